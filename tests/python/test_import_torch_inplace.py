"""import_torch and in-place ops: the importer computes every op out of place, which is exact
only when nothing else reads the overwritten tensor.  Before these checks an in-place op whose
input had another reader imported silently wrong (cosine 0.5 to 0.8 to the torch model), and
nn.ReLU(inplace=True) as the first op overwrote the caller's calibration images."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from aimcemu import _core  # noqa: E402
from aimcemu.importer import UnsupportedOperationError, convert_torch  # noqa: E402


def cosine_to_torch(model: nn.Module, imported, images: torch.Tensor) -> float:
    out = imported.network.output_index()
    y = _core.run_network(imported.network, imported.quantize_images(images.numpy()), keep=[out])[out]
    ours = y.reshape(len(images), -1).astype(np.float64) * 2.0 ** -imported.frac_bits[out]
    with torch.no_grad():
        ref = model(images.clone())
    ref = (ref.permute(0, 2, 3, 1) if ref.ndim == 4 else ref).reshape(len(images), -1).double().numpy()
    return float((ours * ref).sum() / np.linalg.norm(ours) / np.linalg.norm(ref))


class TwoConvs(nn.Module):
    def __init__(self, forward):
        super().__init__()
        self.c, self.c2, self.r = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(inplace=True)
        self.bn = nn.BatchNorm2d(4)
        self._forward = forward

    def forward(self, x):
        return self._forward(self, x)


def _relu_module_dropped(s, x):
    y = s.c(x)
    s.r(y)
    return s.c2(y)


def _relu_method_dropped(s, x):
    y = s.c(x)
    y.relu_()
    return s.c2(y)


def _add_method_dropped(s, x):
    y = s.c(x)
    z = s.c2(y)
    z.add_(y)
    return z


def _functional_relu_on_shared(s, x):
    y = s.c(x)
    z = s.c2(y)
    F.relu(y, inplace=True)
    return z + y


def _relu_on_a_viewed_tensor(s, x):
    y = s.c(x)
    v = y.view(y.size(0), -1)      # a view: the in-place ReLU below changes it too
    y.relu_()
    return v


@pytest.mark.parametrize("forward, where, reader", [
    (_relu_on_a_viewed_tensor, "relu_", "the model's output"),
    (_relu_module_dropped, "r", "c2"),
    (_relu_method_dropped, "relu_", "c2"),
    (_add_method_dropped, "add_", "the model's output"),
    (_functional_relu_on_shared, "relu", "add"),
])
def test_an_in_place_op_whose_input_has_another_reader_is_refused(forward, where, reader):
    torch.manual_seed(0)
    model = TwoConvs(forward).eval()
    with pytest.raises(UnsupportedOperationError) as info:
        convert_torch(model, torch.randn(32, 3, 8, 8))
    message = str(info.value)
    assert f"{where}: in-place op on the value of 'c'" in message or f"{where}: in-place op on the value of 'c2'" in message, message
    assert reader in message, message


def _resnet_style(s, x):
    identity = x
    out = s.r(s.bn(s.c(x)))
    out = s.bn(s.c2(out))
    out += s.c(identity)
    return s.r(out)


def _in_place_chain(s, x):
    out = s.c(x)
    out = out.add_(s.c(x))
    out = out.relu_()
    return s.c2(out)


def _in_place_relu_first(s, x):
    return s.c(s.r(x))


def _relu_after_its_other_reader(s, x):
    y = s.c(x)
    z = s.c2(y)          # runs before the in-place ReLU: it reads y as out-of-place computing does
    return z + s.r(y)


@pytest.mark.parametrize("forward", [_resnet_style, _in_place_chain, _in_place_relu_first, _relu_after_its_other_reader])
def test_in_place_ops_whose_input_has_no_other_reader_still_import(forward):
    torch.manual_seed(0)
    model = TwoConvs(forward).eval()
    imported = convert_torch(model, torch.randn(64, 3, 8, 8))
    assert cosine_to_torch(model, imported, torch.randn(16, 3, 8, 8)) > 0.99


@pytest.mark.parametrize("kind", ["array", "tensor"])
def test_import_torch_does_not_modify_the_calibration_images(kind):
    torch.manual_seed(0)
    model = nn.Sequential(nn.ReLU(inplace=True), nn.Conv2d(3, 4, 3)).eval()
    images = np.random.default_rng(0).normal(size=(8, 3, 6, 6)).astype(np.float32)
    data = images.copy() if kind == "array" else torch.from_numpy(images.copy())
    convert_torch(model, data)
    assert np.array_equal(np.asarray(data), images)
