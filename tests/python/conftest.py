"""Shared pytest setup for tests/python.

Makes the independent NumPy reference (int8_reference.py, next to this file) importable from any
test, and gives tests the C++ core (the build named by AIMCEMU_CORE_DIR, else the installed one).
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session")
def core():
    """aimcemu._core, loaded the way users load it."""
    import aimcemu

    return aimcemu._core


@pytest.fixture
def rng():
    """A fresh seeded generator per test, so tests are reproducible and independent of order."""
    return np.random.default_rng(20261130)
