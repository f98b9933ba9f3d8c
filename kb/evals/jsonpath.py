"""Paths into an answer parsed as JSON, and the parsing itself (fenced JSON accepted).

A rubric's ``json_path`` is a JSONPath without wildcards or filters — one
value, found or not:

* ``$`` (the whole answer), ``$.a.b``, ``$.items[0].name``, ``$['a key']``,
  ``$["a key"][-1]`` (a negative index counts from the end);
* the v2 dotted form ``a.b.0.c`` (no ``$``; a number is a list index) still
  works, so no spec written for v2 changes meaning.

Models often wrap JSON in a markdown fence; :func:`answer_json` accepts an
answer that is exactly one fenced block (```` ```json ```` or ```` ``` ````)
around the JSON, with only whitespace outside it.
"""

from __future__ import annotations

import json
import re
from typing import Any

PathPart = str | int

_FENCE = re.compile(r"\A\s*```[ \t]*(?:json|JSON)?[ \t]*\r?\n(.*?)\r?\n?[ \t]*```\s*\Z", re.DOTALL)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_INDEX = re.compile(r"\[\s*(-?[0-9]+)\s*\]")
_QUOTED = re.compile(r"""\[\s*(?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)")\s*\]""")


def answer_json(output: str) -> Any:
    """The answer parsed as JSON: bare, or inside one markdown code fence.

    Raises ``ValueError`` when it is neither.
    """
    try:
        return json.loads(output)
    except ValueError:
        fenced = _FENCE.match(output)
        if fenced is None:
            raise
        return json.loads(fenced.group(1))


def parse_path(path: str) -> tuple[PathPart, ...]:
    """The steps of ``path`` (names and indexes); ``ValueError`` naming what is wrong."""
    if not path.startswith("$"):
        if not path:
            raise ValueError("json_path is empty (use $ for the whole answer)")
        if path.startswith(("[", ".")):
            raise ValueError(f"json_path {path!r} must start with $ (JSONPath) or a name")
        return tuple(int(part) if _is_int(part) else part for part in path.split("."))
    parts: list[PathPart] = []
    at = 1
    while at < len(path):
        if path.startswith("..", at) or path.startswith(".*", at) or path.startswith("[*", at):
            raise ValueError(
                f"json_path {path!r}: wildcards and recursive descent are not supported "
                "(a path names one value)"
            )
        if path[at] == ".":
            name = _NAME.match(path, at + 1)
            if name is None:
                raise ValueError(f"json_path {path!r}: expected a name after '.' at {at + 1}")
            parts.append(name.group(0))
            at = name.end()
            continue
        index = _INDEX.match(path, at)
        if index is not None:
            parts.append(int(index.group(1)))
            at = index.end()
            continue
        quoted = _QUOTED.match(path, at)
        if quoted is not None:
            raw = quoted.group(1) if quoted.group(1) is not None else quoted.group(2)
            parts.append(re.sub(r"\\(.)", r"\1", raw))
            at = quoted.end()
            continue
        raise ValueError(
            f"json_path {path!r}: unexpected {path[at]!r} at {at} (use $.name, $[0] or $['name'])"
        )
    return tuple(parts)


def _is_int(text: str) -> bool:
    return text.lstrip("-").isdigit()


def find(value: Any, parts: tuple[PathPart, ...]) -> Any:
    """The value at ``parts``; ``KeyError`` when the answer has nothing there."""
    for part in parts:
        if isinstance(value, list) and isinstance(part, int):
            if not -len(value) <= part < len(value):
                raise KeyError(part)
            value = value[part]
        elif isinstance(value, dict) and isinstance(part, str):
            value = value[part]
        elif isinstance(value, dict) and isinstance(part, int) and str(part) in value:
            value = value[str(part)]  # the v2 dotted form: "a.0" may name a key "0"
        else:
            raise KeyError(part)
    return value
