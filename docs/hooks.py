"""MkDocs hooks: the spec reference, generated from the pydantic models kb validates with.

``docs/reference/spec-keys.md`` holds ``<!-- kb:spec-keys -->``; this hook
replaces it with one table per TOML table of a spec (a sweep spec, its
cases and graders, datasets, the canary, a checkpoint spec, a ladders
file): every key, its type, its default and its description — the field's
docstring: the string literal right under it, read from the model's source
(:func:`field_docs`). A key added to a model is documented by the next
``make docs``; one without a docstring fails ``tests/test_docs.py``.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
import types
import typing
from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

MARKER = "<!-- kb:spec-keys -->"


def spec_tables() -> list[tuple[str, type[BaseModel]]]:
    """Each TOML table a person writes, and the model that validates it."""
    from kb.card import Ladder, Profile, Rung
    from kb.checkpoint.spec import CheckpointBudgets, CheckpointSection
    from kb.evals.cases import (
        Case,
        Criterion,
        GoldenGrader,
        JudgeGrader,
        PanelJudge,
        PythonGrader,
        RubricGrader,
    )
    from kb.evals.datasets import DatasetFields, DatasetSpec
    from kb.sweep.spec import (
        Budgets,
        CanarySection,
        ModelEntry,
        SensitiveSection,
        SweepSection,
        Thresholds,
    )

    return [
        ("[sweep]", SweepSection),
        ("[sweep.thresholds]", Thresholds),
        ("[budgets]", Budgets),
        ("[[models]]", ModelEntry),
        ("[[cases]]", Case),
        ('graders: kind = "golden"', GoldenGrader),
        ('graders: kind = "rubric"', RubricGrader),
        ("a rubric's criteria", Criterion),
        ('graders: kind = "judge"', JudgeGrader),
        ("a panel judge written as a table", PanelJudge),
        ('graders: kind = "python"', PythonGrader),
        ("[[datasets]]", DatasetSpec),
        ("[datasets.fields]", DatasetFields),
        ("[canary]", CanarySection),
        ("[canary.sensitive]", SensitiveSection),
        ("[checkpoint] (a checkpoint spec)", CheckpointSection),
        ("[budgets] (a checkpoint spec)", CheckpointBudgets),
        ("[[ladders]] (a ladders file)", Ladder),
        ("a ladder's rungs", Rung),
        ("[[profiles]] (a ladders file)", Profile),
    ]


def type_text(annotation: Any) -> str:
    """A field's type as a person reads it (``"interval" | "point"``, ``list of str``)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_text(args[0])
    if origin is typing.Literal:
        return " \\| ".join(f'`"{a}"`' if isinstance(a, str) else f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        shown = [type_text(a) for a in args if a is not type(None)]
        optional = len(shown) < len(args)
        return " \\| ".join(shown) + (" (optional)" if optional else "")
    if origin in (list, tuple):
        return f"list of {type_text(args[0])}" if args else "list"
    if origin is dict:
        return f"table of {type_text(args[1])}" if len(args) == 2 else "table"
    if isinstance(annotation, type):
        names = {str: "string", int: "integer", float: "number", bool: "boolean"}
        if annotation in names:
            return names[annotation]
        if issubclass(annotation, BaseModel):
            return f"table ({annotation.__name__})"
        return annotation.__name__
    if annotation is Any:
        return "any value"
    return re.sub(r"\b(typing|kb)\.[\w.]*?\.?(\w+)\b", r"\2", str(annotation))


def default_text(field: Any) -> str:
    """The default as TOML would write it (``required`` when there is none)."""
    if field.default is PydanticUndefined and field.default_factory is None:
        return "**required**"
    value = field.default_factory() if field.default_factory is not None else field.default
    if value is None:
        return "—"
    if isinstance(value, BaseModel):
        return "its defaults"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, (list, dict, tuple)) and not value:
        return "`[]`" if not isinstance(value, dict) else "`{}`"
    return f"`{value}`"


def description_text(text: str | None) -> str:
    """A docstring as one table cell (reST roles and double backticks made markdown)."""
    if not text:
        return ""
    flat = " ".join(text.split())
    flat = re.sub(r":(?:mod|func|class|data|meth|attr):`~?([^`]+)`", r"`\1`", flat)
    flat = re.sub(r" ?\(SPEC [0-9.]+[^)]*\)", "", flat)  # kb's own spec, not the reader's
    flat = re.sub(r",? ?SPEC [0-9.]+", "", flat)
    return flat.replace("``", "`").replace("|", "\\|")


@cache
def field_docs(model: type[BaseModel]) -> dict[str, str]:
    """Each field's docstring: the string literal under its annotated assignment."""
    found: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in zip(body, body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                found[node.target.id] = inspect.cleandoc(after.value.value)
    return found


def keys_table(title: str, model: type[BaseModel]) -> str:
    """One TOML table's keys as a markdown table."""
    docs = field_docs(model)
    rows = [
        f"| `{field.alias or name}` | {type_text(field.annotation)} | {default_text(field)} | "
        f"{description_text(field.description or docs.get(name))} |"
        for name, field in model.model_fields.items()
        if not name.startswith("_")
    ]
    intro = description_text((model.__doc__ or "").strip().split("\n\n")[0])
    return "\n".join(
        [f"## {title}", "", intro, "", "| key | type | default | what it is |", "|---|---|---|---|"]
        + rows
        + [""]
    )


def spec_keys_markdown() -> str:
    """Every table of :func:`spec_tables`."""
    return "\n".join(keys_table(title, model) for title, model in spec_tables())


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Fill the spec reference's marker."""
    if MARKER in markdown:
        return markdown.replace(MARKER, spec_keys_markdown())
    return markdown


def on_page_content(html: str, **_: Any) -> str:
    """mkdocs-click prints click 8.3's "no default" sentinel as ``Sentinel.UNSET``: none."""
    return html.replace("<code>Sentinel.UNSET</code>", "none").replace("Sentinel.UNSET", "none")
