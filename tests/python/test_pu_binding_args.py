"""The PU bindings (run_network, gemm, sa_cycle_gemm, im2col) refuse bad arguments with an
aimcemu.FormatError naming the argument, instead of reading them wrongly (keep='stem' letter by
letter, keep=[True] as layer 1), crashing late (bad_alloc, NumPy's "array is too big") or
taking them silently (threads=-1 as all cores, 3000 threads, first_image=-5)."""
from __future__ import annotations

import numpy as np
import pytest

import aimcemu
from aimcemu import _core, modelfile


@pytest.fixture(scope="module")
def net():
    return modelfile.load_model(str(modelfile.embedded_paths()[0]))


IMAGES = np.zeros((1, 8, 8, 1), np.int8)


@pytest.mark.parametrize("kwargs, field, words", [
    (dict(keep="stem"), "keep", "string"),
    (dict(keep=b"stem"), "keep", "string"),
    (dict(keep=5), "keep", "list"),
    (dict(keep=[True, False]), "keep", "bool"),
    (dict(keep=[2**70]), "keep", str(2**70)),
    (dict(weights={2**70: np.zeros(144, np.int8)}), "weights", str(2**70)),
    (dict(weights={True: np.zeros(144, np.int8)}), "weights", "bool"),
    (dict(peripherals=5), "peripherals", "Peripherals"),
    (dict(into=5), "into", "ReferenceActivations"),
    (dict(first_image=-5), "first_image", ">= 0"),
    (dict(threads=-1), "threads", "0..4096"),
    (dict(threads=4097), "threads", "0..4096"),
    (dict(threads=2**31 - 1), "threads", "0..4096"),
])
def test_run_network_names_the_bad_argument(net, kwargs, field, words):
    with pytest.raises(aimcemu.FormatError) as caught:
        _core.run_network(net, IMAGES, **kwargs)
    assert field in str(caught.value) and words in str(caught.value), str(caught.value)


def test_keep_by_name_and_index_still_work(net):
    by_name = _core.run_network(net, IMAGES, keep=[net.layers[0].name])
    by_index = _core.run_network(net, IMAGES, keep=(0,))
    assert [o is not None for o in by_name] == [o is not None for o in by_index]
    assert by_name[0] is not None and all(o is None for o in by_name[1:])


def test_gemm_refuses_thread_counts_outside_0_to_4096():
    w, x, b = np.ones((2, 3), np.int8), np.ones((3, 4), np.int8), np.zeros(2, np.int8)
    for threads in (-1, 4097, 2**31 - 1):
        with pytest.raises(aimcemu.FormatError, match="threads"):
            _core.gemm(w, x, b, 0, threads=threads)
    np.testing.assert_array_equal(_core.gemm(w, x, b, 0, threads=4096), np.full((2, 4), 3))


@pytest.mark.parametrize("kwargs, field", [
    (dict(rows=2**30, rg=1), "rows"),
    (dict(cols=2**30), "cols"),
    (dict(fifo_depth=2**30), "fifo_depth"),
    (dict(wrb_waves=0), "wrb_waves"),
    (dict(cycle_limit=-1), "cycle_limit"),
])
def test_sa_cycle_gemm_names_a_config_it_cannot_model(kwargs, field):
    w, x, b = np.ones((2, 3), np.int8), np.ones((3, 4), np.int8), np.zeros(2, np.int8)
    with pytest.raises(aimcemu.FormatError, match=field):
        _core.sa_cycle_gemm(w, x, b, 0, **kwargs)


def test_im2col_names_a_kernel_whose_operand_cannot_be_held():
    x = np.zeros((1, 1, 1), np.int8)
    with pytest.raises(aimcemu.FormatError, match="kernel"):
        _core.im2col(x, 65535, 1, 65534)
    with pytest.raises(aimcemu.FormatError, match="kernel_h"):
        _core.im2col(x, 70000, 1, 0)
    np.testing.assert_array_equal(_core.im2col(np.ones((2, 2, 1), np.int8), 2), np.ones((1, 4), np.int8))
