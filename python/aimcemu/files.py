"""Writing files safely: atomic replacement without litter, output paths that never destroy an
input, and a lock that keeps two sweeps out of one folder.

Every file aimcemu writes appears only when complete: it is written as a hidden temporary file
``.NAME.tmp-HOST-PID-N`` beside the target and renamed over it (the C++ writers do the same,
with the same names: common/temp_files.hpp).  A temporary file is removed on every error path;
one left by a process that was killed (SIGKILL, the OOM killer, a power cut) is removed by the
next write into the same folder, once its writer is certainly gone (this host, that PID dead or
reused).  Files of live writers and of other hosts are never touched.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import socket
import stat
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from . import _core
from .validate import fail, text


# --- atomic writes ------------------------------------------------------------------------------
def remove_stale_temporaries(folder) -> list[str]:
    """Removes the temporary files in `folder` whose writer is gone; returns their paths."""
    return _core.files.remove_stale_temporaries(os.fspath(folder))


def atomic_write_bytes(path, data: bytes) -> None:
    """Writes `data` to `path` atomically: the file is either the old one or the whole new one,
    and nothing else is left in the folder whatever happens (a full disk included)."""
    path = Path(path)
    remove_stale_temporaries(path.parent if str(path.parent) else ".")
    temp = _core.files.temporary_path(os.fspath(path))
    try:
        try:
            with open(temp, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            if exc.filename is None:   # write, flush and fsync name no file: "[Errno 28] No space left on device"
                exc.filename = os.fspath(path)
            raise
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path, content: str) -> None:
    atomic_write_bytes(path, content.encode("utf-8"))


def atomic_write_json(path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=1) + "\n")


# --- output paths ---------------------------------------------------------------------------------
def _identity(path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def output_file(path, field: str, source: str = "<arguments>", *, inputs: Iterable[tuple[str, Any]] = (),
                default_name: Callable[[], str] | None = None, create_folder: bool = True) -> Path:
    """Where a command may write its output file, checked before any work:

    - a path ending in '/' (or os.sep) is a folder: the file goes inside it under
      ``default_name()``; without a default name it is refused.  The folder must be creatable (its
      nearest existing ancestor a writable folder); it is created here when `create_folder`, else
      by the caller just before it writes (make_folder), so that a refused run leaves no folder;
    - a file's folder must be creatable too; the caller makes it just before it writes;
    - an existing folder, device, FIFO or socket is refused: only a regular file is replaced;
    - the output may not be one of the run's `inputs` ((field, path) pairs), compared by
      device and inode, so neither another name nor a hard or symbolic link gets past.
    """
    raw = text(os.fspath(path), field, source)
    if not raw:  # Path("") is ".", which would be refused as "a folder": say what is wrong
        raise fail(source, field, "empty; give a file name (or a folder ending in '/')")
    if raw.endswith(("/", os.sep)):
        if default_name is None:
            raise fail(source, field, f"{raw} names a folder; give a file name")
        folder = Path(raw)
        if folder.exists() and not folder.is_dir():
            raise fail(source, field, f"{raw} ends in '/' but {folder} is not a folder")
        check_folder_creatable(folder, field, source)
        if create_folder:
            make_folder(folder, field, source)
        out = folder / default_name()
    else:
        out = Path(raw)
        # Its folder is made when the output is written (as for a name ending in '/'): here
        # only refused, before any work, when it cannot be (was found only by the write).
        check_folder_creatable(out.parent, field, source)
    _check_name_leaves_room_for_the_temporary(out, field, source)
    try:
        st = os.stat(out)
    except FileNotFoundError:
        return out
    except OSError as exc:
        raise fail(source, field, f"cannot use {out}: {_words(exc)}") from None
    if stat.S_ISDIR(st.st_mode):
        raise fail(source, field, f"{out} is a folder (end it with '/' to write a file inside it)")
    if not stat.S_ISREG(st.st_mode):
        raise fail(source, field, f"{out} exists and is not a regular file (a device, FIFO or socket); "
                                  "it is never replaced")
    identity = (st.st_dev, st.st_ino)
    for input_field, input_path in inputs:
        if input_path is not None and _identity(input_path) == identity:
            raise fail(source, field, f"{out} is the {input_field} of this run ({input_path}); "
                                      "writing there would destroy it")
    return out


# What a temporary name adds to its target's (".NAME.tmp-HOST-PID-N", temporary_path): the dots and
# dashes, this host's tag (the core's host_tag), a PID of at most 7 digits (pid_max 4194304) and a
# counter of at most 10.
def _temporary_name_extra() -> int:
    return len(".") + len(".tmp-") + len(_core.files.host_tag()) + len("-") + 7 + len("-") + 10


def _check_name_leaves_room_for_the_temporary(out: Path, field: str, source: str) -> None:
    """Refuses, before any work, a file name that the file system takes but not with the suffix of
    the temporary file it is written as: the write would fail only at the end ("File name too
    long"), after all the work."""
    name = len(os.fsencode(out.name))
    try:
        most = os.pathconf(out.parent if out.parent.is_dir() else ".", "PC_NAME_MAX")
    except (OSError, ValueError):
        most = 255
    extra = _temporary_name_extra()
    if name + extra > most:
        raise fail(source, field, f"the file name is {name} bytes; it is written as a temporary file whose name "
                                  f"adds up to {extra}, so at most {most - extra} bytes fit this file system's {most}")


def _words(exc: OSError) -> str:
    """An OSError's reason in lower case ("not a directory"), without Python's "[Errno 20]"."""
    reason = exc.strerror or str(exc)
    return reason[:1].lower() + reason[1:]


def check_folder_creatable(folder, field: str, source: str = "<arguments>") -> None:
    """Refuses, before any work, a folder that cannot exist or be written in, creating nothing:
    its nearest existing ancestor (the folder itself when it exists) must be a folder this process
    may write and enter (os.access, which also reports a read-only mount) on a file system that
    holds folders (not /proc or /sys, which root's access() passes).  What only creating it tells
    (an immutable folder, a full disk) is named by make_folder."""
    folder = Path(folder)
    existing = folder
    while not existing.exists() and existing != existing.parent:
        if existing.is_symlink():  # a dangling link: mkdir would fail on it
            raise fail(source, field, f"cannot create folder {folder}: {existing} is a broken symbolic link")
        existing = existing.parent
    if not existing.is_dir():
        raise fail(source, field, f"cannot create folder {folder}: {existing} is not a folder")
    where = f"folder {folder}" if existing == folder else f"cannot create folder {folder}: {existing}"
    if not os.access(existing, os.W_OK | os.X_OK, effective_ids=os.access in os.supports_effective_ids):
        read_only = os.statvfs(existing).f_flag & os.ST_RDONLY
        raise fail(source, field, f"{where} is not writable "
                                  f"({'a read-only file system' if read_only else 'permission denied'})")
    kind = _pseudo_file_system(existing)
    if kind is not None:
        raise fail(source, field, f"{where} is on the kernel's {kind} file system, where no folder of files can be made")


# Kernel file systems that hold no user folders (mkdir fails there, or makes a kernel object: a
# cgroup), though root's access() passes them.  Only these are refused by name: a FUSE or network
# file system is taken at its access() word.
PSEUDO_FILE_SYSTEMS = frozenset({"proc", "sysfs", "devpts", "cgroup", "cgroup2", "securityfs", "debugfs", "tracefs",
                                 "pstore", "bpf", "configfs", "efivarfs", "fusectl", "mqueue", "binfmt_misc",
                                 "selinuxfs", "nsfs"})


def _pseudo_file_system(path: Path) -> str | None:
    """The type of the kernel file system that holds `path` when it is one of PSEUDO_FILE_SYSTEMS
    (the mount with the longest mount point above it in /proc/self/mountinfo), else None (also
    where there is no mountinfo to read)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text(errors="replace").splitlines()
    except OSError:
        return None
    target = os.path.realpath(path)
    best, kind = "", None
    for line in lines:
        fields = line.split()
        if "-" not in fields or len(fields) < 5:
            continue
        # mountinfo escapes space, tab, newline and backslash in paths as octal (\040)
        mount_point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best):  # later mounts over the same point win
            best, kind = mount_point, fields[fields.index("-") + 1]
    return kind if kind in PSEUDO_FILE_SYSTEMS else None


def make_folder(folder, field: str, source: str = "<arguments>") -> list[Path]:
    """Creates `folder` and its parents (an output's folder, just before the output is written);
    returns the folders this call created (create_folders).  An error names the field and says
    why in words ("cannot create folder X: not a directory")."""
    try:
        return create_folders(folder)
    except FileExistsError:  # a file (or a link to one) at that name
        raise fail(source, field, f"cannot create folder {folder}: a file of that name exists") from None
    except OSError as exc:
        raise fail(source, field, f"cannot create folder {folder}: {_words(exc)}") from None


def create_folders(folder) -> list[Path]:
    """Creates `folder` and its missing parents, as Path.mkdir(parents=True, exist_ok=True) does,
    and returns the folders this call created, outermost first (remove_new_folders takes them
    away again when what goes in them cannot be written).  A folder another process makes
    meanwhile is not counted.  On an error (FileExistsError: a file of that name) the folders
    this call created are removed again."""
    folder = Path(folder)
    missing = []  # from `folder` up to its nearest existing ancestor (whatever that is: mkdir says)
    for path in (folder, *folder.parents):
        if path.exists():
            break
        missing.append(path)
    if not missing and not folder.is_dir():
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fspath(folder))
    created: list[Path] = []
    try:
        for path in reversed(missing):
            try:
                path.mkdir()
            except FileExistsError:
                if not path.is_dir():
                    raise
                continue
            created.append(path)
    except BaseException:
        remove_new_folders(created)
        raise
    return created


def remove_new_folders(created: list[Path]) -> None:
    """Removes the folders a call created (make_folder's list), innermost first, each only while
    it is empty: a call that failed leaves the tree as it found it, and never takes away what
    another process has put there since."""
    for path in reversed(created):
        try:
            os.rmdir(path)
        except OSError:  # not empty (or gone): it and the folders above it stay
            return


@contextlib.contextmanager
def new_folder_for(folder, field: str, source: str = "<arguments>"):
    """`with new_folder_for(output.parent, ...): write(output)`: the output's folder made
    (make_folder) just before the write, and removed again, with the parents this call created,
    when the write fails (a full disk) and leaves it empty."""
    created = make_folder(folder, field, source)
    try:
        yield
    except BaseException:
        remove_new_folders(created)
        raise


class ClaimedFile:
    """An empty file created exclusively to reserve a new output name (claim_new_file); the writer
    later replaces it with the complete output.  release() removes it while it is still the
    empty file claimed (the run failed), and never anything else; then the folders the claim
    created for it, while they are empty."""

    def __init__(self, path: Path, identity: tuple[int, int], new_folders: list[Path] | None = None):
        self.path, self._identity = path, identity
        self._new_folders = new_folders or []

    def release(self) -> None:
        self._remove_claimed_file()
        remove_new_folders(self._new_folders)

    def _remove_claimed_file(self) -> None:
        try:
            st = os.lstat(self.path)
        except OSError:
            return
        if (st.st_dev, st.st_ino) == self._identity and st.st_size == 0:
            try:
                os.unlink(self.path)
            except OSError:
                pass


# How many names claim_new_file tries (NAME, NAME-2, ... NAME-N) before it gives up.
MAX_NAME_TRIES = 10_000


def claim_new_file(path, field: str, source: str = "<arguments>") -> ClaimedFile:
    """A new file at `path`, or at NAME-2.EXT, NAME-3.EXT, ... when that name is taken: created
    empty with O_EXCL (its folder first), so an existing file is never replaced and two processes
    that pick the same default name in the same second still get two files."""
    path = Path(path)
    new_folders = make_folder(path.parent, field, source)
    try:
        return _claim_free_name(path, field, source, new_folders)
    except BaseException:
        remove_new_folders(new_folders)
        raise


def _claim_free_name(path: Path, field: str, source: str, new_folders: list[Path]) -> ClaimedFile:
    stem, suffix = path.stem, path.suffix
    for number in range(1, MAX_NAME_TRIES + 1):
        candidate = path if number == 1 else path.with_name(f"{stem}-{number}{suffix}")
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            continue
        except OSError as exc:
            raise fail(source, field, f"cannot create {candidate}: {_words(exc)}") from None
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        return ClaimedFile(candidate, (st.st_dev, st.st_ino), new_folders)
    raise fail(source, field, f"{path} and {MAX_NAME_TRIES - 1} numbered names after it are all taken")


# --- a lock per folder ----------------------------------------------------------------------------
class FolderBusyError(RuntimeError):
    """Another process holds the folder's lock (the message says which)."""


class FolderLock:
    """An exclusive lock on a folder for as long as the object lives (``with FolderLock(...)``):
    flock(2) on a hidden file ``.aimcemu.lock`` in it, which the kernel releases when the holder
    exits however it exits, so a killed sweep never leaves the folder locked.  The file holds
    the holder's host, PID and start time, for the message a second process gets, and the fields
    of `note`: what the next holder is to clean up should this one be killed.  wait_s: how long
    to wait for the holder to finish (0: refuse at once).  clean_up_after(fields) is called once
    the lock is taken, with the last holder's fields ({} when none could be read), before they
    are replaced: that holder no longer holds the lock (it finished, or it died)."""

    NAME = ".aimcemu.lock"

    def __init__(self, folder, what: str = "sweep", wait_s: float = 0.0, note: dict | None = None,
                 clean_up_after: Callable[[dict], Any] | None = None):
        import fcntl

        self.path = Path(folder) / self.NAME
        self._fd = -1
        self._fd, self.created = self._open_lock_file()
        deadline = time.monotonic() + max(wait_s, 0.0)
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    self.release()
                    raise fail(os.fspath(self.path), "file", f"cannot lock it: {exc.strerror}") from None
                if time.monotonic() >= deadline:
                    holder = self._holder()
                    self.release()
                    raise FolderBusyError(
                        f"{folder}: another {what} is running in this folder ({holder}); wait for it to finish"
                        + (f" (waited {wait_s:g} s)" if wait_s > 0 else " or pass a wait time")) from None
                time.sleep(0.2)
        if clean_up_after is not None:  # before its fields are replaced: a call cut short leaves them for the next
            clean_up_after(self._holder_fields())
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                                            "since": time.strftime("%Y-%m-%d %H:%M:%S"), **(note or {})}).encode(), 0)
        except OSError as exc:  # a full disk: name the file, and leave no empty lock file behind
            self.discard()
            raise fail(os.fspath(self.path), "file", f"cannot write the lock file: {exc.strerror}") from None

    def _open_lock_file(self) -> tuple[int, bool]:
        """The lock file, created if absent, and whether this call created it.  Never through a
        link and never anything but a regular file: the holder truncates and writes it, so a link
        planted there would have its target overwritten (a model, a results file), and a FIFO or
        device would block or take the bytes."""
        flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            try:
                fd, created = os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o644), True
            except FileExistsError:   # (O_EXCL never follows a link: one is opened below, and refused)
                fd, created = os.open(self.path, flags | os.O_CREAT, 0o644), False
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise fail(os.fspath(self.path), "file", "is a symbolic link; the lock file is written, so it is "
                                                         "never followed: remove the link") from None
            raise fail(os.fspath(self.path), "file", f"cannot open the lock file: {exc.strerror}") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise fail(os.fspath(self.path), "file", "exists and is not a regular file (a FIFO, device or socket); "
                                                     "the lock file is written, so it must be one: remove it")
        if st.st_nlink != 1:  # a hard link: another name of another file (a model), or a copied folder's lock
            os.close(fd)
            raise fail(os.fspath(self.path), "file", f"has {st.st_nlink} names (a hard link); the lock file is "
                                                     "written, so it must be its own file: remove it")
        return fd, created

    def _holder_fields(self) -> dict:
        """What the lock file holds (a JSON object), or {} when it cannot be read as one (the file
        is only ever written by FolderLock, but anyone can write into it: "[[[..." is a RecursionError)."""
        try:
            fields = json.loads(os.pread(self._fd, 4096, 0) or b"{}")
        except (OSError, ValueError, RecursionError):
            return {}
        return fields if isinstance(fields, dict) else {}

    def _holder(self) -> str:
        info = self._holder_fields()
        try:
            return f"PID {info['pid']} on {info['host']} since {info['since']}"
        except KeyError:
            return "holder unknown"

    def discard(self) -> None:
        """Removes the lock file if this lock created it, then releases the lock: a call that
        fails in a folder it created leaves no file of its own there.  Removed while still held,
        so no process that opens the name afterwards can hold the removed file."""
        if self.created and self._fd >= 0:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        self.release()

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = -1

    def __enter__(self) -> "FolderLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()
