"""The ``aimcemu`` command.

Each subcommand lives in ``aimcemu/commands/<name>.py`` and provides ``HELP`` (one line),
``add_arguments(parser)`` and ``main(args) -> int``.  They are discovered here, so adding a
command never edits this file.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import signal
import sys

from . import commands
from ._optional import MissingExtraError


def _command_modules():
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            yield info.name, importlib.import_module(f"{commands.__name__}.{info.name}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aimcemu", description="AIMC noise emulation on an FPGA accelerator model")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in _command_modules():
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_main=module.main)
    return parser


# Commands that, run as the `aimcemu` command (main() reading the process's own arguments), set
# the process's malloc thresholds (process_memory.keep_freed_memory): the process is aimcemu's, and
# a run's large temporaries then reuse freed memory.  main(argv) called from a Python program
# leaves that program's allocator alone.
KEEPS_FREED_MEMORY = ("run", "sweep")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_main", None):
        parser.print_help()
        return 2
    previous_sigterm = _sigterm_interrupts() if argv is None and args.command in STOPS_ON_SIGTERM else None
    try:
        return _run_command(args, argv)
    except BrokenPipeError:
        if not _stdout_is_closed():
            raise
        return _quiet_on_closed_stdout()
    except KeyboardInterrupt:
        # Ctrl-C (or SIGTERM, below) where the command has no handling of its own, its imports
        # included: its output files are written atomically, so it leaves none behind.
        print(f"aimcemu {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED
    finally:
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)


def _run_command(args: argparse.Namespace, argv: list[str] | None) -> int:
    from ._netbuild import UnsupportedOperationError
    from .executors import ClusterLostError, WorkerDiedError
    from .files import FolderBusyError

    if argv is None and args.command in KEEPS_FREED_MEMORY:
        from .process_memory import keep_freed_memory

        keep_freed_memory()
    try:
        return int(args._main(args) or 0)
    except BrokenPipeError:
        if _stdout_is_closed():
            raise  # main() ends quietly: a reader of the output (head) has gone
        print(f"aimcemu {args.command}: error: {sys.exc_info()[1]}", file=sys.stderr)  # another pipe's
        return 2
    # Bad input (FormatError is a ValueError), an unusable path, a folder that another sweep
    # holds, an optional extra that is not installed, a model the format cannot express, a
    # sweep worker that died or a Dask cluster that lost a sweep's tasks: the message that names
    # the file and field (or the extra, the ops, the task, what was kept), not a traceback.
    # Anything else is a bug and keeps its traceback.
    except (ValueError, OSError, KeyError, FolderBusyError, MissingExtraError, UnsupportedOperationError,
            WorkerDiedError, ClusterLostError) as exc:
        print(f"aimcemu {args.command}: error: {exc}", file=sys.stderr)
        return 2


INTERRUPTED = 130
# What a shell reports for a program that SIGPIPE ended (`seq 100000 | head -1` under pipefail).
CLOSED_STDOUT = 128 + signal.SIGPIPE


def _stdout_is_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (poll reports an error on its write end):
    a BrokenPipeError from elsewhere (a Dask connection) is an error like any other."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll, or stdout is no file
        return False


def _quiet_on_closed_stdout() -> int:
    """`aimcemu models | head`: the reader took what it wanted and left.  End without a message,
    with stdout pointed at /dev/null so that Python's own flush at exit does not complain either."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return CLOSED_STDOUT


# Commands that, run as the `aimcemu` command, take SIGTERM as they take Ctrl-C (a sweep's own
# handling covers its run; this covers its planning, and `run`): "interrupted", status 130, no
# temporary file left, instead of dying where it stands.
STOPS_ON_SIGTERM = ("run", "sweep")


def _sigterm_interrupts():
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, interrupt)


if __name__ == "__main__":
    sys.exit(main())
