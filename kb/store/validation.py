"""Reading a store file: refuse exactly what rulvar refuses, warn about the rest.

What is refused: not JSON, a bad version, a malformed hash, a claim without
the fields rulvar checks (id, subject with a ``provider:model``, task class,
the enums, a non-empty evidence list, readable instants, an author), or a
hash that does not match the claims — one :class:`ConfigError` listing
every issue with its path. What rulvar accepts but kb would never write
(unknown keys, a pass rate above 1, an empty effort, a long statement,
duplicate ids, an instant in a V8-only form …) is read, and reported as
``warnings``. A file in the canonical layout is validated span by span,
1,000 claims per C call, and hashed as it streams; any other layout is read
whole.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kb.errors import ConfigError
from kb.schema import validation_issues
from kb.store.canonical import fast_canonical_json, sha256_hex, utf8_as_js
from kb.store.claim_texts import RUN_SIZE, HashedPrefix, SpanTexts, WireTexts, parse_run
from kb.store.jsjson import jcs_of, parse_json
from kb.store.layout import StoreLayout, conflict_advice, conflict_lines, scan_layout
from kb.store.models import LenientClaim, ModelClaim, validate_stored
from kb.store.snapshot import ClaimEntry, Snapshot, collector_paused, entry_of
from kb.store.ttl import read_stored_instant

_HASH_FORMAT = re.compile(r"[0-9a-f]{64}")
_NOT_JSON = object()


def parse_store(data: str | bytes, source: str) -> Snapshot:
    """Validate a store file; raise one ``ConfigError`` listing every issue."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    with collector_paused():
        layout = scan_layout(raw)
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
            # Only here can an instant be in a form kb does not write: the strict
            # model reads each with parse_instant, which is kb's form.
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


def _parse_spans(raw: bytes, layout: StoreLayout, source: str) -> Snapshot:
    check = _ClaimCheck()
    entries: list[ClaimEntry] = []
    digest = hashlib.sha256(b"[")
    prefixes: list[HashedPrefix] = []  # where a commit's hash resumes (claim_texts)
    separator = b""
    spans = layout.spans
    for first in range(0, len(spans), RUN_SIZE):
        run_spans = spans[first : first + RUN_SIZE]
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
            pieces = [jcs_of(*parse_json(raw[start:end])) for start, end in run_spans]
        for piece in pieces:
            digest.update(separator)
            digest.update(utf8_as_js(piece))
            separator = b","
        prefixes.append(HashedPrefix(first + len(run_spans), digest.copy()))
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
        texts=SpanTexts(raw, layout.spans, prefixes),
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
    return sha256_hex(jcs_of(claims, plain))


def index_store(data: bytes) -> Snapshot:
    """A snapshot of bytes that passed :func:`parse_store` before (``kb.store.verified``).

    Locates and indexes the claims without re-validating or re-hashing them.
    """
    with collector_paused():
        layout = scan_layout(data)
        if layout is None:
            return parse_store(data, "store")
        entries = [entry_of(json.loads(data[start:end])) for start, end in layout.spans]
        return Snapshot(
            layout.version,
            layout.hash,
            texts=SpanTexts(data, layout.spans),
            entries=entries,
        )
