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


@pytest.fixture
def replace_between_reads():
    """replace(path, replacement): rename `replacement` over `path` right after the checking process
    read `path` (once), through the test-only hook _core.files.set_between_reads_hook_for_tests
    (formats/between_reads_hook.hpp); returns the list of paths replaced."""
    from aimcemu import _core

    replaced = []

    def arm(path, replacement):
        def hook(p):
            if p == os.fspath(path) and not replaced:
                os.rename(replacement, path)
                replaced.append(p)
        _core.files.set_between_reads_hook_for_tests(hook)
        return replaced

    yield arm
    _core.files.set_between_reads_hook_for_tests(None)


def digits_subset(tmp_path_factory, count: int):
    """(model path, data path, net, images, labels): the embedded model with a data set file of
    its first `count` test images (skips the test when the model is not shipped)."""
    from aimcemu import modelfile

    try:
        model, data = modelfile.embedded_paths()
    except FileNotFoundError:
        pytest.skip("the embedded model is not shipped in this checkout")
    net = modelfile.load_model(model)
    full = modelfile.load_dataset(data, net)
    images, labels = full["images"][:count], full["labels"][:count]
    subset = tmp_path_factory.mktemp("digits") / "subset.h5"
    modelfile.save_dataset(images, labels, subset, source="digits subset", input_frac_bits=full["input_frac_bits"])
    return model, subset, net, images, labels
