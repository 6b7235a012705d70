"""A sweep's task files checked in batches (_core.read_results_files, check_results_files): the
checking process reads, under each path's name, the file this process opened for that path, also
while other threads open and close descriptors; and a low descriptor limit only makes the batches
smaller."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading

import pytest

from aimcemu import _core, results

CORPUS = os.path.join(os.path.dirname(__file__), "..", "fuzz", "corpus", "fuzz_results_file")

# Stands in for aimcemu-check-file: reports "ok" for each file, and logs each path whose descriptor
# (4 + i with --fds) is another file.
FAKE_HELPER = textwrap.dedent('''\
    #!{python}
    import os, sys
    args = sys.argv[1:]
    fds = args[0] == "--fds"
    paths = args[2:] if fds else args[1:]
    with open({log!r}, "a") as log:
        for i, path in enumerate(paths):
            if fds and os.readlink(f"/proc/self/fd/{{4 + i}}") != os.path.realpath(path):
                log.write(f"{{path}} read as {{os.readlink(f'/proc/self/fd/{{4 + i}}')}}\\n")
            os.write(1, b"2:ok,")
''')


@pytest.fixture
def task_files(tmp_path):
    folder = tmp_path / "tasks"
    folder.mkdir()
    paths = []
    for i in range(100):
        paths.append(folder / f"task{i:03d}.h5")
        shutil.copy(os.path.join(CORPUS, "noisy.h5"), paths[-1])
    return [os.fspath(p) for p in paths]


def test_each_path_is_checked_as_the_file_opened_for_it_while_other_threads_close_descriptors(tmp_path, task_files):
    log = tmp_path / "mismatches.log"
    log.touch()
    fake = tmp_path / "fake-check-file"
    fake.write_text(FAKE_HELPER.format(python=sys.executable, log=os.fspath(log)))
    fake.chmod(0o755)
    previous = _core.files.check_helper()
    _core.files.set_check_helper(os.fspath(fake))
    try:
        for _ in range(12):
            # Descriptors from 10 up taken, then freed one by one while the batch opens its files: a file
            # opened later then gets a number that an earlier file's descriptor in the checking process has.
            held = [os.open(os.devnull, os.O_RDONLY) for _ in range(60)]
            low = sorted(fd for fd in held if fd >= 10)[:40]
            stop = threading.Event()

            def free_low_descriptors():
                for fd in low:
                    if stop.is_set():
                        break
                    os.close(fd)
                    held.remove(fd)

            freeing = threading.Thread(target=free_low_descriptors)
            freeing.start()
            assert len(_core.read_results_files(task_files)) == len(task_files)
            stop.set()
            freeing.join()
            for fd in held:
                os.close(fd)
    finally:
        _core.files.set_check_helper(previous)
    assert log.read_text() == ""


LOW_LIMIT = textwrap.dedent('''\
    import os, resource, sys
    from aimcemu import _core, results
    paths = sys.argv[2:]
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    summaries = results.read_task_summaries(paths)
    _core.check_results_files(paths)
    print(len(summaries), len(os.listdir("/proc/self/fd")))
''')


@pytest.mark.parametrize("limit", [32, 64])
def test_a_low_descriptor_limit_makes_batches_smaller_not_a_failure(tmp_path, task_files, limit):
    script = tmp_path / "low_limit.py"
    script.write_text(LOW_LIMIT)
    done = subprocess.run([sys.executable, os.fspath(script), str(limit), *task_files], capture_output=True, text=True,
                          env=os.environ, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    read, open_after = (int(v) for v in done.stdout.split())
    assert read == len(task_files)
    assert open_after < limit


def test_without_any_descriptor_left_the_error_says_so(tmp_path, task_files):
    script = tmp_path / "no_descriptor.py"
    script.write_text(textwrap.dedent('''\
        import os, resource, sys
        from aimcemu import _core
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        held = []
        try:
            while True:
                held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        try:
            _core.read_results_files(sys.argv[1:])
        except _core.FormatError as e:
            print(e)
    '''))
    done = subprocess.run([sys.executable, os.fspath(script), *task_files[:3]], capture_output=True, text=True,
                          env=os.environ, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(task_files[0] + ": field 'file': cannot be opened: Too many open files"), done.stdout
