"""The shape of the aimcemu package: no import cycles, no private names used across modules, and
every public name of the package's earlier layout still there.

The first two are read from the source with ``ast`` (no import needed), so they also see imports
hidden inside functions; ``check_*`` return the violations and the tests show each failing on a
made-up package first, so that a check that can never fail is caught too.
"""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "aimcemu"

# Names that may be used across modules although they start with an underscore: the compiled
# extension, and namedtuple's public API.
ALLOWED_PRIVATE = {"_core", "_asdict", "_replace", "_fields", "_make"}


def module_names(root: Path) -> dict[str, Path]:
    """Dotted module name (relative to the package's parent) -> source file."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rsplit(".", 1)[0]


def _imported_modules(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that `module` imports anywhere in its source (a from-import of a
    submodule counts as importing that submodule)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in modules}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(module, path).split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                if f"{target}.{alias.name}" in modules:
                    found.add(f"{target}.{alias.name}")
                elif target in modules:
                    found.add(target)
    found.discard(module)
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    modules = module_names(root)
    return {name: _imported_modules(name, path, modules) for name, path in modules.items()}


def check_import_cycles(root: Path) -> list[list[str]]:
    """Every import cycle among the package's modules (each as the modules on it, in order).
    A package's __init__ importing its own submodules is not a cycle (Python imports the
    package first by construction); any other loop is."""
    graph = import_graph(root)
    for name in graph:  # drop package -> own submodule edges
        graph[name] = {m for m in graph[name] if not m.startswith(name + ".")}
    cycles, state, stack = [], {}, []

    def visit(node: str) -> None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def _defined_private_names(tree: ast.AST) -> set[str]:
    """Private names a module defines itself: functions, classes, assignments (also to
    attributes, e.g. self._x) and keyword arguments (argparse's set_defaults(_main=...))."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.keyword) and node.arg:
            names.add(node.arg)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return {n for n in names if n.startswith("_")}


def _external_names(tree: ast.AST, package: str) -> set[str]:
    """Names bound by importing other packages (numpy, torch, ...): their private names are
    their business, not this check's."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names
                      if not alias.name.startswith(package)}
        elif isinstance(node, ast.ImportFrom) and not node.level and not (node.module or "").startswith(package):
            names |= {alias.asname or alias.name for alias in node.names}
    return names


def _root_name(node: ast.Attribute) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def check_private_names(root: Path) -> list[str]:
    """Uses of another module's private names: `from .x import _y`, and `obj._y` where `_y` is
    not defined in the module that uses it (dunders, ALLOWED_PRIVATE and attributes of other
    packages' objects excepted)."""
    problems = []
    # The package's own underscore modules (_optional, _netbuild) are internal to the package, not
    # to one module: siblings import them by design.
    package_modules = {path.stem for path in root.rglob("_*.py") if not path.stem.startswith("__")}
    for module, path in module_names(root).items():
        tree = ast.parse(path.read_text())
        own, external = _defined_private_names(tree), _external_names(tree, root.name)
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(root.name)):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and node.attr not in own \
                    and _root_name(node) not in external:
                names = [node.attr]
            for name in names:
                if name.startswith("_") and not name.startswith("__") and name not in ALLOWED_PRIVATE \
                        and not (isinstance(node, ast.ImportFrom) and name in package_modules):
                    problems.append(f"{module}:{node.lineno}: uses {name}")
    return problems


# --- the package -------------------------------------------------------------------------------
def test_the_package_has_no_import_cycles():
    cycles = check_import_cycles(PACKAGE)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_no_module_uses_another_modules_private_names():
    problems = check_private_names(PACKAGE)
    assert not problems, "\n".join(problems)


def test_every_module_imports():
    for name in module_names(PACKAGE):
        if not name.endswith(("importer", "__main__")):  # importer needs torch (test_import_torch.py)
            importlib.import_module(name)


# --- the checks fail when violated ---------------------------------------------------------------
def _write_package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_cycle_check_finds_a_cycle_hidden_in_a_function(tmp_path):
    root = _write_package(tmp_path, {
        "__init__.py": "",
        "a.py": "from . import b\n",
        "b.py": "def f():\n    from .c import g\n",
        "c.py": "from .a import x\n",
        "sub/__init__.py": "from .leaf import y\n",
        "sub/leaf.py": "from .. import a\n",
    })
    assert check_import_cycles(root) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]


def test_the_private_name_check_finds_cross_module_uses(tmp_path):
    root = _write_package(tmp_path, {
        "__init__.py": "",
        "a.py": "def _helper():\n    pass\n\nclass A:\n    def __init__(self):\n        self._state = 1\n",
        "b.py": "from .a import _helper\nfrom . import a\nimport numpy as np\n\n"
                "def f(obj):\n    return a._helper, obj._state, obj.__class__, np.random._bit_generator\n",
        "c.py": "class C:\n    def __init__(self):\n        self._own = 1\n    def get(self, other):\n"
                "        return other._own\n",
    })
    assert sorted(check_private_names(root)) == ["pkg.b:1: uses _helper", "pkg.b:6: uses _helper",
                                                 "pkg.b:6: uses _state"]


# --- the earlier public names keep working -----------------------------------------------------
# Every public name the modules defined before the package was restructured (issue 12).
PUBLIC_NAMES = {
    "analysis": ["METRICS", "round_coordinates", "open_run", "open_layer", "error_stats", "activation_histograms",
                 "open_sweep", "student_t_quantile", "accuracy_vs_t", "snr_over_t", "layer_sensitivity",
                 "rank_layers", "format_table"],
    "cli": ["build_parser", "main"],
    "mapping": ["DEVICES", "DEFAULT_NOISE", "resolve_noise", "Placement", "Mapping"],
    "modelfile": ["EMBEDDED_MODEL", "MODEL_FILE", "DATASET_FILE", "models_dir", "embedded_paths", "save_model",
                  "load_model", "save_dataset", "load_dataset"],
    "niu": ["NiuProgram", "compile_program", "apply", "constants"],
    "noise": ["LayerState", "ConductanceConverter", "SinglePairConductanceConverter", "NPairConductanceConverter",
              "DualPairConductanceConverter", "SingleDeviceConductanceConverter", "converter_from_dict", "NoiseModel",
              "PCMLikeNoiseModel", "HermesNoiseModel", "StateIndependentNoiseModel", "CustomDriftPCMLikeNoiseModel",
              "ReRamWan2022NoiseModel", "ReRamCMONoiseModel", "GenericNoiseModel", "noise_model_names",
              "noise_model_from_dict", "DriftCompensation", "GlobalDriftCompensation", "PerColumnDriftCompensation",
              "GlobalDriftCompensationWithExactReference", "drift_compensation_from_dict"],
    "perf": ["PAPER", "U50_PUS", "PerfOptions", "resolve_network", "aimc_mask", "build_system", "PerfResult", "perf"],
    "quantize": ["FRAC_BITS_OF_ZERO_TENSOR", "FRAC_BITS_MIN", "FRAC_BITS_MAX", "BIAS_SHIFT_MAX", "OUT_SHIFT_MAX",
                 "AVG_MULT_MAX", "round_half_up", "frac_bits_for_range", "quantize", "dequantize", "quantize_weights",
                 "quantize_bias", "avg_pool_multiplier", "quantize_images"],
    "report": ["NIU_COUNTS", "accuracy_figure", "snr_heatmap_figure", "histogram_figure", "niu_rows",
               "build_figures", "report", "save_pngs"],
    "runner": ["DEFAULTS", "DRIFT_COMPENSATIONS", "CALIBRATION_ROUND", "READOUT_FLOOR", "LayerSummary", "RunSummary",
               "format_time", "parse_times", "parse_compensations", "load_yaml_config", "niu_alpha_limit", "run"],
    "sweeps": ["INDEX_FILE", "TASK_FOLDER", "FORMAT", "FORMAT_VERSION", "DEFAULTS", "PLAIN_AXES", "Task", "SweepPlan",
               "load_config", "task_id", "plan", "execute_task", "read_task_summary", "SweepResult", "sweep"],
}
PACKAGE_NAMES = ["FormatError", "zoo", "import_torch", "run", "sweep", "analysis", "noise", "modelfile", "niu", "perf",
                 "mapping", "importer", "Mapping"]


@pytest.mark.parametrize("module", sorted(PUBLIC_NAMES))
def test_earlier_public_names_still_exist(module):
    loaded = importlib.import_module(f"aimcemu.{module}")
    missing = [name for name in PUBLIC_NAMES[module] if not hasattr(loaded, name)]
    assert not missing, f"aimcemu.{module} lost {missing}"


def test_earlier_package_names_still_exist():
    pytest.importorskip("torch")  # import_torch and importer need it
    import aimcemu

    assert all(getattr(aimcemu, name) is not None for name in PACKAGE_NAMES)
