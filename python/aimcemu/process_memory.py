"""What a process keeps between runs, and giving it back when a run needs the room.

A sweep worker's later runs are faster because the process keeps three things from its last run:
the reference cache's entry (aimcemu.reference.process_cache: the noise-free activations of
every layer for a noisy run), the loaded model and data set (aimcemu.modelfile.process_inputs, in
a process that keeps freed memory; see below) and the emulator's kept memory
(aimcemu.niu.kept_memory_bytes: the NIU chip states', the PU pass buffers' and the HBM's pages).
All are caches: nothing a run computes depends on them.  So they never stand in a run's way:
before a run starts, ``make_room`` frees them when the run's arrays beside them would exceed the
machine's memory, or when the kernel has less memory available now than the run's arrays need
(docs/hybrid_runs.md, "Memory kept between runs").  A ReferenceCache of the caller's own is the caller's to clear.

``keep_freed_memory`` is the allocator side of the same idea, for processes aimcemu owns (a local
sweep pool's workers, the ``aimcemu`` command): it sets glibc malloc's thresholds so that a run's
large temporaries reuse the memory the previous run freed instead of being mapped and faulted in
afresh (docs/performance.md section 3, "Page faults of a later run").  ``import aimcemu`` never
calls it: it is a process-wide choice, the caller's to make in a process of its own.
"""
from __future__ import annotations

import ctypes
import os

from . import niu, validate
from .modelfile import KeptInputs, process_inputs
from .reference import process_cache

__all__ = ["kept_bytes", "release", "make_room", "keep_freed_memory", "MMAP_THRESHOLD_BYTES",
           "TRIM_THRESHOLD_BYTES"]

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# A block this large or larger gets its own mapping (faulted in page by page, unmapped when freed);
# smaller ones come from the heap and are reused.  32 MiB is the most glibc accepts (half its
# 64 MiB heap size) and the value its dynamic threshold would reach anyway: a ResNet-50 run's large
# temporaries (libhdf5's buffers while the results file is created, up to 9.4 MB per layer's
# weights) all stay below it, so a later run reuses them: 2-41 page faults per later run, against
# ~400 where each run's model load happens to raise glibc's dynamic threshold, ~28,000 where none does.
MMAP_THRESHOLD_BYTES = 32 << 20
# Free memory at the top of the heap is given back to the kernel only beyond this much.  64 MiB is
# what glibc's dynamic adjustment would set beside a 32 MiB mmap threshold (twice it).  Measured
# (bench_warm_costs, ResNet-50, 16 images, 4 rounds, load 2.1-2.9): 64, 128 and 256 MiB all gave
# 2-41 faults per later run from the third run on and the same peak RSS (631-637 MiB), so the
# smallest, which leaves the least memory resident in an idle worker, is taken.
TRIM_THRESHOLD_BYTES = 64 << 20


def keep_freed_memory(mmap_threshold: int = MMAP_THRESHOLD_BYTES, trim_threshold: int = TRIM_THRESHOLD_BYTES) -> bool:
    """Sets this process's glibc malloc thresholds (mallopt M_MMAP_THRESHOLD and M_TRIM_THRESHOLD)
    so that large blocks a run frees are reused by the next run instead of being mapped afresh, and
    lets this process keep its last run's model and data set (modelfile.process_inputs), which pays
    only with these thresholds.  Process-wide and lasting: for processes aimcemu owns (its local
    sweep pool's workers, the `aimcemu` command) or a caller who asks for it; `import aimcemu`
    never calls it.  The same as MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ in the
    environment.  Returns False, and keeps no model, where the C library is not glibc (nothing is
    changed) or glibc refuses a value.

    Through ctypes rather than the C++ extension: it is glibc's call, not the emulator's, it needs
    no build, and it can run before anything else in a fresh worker allocates."""
    mallopt = _glibc_mallopt()
    if mallopt is None:
        return False
    # Trim first: setting the mmap threshold also turns glibc's dynamic adjustment of both off.
    if mallopt(_M_TRIM_THRESHOLD, int(trim_threshold)) != 1 or mallopt(_M_MMAP_THRESHOLD, int(mmap_threshold)) != 1:
        return False
    process_inputs().enabled = True
    return True


def _glibc_mallopt():
    """glibc's mallopt(int, int) -> int, or None in another C library (musl has none; others differ)."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return None
        mallopt = ctypes.CDLL(None).mallopt
    except (ValueError, OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt


def kept_bytes() -> int:
    """Bytes this process keeps between runs: the process cache's references, the last run's model
    and data set (modelfile.process_inputs) and the emulator's kept memory."""
    return process_cache().bytes + process_inputs().bytes + niu.kept_memory_bytes()


def release(in_use: KeptInputs | None = None) -> int:
    """Frees everything kept_bytes() counts, except the kept model and data set when they are
    `in_use` (the running run's own: freeing them would give back nothing while the run holds them,
    and only make the next run load them again); returns the bytes freed."""
    cache, inputs = process_cache(), process_inputs()
    freed = cache.bytes
    cache.clear()
    if not inputs.holds(in_use):
        freed += inputs.bytes
        inputs.clear()
    return freed + niu.release_kept_memory()


def make_room(need: int, in_use: KeptInputs | None = None) -> None:
    """Frees what the process keeps when a run that holds `need` bytes of arrays would, beside it,
    exceed the machine's memory, or needs more than the kernel has available now.  `in_use`: the
    kept model and data set the run took (RunInputs.kept), which are the run's own memory, not
    room to be made: neither counted nor freed."""
    kept = kept_bytes() - (in_use.nbytes if process_inputs().holds(in_use) else 0)
    if not kept:
        return
    available = validate.available_memory()
    if need + kept > validate.physical_memory() or (available is not None and need > available):
        release(in_use)
