"""Claims of the docs that can drift from the code, checked against the code.

- docs/architecture.md's Python module table names every module of python/aimcemu/, and each
  module imports only modules in rows above its own (or before it in its row), as the doc says;
- the floors in docs/architecture.md's and docs/DEVELOPING.md's tables use exactly the floors
  that the top-level CMakeLists.txt (AIMCEMU_FLOORS) links;
- README.md's list of examples names every file in examples/.

Each check returns what is wrong, and is shown failing on a made-up doc first, so that a check
that can never fail is caught too.  Read from the source (no import of aimcemu needed).
"""
from __future__ import annotations

import re
from pathlib import Path

from test_package_structure import import_graph

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "aimcemu"
BACKTICKED = re.compile(r"`([^`]+)`")


# --- markdown tables ------------------------------------------------------------------------------
def table_after(text: str, heading: str) -> list[list[str]]:
    """The cells of the first table after `heading` (header and separator rows left out)."""
    rows, started = [], False
    for line in text[text.index(heading):].splitlines():
        if line.startswith("|"):
            started = True
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif started:
            break
    return rows[2:]


# --- the Python module table ----------------------------------------------------------------------
def package_modules(root: Path) -> set[str]:
    """Top-level modules and subpackages of the package (a subpackage's modules count as it)."""
    modules = {p.stem for p in root.glob("*.py") if p.name != "__init__.py"}
    return modules | {p.parent.name for p in root.glob("*/__init__.py")}


def module_rows(doc: str) -> list[list[str]]:
    """The module names of each row of the Python package table, in order ("commands/" ->
    "commands")."""
    rows = table_after(doc, "## The Python package")
    return [[name.rstrip("/") for name in BACKTICKED.findall(row[0])] for row in rows]


def _top(dotted: str) -> str:
    """aimcemu.noise.models -> noise; the package itself (`from . import _core`) -> _core."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else "_core"


def check_module_table(doc: str, root: Path) -> list[str]:
    rows = module_rows(doc)
    position = {name: (r, k) for r, names in enumerate(rows) for k, name in enumerate(names)}
    modules = package_modules(root)
    problems = [f"module {m!r} of python/aimcemu/ is not in the table" for m in sorted(modules - set(position))]
    problems += [f"the table names {m!r}, which is no module" for m in sorted(set(position) - modules - {"_core"})]
    for module, imports in import_graph(root).items():
        here = _top(module)
        for target in sorted({_top(i) for i in imports} - {here}):
            if here in position and target in position and position[target] >= position[here]:
                problems.append(f"{here!r} imports {target!r}, which the table lists after it")
    return problems


# --- the C++ floors -------------------------------------------------------------------------------
def cmake_floors(cmake: str) -> dict[str, set[str]]:
    """floor -> the floors it links, from AIMCEMU_FLOORS ("floor dir deps...")."""
    block = re.search(r"set\(AIMCEMU_FLOORS(.*?)\)", cmake, re.S).group(1)
    floors = {}
    for row in re.findall(r'"([^"]*)"', block):
        floor, _dir, *uses = row.split()
        floors[floor] = set(uses)
    return floors


def doc_floors(doc: str, order: list[str]) -> dict[str, set[str]]:
    """floor -> what the doc's floor table says it may use ("every floor below": all before it
    in CMake's order; parenthesised remarks dropped)."""
    floors = {}
    for row in table_after(doc, "| floor (folder) |"):
        floor = BACKTICKED.search(row[0]).group(1).rstrip("/")
        uses = re.sub(r"\([^)]*\)", "", row[-1])
        if uses.strip() == "every floor below":
            floors[floor] = set(order[:order.index(floor)])
        else:
            floors[floor] = {u.strip() for u in uses.split(",") if u.strip() not in ("", "—")}
    return floors


def check_floor_table(doc: str, cmake: str) -> list[str]:
    linked = cmake_floors(cmake)
    written = doc_floors(doc, list(linked))
    problems = [f"floor {f!r}: the doc says it may use {sorted(written.get(f, set()))}, "
                f"CMakeLists.txt links {sorted(uses)}" for f, uses in linked.items() if written.get(f) != uses]
    return problems + [f"the doc has a floor {f!r} that CMakeLists.txt lacks" for f in sorted(set(written) - set(linked))]


# --- README's examples ----------------------------------------------------------------------------
def check_examples_listed(readme: str, examples: Path) -> list[str]:
    paragraph = readme[readme.index("`examples/` has"):].split("\n\n")[0]
    named = set(BACKTICKED.findall(paragraph))
    return [f"README does not list examples/{p.name}" for p in sorted(examples.iterdir())
            if p.is_file() and p.name not in named and not p.name.startswith(".")]


# --- the checks fail where they should ------------------------------------------------------------
def test_module_table_check_catches_a_missing_module_and_a_wrong_order(tmp_path):
    pkg = tmp_path / "aimcemu"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("from . import _core\n")
    (pkg / "high.py").write_text("from . import low\n")
    (pkg / "extra.py").write_text("")
    doc = ("## The Python package\n\n| module | what | built on |\n|---|---|---|\n"
           "| `_core` | core | — |\n| `high` | h | `low` |\n| `low` | l | `_core` |\n")
    problems = check_module_table(doc, pkg)
    assert "module 'extra' of python/aimcemu/ is not in the table" in problems
    assert "'high' imports 'low', which the table lists after it" in problems
    fixed = doc.replace("| `high` | h | `low` |\n| `low` | l | `_core` |\n",
                        "| `low`, `extra` | l | `_core` |\n| `high` | h | `low` |\n")
    assert check_module_table(fixed, pkg) == []


def test_floor_check_catches_a_floor_the_doc_gives_too_few_uses():
    cmake = 'set(AIMCEMU_FLOORS\n  "common common"\n  "pu pu common"\n  "perf perf common pu")\n'
    doc = ("| floor (folder) | owns | may use |\n|---|---|---|\n| `common/` | c | — |\n"
           "| `pu/` | p | common |\n| `perf/` | t | common |\n")
    assert check_floor_table(doc, cmake) == ["floor 'perf': the doc says it may use ['common'], "
                                             "CMakeLists.txt links ['common', 'pu']"]
    assert check_floor_table(doc.replace("| t | common |", "| t | every floor below |"), cmake) == []


def test_examples_check_catches_an_unlisted_example(tmp_path):
    (tmp_path / "a.py").write_text("")
    (tmp_path / "b.yaml").write_text("")
    assert check_examples_listed("`examples/` has `a.py`.\n", tmp_path) == ["README does not list examples/b.yaml"]


# --- the repository's docs --------------------------------------------------------------------------
def test_architecture_module_table_lists_every_module_in_import_order():
    assert check_module_table((ROOT / "docs" / "architecture.md").read_text(), PACKAGE) == []


def test_floor_tables_follow_cmakelists():
    cmake = (ROOT / "CMakeLists.txt").read_text()
    for doc in ("architecture.md", "DEVELOPING.md"):
        assert check_floor_table((ROOT / "docs" / doc).read_text(), cmake) == [], doc


def test_readme_lists_every_example():
    assert check_examples_listed((ROOT / "README.md").read_text(), ROOT / "examples") == []
