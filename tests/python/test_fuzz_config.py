"""Property-based fuzzing (Hypothesis) of everything that parses a user's configuration: the YAML
loader, run options, noise configs, layer mappings, time lists and sweep configs.

The property is the same everywhere: any value either parses or raises aimcemu.FormatError
(FileNotFoundError for a path that does not exist); never TypeError, KeyError, RecursionError,
MemoryError or any other exception, which the command line would show as a traceback.  The
values are what YAML can produce (None, booleans, integers far beyond 64 bits, floats including
NaN and infinities, strings with any code point, nested lists and mappings) placed where the
parsers expect something else.  The default run draws a few hundred examples per parser; the
slow test many more.  Failures found this way are kept as @example cases.
"""
from __future__ import annotations

import math

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from aimcemu import FormatError, _core, runner, sweeps  # noqa: E402
from aimcemu.config import RunConfig  # noqa: E402
from aimcemu.mapping import Mapping, resolve_noise  # noqa: E402
from aimcemu.yamlfile import parse_yaml  # noqa: E402
from hostile import tiny_network  # noqa: E402

ALLOWED = (FormatError, FileNotFoundError)
# Hypothesis draws mostly small integers even with wide bounds: the integers around and beyond the
# float range (1.8e308, where float() raises OverflowError) are drawn on purpose, up to 10^400.
BEYOND_FLOATS = st.builds(lambda sign, exponent, digit: sign * digit * 10**exponent, st.sampled_from([1, -1]),
                          st.integers(min_value=300, max_value=400), st.integers(min_value=1, max_value=9))
SCALARS = (st.none() | st.booleans() | st.integers(min_value=-10**400, max_value=10**400) | BEYOND_FLOATS
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
           | st.sampled_from(["all", "none", "pcm_like", "hermes", "aimc", "digital", "global", "none,global", "1h",
                              "conv", "fc", "pool", "conv*", "*", ",", "0,1h", "model", "default", "layers"]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=8) | st.sampled_from(["model", "device", "noise", "layers"]),
                                        inner, max_size=4), max_leaves=12)
NOISE_KEYS = ["model", "prog_noise_scale", "read_noise_scale", "drift_scale", "t0", "g_max", "bogus"]
NOISE = st.dictionaries(st.sampled_from(NOISE_KEYS), VALUES, max_size=4) | VALUES
RUN_KEYS = list(runner.DEFAULTS) + ["bogus"]
SWEEP_KEYS = [k for k in sweeps.DEFAULTS if k not in ("model", "data", "output")]
GRID_AXES = ["noise.prog_noise_scale", "noise.drift_scale", "noise", "mapping", "drift_compensation", "t", "bogus",
             "noise.bogus"]

PROFILE = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LONG = settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module", autouse=True)
def in_process_loading():
    """Reading the network is not what is fuzzed here: skip the checking process to go faster."""
    helper = _core.files.check_helper()
    _core.files.set_check_helper("")
    yield
    _core.files.set_check_helper(helper)


NET = tiny_network()


def only_clean_errors(call) -> None:
    try:
        call()
    except ALLOWED:
        pass


# --- the parsers --------------------------------------------------------------------------------
def parse_run_options(config: dict) -> None:
    RunConfig.resolve(config).placements(NET)


def plan_sweep(config: dict, model_path: str) -> None:
    sweeps.plan({"output": "unused-folder", "model": model_path, **config})


# --- properties ---------------------------------------------------------------------------------
@PROFILE
@given(st.dictionaries(st.sampled_from(RUN_KEYS), VALUES, max_size=6))
@example({"t": [[1.0, 2.0]]})
@example({"noise": {"model": ["pcm_like"]}})
@example({"noise": {1: 2}})
@example({"layers": ","})
@example({"chips": 2**70, "mapping": "all"})
@example({"t": [10**309]})
@example({"mapping": "all", "t": [0, -10**400]})
@example({"peripherals": {"out_noise": 10**309}})
@example({"peripherals": {"inp_res": 10**400, "out_bound": 10**309}})
def test_run_options(config):
    config.pop("model", None), config.pop("data", None), config.pop("output", None), config.pop("config", None)
    if isinstance(config.get("mapping"), str) and config["mapping"] not in ("all",):
        config["mapping"] = None  # a string mapping is a file path: not what this property fuzzes
    only_clean_errors(lambda: parse_run_options(config))


@PROFILE
@given(NOISE)
@example({"model": "pcm_like", "prog_noise_scale": float("nan")})
@example({"model": "pcm_like", "prog_noise_scale": [1, 2]})
def test_noise_configs(noise):
    only_clean_errors(lambda: resolve_noise(noise))


@PROFILE
@given(st.dictionaries(st.sampled_from(["default", "layers", "bogus"]),
                       VALUES | st.dictionaries(st.sampled_from(["conv", "fc", "pool", "c*", "x"]),
                                                VALUES | st.fixed_dictionaries({"device": VALUES, "noise": NOISE}),
                                                max_size=3)))
def test_layer_mappings(config):
    only_clean_errors(lambda: Mapping.from_dict(config).resolve(NET, default_noise={"model": "pcm_like"}))


@PROFILE
@given(VALUES)
@example("0,1h,1d,1y")
@example([float("inf")])
def test_time_lists(value):
    try:
        times = runner.parse_times(value)
    except FormatError:
        return
    assert all(math.isfinite(t) and t >= 0 for t in times) and times == sorted(set(times))


@PROFILE
@given(st.dictionaries(st.sampled_from(SWEEP_KEYS + ["bogus"]), VALUES, max_size=5),
       st.none() | st.dictionaries(st.sampled_from(GRID_AXES), VALUES, max_size=3))
@example({"noise": {"model": "pcm_like"}}, {"noise.prog_noise_scale": [[1, 2]]})
@example({"noise": {"model": "pcm_like"}}, {"noise.prog_noise_scale": {"a": 1, "b": 1.0}})
@example({"noise": {"model": []}}, None)  # found by this test: an unhashable model name
def test_sweep_configs(tmp_path_factory, config, grid):
    model = tmp_path_factory.getbasetemp() / "fuzz-model.h5"
    if not model.exists():
        _core.save_model(NET, str(model))
    if grid is not None:
        config["grid"] = grid
    if isinstance(config.get("mapping"), str) and config["mapping"] != "all":
        config["mapping"] = None
    only_clean_errors(lambda: plan_sweep(config, str(model)))


YAML_TOKENS = st.sampled_from(["{", "}", "[", "]", ": ", ", ", "- ", "\n", "  ", "&a ", "*a", "&b ", "*b", "!!str ",
                               "!!python/object ", "<<: ", "? ", "'", '"', "#", "key", "1", "1e999", ".nan", "~",
                               "\t", "|\n", ">\n", "---\n", "...\n", "%YAML 1.2\n", "\\x", "\u00e9", "\udcff"])


@PROFILE
@given(st.lists(YAML_TOKENS, max_size=40).map("".join) | st.text(max_size=200))
@example("a: &a [*a]")
@example("\x1f")  # found by this test: the YAML reader refused it before parsing began
@example("[" * 70 + "]" * 70)
def test_yaml_text(text):
    only_clean_errors(lambda: parse_yaml(text, "<fuzz>"))


@pytest.mark.slow
@LONG
@given(st.dictionaries(st.sampled_from(RUN_KEYS), VALUES, max_size=8), NOISE, st.lists(YAML_TOKENS, max_size=60).map("".join))
def test_everything_for_longer(config, noise, text):
    test_run_options.hypothesis.inner_test(dict(config))
    test_noise_configs.hypothesis.inner_test(noise)
    test_yaml_text.hypothesis.inner_test(text)
