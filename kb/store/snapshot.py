"""Reading and writing the store file: one immutable :class:`Snapshot` per version.

The read boundary refuses anything rulvar could not have written — not JSON,
a bad version, a malformed hash, any malformed claim, duplicate ids, or a
hash that does not match the claims — with one :class:`ConfigError` that
lists every issue with its path. The snapshot keeps each claim twice: the
validated :class:`ModelClaim` for logic, and the wire object exactly as read
(key order included) so that rewriting an untouched claim changes no byte of
it, as rulvar's own writer does.
"""

from __future__ import annotations

import gc
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kb.errors import ConfigError
from kb.schema import validation_issues
from kb.store.canonical import (
    canonical_json,
    claims_hash,
    fast_canonical_json,
    js_stringify,
    sha256_hex,
)
from kb.store.models import ModelClaim, claim_from_wire

EMPTY_HASH = "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"
_HASH_FORMAT = re.compile(r"[0-9a-f]{64}")
# A surrogate escape (\udXXX) in the text: a lone surrogate may follow, which the C
# encoder would print raw. Conservative: escaped pairs also take the slow path.
_NOT_PLAIN_TEXT = re.compile(r"\\u[dD][89a-fA-F]")
_MAX_SAFE = 2**53


@dataclass(frozen=True)
class Snapshot:
    """One version of the store: what a reader sees and what a commit replaces."""

    version: int
    hash: str
    claims: tuple[ModelClaim, ...]
    wire: tuple[Mapping[str, Any], ...] = field(repr=False)
    """Each claim's JSON object as stored (same order as ``claims``)."""
    js_plain: bool = field(default=False, repr=False, compare=False)
    """The wire data prints the same through Python's C encoder as through JavaScript."""

    @cached_property
    def by_id(self) -> dict[str, ModelClaim]:
        """Claims indexed by id."""
        return {claim.id: claim for claim in self.claims}

    def get(self, claim_id: str) -> ModelClaim | None:
        """The claim with this id, or ``None``."""
        return self.by_id.get(claim_id)


EMPTY_SNAPSHOT = Snapshot(version=0, hash=EMPTY_HASH, claims=(), wire=(), js_plain=True)


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


def parse_json(text: str) -> tuple[Any, bool]:
    """Parse like ``JSON.parse``; also say whether the data is JS-plain (see canonical)."""
    watch = _NumberWatch()
    data = json.loads(
        text,
        parse_float=watch.parse_float,
        parse_int=watch.parse_int,
        parse_constant=_refuse_constant,
    )
    plain = watch.js_plain and _NOT_PLAIN_TEXT.search(text) is None
    return data, plain


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


def parse_store(text: str, source: str) -> Snapshot:
    """Validate a store file's text; raise one ``ConfigError`` listing every issue."""
    with _collector_paused():
        return _parse_store(text, source)


_CONFLICT = re.compile(r"^(<{7}|>{7})( |$)", re.MULTILINE)


def conflict_lines(text: str) -> list[int]:
    """Line numbers of git conflict markers (``<<<<<<<`` / ``>>>>>>>``) in ``text``."""
    return [text.count("\n", 0, match.start()) + 1 for match in _CONFLICT.finditer(text)]


def _parse_store(text: str, source: str) -> Snapshot:
    try:
        data, plain = parse_json(text)
    except (ValueError, RecursionError) as exc:
        markers = conflict_lines(text)
        if markers:
            raise ConfigError(
                source,
                f"unresolved git merge conflict (markers at lines {markers[0]}-{markers[-1]}); "
                "`kb merge-driver --install` lets git merge stores by re-applying the ops, "
                "then redo the merge (git merge --abort; git merge ...), or take one side "
                f"(git checkout --ours {Path(source).name}) and re-run what the other did",
            ) from None
        raise ConfigError(source, f"not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(source, f"top level must be an object, got {type(data).__name__}")
    issues: list[str] = []
    for key in data:
        if key not in ("version", "hash", "claims"):
            issues.append(f"{key}: unknown top-level key")
    version = data.get("version")
    if "version" not in data:
        issues.append("version: missing")
    elif isinstance(version, bool) or not isinstance(version, int) or version < 0:
        issues.append(f"version: must be a nonnegative integer, got {version!r}")
    stored_hash = data.get("hash")
    if "hash" not in data:
        issues.append("hash: missing")
    elif not isinstance(stored_hash, str) or not _HASH_FORMAT.fullmatch(stored_hash):
        issues.append(f"hash: must be 64 lowercase hex characters, got {stored_hash!r}")
    raw_claims = data.get("claims")
    claims: list[ModelClaim] = []
    if "claims" not in data:
        issues.append("claims: missing")
    elif not isinstance(raw_claims, list):
        issues.append(f"claims: must be an array, got {type(raw_claims).__name__}")
    else:
        seen: dict[str, int] = {}
        for index, raw in enumerate(raw_claims):
            raw_id = raw.get("id") if isinstance(raw, dict) else None
            if isinstance(raw_id, str) and raw_id:
                if raw_id in seen:
                    issues.append(
                        f"claims[{index}].id: {raw_id!r} duplicates claims[{seen[raw_id]}].id"
                    )
                else:
                    seen[raw_id] = index
            try:
                claims.append(claim_from_wire(raw))
            except ValidationError as exc:
                issues.extend(validation_issues(f"claims[{index}]", exc))
    if not issues:
        assert isinstance(raw_claims, list) and isinstance(stored_hash, str)
        computed = sha256_hex(
            fast_canonical_json(raw_claims) if plain else canonical_json(raw_claims)
        )
        if computed != stored_hash:
            issues.append(
                f"hash: does not match the claims (stored {stored_hash}, computed {computed}); "
                "the file was edited by hand: restore it (git restore FILE) and change claims "
                "through kb (note, archive, deprecate)"
            )
    if issues:
        raise ConfigError(source, issues)
    assert isinstance(version, int) and isinstance(stored_hash, str)
    return Snapshot(
        version=version,
        hash=stored_hash,
        claims=tuple(claims),
        wire=tuple(raw_claims or ()),
        js_plain=plain,
    )


def parse_verified_store(text: str) -> Snapshot:
    """A snapshot of text that passed :func:`parse_store` before (see ``kb.store.verified``).

    Parses with the same number semantics, but builds the claims without
    re-validating them.
    """
    with _collector_paused():
        data, plain = parse_json(text)
        wire = tuple(data["claims"])
        claims = tuple(
            ModelClaim.model_construct(
                **{_FIELD_OF_ALIAS[key]: value for key, value in raw.items()}
            )
            for raw in wire
        )
        return Snapshot(data["version"], data["hash"], claims, wire, js_plain=plain)


_FIELD_OF_ALIAS = {(info.alias or name): name for name, info in ModelClaim.model_fields.items()}


def build_snapshot(
    version: int,
    wire: Iterable[Mapping[str, Any]],
    claims: Iterable[ModelClaim] | None = None,
) -> Snapshot:
    """A snapshot of ``wire`` with its hash computed.

    ``claims`` are the validated claims the wire objects render (validated
    here when not given).
    """
    wire_tuple = tuple(wire)
    built = tuple(claims) if claims is not None else tuple(map(claim_from_wire, wire_tuple))
    return Snapshot(version=version, hash=claims_hash(wire_tuple), claims=built, wire=wire_tuple)


def render_store(snapshot: Snapshot) -> str:
    """The file text: ``JSON.stringify(store, null, 2)`` plus a trailing newline."""
    document = {"version": snapshot.version, "hash": snapshot.hash, "claims": list(snapshot.wire)}
    return js_stringify(document, indent=2) + "\n"
