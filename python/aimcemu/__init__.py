"""aimcemu: analog in-memory computing noise emulation on a bit-exact FPGA accelerator model.

The C++ core lives in ``aimcemu._core``; this package adds the user API (model import, runs,
sweeps, analysis) on top.  Submodules are imported lazily so that ``import aimcemu`` stays fast
and does not pull in torch, dask or matplotlib unless they are used.
"""
from __future__ import annotations

import importlib

from . import _core
from ._core import FormatError

__version__ = "0.1.0"

# Public names -> the submodule that defines them (imported on first use).
_LAZY = {
    "import_torch": "importer",
    "run": "runner",
    "sweep": "sweep",
    "analysis": None,
    "noise": None,
    "zoo": None,
    "modelfile": None,
}


def __getattr__(name: str):
    if name in _LAZY:
        module_name = _LAZY[name] or name
        module = importlib.import_module(f".{module_name}", __name__)
        value = module if _LAZY[name] is None else getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'aimcemu' has no attribute {name!r}")


__all__ = ["FormatError", "_core", *_LAZY]
