"""Helpers of the hostile-input tests (test_bad_input_*.py, test_kill.py, test_full_disk.py).

Every bad-input case asserts three things: the exit code, that the message names the file or
field at fault, and that nothing appeared, changed or was left behind in the folders involved
(``Snapshot``).  ``tiny_files`` writes a small model and data set so that runs take well under
a second.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aimcemu import _core, cli, modelfile


@dataclass(frozen=True)
class Entry:
    kind: str
    size: int
    mtime_ns: int
    inode: int
    content: bytes | None  # small regular files only


class Snapshot:
    """Everything under some folders: names (hidden ones included), kinds, sizes, times, inodes,
    and the bytes of small files.  ``assert_unchanged`` names what differs."""

    def __init__(self, *folders):
        self.folders = [Path(f) for f in folders]
        self.entries = self._take()

    def _take(self) -> dict[str, Entry]:
        entries = {}
        for folder in self.folders:
            for root, dirs, names in os.walk(folder):
                for name in dirs + names:
                    path = os.path.join(root, name)
                    st = os.lstat(path)
                    kind = ("dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode)
                            else "fifo" if stat.S_ISFIFO(st.st_mode) else "link" if stat.S_ISLNK(st.st_mode) else "other")
                    content = Path(path).read_bytes() if kind == "file" and st.st_size <= 1 << 20 else None
                    entries[path] = Entry(kind, st.st_size if kind == "file" else 0,
                                          st.st_mtime_ns if kind != "dir" else 0, st.st_ino, content)
        return entries

    def changes(self) -> list[str]:
        now = self._take()
        out = [f"appeared: {p}" for p in sorted(set(now) - set(self.entries))]
        out += [f"vanished: {p}" for p in sorted(set(self.entries) - set(now))]
        out += [f"changed: {p}" for p in sorted(set(now) & set(self.entries)) if now[p] != self.entries[p]]
        return out

    def assert_unchanged(self) -> None:
        changes = self.changes()
        assert not changes, "\n".join(changes)


def cli_run(argv: list[str], capsys) -> tuple[int, str]:
    """Runs the aimcemu command in this process; returns (exit code, stderr)."""
    code = cli.main([os.fspath(a) for a in argv])
    return code, capsys.readouterr().err


def assert_refused(argv: list, folder, capsys, *expected: str) -> str:
    """Runs `aimcemu ARGV` in this process and asserts the bad-input contract: exit status 2, each
    expected text in the one-line message, no traceback, and nothing under `folder` appeared,
    changed or was left behind.  Returns the message."""
    snapshot = Snapshot(folder)
    code, err = cli_run(argv, capsys)
    assert code == 2, err
    for text in expected:
        assert text in err, err
    assert "Traceback" not in err
    snapshot.assert_unchanged()
    return err


def tiny_network(name: str = "tiny", class_names: tuple[str, ...] = ("a", "b", "c", "d")):
    """conv 3x3 + ReLU on 6x6x1 -> max-pool -> linear to 4 classes (fixed pseudo-random weights)."""
    rng = np.random.default_rng(7)
    conv = _core.Layer()
    conv.name, conv.kind, conv.kernel, conv.pad, conv.out_channels = "conv", _core.LayerKind.conv, 3, 1, 4
    conv.weights = rng.integers(-64, 64, size=36, dtype=np.int8)
    conv.bias = rng.integers(-8, 8, size=4, dtype=np.int8)
    conv.out_shift, conv.relu = 5, True
    pool = _core.Layer()
    pool.name, pool.kind, pool.input, pool.kernel, pool.stride = "pool", _core.LayerKind.max_pool, 0, 2, 2
    fc = _core.Layer()
    fc.name, fc.kind, fc.input, fc.out_channels = "fc", _core.LayerKind.linear, 1, 4
    fc.weights = rng.integers(-64, 64, size=4 * 36, dtype=np.int8)
    fc.bias = np.zeros(4, np.int8)
    fc.out_shift = 6
    net = _core.Network()
    net.name, net.input_shape, net.input_frac_bits = name, _core.Shape3(6, 6, 1), 7
    net.layers = [conv, pool, fc]
    net.class_names = list(class_names)
    net.resolve()
    return net


def one_linear_layer_network(name: str, classes: int):
    """A single linear layer from 4 inputs to `classes` outputs (weights 0, 1, 2, ..., no bias,
    shift 2): its activations are the logits a results file stores, easy to set by hand."""
    fc = _core.Layer()
    fc.name, fc.kind, fc.out_channels, fc.out_shift = "fc", _core.LayerKind.linear, classes, 2
    fc.weights = np.arange(4 * classes, dtype=np.int8)
    fc.bias = np.zeros(classes, np.int8)
    net = _core.Network()
    net.name, net.input_shape, net.input_frac_bits = name, _core.Shape3(1, 1, 4), 7
    net.layers = [fc]
    net.resolve()
    return net


def tiny_files(folder: Path, images: int = 12) -> tuple[Path, Path]:
    """model.h5 and test_set.h5 (`images` 6x6x1 images) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    model, data = folder / "model.h5", folder / "test_set.h5"
    modelfile.save_model(tiny_network(), model)
    rng = np.random.default_rng(11)
    modelfile.save_dataset(rng.integers(-128, 128, size=(images, 6, 6, 1), dtype=np.int8),
                           rng.integers(0, 4, size=images), data, source="test", input_frac_bits=7)
    return model, data


def temporaries(folder: Path) -> list[Path]:
    """Hidden temporary files of atomic writers anywhere under `folder`."""
    return [p for p in Path(folder).rglob(".*") if _core.files.parse_temporary_name(p.name)]


def sweep_in_process(config: dict) -> Path:
    """The sweep of `config` run to the end in this process, task after task (no pool: fast), with
    its index written as sweep() writes it; returns its folder."""
    from aimcemu import sweeps

    plan = sweeps.plan(config)
    plan.folder.mkdir()
    summaries = sweeps._prepare_folder(plan)
    for task in plan.tasks:
        summaries[task.file] = sweeps.execute_task(task.to_dict(), os.fspath(plan.folder), 1)
    sweeps._write_json_atomic(plan.folder / sweeps.INDEX_FILE, sweeps._index(plan, summaries))
    return plan.folder


def live_processes_in_group(group: int) -> list[str]:
    """Processes (not zombies) whose process group is `group`, as 'pid command' lines."""
    found = []
    for stat_path in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat_path.read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2:].split()
        if int(fields[2]) == group and fields[0] not in ("Z", "X"):
            found.append(f"{stat_path.parent.name} {text[text.find('(') + 1:text.rfind(')')]}")
    return found
