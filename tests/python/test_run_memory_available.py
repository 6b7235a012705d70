"""check_run_memory compares a run's arrays with what the machine can give it now (MemAvailable
plus the process's own resident memory), not with physical memory alone: a run of 2^20 chips on
a machine whose memory others hold passed the check and grew for minutes.  The memory figures
are monkeypatched: nothing here allocates what it checks."""
from __future__ import annotations

import pytest

import aimcemu
from aimcemu import validate

GIB = 1 << 30


def test_a_run_larger_than_available_memory_is_refused(monkeypatch):
    monkeypatch.setattr(validate, "physical_memory", lambda: 64 * GIB)
    monkeypatch.setattr(validate, "available_memory", lambda: 2 * GIB)
    monkeypatch.setattr(validate, "resident_memory", lambda: GIB)
    # 2^20 noisy rounds x 360 images x (10 classes + 9) bytes: 6.7 GiB of predictions and logits.
    with pytest.raises(aimcemu.FormatError, match=r"field 'chips'.*can give it now.* 3 GiB"):
        validate.check_run_memory(360, 1000, 10, 2**20, "data.h5", "<arguments>")


def test_the_process_own_memory_counts_as_obtainable(monkeypatch):
    monkeypatch.setattr(validate, "physical_memory", lambda: 64 * GIB)
    monkeypatch.setattr(validate, "available_memory", lambda: GIB)
    monkeypatch.setattr(validate, "resident_memory", lambda: 8 * GIB)
    assert validate.check_run_memory(360, 1000, 10, 2**20, "data.h5", "<arguments>") > 6 * GIB


def test_physical_memory_bounds_the_run_where_meminfo_says_nothing(monkeypatch):
    monkeypatch.setattr(validate, "physical_memory", lambda: 4 * GIB)
    monkeypatch.setattr(validate, "available_memory", lambda: None)
    with pytest.raises(aimcemu.FormatError, match=r"this machine has 4 GiB"):
        validate.check_run_memory(360, 1000, 10, 2**20, "data.h5", "<arguments>")
    monkeypatch.setattr(validate, "available_memory", lambda: 100 * GIB)
    with pytest.raises(aimcemu.FormatError, match=r"this machine has 4 GiB"):
        validate.check_run_memory(360, 1000, 10, 2**20, "data.h5", "<arguments>")


def test_resident_memory_reads_this_process():
    assert validate.resident_memory() > 1 << 20
