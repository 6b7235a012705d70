"""What a process keeps between runs (the reference cache's entry, the emulator's kept chip states
and buffers) is a cache: it never stands in a run's way.

Pinned here: after a noisy run with reuse_reference=True the process keeps memory
(process_memory.kept_bytes counts both parts); make_room frees all of it before a run whose
arrays, beside it, would exceed the machine's memory (exactly at the byte) or what the kernel has
available now, and keeps it otherwise; aimcemu.run does so before it starts (a run after such a
release recomputes its reference and writes the same file)."""
from __future__ import annotations

import pytest

import aimcemu
from aimcemu import niu, process_memory, validate
from aimcemu.reference import process_cache
from conftest import digits_subset
from test_reference_reuse import assert_same_contents, file_contents

IMAGES = 8
NOISY = dict(mapping="all", noise="pcm_like", t="0,1d", chips=1, rounds=2, seed=5, layers="none")
# a small run's arrays: 8 images of 100 bytes of activations, 2 noisy rounds of 10 classes
SMALL_RUN = (IMAGES, 100, 10, 2, "data.h5", "<arguments>")  # check_run_memory's arguments
SMALL_RUN_BYTES = IMAGES * 100 + 2 * IMAGES * (10 + 8 + 1)


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return digits_subset(tmp_path_factory, IMAGES)


@pytest.fixture
def warm_process(digits, tmp_path):
    """A process after one noisy run with reuse_reference=True: a cached reference and kept buffers."""
    model, data, _, _, _ = digits
    process_cache().clear()
    aimcemu.run(model, data, tmp_path / "first.h5", reuse_reference=True, **NOISY)
    yield model, data
    process_cache().clear()


def test_a_warm_process_counts_both_parts_of_what_it_keeps(warm_process):
    cache_bytes, emulator_bytes = process_cache().bytes, niu.kept_memory_bytes()
    assert cache_bytes > 0 and emulator_bytes > 0
    assert process_memory.kept_bytes() == cache_bytes + emulator_bytes


def test_kept_memory_is_freed_when_the_run_and_it_would_exceed_the_machine(warm_process, monkeypatch):
    monkeypatch.setattr(validate, "available_memory", lambda: None)
    kept = process_memory.kept_bytes()
    monkeypatch.setattr(validate, "physical_memory", lambda: SMALL_RUN_BYTES + kept)  # fits exactly: kept
    process_memory.make_room(validate.check_run_memory(*SMALL_RUN))
    assert process_memory.kept_bytes() == kept
    monkeypatch.setattr(validate, "physical_memory", lambda: SMALL_RUN_BYTES + kept - 1)  # one byte short: freed
    process_memory.make_room(validate.check_run_memory(*SMALL_RUN))
    assert process_memory.kept_bytes() == 0 and len(process_cache()) == 0 and niu.kept_memory_bytes() == 0


def test_kept_memory_is_freed_when_the_kernel_has_less_available_than_the_run_needs(warm_process, monkeypatch):
    kept = process_memory.kept_bytes()
    monkeypatch.setattr(validate, "available_memory", lambda: SMALL_RUN_BYTES)
    process_memory.make_room(validate.check_run_memory(*SMALL_RUN))
    assert process_memory.kept_bytes() == kept
    monkeypatch.setattr(validate, "available_memory", lambda: SMALL_RUN_BYTES - 1)
    process_memory.make_room(validate.check_run_memory(*SMALL_RUN))
    assert process_memory.kept_bytes() == 0


def test_available_memory_reads_the_kernels_figure():
    available = validate.available_memory()
    assert available is not None and 0 < available <= validate.physical_memory()


def test_a_run_after_a_release_recomputes_its_reference_and_writes_the_same_file(warm_process, tmp_path,
                                                                                   monkeypatch):
    model, data = warm_process
    cache = process_cache()
    computed = cache.computed
    aimcemu.run(model, data, tmp_path / "reused.h5", reuse_reference=True, **NOISY)
    assert cache.computed == computed  # the reference came from the cache
    monkeypatch.setattr(validate, "available_memory", lambda: 0)
    aimcemu.run(model, data, tmp_path / "released.h5", reuse_reference=True, **NOISY)
    assert cache.computed == computed + 1  # freed before the run, so computed again
    assert_same_contents(file_contents(tmp_path / "reused.h5"), file_contents(tmp_path / "released.h5"))
