"""Text that fits a terminal of 80 columns.

Tables are laid out flat when every line fits and regrouped by their first
column when one would not (see ``kb.views.decision``); prose lines are
wrapped at spaces. Nothing here breaks a word: a model id or a claim id
longer than the line stays whole, so it can still be copied and searched.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence

WIDTH = 80


def table_lines(rows: Sequence[Sequence[str]], right: frozenset[int] = frozenset()) -> list[str]:
    """Rows as aligned columns two spaces apart (``right``: right-aligned columns)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def fits(lines: Sequence[str], width: int = WIDTH) -> bool:
    """Every line within ``width`` columns."""
    return all(len(line) <= width for line in lines)


def wrapped(text: str, indent: str = "", more: str | None = None, width: int = WIDTH) -> list[str]:
    r"""``text`` wrapped at spaces: the first line after ``indent``, the rest after ``more``.

    ``more`` defaults to ``indent`` plus two spaces, so a continuation reads
    as part of the line above it. A no-break space (``\xa0``) in ``text``
    keeps its neighbours on one line and comes out as a plain space.
    """
    lines = textwrap.wrap(
        text,
        width=width,
        initial_indent=indent,
        subsequent_indent=indent + "  " if more is None else more,
        break_long_words=False,
        break_on_hyphens=False,
    )
    # a no-break space glues words the caller keeps on one line ("+ claim-id:")
    return [line.replace("\xa0", " ") for line in lines] or [indent.rstrip()]


def wrapped_items(items: Sequence[str], sep: str = "; ", width: int = WIDTH) -> list[str]:
    """``items`` joined by ``sep`` and wrapped only between items (never inside one).

    An item longer than ``width`` stays whole on its own line.
    """
    glued = sep.join(item.replace(" ", "\xa0") for item in items)
    return wrapped(glued, more="", width=width)


def fit(text: str, width: int = WIDTH) -> str:
    """Every line of ``text`` within ``width`` columns, wrapped under its own indent."""
    lines = []
    for line in text.splitlines():
        body = line.lstrip(" ")
        indent = line[: len(line) - len(body)]
        lines += wrapped(body, indent, width=width) if len(line) > width else [line]
    return "\n".join(lines)


_BOUNDARY = re.compile(r"[\s\"'`,;:()\[\]{}<>=]")
"""Where a shortened quote may end: no key, token or id has one of these inside it."""


def shorten(text: str, limit: int, mark: str = "…") -> str:
    """``text`` in at most ``limit`` characters, ending in ``mark`` when shortened.

    It never ends inside a token (a run without spaces, quotes, brackets or
    ``=,;:``): a key cut in half would show half a key, which no later cut of
    the whole key could find. A first token longer than ``limit`` is dropped
    whole.
    """
    if len(text) <= limit:
        return text
    room = max(0, limit - len(mark))
    kept = text[:room]
    if not _BOUNDARY.match(text[room : room + 1]):
        ends = [m.end() for m in _BOUNDARY.finditer(kept)]
        kept = kept[: ends[-1]] if ends else ""
    return kept.rstrip() + mark
