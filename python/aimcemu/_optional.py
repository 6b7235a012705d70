"""Imports of optional dependencies, failing with the pip extra that provides them.

The core package needs only numpy, h5py, pyyaml and tqdm.  Model import, analysis and plotting
pull in heavier packages that are installed with an extra (pyproject.toml's
``[project.optional-dependencies]``).  Every such import goes through :func:`require`, so a user
without the package reads which extra to install instead of a bare ``ModuleNotFoundError``::

    torch = require("torch", "import_torch")        # MissingExtraError names aimcemu[torch]
"""
from __future__ import annotations

import importlib
from types import ModuleType

# Top-level package -> the extra of pyproject.toml that installs it.  test_packaging.py checks
# that every extra named here exists in pyproject.toml and lists the package.
EXTRA_OF_PACKAGE = {
    "torch": "torch",
    "sklearn": "torch",
    "onnx": "onnx",
    "onnxruntime": "onnx",
    "xarray": "analysis",
    "h5netcdf": "analysis",
    "matplotlib": "analysis",
    "dask": "analysis",
    "distributed": "analysis",
    "scipy": "analysis",
    "pandas": "analysis",
}


class MissingExtraError(ModuleNotFoundError):
    """An optional dependency is not installed; the message names the pip extra to install."""


def require(module: str, purpose: str) -> ModuleType:
    """Imports ``module`` (dotted names allowed).  If its top-level package is missing, raises
    MissingExtraError saying that ``purpose`` needs it and which extra installs it.  A missing
    module inside an installed package is a different problem and keeps its own error."""
    top = module.split(".")[0]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != top:   # the package is there but something inside it is not: its own error
            raise
        extra = EXTRA_OF_PACKAGE.get(top)
        how = f"pip install 'aimcemu[{extra}]'" if extra else f"pip install {top}"
        raise MissingExtraError(f"{purpose} needs {top}, which is not installed: {how}", name=top) from exc
