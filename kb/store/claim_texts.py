"""Where each claim's text is: the claims of one snapshot, by position.

A snapshot read from a file in the canonical layout keeps each claim as the
bytes it is in the file (:class:`SpanTexts`); new claims and files in other
layouts are wire objects (:class:`WireTexts`); a commit's result is the base
with some statuses patched, some claims removed and new ones appended
(:class:`PatchedTexts`). Each gives the wire object, the file text and the
canonical form of a claim, and :func:`claims_hash_of` streams the hash.

The hash is sha256 over ``[`` + the claims' canonical forms joined by ``,`` +
``]``, so it can resume: a file read in full keeps the digest's state after
every run of claims (:class:`HashedPrefix`), and a commit that leaves the
first claims as they were hashes only from the first change on (a one-claim
``kb note`` on 100,000 claims canonicalises one claim, not 100,001).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from kb.store.canonical import fast_canonical_json, js_stringify, utf8_as_js
from kb.store.jsjson import jcs_of, js_plain_value, parse_json


class Digest(Protocol):
    """A running sha256 (``hashlib``'s object)."""

    def update(self, data: bytes, /) -> None: ...

    def copy(self) -> Digest: ...

    def hexdigest(self) -> str: ...


class HashedPrefix(NamedTuple):
    """The hash's state after the first ``claims`` claims (``[``, their forms comma-joined)."""

    claims: int
    digest: Digest


def empty_prefix() -> HashedPrefix:
    """The hash's state before any claim."""
    return HashedPrefix(0, hashlib.sha256(b"["))


class ClaimTexts(Protocol):
    """The claims of one snapshot, by position: wire object, file text, canonical form."""

    def __len__(self) -> int: ...

    def wire(self, index: int) -> dict[str, Any]:
        """The claim's JSON object as stored (key order kept)."""
        ...

    def text(self, index: int) -> bytes:
        """The claim as it stands in the file (nested lines indented 4 more spaces)."""
        ...

    def jcs(self, index: int) -> str:
        """RFC 8785 canonical form of the claim."""
        ...

    def jcs_run(self, start: int, stop: int) -> Iterator[str]:
        """The canonical forms of claims ``start``..``stop - 1``, comma-joined in pieces."""
        ...

    def hashed_prefix(self, limit: int) -> HashedPrefix:
        """The longest hashed prefix of at most ``limit`` claims known (a copy to update)."""
        ...


def claim_text(wire: Mapping[str, Any]) -> bytes:
    rendered = js_stringify(wire, indent=2).replace("\n", "\n    ")
    return rendered.encode("utf-8", "surrogatepass")


class WireTexts:
    """Claims held as wire objects (small stores, new claims, any file layout)."""

    def __init__(self, wires: Sequence[Mapping[str, Any]]) -> None:
        self._wires = list(wires)

    def __len__(self) -> int:
        return len(self._wires)

    def wire(self, index: int) -> dict[str, Any]:
        return dict(self._wires[index])

    def text(self, index: int) -> bytes:
        return claim_text(self._wires[index])

    def jcs(self, index: int) -> str:
        value = self._wires[index]
        return jcs_of(value, js_plain_value(value))

    def jcs_run(self, start: int, stop: int) -> Iterator[str]:
        return map(self.jcs, range(start, stop))

    def hashed_prefix(self, limit: int) -> HashedPrefix:
        return empty_prefix()


class SpanTexts:
    """Claims held as the bytes of the file they were read from.

    ``prefixes`` are the hash's states the full read computed on its way
    (ascending counts); a read that did not hash (bytes validated before) has none.
    """

    def __init__(
        self,
        data: bytes,
        spans: Sequence[tuple[int, int]],
        prefixes: Sequence[HashedPrefix] = (),
    ) -> None:
        self._data = data
        self._spans = spans
        self._prefixes = tuple(prefixes)

    def __len__(self) -> int:
        return len(self._spans)

    def wire(self, index: int) -> dict[str, Any]:
        value, _ = parse_json(self.text(index))
        return dict(value)

    def text(self, index: int) -> bytes:
        start, end = self._spans[index]
        return self._data[start:end]

    def jcs(self, index: int) -> str:
        value, plain = parse_json(self.text(index))
        return jcs_of(value, plain)

    def jcs_run(self, start: int, stop: int) -> Iterator[str]:
        for first in range(start, stop, RUN_SIZE):
            last = min(first + RUN_SIZE, stop)
            run = parse_run(self._data, self._spans[first:last])
            if run is not None and run[1]:
                yield fast_canonical_json(run[0])[1:-1]
            else:
                yield from map(self.jcs, range(first, last))

    def hashed_prefix(self, limit: int) -> HashedPrefix:
        found = empty_prefix()
        for prefix in self._prefixes:
            if prefix.claims > limit:
                break
            found = prefix
        return HashedPrefix(found.claims, found.digest.copy())


_NOT_JSON = object()
RUN_SIZE = 1000
"""Claims parsed and canonicalised per C call: one call per claim costs ~0.8 s at 100,000."""


def parse_run(data: bytes, spans: Sequence[tuple[int, int]]) -> tuple[list[Any], bool] | None:
    """Adjacent claims of a canonical-layout file parsed at once (``None``: not valid JSON).

    Claims in that layout are separated by ``,`` and whitespace only, so the
    bytes from the first claim's start to the last one's end, in brackets, are
    the array of those claims.
    """
    try:
        values, plain = parse_json(b"[" + data[spans[0][0] : spans[-1][1]] + b"]")
    except (ValueError, RecursionError):
        return None
    return (values, plain) if isinstance(values, list) and len(values) == len(spans) else None


_STATUS_LINE = re.compile(rb'(\n      "status": ")([a-z]+)(")')


class PatchedTexts:
    """A snapshot's claims with some statuses changed, some removed, new ones appended."""

    def __init__(
        self,
        base: ClaimTexts,
        statuses: Mapping[int, str],
        appended: Sequence[Mapping[str, Any]],
        removed: Iterable[int] = (),
    ) -> None:
        self._base = base
        self._statuses = dict(statuses)
        self._appended = WireTexts(appended)
        gone = set(removed)
        self._removed = gone
        self._kept: Sequence[int] = (
            [i for i in range(len(base)) if i not in gone] if gone else range(len(base))
        )
        self._size = len(self._kept)

    def __len__(self) -> int:
        return self._size + len(self._appended)

    def wire(self, index: int) -> dict[str, Any]:
        if index >= self._size:
            return self._appended.wire(index - self._size)
        position = self._kept[index]
        value = self._base.wire(position)
        if position in self._statuses:
            value["status"] = self._statuses[position]  # in place: the key keeps its position
        return value

    def text(self, index: int) -> bytes:
        if index >= self._size:
            return self._appended.text(index - self._size)
        position = self._kept[index]
        text = self._base.text(position)
        status = self._statuses.get(position)
        if status is None:
            return text
        patched, count = _STATUS_LINE.subn(
            lambda m: m.group(1) + status.encode() + m.group(3), text, count=1
        )
        return patched if count else claim_text(self.wire(index))

    def jcs(self, index: int) -> str:
        if index >= self._size:
            return self._appended.jcs(index - self._size)
        position = self._kept[index]
        if position not in self._statuses:
            return self._base.jcs(position)
        raw = self._base.text(position) if isinstance(self._base, SpanTexts) else None
        value = self.wire(index)
        plain = parse_json(raw)[1] if raw is not None else js_plain_value(value)
        return jcs_of(value, plain)

    def jcs_run(self, start: int, stop: int) -> Iterator[str]:
        index = start
        base_stop = min(stop, self._size)
        while index < base_stop:
            position = self._kept[index]
            if position in self._statuses:
                yield self.jcs(index)
                index += 1
                continue
            # The longest stretch of untouched, adjacent base claims: one base run.
            end = index + 1
            while (
                end < base_stop
                and self._kept[end] == position + (end - index)
                and self._kept[end] not in self._statuses
            ):
                end += 1
            yield from self._base.jcs_run(position, position + (end - index))
            index = end
        yield from self._appended.jcs_run(max(start, self._size) - self._size, stop - self._size)

    def hashed_prefix(self, limit: int) -> HashedPrefix:
        # The base's claims before the first patched or removed one are unchanged.
        changed = min([*self._statuses, *self._removed], default=self._size)
        return self._base.hashed_prefix(min(limit, changed))


def claims_hash_of(texts: ClaimTexts) -> str:
    """sha256 of JCS(claims), streamed claim by claim (never the whole array in memory).

    Resumes from the longest hashed prefix the texts know.
    """
    count, digest = texts.hashed_prefix(len(texts))
    separator = b"," if count else b""
    for piece in texts.jcs_run(count, len(texts)):
        digest.update(separator)
        digest.update(utf8_as_js(piece))
        separator = b","
    digest.update(b"]")
    return digest.hexdigest()
