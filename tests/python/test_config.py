"""One configuration, resolved once (aimcemu.config.RunConfig).

Options mean the same in a run and in a sweep; defaults exist once; a run builds each distinct
noise model once and compiles only the NIU programs its rounds use; a sweep's workers run the
configuration the plan resolved without checking it again."""
from __future__ import annotations

import concurrent.futures as cf
import re

import pytest

import aimcemu
from aimcemu import _core, config, sweeps
from aimcemu.config import RunConfig
from conftest import digits_subset

IMAGES = 16


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return digits_subset(tmp_path_factory, IMAGES)


@pytest.fixture
def calls(monkeypatch):
    """Counts of the C++ noise-model builds and NIU program compilations."""
    counts = {"models": 0, "programs": 0}
    build, compile_program = _core.noise.make_noise_model, _core.niu.compile_program

    def counting_build(*args, **kwargs):
        counts["models"] += 1
        return build(*args, **kwargs)

    def counting_compile(*args, **kwargs):
        counts["programs"] += 1
        return compile_program(*args, **kwargs)

    monkeypatch.setattr(_core.noise, "make_noise_model", counting_build)
    monkeypatch.setattr(_core.niu, "compile_program", counting_compile)
    return counts


def test_defaults_fill_every_option(digits):
    model, data, _, _, _ = digits
    cfg = RunConfig.resolve({"model": str(model), "data": str(data)})
    assert (cfg.t, cfg.chips, cfg.rounds, cfg.seed, cfg.compensations, cfg.backend, cfg.threads, cfg.layers) == \
        ((0.0,), 1, 1, 0, ("none",), "fast", 0, "all")
    assert cfg.mapping is None and cfg.noise is None and not cfg.noisy and cfg.round_coordinates() == []


def test_a_sweep_takes_the_defaults_of_a_run():
    shared = set(config.SWEEP_DEFAULTS) & set(config.RUN_DEFAULTS) - {"t", "layers"}
    assert {k: config.SWEEP_DEFAULTS[k] for k in shared} == {k: config.RUN_DEFAULTS[k] for k in shared}
    assert list(config.SWEEP_DEFAULTS["t"]) == list(config.RUN_DEFAULTS["t"])


@pytest.mark.parametrize("times, seconds", [("0,1h,1d,1y", [0.0, 3600.0, 86400.0, 365 * 86400.0]),
                                            (["1", "30min", 7200], [1.0, 1800.0, 7200.0]), (5, [5.0])])
def test_times_mean_the_same_in_a_run_and_in_a_sweep(digits, tmp_path, times, seconds):
    model, data, _, _, _ = digits
    run = RunConfig.resolve({"model": str(model), "data": str(data), "t": times, "mapping": "all"})
    plan = sweeps.plan({"output": str(tmp_path / "s"), "model": str(model), "data": str(data), "t": times,
                        "noise": {"model": "pcm_like"}, "mapping": "all"})
    assert list(run.t) == seconds == plan.tasks[0].run["t"] == list(plan.tasks[0].config.t)


def test_explicit_arguments_override_the_config_file(digits, tmp_path):
    model, data, _, _, _ = digits
    path = tmp_path / "run.yaml"
    path.write_text(f"model: {model}\ndata: {data}\nmapping: all\nchips: 3\nt: [0, 1h]\nseed: 4\n")
    cfg = RunConfig.resolve(path, {"chips": 5, "seed": 0})  # seed 0 is the default: the file's 4 stays
    assert (cfg.chips, cfg.seed, cfg.t) == (5, 4, (0.0, 3600.0))
    assert cfg.sources["chips"] == "<arguments>" and cfg.sources["seed"] == str(path)


def test_a_noise_alone_puts_every_gemm_layer_on_aimc(digits):
    model, data, net, _, _ = digits
    cfg = RunConfig.resolve({"model": str(model), "data": str(data), "noise": "hermes"})
    aimc = [p.name for p in cfg.placements(net) if p.is_aimc]
    assert aimc == [l.name for l in net.layers if l.is_gemm]
    assert all(p.noise["model"] == "hermes" for p in cfg.placements(net) if p.is_aimc)


def test_a_model_the_niu_cannot_run_is_refused_while_resolving(digits):
    model, data, _, _, _ = digits
    with pytest.raises(aimcemu.FormatError, match=r"field 'noise\.model': 'reram_cmo' is not a PCM-family"):
        RunConfig.resolve({"model": str(model), "data": str(data), "noise": "reram_cmo"})


@pytest.mark.parametrize("options, source, field, niu_field", [
    ({"t": "0,1e15"}, "study.yaml", "t", "field 't (log2(t/t0) beyond 32)'"),      # ~3e7 years
    ({"noise": {"model": "pcm_like", "prog_noise_scale": 1e300}}, "study.yaml", "noise", "field 'SP'"),
    ({"noise": {"model": "pcm_like", "drift_scale": 1e300}}, "study.yaml", "noise", "field 'MU'"),
    ({"mapping": {"default": "aimc", "layers": {"head": {"noise": {"model": "pcm_like", "read_noise_scale": 1e300}}}},
      "t": [0.0, 3600.0]}, "study.yaml: mapping", "layers.head.noise", "field 'RT'"),
], ids=["t", "prog_noise_scale", "drift_scale", "rule_read_noise"])
def test_what_the_niu_cannot_hold_is_refused_while_resolving(digits, options, source, field, niu_field):
    """Every noise model of a run, at every t, goes through the NIU compiler's table checks before
    any work (a sweep's plan resolves each grid point, so `sweep --check` refuses it too): before,
    the run failed at its first round there, naming '<niu compiler>' and not the option."""
    model, data, _, _, _ = digits
    config = {"model": str(model), "data": str(data), "mapping": "all", **options}
    with pytest.raises(aimcemu.FormatError) as refused:
        RunConfig.resolve(config, source="study.yaml")
    message = str(refused.value)
    assert message.startswith(f"{source}: field '{field}': the NIU cannot run pcm_like at t = "), message
    assert niu_field in message and "does not fit the NIU's" in message
    assert len(message) < 300  # the value is shown with %g, not 300 digits


def test_the_niu_check_covers_every_abs_max():
    """Review rev_s12: the targets k/A of a layer of abs-max A are not a subset of those of 127, so a
    table can overflow at A = 2 (x = 1/2, where this polynomial peaks) and fit at 127; the run would
    pass the check and fail at a layer whose abs-max is 2."""
    noise = {"model": "pcm_like", "prog_coeff": [0.0, 4.0, -4.0], "prog_noise_scale": 50.00125,
             "drift_reference": "programmed"}  # the one the NIU compiler runs
    model = aimcemu.noise.noise_model_from_dict(noise)
    layer = {"layer_id": 0, "count": 1}
    _core.niu.compile_program(model.core_model, [{**layer, "absmax": 127}])    # fits at 127
    with pytest.raises(aimcemu.FormatError, match="field 'SP'"):
        _core.niu.compile_program(model.core_model, [{**layer, "absmax": 2}])  # not at 2
    with pytest.raises(aimcemu.FormatError, match="field 'noise': the NIU cannot run pcm_like at t = 0 s: field 'SP'"):
        RunConfig.resolve({"mapping": "all", "noise": noise}, source="study.yaml")


def test_the_niu_check_splits_into_the_code_tables_and_what_depends_on_t():
    """check_runs_at(model, t) is check_code_tables(model) and check_tables_at(model, t): the code
    tables do not depend on t, t and the read table do; each half refuses only its own failures."""
    pcm = lambda **fields: aimcemu.noise.noise_model_from_dict({"model": "pcm_like", "drift_reference": "programmed",  # noqa: E731
                                                                 **fields})
    cases = [  # model, t, the field the NIU names, whether the t-independent half fails
        (pcm(prog_noise_scale=1e300), 0.0, "'SP'", True),
        (pcm(drift_scale=1e300), 0.0, "'MU'", True),
        (pcm(read_noise_scale=1e300), 0.0, "'RT'", False),
        (pcm(), 1e15, "'t (log2(t/t0) beyond 32)'", False),
        (pcm(), -1.0, "'t'", False),
    ]
    for model, t, niu_field, in_code_tables in cases:
        with pytest.raises(aimcemu.FormatError, match=f"field {re.escape(niu_field)}"):
            aimcemu.niu.check_runs_at(model, t)
        half, other = ((aimcemu.niu.check_code_tables, (model,)), (aimcemu.niu.check_tables_at, (model, t)))
        failing, passing = (half, other) if in_code_tables else (other, half)
        with pytest.raises(aimcemu.FormatError, match=f"field {re.escape(niu_field)}"):
            failing[0](*failing[1])
        passing[0](*passing[1])
    aimcemu.niu.check_runs_at(pcm(), 3.15e7)


def test_resolving_builds_the_niu_code_tables_once_per_noise_model_not_once_per_t(monkeypatch):
    """The 127 code tables are the bulk of the NIU check (about 1.6 ms a model): at 1,000 grid points
    of a sweep plan, building them again at every t cost seconds."""
    counts = {"code_tables": 0, "at_t": []}
    runs_at, tables_at = _core.niu.check_runs_at, _core.niu.check_tables_at

    def counting_runs_at(model, t):
        counts["code_tables"] += 1
        counts["at_t"].append(t)
        return runs_at(model, t)

    def counting_tables_at(model, t):
        counts["at_t"].append(t)
        return tables_at(model, t)

    monkeypatch.setattr(_core.niu, "check_runs_at", counting_runs_at)
    monkeypatch.setattr(_core.niu, "check_tables_at", counting_tables_at)
    monkeypatch.setattr(_core.niu, "check_code_tables", lambda model: pytest.fail("counted in check_runs_at"))
    times = [0.0, 1.0, 60.0, 3600.0, 86400.0, 3.15e7]
    mapping = {"default": "aimc", "layers": {"head": {"noise": {"model": "hermes"}}}}
    RunConfig.resolve({"mapping": mapping, "noise": "pcm_like", "t": times})
    assert counts["code_tables"] == 2                                  # pcm_like and hermes
    assert sorted(counts["at_t"]) == sorted(times * 2)                 # each model at each t, once


def test_a_run_builds_each_distinct_noise_model_once_and_compiles_only_the_programs_it_uses(digits, tmp_path, calls):
    model, data, _, _, _ = digits
    mapping = {"default": "aimc", "layers": {"head": {"noise": {"model": "hermes"}},
                                            "stem": {"noise": {"model": "hermes"}}}}
    aimcemu.run(model, data, tmp_path / "r.h5", mapping=mapping, noise="pcm_like", t=(0.0, 3600.0), chips=2,
                rounds=2, drift_compensation="global", layers="none")
    # pcm_like (the default) and hermes (named by two rules) once each
    assert calls["models"] == 2
    # per round one program per noise model (2 groups x 2 chips x 2 t x 2 rounds) and the
    # calibration readouts once per (chip, t) and group (2 x 2 x 2): nothing thrown away
    assert calls["programs"] == 2 * 2 * 2 * 2 + 2 * 2 * 2


def test_sweep_workers_run_the_planned_configuration_without_resolving_it_again(digits, tmp_path, monkeypatch, calls):
    model, data, _, _, _ = digits
    resolved = []
    real = RunConfig.resolve.__func__

    def counting(cls, *args, **kwargs):
        resolved.append(1)
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(RunConfig, "resolve", classmethod(counting))
    grid = {"noise.prog_noise_scale": [0.5, 1.0, 2.0]}
    with cf.ThreadPoolExecutor(2) as pool:
        result = aimcemu.sweep({"output": str(tmp_path / "s"), "model": str(model), "data": str(data),
                                "noise": {"model": "pcm_like"}, "mapping": "all", "t": [0.0], "grid": grid},
                               executor=pool, progress=False)
    assert result.complete and result.ran == 3
    assert len(resolved) == 3            # once per task, in the plan
    assert calls["models"] == 3          # one model per task, built by the plan, used by the worker


def test_perf_times_the_aimc_layers_of_a_runs_mapping(digits):
    from aimcemu.perf import perf

    model, _, _, _, _ = digits
    mapping = {"default": "digital", "layers": {"block_conv*": "aimc", "head": {"noise": {"model": "hermes"}}}}
    by_mapping = perf(str(model), mapping=mapping, niu=1).summary()
    by_names = perf(str(model), aimc_layers=["block_conv1", "block_conv2", "head"], niu=1).summary()
    assert by_mapping == by_names and by_mapping["aimc_layers"] == 3
    with pytest.raises(aimcemu.FormatError, match="field 'mapping'"):
        perf(str(model), mapping="all", aimc_layers="all")
