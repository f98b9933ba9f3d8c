"""Reading and writing the store file: one immutable :class:`Snapshot` per version.

**What is refused.** Exactly what rulvar's reader refuses — not JSON, a bad
version, a malformed hash, a claim without the fields rulvar checks (id,
subject with a ``provider:model``, task class, the enums, a non-empty evidence
list, readable instants, an author), or a hash that does not match the
claims — with one :class:`ConfigError` listing every issue with its path.
What rulvar accepts but kb would never write (unknown keys, a pass rate above
1, an empty effort, a long statement, duplicate ids, an instant in a V8-only
form …) is read, and reported as ``warnings`` (``kb verify`` prints them).

**Cost independent of history.** A store file written by kb or rulvar
(``JSON.stringify(store, null, 2)``) is read as spans: each claim's bytes are
located with one scan, parsed 1,000 at a time by the C parser (never the
whole document at once), and kept as bytes; the hash streams their canonical
forms, printed by the C encoder wherever that prints what JavaScript would.
Logic reads a light :class:`ClaimEntry` per claim; a full
:class:`ModelClaim` is built only when asked for. A commit re-renders
and re-hashes only what it changed: unchanged claims are copied byte for
byte — their unknown keys and exact integers included — and a status change
patches one line. A file in any other layout (compact, tabs, CRLF) is read
whole and rewritten in kb's layout.
"""

from __future__ import annotations

import gc
import hashlib
import io
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import IO, Any, Protocol

from pydantic import ValidationError

from kb.errors import ConfigError
from kb.schema import validation_issues
from kb.store.canonical import (
    canonical_json,
    fast_canonical_json,
    js_stringify,
    sha256_hex,
    utf8_as_js,
)
from kb.store.models import (
    LenientClaim,
    ModelClaim,
    claim_from_wire,
    claim_to_wire,
    validate_stored,
)
from kb.store.ttl import read_stored_instant

EMPTY_HASH = "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"
_HASH_FORMAT = re.compile(r"[0-9a-f]{64}")
_MAX_SAFE = 2**53
_NOT_PLAIN_TEXT = re.compile(r"\\u[dD][89a-fA-F]")
# A character beyond the BMP: Python sorts keys by code point, JCS by UTF-16 units, and
# the two orders differ only around such characters, so their claims take the slow path.
_ASTRAL = re.compile(rb"[\xf0-\xf4]")
_NOT_PLAIN_CHAR = re.compile("[\ud800-\udfff\U00010000-\U0010ffff]")


# -- numbers as JavaScript reads them ---------------------------------------------------------


class _NumberWatch:
    """``json.loads`` hooks that read numbers the way ``JSON.parse`` does.

    JavaScript has one number type, so ``3.0`` is the integer 3 and an
    integer beyond 2**53 is a rounded double. While parsing we also learn
    whether every number prints the same in Python and JavaScript, which
    lets the hash take the C encoder's fast path.
    """

    def __init__(self) -> None:
        self.js_plain = True

    def parse_float(self, text: str) -> float | int:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(f"number {text} is out of range")
        if value.is_integer():
            if abs(value) <= _MAX_SAFE:
                return int(value)
            self.js_plain = False
            return value
        if "e" in repr(value):
            self.js_plain = False
        return value

    def parse_int(self, text: str) -> float | int:
        value = int(text)
        if abs(value) > _MAX_SAFE:
            self.js_plain = False
            return float(value)  # the double JSON.parse makes of it
        return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(text: str | bytes) -> tuple[Any, bool]:
    """Parse like ``JSON.parse``; also say whether the data is JS-plain (see canonical).

    JS-plain data prints the same through Python's C encoder as through
    JavaScript (and its keys sort the same), so the hash may use the former.
    The number hooks cost one call per number; a regular expression over the
    text to skip them was measured slower (14 s against 0.2 s at 100,000 claims).
    """
    if isinstance(text, bytes):
        raw = text
        # As Node reads a file: bytes that are not UTF-8 become U+FFFD (json.loads
        # would make lone surrogates of some).
        text = raw.decode("utf-8", "replace")
    else:
        raw = text.encode("utf-8", "surrogatepass")
    watch = _NumberWatch()
    data = json.loads(
        text,
        parse_float=watch.parse_float,
        parse_int=watch.parse_int,
        parse_constant=_refuse_constant,
    )
    return data, watch.js_plain and _plain_text(raw)


def _plain_text(raw: bytes) -> bool:
    """No surrogate escape and no character beyond the BMP (the common case: ASCII)."""
    if b"\\u" in raw and _NOT_PLAIN_TEXT.search(raw.decode("utf-8", "surrogatepass")):
        return False
    return raw.isascii() or _ASTRAL.search(raw) is None


def _jcs(value: Any, plain: bool) -> str:
    return fast_canonical_json(value) if plain else canonical_json(value)


def js_plain_value(value: Any) -> bool:
    """Whether kb-built data prints the same through the C encoder as in JavaScript."""
    if isinstance(value, str):
        return value.isascii() or _NOT_PLAIN_CHAR.search(value) is None
    if isinstance(value, bool) or value is None:
        return True
    if isinstance(value, int):
        return abs(value) <= _MAX_SAFE
    if isinstance(value, float):
        return math.isfinite(value) and not value.is_integer() and "e" not in repr(value)
    if isinstance(value, Mapping):
        return all(js_plain_value(k) and js_plain_value(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(js_plain_value(v) for v in value)
    return False


# -- the light view of a claim ----------

_INTERNED: dict[str, str] = {}


def _shared(text: str) -> str:
    """One object per repeated string (models, task classes, a night's instants)."""
    return _INTERNED.setdefault(text, text)


@dataclass(frozen=True, slots=True)
class ClaimEntry:
    """The fields logic reads, without building the whole claim."""

    id: str
    status: str
    model: str
    effort: str | None
    task_class: str
    polarity: str
    claim_class: str
    observed_at: str
    expires_at: str
    canary_fingerprint: str | None

    @property
    def subject_key(self) -> str:
        """``model`` or ``model@effort``."""
        return f"{self.model}@{self.effort}" if self.effort else self.model


def entry_of(wire: Mapping[str, Any]) -> ClaimEntry:
    """The entry of a claim's wire object (one that passed the read boundary)."""
    shared = _shared if len(_INTERNED) < 200_000 else str
    subject = wire["subject"]
    effort = subject.get("effort")
    epoch = wire.get("modelEpoch")
    fingerprint = epoch.get("canaryFingerprint") if isinstance(epoch, dict) else None
    return ClaimEntry(
        wire["id"],
        shared(wire["status"]),
        shared(subject["model"]),
        shared(effort) if isinstance(effort, str) and effort else None,
        shared(wire["taskClass"]),
        shared(wire["polarity"]),
        shared(wire["class"]),
        shared(wire["observedAt"]),
        shared(wire["expiresAt"]),
        shared(fingerprint) if isinstance(fingerprint, str) else None,
    )


class ClaimView(Protocol):
    """What both a :class:`ClaimEntry` and a :class:`ModelClaim` tell about a claim."""

    @property
    def id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def effort(self) -> str | None: ...
    @property
    def task_class(self) -> str: ...
    @property
    def polarity(self) -> str: ...
    @property
    def claim_class(self) -> str: ...
    @property
    def observed_at(self) -> str: ...
    @property
    def expires_at(self) -> str: ...
    @property
    def canary_fingerprint(self) -> str | None: ...
    @property
    def subject_key(self) -> str: ...


_FIELD_OF_ALIAS = {(info.alias or name): name for name, info in ModelClaim.model_fields.items()}


def construct_claim(wire: Mapping[str, Any]) -> ModelClaim:
    """A :class:`ModelClaim` of a wire object that passed the read boundary (no re-check)."""
    fields = {_FIELD_OF_ALIAS[k]: v for k, v in wire.items() if k in _FIELD_OF_ALIAS}
    return ModelClaim.model_construct(**fields)


# -- where each claim's text is --------------------------------------------------------------------


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


def _claim_text(wire: Mapping[str, Any]) -> bytes:
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
        return _claim_text(self._wires[index])

    def jcs(self, index: int) -> str:
        value = self._wires[index]
        return _jcs(value, js_plain_value(value))

    def jcs_run(self, start: int, stop: int) -> Iterator[str]:
        return map(self.jcs, range(start, stop))


class SpanTexts:
    """Claims held as the bytes of the file they were read from."""

    def __init__(self, data: bytes, spans: Sequence[tuple[int, int]]) -> None:
        self._data = data
        self._spans = spans

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
        return _jcs(value, plain)

    def jcs_run(self, start: int, stop: int) -> Iterator[str]:
        for first in range(start, stop, _RUN):
            last = min(first + _RUN, stop)
            run = parse_run(self._data, self._spans[first:last])
            if run is not None and run[1]:
                yield fast_canonical_json(run[0])[1:-1]
            else:
                yield from map(self.jcs, range(first, last))


_NOT_JSON = object()
_RUN = 1000
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
        return patched if count else _claim_text(self.wire(index))

    def jcs(self, index: int) -> str:
        if index >= self._size:
            return self._appended.jcs(index - self._size)
        position = self._kept[index]
        if position not in self._statuses:
            return self._base.jcs(position)
        raw = self._base.text(position) if isinstance(self._base, SpanTexts) else None
        value = self.wire(index)
        plain = parse_json(raw)[1] if raw is not None else js_plain_value(value)
        return _jcs(value, plain)

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


def claims_hash_of(texts: ClaimTexts) -> str:
    """sha256 of JCS(claims), streamed claim by claim (never the whole array in memory)."""
    digest = hashlib.sha256(b"[")
    separator = b""
    for piece in texts.jcs_run(0, len(texts)):
        digest.update(separator)
        digest.update(utf8_as_js(piece))
        separator = b","
    digest.update(b"]")
    return digest.hexdigest()


# -- the snapshot ----------


class Snapshot:
    """One version of the store: what a reader sees and what a commit replaces.

    Built eagerly from claims or wire objects (``Snapshot(version, hash,
    claims, wire)``), or by the reader over the file's bytes. Either way
    ``entries`` is the cheap view logic uses; ``claims`` and ``wire`` build
    every claim on first use.
    """

    def __init__(
        self,
        version: int,
        hash: str,
        claims: Sequence[ModelClaim] | None = None,
        wire: Sequence[Mapping[str, Any]] | None = None,
        *,
        texts: ClaimTexts | None = None,
        entries: Sequence[ClaimEntry] | None = None,
        warnings: Sequence[str] = (),
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        self.version = version
        self.hash = hash
        self.warnings = tuple(warnings)
        """What rulvar accepts but kb would never write (``kb verify`` prints them)."""
        self.extra = dict(extra or {})
        """Unknown top-level keys of a file read whole (kept on rewrite)."""
        if texts is None:
            if wire is None:
                wire = [claim_to_wire(claim) for claim in claims or ()]
            texts = WireTexts(wire)
        self.texts = texts
        self._claims = tuple(claims) if claims is not None else None
        self._entries = tuple(entries) if entries is not None else None

    def __repr__(self) -> str:
        return f"Snapshot(version={self.version}, hash={self.hash[:12]}…, claims={len(self)})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Snapshot):
            return NotImplemented
        return (self.version, self.hash, self.wire) == (other.version, other.hash, other.wire)

    __hash__ = None  # type: ignore[assignment]

    def __len__(self) -> int:
        return len(self.texts)

    @cached_property
    def entries(self) -> tuple[ClaimEntry, ...]:
        """Each claim's light view, in file order."""
        if self._entries is not None:
            return self._entries
        if self._claims is not None:
            return tuple(entry_of(claim_to_wire(claim)) for claim in self._claims)
        return tuple(entry_of(self.texts.wire(i)) for i in range(len(self.texts)))

    @cached_property
    def claims(self) -> tuple[ModelClaim, ...]:
        """Every claim, built on first use."""
        if self._claims is not None:
            return self._claims
        with _collector_paused():
            return tuple(construct_claim(self.texts.wire(i)) for i in range(len(self.texts)))

    @cached_property
    def wire(self) -> tuple[dict[str, Any], ...]:
        """Every claim's JSON object as stored (key order included)."""
        with _collector_paused():
            return tuple(self.texts.wire(i) for i in range(len(self.texts)))

    def wire_at(self, index: int) -> dict[str, Any]:
        """One claim's JSON object, parsed on its own."""
        return self.texts.wire(index)

    def claim_at(self, index: int) -> ModelClaim:
        """One claim, built on its own."""
        if self._claims is not None:
            return self._claims[index]
        return construct_claim(self.texts.wire(index))

    @cached_property
    def index(self) -> dict[str, int]:
        """Position of each claim id (the first, if a hand edit duplicated one)."""
        found: dict[str, int] = {}
        for position, entry in enumerate(self.entries):
            found.setdefault(entry.id, position)
        return found

    def get(self, claim_id: str) -> ModelClaim | None:
        """The claim with this id, or ``None``."""
        position = self.index.get(claim_id)
        return None if position is None else self.claim_at(position)

    def has(self, claim_id: str) -> bool:
        """Whether a claim with this id exists."""
        return claim_id in self.index

    @cached_property
    def by_id(self) -> dict[str, ModelClaim]:
        """Claims indexed by id (builds every claim)."""
        return {claim.id: claim for claim in self.claims}


EMPTY_SNAPSHOT = Snapshot(version=0, hash=EMPTY_HASH, claims=(), wire=())


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic GC while building a large acyclic object graph.

    Parsing a 10,000-claim store allocates ~10⁶ containers and none of them
    form cycles, yet each allocation burst triggers generation scans; pausing
    the collector takes ~30 % off a read.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# -- reading ----------

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
class _Layout:
    version: int
    hash: str
    spans: list[tuple[int, int]]


def _layout(data: bytes) -> _Layout | None:
    """The spans of a file in ``JSON.stringify(store, null, 2)`` layout (``None``: another)."""
    header = _HEADER.match(data)
    if header is None:
        return None
    at = header.end()
    if len(data) - at == 4 and data.endswith(b"]\n}\n"):  # no slice: it would copy the file
        return _Layout(_js_integer(header.group(1)), header.group(2).decode(), [])
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
    return _Layout(
        _js_integer(header.group(1)),
        header.group(2).decode(),
        list(zip(starts, ends, strict=True)),
    )


def _js_integer(digits: bytes) -> int:
    """An integer as ``JSON.parse`` reads it (beyond 2**53: the nearest double)."""
    value = int(digits)
    return value if value <= _MAX_SAFE else int(float(value))


def parse_store(data: str | bytes, source: str) -> Snapshot:
    """Validate a store file; raise one ``ConfigError`` listing every issue."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    with _collector_paused():
        layout = _layout(raw)
        if layout is None:
            return _parse_whole(raw, source)
        return _parse_spans(raw, layout, source)


class _ClaimCheck:
    """Checks claims one by one: issues (refusals) and warnings, with their paths."""

    def __init__(self) -> None:
        self.issues: list[str] = []
        self.warnings: list[str] = []
        self.seen: dict[str, int] = {}

    def check(self, index: int, value: Any) -> ClaimEntry | None:
        where = f"claims[{index}]"
        if not isinstance(value, dict):
            self.issues.append(f"{where}: must be an object, got {type(value).__name__}")
            return None
        try:
            validate_stored(ModelClaim, value)
        except ValidationError as strict:
            try:
                validate_stored(LenientClaim, value)
            except ValidationError as lenient:
                self.issues.extend(validation_issues(where, lenient))
                return None
            self.warnings.extend(
                issue.replace(": unknown key", ": unknown key (kept)")
                for issue in validation_issues(where, strict)
            )
        for field in ("observedAt", "expiresAt"):
            note = read_stored_instant(value[field]).warning
            if note:
                self.warnings.append(f"{where}.{field}: {note}")
        claim_id = value["id"]
        if claim_id in self.seen:
            self.warnings.append(
                f"{where}.id: {claim_id!r} duplicates claims[{self.seen[claim_id]}].id"
            )
        else:
            self.seen[claim_id] = index
        return entry_of(value)


def _parse_spans(raw: bytes, layout: _Layout, source: str) -> Snapshot:
    check = _ClaimCheck()
    entries: list[ClaimEntry] = []
    digest = hashlib.sha256(b"[")
    separator = b""
    spans = layout.spans
    for first in range(0, len(spans), _RUN):
        run_spans = spans[first : first + _RUN]
        run = parse_run(raw, run_spans)
        values: list[Any] = run[0] if run is not None else []
        if run is None:  # some claim is not valid JSON: one by one, to name each
            for index, (start, end) in enumerate(run_spans, first):
                try:
                    values.append(parse_json(raw[start:end])[0])
                except (ValueError, RecursionError) as exc:
                    check.issues.append(f"claims[{index}]: not valid JSON: {exc}")
                    values.append(_NOT_JSON)
        for index, value in enumerate(values, first):
            if value is not _NOT_JSON:
                entry = check.check(index, value)
                if entry is not None:
                    entries.append(entry)
        if check.issues:
            continue  # refused anyway: the hash no longer matters
        if run is not None and run[1]:
            pieces = [fast_canonical_json(values)[1:-1]]
        else:
            pieces = [_jcs(*parse_json(raw[start:end])) for start, end in run_spans]
        for piece in pieces:
            digest.update(separator)
            digest.update(utf8_as_js(piece))
            separator = b","
    digest.update(b"]")
    if not check.issues:
        computed = digest.hexdigest()
        if computed != layout.hash:
            check.issues.append(_hash_issue(layout.hash, computed))
    if check.issues:
        raise ConfigError(source, check.issues)
    check.warnings[:0] = _encoding_warnings(raw)
    return Snapshot(
        layout.version,
        layout.hash,
        texts=SpanTexts(raw, layout.spans),
        entries=entries,
        warnings=check.warnings,
    )


_NOT_UTF8 = "the file holds bytes that are not UTF-8 (read as U+FFFD, as Node does; kept)"


def _encoding_warnings(raw: bytes) -> list[str]:
    if raw.isascii():
        return []
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return [_NOT_UTF8]
    return []


def _hash_issue(stored: str, computed: str) -> str:
    return (
        f"hash: does not match the claims (stored {stored}, computed {computed}); "
        "the file was edited by hand: restore it (git restore FILE, or from a backup "
        "outside git) and change claims through kb (note, archive, deprecate)"
    )


def _parse_whole(raw: bytes, source: str) -> Snapshot:
    """A file in another layout: read whole, as ``JSON.parse`` would."""
    warnings = _encoding_warnings(raw)
    try:
        data, plain = parse_json(raw)  # decodes as Node does; the bytes tell plainness
    except (ValueError, RecursionError) as exc:
        markers = conflict_lines(raw.decode("utf-8", "replace"))
        if markers:
            raise ConfigError(source, conflict_advice(Path(source).name, markers)) from None
        raise ConfigError(source, f"not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(source, f"top level must be an object, got {type(data).__name__}")
    issues: list[str] = []
    extra = {key: value for key, value in data.items() if key not in ("version", "hash", "claims")}
    warnings += [f"{key}: unknown top-level key (kept)" for key in extra]
    version = data.get("version")
    if "version" not in data:
        issues.append("version: missing")
    elif (
        isinstance(version, bool)
        or not isinstance(version, int | float)
        or version < 0
        or (isinstance(version, float) and not version.is_integer())
    ):
        issues.append(f"version: must be a nonnegative integer, got {version!r}")
    stored_hash = data.get("hash")
    if "hash" not in data:
        issues.append("hash: missing")
    elif not isinstance(stored_hash, str) or not _HASH_FORMAT.fullmatch(stored_hash):
        issues.append(f"hash: must be 64 lowercase hex characters, got {stored_hash!r}")
    raw_claims = data.get("claims")
    check = _ClaimCheck()
    entries: list[ClaimEntry] = []
    if "claims" not in data:
        issues.append("claims: missing")
    elif not isinstance(raw_claims, list):
        issues.append(f"claims: must be an array, got {type(raw_claims).__name__}")
    else:
        for index, value in enumerate(raw_claims):
            entry = check.check(index, value)
            if entry is not None:
                entries.append(entry)
    issues += check.issues
    if not issues:
        assert isinstance(raw_claims, list) and isinstance(stored_hash, str)
        computed = _whole_hash(raw_claims, plain)
        if computed != stored_hash:
            issues.append(_hash_issue(stored_hash, computed))
    if issues:
        raise ConfigError(source, issues)
    assert isinstance(raw_claims, list) and isinstance(stored_hash, str)
    return Snapshot(
        int(version),  # type: ignore[arg-type]
        stored_hash,
        texts=WireTexts(raw_claims),
        entries=entries,
        warnings=warnings + check.warnings,
        extra=extra,
    )


def _whole_hash(claims: list[Any], plain: bool) -> str:
    return sha256_hex(_jcs(claims, plain))


def index_store(data: bytes) -> Snapshot:
    """A snapshot of bytes that passed :func:`parse_store` before (``kb.store.verified``).

    Locates and indexes the claims without re-validating or re-hashing them.
    """
    with _collector_paused():
        layout = _layout(data)
        if layout is None:
            return parse_store(data, "store")
        entries = [entry_of(json.loads(data[start:end])) for start, end in layout.spans]
        return Snapshot(
            layout.version,
            layout.hash,
            texts=SpanTexts(data, layout.spans),
            entries=entries,
        )


# -- writing ----------


def build_snapshot(
    version: int,
    wire: Iterable[Mapping[str, Any]],
    claims: Iterable[ModelClaim] | None = None,
) -> Snapshot:
    """A snapshot of ``wire`` with its hash computed.

    ``claims`` are the validated claims the wire objects render (validated
    here when not given).
    """
    wire_list = list(wire)
    built = tuple(claims) if claims is not None else tuple(map(claim_from_wire, wire_list))
    texts = WireTexts(wire_list)
    return Snapshot(version, claims_hash_of(texts), built, texts=texts)


def write_store(snapshot: Snapshot, handle: IO[bytes]) -> None:
    """Write the file: ``JSON.stringify(store, null, 2)`` plus a trailing newline.

    Streams claim by claim; a claim read from a file is copied as it stood.
    """
    if snapshot.extra:
        document = {
            "version": snapshot.version,
            "hash": snapshot.hash,
            "claims": list(snapshot.wire),
            **snapshot.extra,
        }
        handle.write((js_stringify(document, indent=2) + "\n").encode("utf-8", "surrogatepass"))
        return
    header = f'{{\n  "version": {snapshot.version},\n  "hash": "{snapshot.hash}",\n  "claims": ['
    handle.write(header.encode())
    texts = snapshot.texts
    if not len(texts):
        handle.write(b"]\n}\n")
        return
    for index in range(len(texts)):
        handle.write(b"\n    " if index == 0 else b",\n    ")
        handle.write(texts.text(index))
    handle.write(b"\n  ]\n}\n")


def render_store(snapshot: Snapshot) -> str:
    """The file text (see :func:`write_store`)."""
    buffer = io.BytesIO()
    write_store(snapshot, buffer)
    return buffer.getvalue().decode("utf-8", "surrogatepass")
