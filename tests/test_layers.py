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

#: Lowest first. A module may import its own layer and any layer below it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("kb", "kb.errors", "kb.schema", "kb.atomicfile", "kb.stats", "kb.tomlfile", "kb.__main__"),
    ("kb.store",),
    ("kb.engine",),
    ("kb.evals",),
    ("kb.sweep.spec", "kb.sweep.pool", "kb.sweep.gate"),
    ("kb.canary", "kb.canary_baselines"),
    ("kb.sweep",),
    ("kb.compaction",),
    ("kb.card",),
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


def kb_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
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
    banned = ("kb.engine", "kb.evals", "kb.sweep", "kb.canary", "kb.card", "kb.checkpoint")
    for path in (KB / "store").rglob("*.py"):
        for target in kb_imports(path):
            assert not target.startswith(banned), f"{module_name(path)} imports {target}"


def test_schema_imports_nothing_of_kb_but_errors() -> None:
    assert kb_imports(KB / "schema.py") <= {"kb.errors"}


def test_only_the_adapter_imports_litellm_and_only_store_git_imports_git() -> None:
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
            assert module == "kb.store.git", f"{module} imports GitPython"
        if "click" in roots:
            assert module.startswith("kb.cli"), f"{module} (the core) imports click"


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
