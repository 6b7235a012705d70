"""A sweep worker's later runs: glibc's malloc thresholds set in aimcemu's own processes, and the
model and data set kept from one run to the next (process_memory.keep_freed_memory,
modelfile.process_inputs).

Pinned here:
  * the local pool's worker start and the `aimcemu run` / `aimcemu sweep` commands set the
    thresholds, seen as behaviour: a 24 MiB block freed and taken again is not faulted in afresh
    (ru_minflt in a fresh process), while `import aimcemu` alone leaves glibc's defaults (the
    block faults in again) and keeps no model;
  * with the thresholds set, a second run on the same files loads nothing (loads counted) and
    writes a results file identical, dataset by dataset, to a run that loads its files;
  * a file renamed over the path between runs (same bytes, size and modification time: only the
    inode differs) or written in place is loaded again, and the run follows the new file; a file
    that changed just before its load (within modelfile.SETTLED_NS) is not kept;
  * process_memory counts the kept inputs and release() frees them.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import aimcemu
from aimcemu import executors, modelfile, process_memory
from aimcemu.reference import process_cache
from conftest import digits_subset
from test_reference_reuse import assert_same_contents, file_contents

IMAGES = 8
NOISY = dict(mapping="all", noise="pcm_like", t="0,1d", chips=1, rounds=2, seed=5, layers="all")
BLOCK = 24 << 20  # above glibc's default mmap threshold (128 KiB), below the one keep_freed_memory sets
BLOCK_PAGES = BLOCK // 4096

# Frees a BLOCK-byte block, takes one again and writes it: how many pages that faulted in.
REUSE_FAULTS = textwrap.dedent("""
    import ctypes, resource
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    def written_block():
        block = libc.malloc({size})
        ctypes.memset(block, 1, {size})
        return block
    libc.free(written_block())
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = written_block()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    libc.free(block)
""").format(size=BLOCK)


def faults_of_a_reused_block(setup: str) -> int:
    """REUSE_FAULTS in a fresh Python process after `setup`."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(setup) + REUSE_FAULTS + "print(faults)"], check=True,
                          capture_output=True, text=True, env=os.environ.copy())
    return int(done.stdout.strip().splitlines()[-1])


def faults_of_a_reused_block_here() -> int:
    """REUSE_FAULTS in this process (a pool worker's task)."""
    scope: dict = {}
    exec(REUSE_FAULTS, scope)
    return scope["faults"]


glibc_only = pytest.mark.skipif(not os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else True,
                                reason="mallopt's thresholds are glibc's")


@glibc_only
def test_import_alone_leaves_mallocs_defaults_and_keeps_no_model():
    faults = faults_of_a_reused_block("""
        import aimcemu, aimcemu.runner, aimcemu.sweeps, aimcemu.executors
        from aimcemu import modelfile
        assert not modelfile.process_inputs().enabled
    """)
    assert faults >= BLOCK_PAGES // 2  # mapped afresh: glibc's default mmap threshold


@glibc_only
def test_the_local_pool_workers_start_keeps_freed_memory():
    faults = faults_of_a_reused_block("""
        import os
        from aimcemu import executors, modelfile
        executors.init_worker(1, os.getppid())
        assert modelfile.process_inputs().enabled
    """)
    assert faults < BLOCK_PAGES // 16


@glibc_only
def test_keep_freed_memory_reuses_a_freed_block():
    faults = faults_of_a_reused_block("""
        from aimcemu import process_memory
        assert process_memory.keep_freed_memory()
    """)
    assert faults < BLOCK_PAGES // 16


def test_keep_freed_memory_changes_nothing_outside_glibc(monkeypatch):
    monkeypatch.setattr(modelfile.process_inputs(), "enabled", False)
    monkeypatch.setattr(os, "confstr", lambda name: None)
    assert process_memory.keep_freed_memory() is False
    assert not modelfile.process_inputs().enabled


@glibc_only
def test_a_local_pool_worker_keeps_freed_memory():
    """The pool spawns its workers (a fork would start them with the coordinator's state), and a
    task then finds the thresholds init_worker set."""
    pool = executors.local_pool(1, 1, 1)
    try:
        assert pool.submit(faults_of_a_reused_block_here, "faults").result(timeout=120) < BLOCK_PAGES // 16
    finally:
        pool.close()


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_the_commands_keep_freed_memory_in_their_own_process_only(command, monkeypatch, tmp_path):
    from aimcemu import cli

    calls = []
    monkeypatch.setattr(process_memory, "keep_freed_memory", lambda: calls.append(command))
    # Both stop at a missing file, after the call (which comes first).
    argv = ["run", str(tmp_path / "none.h5")] if command == "run" else ["sweep", "--config", str(tmp_path / "none.yaml"), "--check"]
    assert cli.main(argv) == 2  # called from a Python program: its allocator is left alone
    assert calls == []
    monkeypatch.setattr(sys, "argv", ["aimcemu", *argv])
    assert cli.main() == 2  # the `aimcemu` command (console script, python -m aimcemu)
    assert calls == [command]


# ---- the kept model and data set ----

@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return digits_subset(tmp_path_factory, IMAGES)


@pytest.fixture
def files(digits, tmp_path):
    """The model and data set copied into this test's folder (so they can be replaced)."""
    model, data = tmp_path / "model.h5", tmp_path / "data.h5"
    shutil.copyfile(digits[0], model)
    shutil.copyfile(digits[1], data)
    return model, data


@pytest.fixture
def keeping(monkeypatch):
    """This process as a sweep worker after keep_freed_memory (the flag alone: the pytest process's
    malloc is left as it is), with nothing kept before or after the test."""
    inputs = modelfile.process_inputs()
    monkeypatch.setattr(inputs, "enabled", True)
    monkeypatch.setattr(inputs, "loads", 0)
    monkeypatch.setattr(modelfile, "SETTLED_NS", 0)  # the files are copied just before each test
    process_memory.release()
    yield inputs
    process_memory.release()


def run_noisy(model, data, out, reuse=True):
    return aimcemu.run(model, data, out, reuse_reference=reuse, **NOISY)


def test_a_second_run_takes_the_kept_inputs_and_writes_the_same_file(files, keeping, tmp_path):
    model, data = files
    run_noisy(model, data, tmp_path / "loaded.h5", reuse=False)  # loads its files: what the others must equal
    assert keeping.loads == 0 and keeping.bytes == 0
    run_noisy(model, data, tmp_path / "first.h5")
    assert keeping.loads == 1 and keeping.bytes > 0
    process_cache().clear()  # the second run computes its reference again, from the kept inputs
    run_noisy(model, data, tmp_path / "kept.h5")
    assert keeping.loads == 1
    expected = file_contents(tmp_path / "loaded.h5")
    assert_same_contents(file_contents(tmp_path / "first.h5"), expected)
    assert_same_contents(file_contents(tmp_path / "kept.h5"), expected)


def test_nothing_is_kept_in_a_process_that_did_not_ask(files, monkeypatch, tmp_path):
    inputs = modelfile.process_inputs()
    monkeypatch.setattr(inputs, "enabled", False)
    loads = inputs.loads
    run_noisy(*files, tmp_path / "a.h5")
    run_noisy(*files, tmp_path / "b.h5")
    assert inputs.loads == loads and inputs.bytes == 0
    process_memory.release()


def replace_keeping_size_and_times(path, new_bytes_from) -> None:
    """Renames a copy of `new_bytes_from` over `path` with `path`'s modification time: a new inode,
    and (for the same bytes) the same size and modification time."""
    old = os.stat(path)
    staged = path.with_name(path.name + ".new")
    shutil.copyfile(new_bytes_from, staged)
    os.utime(staged, ns=(old.st_atime_ns, old.st_mtime_ns))
    os.replace(staged, path)


def test_a_model_renamed_over_the_path_is_loaded_again(files, keeping, tmp_path):
    model, data = files
    run_noisy(model, data, tmp_path / "first.h5")
    before = os.stat(model)
    replace_keeping_size_and_times(model, model)
    after = os.stat(model)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert after.st_ino != before.st_ino
    run_noisy(model, data, tmp_path / "second.h5")
    assert keeping.loads == 2
    run_noisy(model, data, tmp_path / "third.h5")  # and the reloaded one is kept in turn
    assert keeping.loads == 2


def test_a_data_set_renamed_over_the_path_is_loaded_and_used(files, digits, keeping, tmp_path):
    model, data = files
    run_noisy(model, data, tmp_path / "first.h5")
    # Another data set of the same shape (the images in reverse order), with the old modification time.
    images, labels = digits[3][::-1].copy(), digits[4][::-1].copy()
    other = tmp_path / "other.h5"
    modelfile.save_dataset(images, labels, other, source="digits subset", input_frac_bits=digits[2].input_frac_bits)
    replace_keeping_size_and_times(data, other)
    run_noisy(model, data, tmp_path / "second.h5")
    assert keeping.loads == 2
    run_noisy(model, data, tmp_path / "loaded.h5", reuse=False)
    assert_same_contents(file_contents(tmp_path / "second.h5"), file_contents(tmp_path / "loaded.h5"))
    first, second = file_contents(tmp_path / "first.h5"), file_contents(tmp_path / "second.h5")
    assert not np.array_equal(first["labels"], second["labels"])


def test_a_file_written_in_place_is_loaded_again(files, keeping, tmp_path):
    model, data = files
    run_noisy(model, data, tmp_path / "first.h5")
    old = os.stat(data)
    with open(data, "r+b") as f:  # the same bytes written back: only the change time moves
        content = f.read()
        f.seek(0)
        f.write(content)
    os.utime(data, ns=(old.st_atime_ns, old.st_mtime_ns))
    assert os.stat(data).st_ctime_ns != old.st_ctime_ns or pytest.skip("this file system kept the change time")
    run_noisy(model, data, tmp_path / "second.h5")
    assert keeping.loads == 2


def test_process_memory_counts_and_releases_the_kept_inputs(files, keeping, tmp_path):
    run_noisy(*files, tmp_path / "first.h5")
    kept = keeping.bytes
    assert kept > 0
    assert process_memory.kept_bytes() >= kept + process_cache().bytes
    assert process_memory.release() >= kept
    assert keeping.bytes == 0 and process_memory.kept_bytes() == 0
    run_noisy(*files, tmp_path / "second.h5")
    assert keeping.loads == 2


def test_a_bad_file_is_reported_by_the_users_path(files, keeping, tmp_path):
    model, data = files
    data.write_bytes(b"not an HDF5 file")
    with pytest.raises(aimcemu.FormatError) as error:
        run_noisy(model, data, tmp_path / "out.h5")
    assert str(data) in str(error.value) and "/proc/self/fd" not in str(error.value)
    assert keeping.bytes == 0


def test_a_file_changed_just_before_its_load_is_not_kept(files, keeping, monkeypatch, tmp_path):
    """A second write within the file system's timestamp tick would leave its times unchanged."""
    monkeypatch.setattr(modelfile, "SETTLED_NS", 3600 * 10**9)
    run_noisy(*files, tmp_path / "first.h5")
    assert keeping.loads == 1 and keeping.bytes == 0
    run_noisy(*files, tmp_path / "second.h5")
    assert keeping.loads == 2


class PruningMapping(aimcemu.Mapping):
    """A mapping of the caller's own class whose resolve() changes the network it is given."""

    def resolve(self, net, *args, **kwargs):
        layer = net.layers[-1]
        layer.weights = np.zeros_like(layer.weights)
        return super().resolve(net, *args, **kwargs)


def test_a_mapping_of_the_callers_class_never_gets_or_leaves_a_kept_network(files, keeping, tmp_path):
    """Its change to the network stays in its run, as it does without the keep."""
    model, data = files
    plain = run_noisy(model, data, tmp_path / "plain.h5")
    pruned = aimcemu.run(model, data, tmp_path / "pruned.h5", reuse_reference=True,
                         **{**NOISY, "mapping": PruningMapping.all_aimc()})
    after = run_noisy(model, data, tmp_path / "after.h5")
    assert pruned.accuracy != plain.accuracy  # the pruning took effect in its run
    assert after.accuracy == plain.accuracy
    assert_same_contents(file_contents(tmp_path / "after.h5"), file_contents(tmp_path / "plain.h5"))
    assert keeping.loads == 1  # the pruned run loaded its own network, outside the cache


def test_the_environment_can_turn_the_keep_off(files, keeping, monkeypatch, tmp_path):
    """For inputs changed in ways that keep a file's times (a shared memory mapping, some FUSE file systems)."""
    monkeypatch.setenv("AIMCEMU_KEEP_INPUTS", "0")
    run_noisy(*files, tmp_path / "first.h5")
    run_noisy(*files, tmp_path / "second.h5")
    assert keeping.loads == 0 and keeping.bytes == 0


def test_a_run_that_fails_before_reading_the_data_set_holds_no_files(files, keeping, tmp_path):
    """Without a garbage collection: the data set's reader and the run's inputs referred to each other."""
    import gc

    model, data = files
    folder = tmp_path / "a-folder"
    folder.mkdir()
    gc.collect()
    gc.disable()
    try:
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(5):
            with pytest.raises(aimcemu.FormatError):
                run_noisy(model, data, folder)  # the output is a folder: refused before the data set is read
        assert len(os.listdir("/proc/self/fd")) == before
    finally:
        gc.enable()


def test_a_run_on_other_files_drops_the_kept_inputs_before_its_load(files, digits, keeping, monkeypatch, tmp_path):
    """Two models and data sets are never held at once, and one not kept leaves nothing behind."""
    model, data = files
    run_noisy(model, data, tmp_path / "first.h5")
    assert keeping.bytes > 0
    other_model = tmp_path / "other_model.h5"
    shutil.copyfile(model, other_model)
    monkeypatch.setattr(modelfile, "SETTLED_NS", 3600 * 10**9)  # the other files are not kept
    run_noisy(other_model, data, tmp_path / "second.h5")
    assert keeping.loads == 2 and keeping.bytes == 0


def test_the_kept_inputs_open_their_files_with_the_loaders_opener(files, tmp_path, monkeypatch):
    """OpenedInputs opens through _core.files.open_input, whose path is resolved once and only a
    regular file opened (test_io_hostile_files: a FIFO flipped over the path is never opened), not
    by a stat and an open of its own that a device renamed over the path in between would pass."""
    from aimcemu import _core

    model, _ = files
    fifo = tmp_path / "fifo.h5"
    os.mkfifo(fifo)
    assert modelfile.OpenedInputs.open(model, fifo) is None
    with pytest.raises(OSError):  # ENXIO: nobody holds the FIFO open for reading
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    opener, used = _core.files.open_input, []
    monkeypatch.setattr(_core.files, "open_input", lambda path: (used.append(path), opener(path))[1])
    opened = modelfile.OpenedInputs.open(model, model)
    assert opened is not None and used == [os.fspath(model)] * 2
    opened.close()


def test_making_room_keeps_the_inputs_the_run_is_using(files, keeping, monkeypatch, tmp_path):
    """Freeing the kept model and data set that the run itself holds gives back no memory; it only
    made the next run load them again.  The reference cache is still freed."""
    from aimcemu import validate

    model, data = files
    run_noisy(model, data, tmp_path / "first.h5")
    assert keeping.loads == 1 and process_cache().bytes > 0
    with monkeypatch.context() as patch:
        patch.setattr(validate, "available_memory", lambda: 0)  # the run must make room
        run_noisy(model, data, tmp_path / "second.h5")
    assert keeping.bytes > 0 and process_cache().bytes > 0  # the second run's own reference
    run_noisy(model, data, tmp_path / "third.h5")
    assert keeping.loads == 1
    assert_same_contents(file_contents(tmp_path / "third.h5"), file_contents(tmp_path / "first.h5"))


def test_making_room_counts_no_inputs_in_use(files, keeping, monkeypatch, tmp_path):
    """A run whose only kept memory is its own inputs finds nothing to free: kept_bytes less them."""
    model, data = files
    run_noisy(model, data, tmp_path / "first.h5")
    process_cache().clear()
    aimcemu.niu.release_kept_memory()
    kept = modelfile.process_inputs()._kept
    released = []
    monkeypatch.setattr(process_memory, "release", lambda in_use=None: released.append(in_use) or 0)
    from aimcemu import validate
    monkeypatch.setattr(validate, "available_memory", lambda: 0)
    process_memory.make_room(1, kept)
    assert released == []
    process_memory.make_room(1)
    assert released == [None]
