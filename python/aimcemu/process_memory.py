"""What a process keeps between runs, and giving it back when a run needs the room.

A sweep worker's later runs are faster because the process keeps two things from its last run:
the reference cache's entry (aimcemu.reference.process_cache: the noise-free activations of
every layer for a noisy run) and the emulator's kept memory (aimcemu.niu.kept_memory_bytes: the
NIU chip states', the PU pass buffers' and the HBM's pages).  Both are caches: nothing a run computes
depends on them.  So they never stand in a run's way: before a run starts, ``make_room`` frees
them when the run's arrays beside them would exceed the machine's memory, or when the kernel has
less memory available now than the run's arrays need (docs/hybrid_runs.md, "Memory kept between
runs").  A ReferenceCache of the caller's own is the caller's to clear.
"""
from __future__ import annotations

from . import niu, validate
from .reference import process_cache

__all__ = ["kept_bytes", "release", "make_room"]


def kept_bytes() -> int:
    """Bytes this process keeps between runs: the process cache's references and the emulator's
    kept memory."""
    return process_cache().bytes + niu.kept_memory_bytes()


def release() -> int:
    """Frees everything kept_bytes() counts; returns the bytes freed."""
    cache = process_cache()
    freed = cache.bytes
    cache.clear()
    return freed + niu.release_kept_memory()


def make_room(need: int) -> None:
    """Frees what the process keeps when a run that holds `need` bytes of arrays would, beside it,
    exceed the machine's memory, or needs more than the kernel has available now."""
    kept = kept_bytes()
    if not kept:
        return
    available = validate.available_memory()
    if need + kept > validate.physical_memory() or (available is not None and need > available):
        release()
