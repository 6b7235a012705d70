"""Every long option of every `aimcemu` subcommand is documented: it appears, as a whole flag, in
README.md or a docs/*.md page that also names the command (`aimcemu run`, `aimcemu perf`, ...),
so a flag that exists only in --help fails here.

The options are read from the CLI's own argparse parser (aimcemu.cli.build_parser), so a flag
added to a command later is checked without editing this file.  The check is shown failing on
made-up docs first, so that a check that can never fail is caught too.
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from aimcemu.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


def long_options(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """command -> its long options (`--help` left out), for every subcommand of `parser`."""
    commands = {}
    for action in parser._actions:  # argparse keeps subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                commands[name] = [option for sub_action in sub._actions for option in sub_action.option_strings
                                  if option.startswith("--") and option != "--help"]
    return commands


def mentions_flag(text: str, flag: str) -> bool:
    """`flag` as a whole flag: `--niu` is not found inside `--niu-lanes` or `--niu_x`."""
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text) is not None


def undocumented(commands: dict[str, list[str]], docs: dict[str, str]) -> list[str]:
    """`aimcemu COMMAND --flag` for every option that no doc naming its command mentions."""
    missing = []
    for command, options in sorted(commands.items()):
        pages = [text for text in docs.values() if f"aimcemu {command}" in text]
        missing += [f"aimcemu {command} {flag}" for flag in options
                    if not any(mentions_flag(text, flag) for text in pages)]
    return missing


def project_docs() -> dict[str, str]:
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return {str(path.relative_to(ROOT)): path.read_text(encoding="utf-8") for path in paths}


def test_the_parser_walk_finds_every_subcommand_and_its_options():
    commands = long_options(build_parser())
    assert {"run", "perf", "sweep", "import", "report", "models"} <= set(commands)
    assert "--niu-lanes" in commands["perf"] and "--no-progress" in commands["sweep"]
    assert commands["models"] == []
    assert all(not flag.startswith("--help") for options in commands.values() for flag in options)


def test_the_check_fails_on_made_up_docs():
    commands = {"run": ["--seed", "--threads"], "perf": ["--niu", "--niu-lanes"]}
    docs = {
        "a.md": "aimcemu run --threads 2",
        "b.md": "aimcemu perf --niu-lanes 8; --seed without naming run",   # --seed: not on a page naming run
    }
    assert undocumented(commands, docs) == ["aimcemu perf --niu", "aimcemu run --seed"]
    docs["b.md"] += "; aimcemu perf --niu 2"
    docs["a.md"] += ", --seed 5"
    assert undocumented(commands, docs) == []


def test_a_flag_is_matched_whole():
    assert mentions_flag("`--niu 2`", "--niu")
    assert mentions_flag("(--niu)", "--niu")
    assert not mentions_flag("--niu-lanes 8", "--niu")
    assert not mentions_flag("--niu_count", "--niu")
    assert not mentions_flag("x--niu", "--niu")


def test_every_long_option_of_every_command_is_documented():
    missing = undocumented(long_options(build_parser()), project_docs())
    assert not missing, ("options only --help knows of (document each in README.md or the docs/ page that "
                         "describes its command):\n  " + "\n  ".join(missing))
