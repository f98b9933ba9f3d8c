"""Scanning a store file's layout: where each claim's bytes are, and git's conflict markers.

A file in ``JSON.stringify(store, null, 2)`` layout (what kb and rulvar
write) is located with one scan: the header (version and hash) and each
claim's span. Any other layout scans as ``None`` and is read whole.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from kb.store.jsjson import js_integer

_HEADER = re.compile(
    rb'\{\n  "version": (0|[1-9][0-9]{0,15}),\n  "hash": "([0-9a-f]{64})",\n  "claims": \['
)
_CLAIM_START = re.compile(rb"\n    \{\n")
_CLAIM_END = re.compile(rb"\n    \}")
_CONFLICT = re.compile(r"^(<{7}|>{7})( |$)", re.MULTILINE)


def conflict_advice(name: str, markers: Sequence[int]) -> str:
    """What to do about a store file git left with conflict markers."""
    return (
        f"unresolved git merge conflict (markers at lines {markers[0]}-{markers[-1]}); "
        "if `git merge` printed why kb's merge driver could not merge, take one side "
        f"(git checkout --ours {name} or --theirs) and redo what still applies of the "
        "other side's change with kb; if it did not, this clone lacks the driver: "
        "git merge --abort, kb merge-driver --install, then merge again"
    )


def conflict_lines(text: str) -> list[int]:
    """Line numbers of git conflict markers (``<<<<<<<`` / ``>>>>>>>``) in ``text``."""
    return [text.count("\n", 0, match.start()) + 1 for match in _CONFLICT.finditer(text)]


@dataclass(frozen=True)
class StoreLayout:
    version: int
    hash: str
    spans: list[tuple[int, int]]


def scan_layout(data: bytes) -> StoreLayout | None:
    """The spans of a file in ``JSON.stringify(store, null, 2)`` layout (``None``: another)."""
    header = _HEADER.match(data)
    if header is None:
        return None
    at = header.end()
    if len(data) - at == 4 and data.endswith(b"]\n}\n"):  # no slice: it would copy the file
        return StoreLayout(js_integer(header.group(1)), header.group(2).decode(), [])
    starts = [m.start() + 5 for m in _CLAIM_START.finditer(data, at)]
    ends = [m.start() + 6 for m in _CLAIM_END.finditer(data, at)]
    if not starts or len(starts) != len(ends) or data[at : starts[0]] != b"\n    ":
        return None
    for end, next_start in zip(ends, starts[1:], strict=False):
        if data[end:next_start] != b",\n    ":
            return None
    if (
        len(data) - ends[-1] != 7
        or not data.endswith(b"\n  ]\n}\n")
        or any(s > e for s, e in zip(starts, ends, strict=True))
    ):
        return None
    return StoreLayout(
        js_integer(header.group(1)),
        header.group(2).decode(),
        list(zip(starts, ends, strict=True)),
    )
