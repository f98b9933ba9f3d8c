"""kb's shape, measured from its source: sizes, methods per class, import cycles (SPEC 14.2).

Read with :mod:`ast`, never by running kb:

* module sizes (lines) — the largest, and how many in ``kb/store`` exceed 600;
* function sizes (lines from ``def`` to the last line of the body) — p50, p90,
  the largest, and how many exceed 60;
* public methods per class, those inherited from kb's own classes included (a
  chain of base classes does not shrink a surface) — ``KnowledgeStore`` and
  ``GitStoreRepo`` by name,
  and the largest;
* module import cycles — strongly connected components of the graph of
  ``kb.*`` imports made at module level (imports inside a function or under
  ``if TYPE_CHECKING:`` do not run at import time and are not counted);
* ``isinstance(…, JudgeGrader)`` checks outside the module that defines graders.

``python bench/code_metrics.py`` prints each figure beside its goal;
``--json`` prints them as data (the tests read :func:`measure`).
"""

from __future__ import annotations

import argparse
import ast
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Metrics:
    """What :func:`measure` found."""

    modules: int
    largest_modules: list[tuple[str, int]]
    store_over_600: list[tuple[str, int]]
    functions: int
    function_p50: int
    function_p90: int
    largest_functions: list[tuple[str, int]]
    functions_over_60: int
    methods: dict[str, int] = field(default_factory=dict)
    """Public methods of KnowledgeStore, GitStoreRepo and the largest class."""
    all_methods: dict[str, int] = field(default_factory=dict)
    """The same classes' methods, private ones too."""
    cycles: list[list[str]] = field(default_factory=list)
    """Cycles of imports that run when a module is imported."""
    deferred_cycles: list[list[str]] = field(default_factory=list)
    """Cycles once the imports inside functions and for type checking are counted too (a
    deferred import only breaks a cycle at import time: the modules still depend on each
    other)."""
    judge_isinstance: list[str] = field(default_factory=list)


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _runtime_imports(
    tree: ast.Module, module: str, is_package: bool, *, deferred: bool = False
) -> set[str]:
    """The ``kb.*`` modules ``module`` imports: at module level (``deferred``: anywhere)."""
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                if deferred:  # a type's module is a dependency too, if not at import time
                    visit(node.body)
                continue
            if deferred and isinstance(
                node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.With
            ):
                visit(node.body)
                continue
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names if alias.name.startswith("kb"))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = module.split(".") if is_package else module.split(".")[:-1]
                    package = package[: len(package) - node.level + 1]
                    base = ".".join([*package, base] if base else package)
                if base.startswith("kb"):
                    found.add(base)
                    found.update(f"{base}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.If | ast.Try):
                visit(node.body)
                visit(node.orelse)

    visit(tree.body)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def connect(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(found)


def _surface(name: str, own: dict[str, set[str]], bases: dict[str, list[str]]) -> set[str]:
    """A class's methods with those it inherits from kb's own classes (its whole surface).

    Splitting a class into a chain of base classes does not shrink what a caller
    sees, so a class is measured with everything it inherits.
    """
    found: set[str] = set()
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        if current in seen or current not in own:
            continue
        seen.add(current)
        found |= own[current]
        todo.extend(bases.get(current, ()))
    return found


def measure(root: Path = ROOT) -> Metrics:
    """The figures of the package under ``root / "kb"``."""
    package = root / "kb"
    sizes: dict[str, int] = {}
    functions: list[tuple[str, int]] = []
    own: dict[str, set[str]] = {}
    bases: dict[str, list[str]] = {}
    graph: dict[str, set[str]] = {}
    later: dict[str, set[str]] = {}
    judges: list[str] = []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text("utf-8")
        rel = path.relative_to(root).as_posix()
        sizes[rel] = len(text.splitlines())
        tree = ast.parse(text)
        module = _module_name(path, root)
        graph[module] = _runtime_imports(tree, module, path.name == "__init__.py")
        later[module] = _runtime_imports(tree, module, path.name == "__init__.py", deferred=True)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                end = node.end_lineno or node.lineno
                functions.append((f"{rel}:{node.name}", end - node.lineno + 1))
            elif isinstance(node, ast.ClassDef):
                own[node.name] = {
                    item.name
                    for item in node.body
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                }
                bases[node.name] = [ast.unparse(base).rpartition(".")[2] for base in node.bases]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "isinstance"
                and "JudgeGrader" in ast.unparse(node)
                and not rel.endswith(("evals/cases.py", "evals/graders.py"))
            ):
                judges.append(f"{rel}:{node.lineno}")
    known = set(graph)

    def edges(found: dict[str, set[str]]) -> dict[str, set[str]]:
        return {m: {t for t in targets if t in known and t != m} for m, targets in found.items()}

    surfaces = {name: _surface(name, own, bases) for name in own}
    methods = {
        name: sum(1 for m in found if not m.startswith("_")) for name, found in surfaces.items()
    }
    every = {name: len(found) for name, found in surfaces.items()}
    lengths = sorted(size for _, size in functions)
    largest_class = max(methods, key=lambda name: methods[name])
    named = ("KnowledgeStore", "GitStoreRepo", "Engine", largest_class)
    return Metrics(
        modules=len(sizes),
        largest_modules=sorted(sizes.items(), key=lambda item: -item[1])[:5],
        store_over_600=[(m, n) for m, n in sorted(sizes.items()) if "/store/" in m and n > 600],
        functions=len(functions),
        function_p50=lengths[len(lengths) // 2],
        function_p90=lengths[int(len(lengths) * 0.9)],
        largest_functions=sorted(functions, key=lambda item: -item[1])[:8],
        functions_over_60=sum(1 for _, size in functions if size > 60),
        methods={name: methods.get(name, 0) for name in named},
        all_methods={name: every.get(name, 0) for name in named},
        cycles=_cycles(edges(graph)),
        deferred_cycles=_cycles(edges(later)),
        judge_isinstance=judges,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="The checkout to measure.")
    parser.add_argument("--json", action="store_true", help="Print the figures as JSON.")
    args = parser.parse_args()
    found = measure(args.root.resolve())
    if args.json:
        print(json.dumps(asdict(found), indent=2))
        return
    print(f"kb's shape ({args.root}): {found.modules} modules, {found.functions} functions")
    print(f"  largest modules: {', '.join(f'{m} {n}' for m, n in found.largest_modules)}")
    over = ", ".join(f"{m} {n}" for m, n in found.store_over_600) or "none"
    print(f"  kb/store modules over 600 lines: {over}   goal none")
    print(f"  function lines p50 {found.function_p50}, p90 {found.function_p90}")
    print(f"  functions over 60 lines: {found.functions_over_60}   goal <= 12")
    for name, size in found.largest_functions:
        print(f"    {size:>4}  {name}")
    for name, count in found.methods.items():
        goal = "   goal <= 16" if name == "KnowledgeStore" else ""
        print(f"  methods of {name}: {count} public, {found.all_methods[name]} in all{goal}")
    cycles = "; ".join(" <-> ".join(c) for c in found.cycles) or "none"
    print(f"  module import cycles at import time: {len(found.cycles)} ({cycles})   goal 0")
    deferred = "; ".join(" <-> ".join(c) for c in found.deferred_cycles) or "none"
    print(
        f"  ... counting imports inside functions and for types: {len(found.deferred_cycles)} "
        f"({deferred})   goal 0"
    )
    print(
        f"  isinstance(..., JudgeGrader) outside the graders: {len(found.judge_isinstance)} "
        f"({', '.join(found.judge_isinstance)})"
    )


if __name__ == "__main__":
    main()
