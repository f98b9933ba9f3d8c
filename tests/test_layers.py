"""Layering: every kb module imports only from its own layer or the layers below it.

The import graph is read from the source (every ``import`` statement,
including the lazy ones inside functions), so a cycle or an upward import
fails here before it bites at run time. pip-tools keeps the same idea as
``test_circular_imports.py``.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

KB = Path(__file__).resolve().parent.parent / "kb"

#: Lowest first. A module may import its own layer and any layer below it; each package
#: is one layer (its modules may import each other, never in a circle).
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "kb",
        "kb.errors",
        "kb.schema",
        "kb.atomicfile",
        "kb.stats",
        "kb.textwidth",
        "kb.markdown",
        "kb.money",
        "kb.tomlfile",
        "kb.sidefile",
        "kb.examples",
        "kb.__main__",
    ),
    ("kb.store",),
    ("kb.evidence_index",),
    ("kb.engine",),
    ("kb.evals",),
    ("kb.sweep",),
    ("kb.compare", "kb.export", "kb.judging"),
    ("kb.card", "kb.route"),
    ("kb.checkpoint",),
    ("kb.views",),
    ("kb.cli",),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(KB.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    best, rank = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), index
    assert rank >= 0, f"{module} has no layer in tests/test_layers.py"
    return rank


def _type_checking_only(tree: ast.AST) -> set[ast.AST]:
    """Import nodes inside ``if TYPE_CHECKING:`` blocks (annotations, never executed)."""
    found: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                found |= set(ast.walk(inner))
    return found


def kb_imports(path: Path, *, executed_only: bool = False) -> set[str]:
    """The kb modules ``path`` imports (lazy ones inside functions included)."""
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_only(tree) if executed_only else set()
    for node in ast.walk(tree):
        if node in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("kb")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "kb" or node.module.startswith("kb."):
                found.add(node.module)
    return found


MODULES = sorted(KB.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_no_upward_import(path: Path) -> None:
    module = module_name(path)
    if module == "kb.__main__":
        return
    upward = sorted(target for target in kb_imports(path) if layer_of(target) > layer_of(module))
    assert not upward, f"{module} (layer {layer_of(module)}) imports from above: {upward}"


def test_the_store_never_imports_engine_evals_sweep_or_canary() -> None:
    banned = ("kb.engine", "kb.evals", "kb.sweep", "kb.card", "kb.checkpoint", "kb.views")
    for path in (KB / "store").rglob("*.py"):
        for target in kb_imports(path):
            assert not target.startswith(banned), f"{module_name(path)} imports {target}"


def test_store_maintenance_and_views_never_import_the_sweep() -> None:
    """Compaction, evidence reading and the views read the typed records, not the sweep."""
    readers = [KB / "store" / "compaction.py", KB / "store" / "evidence.py"]
    readers += sorted((KB / "views").glob("*.py"))
    for path in readers:
        for target in kb_imports(path):
            assert not target.startswith("kb.sweep"), f"{module_name(path)} imports {target}"


def _module_of(target: str) -> str | None:
    """The kb module an import names (``kb.store.snapshot``), if it is one."""
    for path in MODULES:
        if module_name(path) == target:
            return target
    return None


def test_no_import_circles() -> None:
    """No module reaches itself through the imports it executes (lazy ones included)."""
    graph = {
        module_name(path): {
            found for t in kb_imports(path, executed_only=True) if (found := _module_of(t))
        }
        for path in MODULES
    }
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if target == module or target == "kb":
                continue
            if state.get(target) == 1:
                circle = stack[stack.index(target) :] + [target]
                raise AssertionError("import circle: " + " -> ".join(circle))
            if state.get(target) is None:
                visit(target)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if state.get(module) is None:
            visit(module)


def test_schema_imports_nothing_of_kb_but_errors() -> None:
    assert kb_imports(KB / "schema.py") <= {"kb.errors"}


def test_litellm_git_click_and_redis_are_each_imported_in_their_one_place() -> None:
    for path in MODULES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        roots = {
            alias.name.split(".")[0]
            for n in ast.walk(tree)
            if isinstance(n, ast.Import)
            for alias in n.names
        } | {
            n.module.split(".")[0]
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and n.module and n.level == 0
        }
        module = module_name(path)
        if "litellm" in roots:
            assert module == "kb.engine.adapter", f"{module} imports litellm"
        if "git" in roots:
            assert module.startswith("kb.store.git"), f"{module} imports GitPython"
        if "click" in roots:
            assert module.startswith("kb.cli"), f"{module} (the core) imports click"
        if "redis" in roots:
            assert module == "kb.engine.shared_buckets", f"{module} imports redis"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_every_module_imports_alone(path: Path) -> None:
    """Each module imports in a fresh interpreter, so no cycle hides behind import order."""
    module = module_name(path)
    if module == "kb.__main__":
        return
    importlib.import_module(module)  # fast path in this process first
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_no_two_modules_depend_on_each_other() -> None:
    """SPEC 14.2: 0 module cycles, counting imports inside functions and for types too."""
    from bench.code_metrics import measure

    found = measure()
    assert found.cycles == []
    assert found.deferred_cycles == []


def test_the_store_and_functions_stay_within_their_sizes() -> None:
    """SPEC 14.2's figures: no kb/store module over 600 lines, KnowledgeStore's surface
    (inherited methods included) at most 16 public methods, at most 12 functions over 60."""
    from bench.code_metrics import measure

    found = measure()
    assert found.store_over_600 == []
    assert found.methods["KnowledgeStore"] <= 16
    assert found.functions_over_60 <= 12, found.largest_functions


#: What reads runs and computes intervals (SPEC 14.2): the evidence index and the core.
_EVIDENCE_READERS = {"load_evidence", "runs_reader", "RunsReader", "earlier_reports"}
_INTERVALS = {"wilson_interval", "wilson_arrays", "newcombe_paired_interval", "newcombe_arrays"}


def _imported_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kb."):
            names |= {alias.name for alias in node.names}
    return names


@pytest.mark.parametrize(
    "path",
    sorted([*(KB / "views").glob("*.py"), *(KB / "cli").glob("*.py")]),
    ids=lambda p: module_name(p),
)
def test_no_command_or_view_reads_runs_or_computes_an_interval(path: Path) -> None:
    names = _imported_names(path)
    assert not names & _EVIDENCE_READERS, (
        f"{path.name} reads evidence by hand: use kb.evidence_index"
    )
    assert not names & _INTERVALS, f"{path.name} computes an interval: it belongs on the type"
