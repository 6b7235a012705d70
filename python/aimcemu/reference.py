"""The noise-free reference of a run: computed once per run, or once for many runs.

Every run first computes the reference: the bit-exact activations, on the PU functional model,
of the layers its results file needs (those it stores, the output, and, when it has noisy
rounds, every layer, since each round's metrics compare with them).  The PU's pass copies each
such layer straight into a ``_core.ReferenceActivations`` (one copy per micro-batch, while it is
in cache); the results writer then shares that object instead of copying it, and NumPy sees it
only through read-only views where Python needs an array.

The reference is a pure function of the network (structure, weights, biases, requantisation
parameters), the images and which layers are kept: every backend gives the same bytes.  A
sweep's runs on the same model and data set therefore need it only once.  ``ReferenceCache``
keeps it, keyed by a content digest of exactly those inputs (``reference_key``), immutable and
shared by every writer that uses it, within a bound (entries and bytes).  Reuse is opt-in:
``aimcemu.run(..., reuse_reference=True)`` uses this process's cache (``process_cache()``),
sweep workers turn it on for their tasks.  docs/hybrid_runs.md, "The reference, and reusing it
across runs".
"""
from __future__ import annotations

import hashlib
import os
import threading
import weakref
from collections import OrderedDict

import numpy as np

from . import _core, rounds

__all__ = ["ReferenceCache", "ContentDigest", "content_digest", "reference_key", "compute_reference", "process_cache",
           "DEFAULT_MAX_ENTRIES"]

DEFAULT_MAX_ENTRIES = 1  # a sweep's tasks share one model and data set


def content_digest(net, images: np.ndarray) -> bytes:
    """The SHA-256 of the network's structure and operands (_core.feed_network, without copying
    the weights) and the images' dtype, shape and bytes: the costly part of reference_key.
    SHA-256 because the CPU computes it in hardware (~1.4 GB/s here: ~20 ms for ResNet-50's
    25.5 MB of weights); hashlib releases the GIL while it hashes, so a run computes this on a
    thread while it builds its emulator and results writer (runner.execute)."""
    digest = hashlib.sha256()
    _core.feed_network(net, digest.update)
    images = np.ascontiguousarray(images)
    digest.update(repr((str(images.dtype), images.shape)).encode())
    digest.update(memoryview(images).cast("B"))
    return digest.digest()


def reference_key(net, images: np.ndarray, layers, content: bytes | None = None) -> str:
    """A SHA-256 digest of everything the reference depends on: content_digest(net, images)
    (given as `content` when already computed) and the kept layer indices."""
    if content is None:
        content = content_digest(net, images)
    return hashlib.sha256(content + repr(sorted(int(i) for i in layers)).encode()).hexdigest()


class ContentDigest:
    """content_digest(net, images) computed on its own thread from construction on; result()
    waits for it and raises what it raised.  The thread only reads `net` and `images`."""

    def __init__(self, net, images: np.ndarray):
        self._value: bytes | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, args=(net, images), name="aimcemu-reference-key",
                                        daemon=True)
        self._thread.start()

    def _work(self, net, images) -> None:
        try:
            self._value = content_digest(net, images)
        except BaseException as exc:  # handed to whoever asks for the result
            self._error = exc

    def join(self) -> None:
        """Waits for the thread (a caller that gives up on the result still lets no thread outlive it)."""
        self._thread.join()

    def result(self) -> bytes:
        self.join()
        if self._error is not None:
            raise self._error
        return self._value


def compute_reference(net, images: np.ndarray, layers, backend: str, threads: int):
    """The reference of `layers` (indices) on the PU functional model: a sealed
    _core.ReferenceActivations, filled during the pass (no layer comes back to NumPy)."""
    reference = _core.ReferenceActivations(net, len(images), list(layers))
    rounds.run_network(net, images, backend, threads, keep=[], into=reference)
    return reference


class _Computation:
    """One key's reference while a thread computes it.  Threads asking for the same key meanwhile
    wait on `done`, then take `reference` even when the cache does not keep it (too large for
    its bound): it is sealed and immutable like any cached entry.  None after a failure."""

    def __init__(self):
        self.done = threading.Event()
        self.reference = None


class ReferenceCache:
    """Sealed references by key, least recently used first out, within `max_entries` and
    `max_bytes` (None: no byte bound); a reference larger than max_bytes is never kept.
    Thread-safe (Dask workers run tasks on threads); entries are immutable, so whoever got one
    may keep using it after it is evicted.  `computed` counts the references computed through
    get_or_compute, `hits` those found (in the cache, or from a computation another thread had
    under way)."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES, max_bytes: int | None = None):
        if int(max_entries) < 1:
            raise ValueError(f"max_entries: expected at least 1, got {max_entries}")
        if max_bytes is not None and int(max_bytes) < 0:
            raise ValueError(f"max_bytes: expected >= 0 or None, got {max_bytes}")
        self.max_entries = int(max_entries)
        self.max_bytes = None if max_bytes is None else int(max_bytes)
        self._entries: OrderedDict[str, object] = OrderedDict()
        self._in_flight: dict[str, _Computation] = {}  # keys being computed
        self._lock = threading.Lock()
        self.hits = 0
        self.computed = 0
        _every_cache.add(self)

    def _after_fork_in_child(self) -> None:
        # Only the forking thread lives on in a fork's child: a lock another thread held stays
        # held there, and a computation another thread had under way never finishes.
        self._lock = threading.Lock()
        self._in_flight.clear()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        """Bytes of activations held."""
        with self._lock:
            return sum(r.bytes for r in self._entries.values())

    def get(self, key: str):
        """The reference under `key`, or None."""
        with self._lock:
            reference = self._entries.get(key)
            if reference is not None:
                self._entries.move_to_end(key)
            return reference

    def put(self, key: str, reference) -> None:
        """Keeps a sealed reference, evicting the least recently used ones beyond the bound."""
        if not reference.sealed:
            raise ValueError("only a filled (sealed) reference can be shared")
        with self._lock:
            self._entries.pop(key, None)
            if self.max_bytes is not None and reference.bytes > self.max_bytes:
                return
            self._entries[key] = reference
            while len(self._entries) > self.max_entries or (
                    self.max_bytes is not None and sum(r.bytes for r in self._entries.values()) > self.max_bytes):
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def get_or_compute(self, net, images: np.ndarray, layers, backend: str, threads: int,
                       content: bytes | None = None):
        """(reference, reused): the cached reference of (net, images, layers), or a new one,
        computed and kept.  content: content_digest(net, images) if already computed.  Threads
        asking for the same key at once compute it once: the others wait for it and share it (a
        Dask worker's threads start a sweep's first tasks together); when it fails, each of them
        computes it itself."""
        key = reference_key(net, images, layers, content)
        ours = None  # the computation this thread registered
        try:
            with self._lock:
                reference = self._entries.get(key)
                if reference is not None:
                    self._entries.move_to_end(key)
                    self.hits += 1
                    return reference, True
                theirs = self._in_flight.get(key)
                if theirs is None:
                    ours = self._in_flight[key] = _Computation()
                    # room first: the old entries are not held beside the new one while it is computed
                    while self._entries and len(self._entries) >= self.max_entries:
                        self._entries.popitem(last=False)
            if ours is None:
                return self._share_or_compute(theirs, key, net, images, layers, backend, threads)
            ours.reference = self._compute_and_keep(key, net, images, layers, backend, threads)
            return ours.reference, False
        finally:  # also on an interrupt: a key left registered would keep later requests waiting
            if ours is not None:
                with self._lock:
                    if self._in_flight.get(key) is ours:
                        del self._in_flight[key]
                ours.done.set()

    def _share_or_compute(self, theirs: _Computation, key, net, images, layers, backend, threads):
        theirs.done.wait()
        if theirs.reference is not None:
            with self._lock:
                self.hits += 1
            return theirs.reference, True
        # It failed: each waiter tries itself, side by side rather than one after another.
        return self._compute_and_keep(key, net, images, layers, backend, threads), False

    def _compute_and_keep(self, key, net, images, layers, backend, threads):
        reference = compute_reference(net, images, layers, backend, threads)
        with self._lock:
            self.computed += 1
        self.put(key, reference)
        return reference


_every_cache: weakref.WeakSet = weakref.WeakSet()


def _after_fork_in_child() -> None:
    global _process_lock
    _process_lock = threading.Lock()
    for cache in list(_every_cache):
        cache._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)

_process_cache: ReferenceCache | None = None
_process_lock = threading.Lock()


def process_cache() -> ReferenceCache:
    """This process's cache (one entry), made on first use: what aimcemu.run(reuse_reference=True)
    and sweep workers use."""
    global _process_cache
    with _process_lock:
        if _process_cache is None:
            _process_cache = ReferenceCache()
        return _process_cache
