"""Layer mappings (aimcemu.mapping): patterns, precedence, noise resolution and bad input."""
from __future__ import annotations

import os

import numpy as np
import pytest

import aimcemu
from aimcemu import _core
from aimcemu.mapping import Mapping
from aimcemu.noise import HermesNoiseModel

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "hybrid_mapping.yaml")


def net_with(*layers: tuple[str, str]):
    """A resolved network of the given (name, kind) layers on a 4x4x2 input: convs 3x3 with pad
    1 keep the shape, a max pool halves it, a linear layer ends it."""
    made = []
    for index, (name, kind) in enumerate(layers):
        layer = _core.Layer()
        layer.name, layer.input = name, index - 1
        if kind == "conv":
            layer.kind, layer.kernel, layer.pad, layer.out_channels = _core.LayerKind.conv, 3, 1, 2
            layer.weights = np.ones(9 * 2 * 2, np.int8)
            layer.bias = np.zeros(2, np.int8)
        elif kind == "pool":
            layer.kind, layer.kernel, layer.stride = _core.LayerKind.max_pool, 2, 2
        else:
            layer.kind, layer.out_channels = _core.LayerKind.linear, 3
            layer.weights = np.ones(3 * 2 * 2 * 2, np.int8)
            layer.bias = np.zeros(3, np.int8)
        layer.out_shift = 4
        made.append(layer)
    net = _core.Network()
    net.name, net.input_shape, net.input_frac_bits = "toy", _core.Shape3(4, 4, 2), 7
    net.layers = made
    net.resolve()
    return net


@pytest.fixture(scope="module")
def toy():
    return net_with(("stem", "conv"), ("block1.conv1", "conv"), ("block1.conv2", "conv"), ("block1.pool", "pool"),
                    ("fc", "linear"))


def devices(placements):
    return {p.name: p.device for p in placements}


def test_default_and_patterns_with_the_last_match_winning(toy):
    m = Mapping(default="digital", layers={"block1.*": "aimc", "block1.conv2": "digital"})
    assert devices(m.resolve(toy)) == {"stem": "digital", "block1.conv1": "aimc", "block1.conv2": "digital",
                                       "block1.pool": "digital", "fc": "digital"}
    m = Mapping(default="aimc", layers={"stem": "digital"})
    # layers without weights stay digital even under default aimc
    assert devices(m.resolve(toy)) == {"stem": "digital", "block1.conv1": "aimc", "block1.conv2": "aimc",
                                       "block1.pool": "digital", "fc": "aimc"}


def test_noise_per_layer_overrides_the_default_and_defaults_are_filled(toy):
    m = Mapping.from_dict({"layers": {"block1.*": "aimc", "fc": {"device": "aimc", "noise": {"model": "hermes"}}}})
    placements = {p.name: p for p in m.resolve(toy, default_noise={"model": "pcm_like", "read_noise_scale": 0.5})}
    assert placements["block1.conv1"].noise["model"] == "pcm_like"
    assert placements["block1.conv1"].noise["read_noise_scale"] == 0.5
    assert placements["block1.conv1"].noise["g_max"] == 25.0
    assert placements["fc"].noise == HermesNoiseModel(drift_reference="programmed").to_dict()  # the NIU's drift reference
    assert placements["stem"].noise is None
    # without a default noise, AIMC layers get pcm_like with its defaults
    assert Mapping.all_aimc().resolve(toy)[0].noise["model"] == "pcm_like"


def test_noise_objects_and_round_trip(toy):
    m = Mapping(layers={"fc": {"noise": HermesNoiseModel(num_devices=1, drift_reference="programmed")}})  # a noise implies aimc
    assert m.resolve(toy)[-1].device == "aimc" and m.resolve(toy)[-1].noise["num_devices"] == 1
    assert Mapping.from_dict(m.to_dict()) == m
    assert Mapping.coerce("all") == Mapping(default="aimc")
    assert Mapping.coerce(None) is None and Mapping.coerce(m) is m


def test_the_shipped_example_resolves_on_the_embedded_model():
    try:
        model, _ = aimcemu.modelfile.embedded_paths()
    except FileNotFoundError:
        pytest.skip("the embedded model is not shipped in this checkout")
    placements = Mapping.from_yaml(EXAMPLE).resolve(aimcemu.modelfile.load_model(model))
    assert devices(placements) == {"stem": "digital", "block_conv1": "aimc", "block_conv2": "aimc",
                                   "max_pool": "digital", "head": "aimc", "avg_pool": "digital",
                                   "classifier": "digital"}
    assert [p.noise["model"] for p in placements if p.is_aimc] == ["pcm_like", "pcm_like", "hermes"]


@pytest.mark.parametrize("config, message", [
    ({"layers": {"block2.*": "aimc"}}, r"<mapping>: field 'layers.block2.\*': matches no layer of model 'toy'"),
    ({"layers": {"*.pool": "aimc"}}, r"field 'layers.\*.pool': matches only layers without weights"),
    ({"default": "analog"}, r"field 'default': expected one of digital, aimc"),
    ({"layers": {"fc": {"device": "aimc", "noise": {"model": "memristor"}}}},
     r"field 'layers.fc.noise': .*unknown noise model 'memristor'"),
    ({"layers": {"fc": {"device": "aimc", "noise": {"model": "pcm_like", "g_maxx": 3}}}}, r"field 'layers.fc.noise'"),
    ({"layers": {"fc": {"noise": {"model": "reram_wan2022"}}}}, r"field 'layers\.fc\.noise\.model': 'reram_wan2022' is not a PCM-family model"),
    ({"layers": {"fc": {"device": "digital", "noise": {"model": "pcm_like"}}}}, r"a digital layer takes no noise"),
    ({"layers": {"fc": {"devices": "aimc"}}}, r"field 'layers.fc.devices': unknown key"),
    ({"layer": {}}, r"field 'layer': unknown key"),
    ({"layers": ["fc"]}, r"field 'layers': expected a mapping"),
])
def test_bad_mappings_name_the_field(toy, config, message):
    with pytest.raises(aimcemu.FormatError, match=message):
        Mapping.from_dict(config).resolve(toy)


def test_bad_yaml_mapping_names_the_file(tmp_path, toy):
    path = tmp_path / "m.yaml"
    path.write_text("layers: {fc: [unclosed\n")
    with pytest.raises(aimcemu.FormatError, match=r"m\.yaml: field '<yaml>'"):
        Mapping.from_yaml(path)
    path.write_text("layers:\n  fc2: aimc\n")
    with pytest.raises(aimcemu.FormatError, match=r"m\.yaml: field 'layers.fc2': matches no layer"):
        Mapping.coerce(os.fspath(path)).resolve(toy)
    with pytest.raises(FileNotFoundError, match="mapping file not found"):
        Mapping.coerce(tmp_path / "absent.yaml")
