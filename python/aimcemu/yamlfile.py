"""YAML input, read one way everywhere: run and sweep configs, mapping files, --noise snippets.

safe_load only (no Python objects); a syntax error is a FormatError naming the file (or the
command-line option) and the field '<yaml>'.  Limits on a document's size or depth belong here.
"""
from __future__ import annotations

import os
from typing import Any

from . import _core


def parse_yaml(text: str, source: str) -> Any:
    """The value of a YAML document; `source` names it in errors."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise _core.FormatError(f"{source}: field '<yaml>': {exc}") from None


def load_yaml(path) -> Any:
    """The value of a YAML file, read as UTF-8."""
    source = os.fspath(path)
    with open(source, encoding="utf-8") as f:
        return parse_yaml(f.read(), source)
