"""The package installs like one: light core, optional imports that name their extra, a wheel
that works in a fresh virtual environment without torch (slow: builds the wheel)."""
from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from aimcemu import _optional, cli

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
EXTRAS = PYPROJECT["project"]["optional-dependencies"]


def requirement_names(requirements) -> set[str]:
    names = set()
    for req in requirements:
        name = req.split(";")[0].split("[")[0]
        for sep in "<>=!~ ":
            name = name.split(sep)[0]
        names.add(name.lower().replace("_", "-"))
    return names


def test_every_optional_package_belongs_to_its_extra():
    pip_name = {"sklearn": "scikit-learn", "distributed": "dask"}
    for package, extra in _optional.EXTRA_OF_PACKAGE.items():
        assert extra in EXTRAS, (package, extra)
        assert pip_name.get(package, package) in requirement_names(EXTRAS[extra]), (package, extra)
    assert PYPROJECT["project"]["dependencies"] and requirement_names(PYPROJECT["project"]["dependencies"]) == {
        "numpy", "h5py", "pyyaml", "tqdm"}
    assert EXTRAS["all"] == ["aimcemu[analysis,torch,onnx]"]


@pytest.mark.parametrize("module,missing,extra", [
    ("aimcemu.importer", "torch", "torch"),
    ("aimcemu.onnx_import", "onnx", "onnx"),
])
def test_module_without_its_package_names_the_extra(monkeypatch, module, missing, extra):
    monkeypatch.setitem(sys.modules, missing, None)     # makes `import missing` fail as if absent
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ModuleNotFoundError, match=rf"pip install 'aimcemu\[{extra}\]'") as err:
        importlib.import_module(module)
    assert isinstance(err.value, _optional.MissingExtraError) and err.value.name == missing


def test_report_without_xarray_names_the_extra(monkeypatch, capsys, tmp_path_factory):
    import aimcemu
    from conftest import digits_subset

    model, data, *_ = digits_subset(tmp_path_factory, 8)
    results = tmp_path_factory.mktemp("report") / "run.h5"
    aimcemu.run(model, data, results)
    monkeypatch.setitem(sys.modules, "xarray", None)
    assert cli.main(["report", str(results)]) == 2
    assert "pip install 'aimcemu[analysis]'" in capsys.readouterr().err


def test_a_missing_module_inside_an_installed_package_keeps_its_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "numpy.no_such_module", None)
    with pytest.raises(ModuleNotFoundError) as err:
        _optional.require("numpy.no_such_module", "a test")
    assert not isinstance(err.value, _optional.MissingExtraError)


@pytest.mark.slow
def test_wheel_in_a_fresh_venv(tmp_path):
    """Build the wheel, install it into a fresh venv outside the repository (no torch, no extras),
    run `aimcemu run` on the embedded model and check the missing-extra messages."""
    wheels = tmp_path / "wheels"
    # --no-build-isolation: the build requirements are installed here (scripts/setup.sh); the C++
    # build reuses build/py-<tag> incrementally (pyproject's build-dir).
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels),
                    str(REPO)], check=True, timeout=1200)
    wheel = next(wheels.glob("aimcemu-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python, aimcemu_cmd = venv / "bin" / "python", venv / "bin" / "aimcemu"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AIMCEMU_CORE_DIR", "AIMCEMU_MODELS_DIR")}
    installed = subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)], env=env, capture_output=True,
                               text=True, timeout=900)
    if installed.returncode != 0 and "No matching distribution" in installed.stderr:
        pytest.skip(f"the wheel's dependencies cannot be fetched here: {installed.stderr.strip()[-300:]}")
    assert installed.returncode == 0, installed.stderr
    work = tmp_path / "work"          # outside the repository: nothing of the checkout on the path
    work.mkdir()

    def run(*args):
        return subprocess.run([str(a) for a in args], cwd=work, env=env, capture_output=True, text=True, timeout=600)

    no_torch = run(python, "-c", "import torch")
    assert no_torch.returncode != 0, "torch must not be installed in the fresh venv"
    where = run(python, "-c", "import aimcemu; print(aimcemu.__file__)")
    assert str(venv) in where.stdout, where.stdout + where.stderr
    result = run(aimcemu_cmd, "run", "--output", "run.h5")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (work / "run.h5").is_file()
    importer = run(python, "-c", "import aimcemu.importer")
    assert importer.returncode != 0 and "pip install 'aimcemu[torch]'" in importer.stderr, importer.stderr
    assert "MissingExtraError" in importer.stderr
    onnx = run(python, "-c", "import aimcemu; aimcemu.import_onnx")
    assert "pip install 'aimcemu[onnx]'" in onnx.stderr, onnx.stderr
    report = run(aimcemu_cmd, "report", "run.h5")
    assert report.returncode == 2 and "pip install 'aimcemu[analysis]'" in report.stderr, report.stderr
    assert "Traceback" not in report.stderr
    shutil.rmtree(venv)
