"""The drift-compensation limits the docs quote are the NIU compiler's (niu.max_alpha), to the
digits written: docs/hybrid_runs.md once said 16.1 for A = 64 where the limit is 15.9995."""
from __future__ import annotations

import re
from pathlib import Path

from aimcemu import niu

DOCS = Path(__file__).resolve().parents[2] / "docs"
QUOTED = re.compile(r"`niu\.max_alpha\((\d+)\)` = (\d+\.\d+)")


def quoted_limits(text: str) -> list[tuple[int, str]]:
    return [(int(a), value) for a, value in QUOTED.findall(text.replace("\n  ", " "))]


def test_quoted_limits_match_the_compiler():
    quoted = quoted_limits((DOCS / "hybrid_runs.md").read_text())
    assert {a for a, _ in quoted} >= {64, 127}
    for absmax, value in quoted:
        decimals = len(value.split(".")[1])
        assert f"{niu.max_alpha(absmax):.{decimals}f}" == value, f"niu.max_alpha({absmax}) = {niu.max_alpha(absmax)}"


def test_the_pattern_catches_a_wrong_value():
    assert quoted_limits("(`niu.max_alpha(64)` = 16.1)") == [(64, "16.1")]
    assert f"{niu.max_alpha(64):.1f}" != "16.1"
