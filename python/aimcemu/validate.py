"""Untrusted input, checked before any work and bounded before any allocation.

Everything a user hands aimcemu (command-line options, paths, numbers in configs) goes through
the checks here (aimcemu.config.RunConfig applies them to a run's options; aimcemu.yamlfile
bounds YAML), so that bad input gets one clear error naming the source and the
field (``aimcemu.FormatError``, a ``ValueError``; the CLI prints it and exits 2) instead of a
crash, a hang or memory growing until the machine kills the process.

The documented ranges (docs/reliability.md lists them with the reasons):

=====================  =======================  ==================================================
what                   range                    why
=====================  =======================  ==================================================
chips                  1 .. 2^20                each chip is keyed into the RNG; more is years of work
rounds                 1 .. 2^20                read-noise rounds per (chip, t)
t                      1 .. 4096 times          each time is one calibration readout per chip
noisy rounds           chips x t x rounds x     one run holds every round's predictions in memory
                       compensations <= 2^20
seed                   0 .. 2^64 - 1            the NIU's pcg32 seed is 64 bits
threads                0 .. 4096                0 = all cores
workers                1 .. 4096                local sweep processes
sweep tasks            1 .. 100000              grid points; checked from the axis lengths
YAML file              <= 1 MiB, UTF-8,         configs are a few KB; bounded parsing
                       depth <= 64, aliases     (aimcemu.yamlfile)
                       <= 100, <= 100000 nodes
                       after alias expansion,
                       no duplicate keys
=====================  =======================  ==================================================

Memory: a run also checks, before it starts, that its activations and per-round results fit
in the memory this machine can give it now: physical memory, and no more than MemAvailable plus
the process's own resident memory (``check_run_memory``; what the process keeps between runs is freed
when the run needs the room: aimcemu.process_memory); the C++ loaders check every array in a model
or data set file against the file's own size and the machine's memory before reading it.
"""
from __future__ import annotations

import math
import os
import stat
from typing import Any

from . import _core

MAX_CHIPS = 2**20
MAX_ROUNDS = 2**20
MAX_TIMES = 4096
MAX_NOISY_ROUNDS = 2**20
MAX_SEED = 2**64 - 1
MAX_THREADS = 4096
MAX_WORKERS = 4096
MAX_TASKS = 100_000


def fail(source: str, field: str, what: str) -> _core.FormatError:
    """The error every check raises: '<source>: field '<field>': <what>'."""
    return _core.FormatError(f"{source}: field '{field}': {what}")


# --- numbers --------------------------------------------------------------------------------------
def integer(value: Any, field: str, source: str, lo: int, hi: int, hint: str = "") -> int:
    """`value` as an int in lo..hi: ints (and NumPy integers) only, never bools or floats."""
    import numpy as np

    rule = f"must be an integer >= {lo} and <= {_bound_text(hi)}{hint}"
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise fail(source, field, f"{rule}, got {short_repr(value)}")
    value = int(value)
    if not lo <= value <= hi:
        raise fail(source, field, f"{rule}, got {value}")
    return value


def as_float(value: Any, source: str, field: str) -> float:
    """An int or float (NumPy's too, never a bool) as a float; inf and NaN pass (for settings whose
    own check says what they mean).  YAML, the command line and Python hand over ints of any size:
    one beyond the float range is a FormatError naming source and field, where float() raises
    OverflowError (a traceback)."""
    import numpy as np

    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise fail(source, field, f"expected a number, got {short_repr(value)}")
    try:
        return float(value)
    except OverflowError:
        raise fail(source, field, f"{short_repr(value)} is beyond the range of a float (about 1.8e308)") from None


def number(value: Any, field: str, source: str, minimum: float | None = None) -> float:
    """A finite float (ints allowed), at least `minimum` when given."""
    result = as_float(value, source, field)
    if not math.isfinite(result) or (minimum is not None and result < minimum):
        raise fail(source, field, f"must be a finite number{'' if minimum is None else f' >= {minimum:g}'}, "
                                  f"got {short_repr(value)}")
    return result


def _bound_text(hi: int) -> str:
    for power in (64, 32, 20):
        if hi == 2**power - 1:
            return f"2^{power} - 1"
        if hi == 2**power:
            return f"2^{power}"
    return str(hi)


def short_repr(value: Any, limit: int = 80) -> str:
    """A value for an error message, cut short (a config value can be huge); an int of hundreds of
    digits by its length (repr of an int of more than 4,300 digits raises ValueError)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 133:  # >= ~10^40
        size = f"{len(str(abs(value)))} digits" if value.bit_length() < 14000 else f"{value.bit_length()} bits"
        return f"an integer of {size}"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({type(value).__name__})"


def seed(value: Any, field: str = "seed", source: str = "<arguments>") -> int:
    return integer(value, field, source, 0, MAX_SEED)


def chips(value: Any, field: str = "chips", source: str = "<arguments>") -> int:
    return integer(value, field, source, 1, MAX_CHIPS)


def rounds(value: Any, field: str = "rounds", source: str = "<arguments>") -> int:
    return integer(value, field, source, 1, MAX_ROUNDS)


def threads(value: Any, field: str = "threads", source: str = "<arguments>") -> int:
    return integer(value, field, source, 0, MAX_THREADS, " (0 = all cores)")


def workers(value: Any, field: str = "workers", source: str = "<arguments>") -> int:
    return integer(value, field, source, 1, MAX_WORKERS, " (leave it out for one per core)")


def noisy_rounds(chip_count: int, time_count: int, round_count: int, compensations: int,
                 source: str = "<arguments>") -> int:
    """The rounds one run holds: chips x t x rounds x compensations, at most MAX_NOISY_ROUNDS."""
    if time_count > MAX_TIMES:
        raise fail(source, "t", f"{time_count} times; at most {MAX_TIMES}")
    total = chip_count * time_count * round_count * compensations
    if total > MAX_NOISY_ROUNDS:
        raise fail(source, "chips", f"{chip_count} chips x {time_count} t x {round_count} rounds x "
                                    f"{compensations} compensations = {total} noisy rounds in one run; at most "
                                    f"{MAX_NOISY_ROUNDS} (split the study into a sweep)")
    return total


def physical_memory() -> int:
    """Bytes of physical memory of this machine."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def available_memory() -> int | None:
    """Bytes the kernel can give this process now without swapping (MemAvailable), or None where
    /proc/meminfo does not say."""
    try:
        with open("/proc/meminfo", "rb") as meminfo:
            for line in meminfo:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_run_memory(images: int, activation_bytes_per_image: int, output_classes: int, noisy: int,
                     data_source: str, rounds_source: str) -> int:
    """Refuses a run whose arrays cannot fit in memory, before it starts; returns the bytes they
    take (aimcemu.process_memory.make_room frees what the process keeps for them).  The caller
    counts the activations the run holds at once, per image (``activation_bytes_per_image``: see
    ``runner.activation_bytes_held``); per noisy round the predictions and logits of every image
    are kept besides."""
    memory, where = run_memory_limit()
    activations = images * activation_bytes_per_image
    if activations > memory:
        raise fail(data_source, "images", f"{images} images need {_gib(activations)} of activations "
                                          f"(the reference and the rounds in flight); {where} {_gib(memory)}")
    per_round = noisy * images * (output_classes + 8 + 1)
    if activations + per_round > memory:
        raise fail(rounds_source, "chips", f"{noisy} noisy rounds x {images} images need {_gib(per_round)} for "
                                           f"predictions and logits; {where} {_gib(memory)}")
    return activations + per_round


def run_memory_limit() -> tuple[int, str]:
    """(bytes, what they are) a run's arrays may take: physical memory, and, where /proc/meminfo
    says, no more than the kernel can give now (MemAvailable) plus what this process already
    holds (its resident set, which includes what it keeps between runs and frees for the run).
    Physical memory alone let a run of 2^20 chips on a busy machine start and grow for minutes
    until it swapped or was killed; memory other processes hold now is not the run's to take.
    Memory freed by others after the check is not counted: on a busy machine a run may be refused
    that would have fit later (run it again, or with fewer images or rounds)."""
    physical = physical_memory()
    available = available_memory()
    if available is None:
        return physical, "this machine has"
    obtainable = available + resident_memory()
    if obtainable >= physical:
        return physical, "this machine has"
    return obtainable, "this machine can give it now (MemAvailable and this process' own)"


def resident_memory() -> int:
    """Bytes of this process's resident set (/proc/self/statm), 0 where it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return 0


def _gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB"


# --- text -----------------------------------------------------------------------------------------
def text(value: Any, field: str, source: str = "<arguments>") -> str:
    """A str that is valid Unicode (command-line arguments with bytes that are not UTF-8 arrive
    as lone surrogates: refused here with the byte named, instead of failing deep inside)."""
    if not isinstance(value, str):
        raise fail(source, field, f"expected a string, got {short_repr(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start]
        byte = ord(bad) - 0xDC00 if 0xDC80 <= ord(bad) <= 0xDCFF else None
        what = f"byte 0x{byte:02x}" if byte is not None else f"character U+{ord(bad):04X}"
        raise fail(source, field, f"not valid UTF-8 ({what} at position {exc.start})") from None
    return value


def decode(raw: bytes, source: str, field: str = "<encoding>") -> str:
    """UTF-8 bytes (a leading BOM allowed) as str; the error names the line and column."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise fail(source, field, f"not valid UTF-8: byte 0x{raw[exc.start]:02x} at line {line}, column {column}") from None


# --- paths ----------------------------------------------------------------------------------------
def input_file(path: Any, field: str, source: str = "<arguments>", what: str = "file") -> str:
    """A path that exists and is a regular file (a FIFO would block the read forever, a device
    or folder is not a file); returns it as str.  A missing file raises FileNotFoundError
    naming the field."""
    if not isinstance(path, (str, os.PathLike)):
        raise fail(source, field, f"expected a path, got {short_repr(path)}")
    path = text(os.fspath(path), field, source)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{source}: field '{field}': {what} not found: {path}") from None
    except OSError as exc:
        raise fail(source, field, f"cannot read {path}: {exc.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise fail(source, field, f"{path} is a folder, not a {what}")
    if not stat.S_ISREG(st.st_mode):
        raise fail(source, field, f"{path} is not a regular file (a FIFO, device or socket)")
    return path
