"""aimcemu: analog in-memory computing noise emulation on a bit-exact FPGA accelerator model.

The C++ core lives in ``aimcemu._core``; this package adds the user API (model import, runs,
sweeps, analysis) on top.  Submodules are imported lazily so that ``import aimcemu`` stays fast
and does not pull in torch, dask or matplotlib unless they are used.
"""
from __future__ import annotations

import importlib
import os


def _load_dev_core() -> None:
    """Developers who build the extension in their own CMake folder set AIMCEMU_CORE_DIR to the
    folder holding _core*.so; that build is then used instead of the installed one."""
    import glob
    import importlib.util
    import sys

    found = glob.glob(os.path.join(os.environ["AIMCEMU_CORE_DIR"], "_core*.so"))
    if not found:
        raise ImportError(f"AIMCEMU_CORE_DIR={os.environ['AIMCEMU_CORE_DIR']} holds no _core*.so")
    spec = importlib.util.spec_from_file_location(f"{__name__}._core", found[0])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)


if os.environ.get("AIMCEMU_CORE_DIR"):
    _load_dev_core()

from . import _core
from ._core import FormatError
from ._core import zoo  # built-in topologies with synthetic weights (ResNet-18/50)

__version__ = "0.1.0"

# Public names -> the submodule that defines them (imported on first use).
_LAZY = {
    "import_torch": "importer",
    "import_onnx": "onnx_import",
    "run": "runner",
    "sweep": "sweeps",
    "analysis": None,
    "noise": None,
    "modelfile": None,
    "niu": None,
    "perf": None,
    "mapping": None,
    "importer": None,
    "onnx_import": None,
    "Mapping": "mapping",
    "config": None,
    "results": None,
    "RunConfig": "config",
}


def __getattr__(name: str):
    if name in _LAZY:
        module_name = _LAZY[name] or name
        module = importlib.import_module(f".{module_name}", __name__)
        value = module if _LAZY[name] is None else getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'aimcemu' has no attribute {name!r}")


__all__ = ["FormatError", "_core", "zoo", *_LAZY]
