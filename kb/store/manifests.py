"""Epoch manifests: how a claim cites every night of its epoch in a bounded size (SPEC 14.3).

A claim of a cell whose epoch pooled several nights rests on all of them. In
v4 it listed one ``{kind: "eval", reportId, caseIds}`` per night, so a claim
grew with its epoch and the store with the square of the nights (a steady
cell's claim is re-measured, and rewritten, every night). From v5 such a
claim cites two entries, whatever the epoch's length:

* ``{kind: "eval", reportId: "epoch:<24 hex>", caseIds: []}`` — the
  **manifest**, a committed file ``<evidence dir>/manifests/<24 hex>.json``
  that lists the epoch's nights and the cases each ran, named by the sha256
  of its bytes (so it cannot change under the claim, and two writers who
  pooled the same nights write the same file);
* ``{kind: "eval", reportId: <tonight's report>, caseIds: [tonight's
  cases]}`` — the night that made the claim, last (as before).

A one-night epoch (and every claim without an epoch, ``gate = "point"``)
cites its night directly, byte for byte as rulvar writes it. rulvar reads
both shapes: it checks only that a claim has evidence, and an empty
``caseIds`` is valid (``tests/test_manifests.py`` reads a kb store with
rulvar's own code). ``kb show --evidence`` expands the manifest into every
night and run; ``kb compact`` keeps the manifests the claims left in the
file cite.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from kb.errors import ConfigError
from kb.schema import validation_issues
from kb.sidefile import SideFormat
from kb.store.epochs import EpochNight, EpochStart
from kb.store.home import MANIFESTS_DIR
from kb.store.wire import WireModel

if TYPE_CHECKING:
    from kb.store.git import GitStoreRepo
    from kb.store.home import StoreHome
    from kb.store.models import ModelClaim

MANIFEST = SideFormat("epoch manifest")
MANIFEST_PREFIX = "epoch:"
_REF = re.compile(r"epoch:([0-9a-f]{24})")


class EpochManifest(WireModel):
    """The nights one cell's epoch pooled when a claim was made of it."""

    format: int = MANIFEST.current
    cell: str
    """``model[@effort]|taskClass``."""
    suite: str
    """The suite fingerprint the epoch measured."""
    start: EpochStart
    nights: tuple[EpochNight, ...]

    def render(self) -> bytes:
        """Deterministic JSON (two-space indent, trailing newline): the bytes the ref names."""
        from kb.store.canonical import js_stringify

        return (js_stringify(self.to_wire(), indent=2) + "\n").encode("utf-8")

    @property
    def ref(self) -> str:
        """``epoch:<first 24 hex of the sha256 of the rendered file>``."""
        return MANIFEST_PREFIX + hashlib.sha256(self.render()).hexdigest()[:24]

    @property
    def reports(self) -> tuple[str, ...]:
        """The nights' report ids, in the epoch's order."""
        return tuple(night.report_id for night in self.nights)


def is_manifest_ref(report_id: str) -> bool:
    """Whether an eval evidence entry's ``reportId`` names a manifest, not a night."""
    return _REF.fullmatch(report_id) is not None


def manifest_path(directory: Path, ref: str) -> Path:
    """Where the manifest ``ref`` lives in the evidence ``directory``."""
    found = _REF.fullmatch(ref)
    if found is None:
        raise ConfigError("evidence", f"{ref!r} is not an epoch manifest (epoch:<24 hex>)")
    return directory / MANIFESTS_DIR / f"{found.group(1)}.json"


def parse_manifest(data: bytes, source: str, ref: str | None = None) -> EpochManifest:
    """A manifest's bytes; ``ref`` (when given) must be the sha256 they carry."""
    value: Any = MANIFEST.load(data, source)
    try:
        manifest = EpochManifest.model_validate(value)
    except ValidationError as exc:
        raise ConfigError(source, validation_issues("", exc)) from None
    if ref is not None and MANIFEST_PREFIX + hashlib.sha256(data).hexdigest()[:24] != ref:
        raise ConfigError(source, f"its bytes are not {ref} (edited after it was committed?)")
    return manifest


@dataclass(frozen=True)
class PooledNight:
    """One night a claim rests on: its report and the cases it ran (``None``: not known)."""

    report_id: str
    cases: tuple[str, ...] | None


@dataclass(frozen=True)
class ClaimEvidence:
    """Every night a claim rests on, the manifest expanded (``missing``: manifests not found)."""

    nights: tuple[PooledNight, ...]
    missing: tuple[str, ...] = ()

    @property
    def reports(self) -> tuple[str, ...]:
        """The nights' report ids."""
        return tuple(night.report_id for night in self.nights)

    @property
    def cases(self) -> frozenset[str]:
        """Every case a known night ran."""
        return frozenset(c for night in self.nights for c in night.cases or ())


def load_manifest(
    home: StoreHome, git: GitStoreRepo | None, ref: str, directory: Path | None = None
) -> EpochManifest | None:
    """The manifest ``ref`` from the evidence directories, else git history (``None``: nowhere)."""
    places = [manifest_path(where, ref) for where in home.evidence_dirs(directory)]
    for path in places:
        if path.is_file():
            return parse_manifest(path.read_bytes(), str(path), ref)
    if git is None:
        return None
    for path in places:
        found = git.last_version_of(path)
        if found is not None:
            commit, data = found
            return parse_manifest(data, f"{commit[:12]}:{path.name}", ref)
    return None


def claim_evidence(
    home: StoreHome, git: GitStoreRepo | None, claim: ModelClaim, directory: Path | None = None
) -> ClaimEvidence:
    """Every night ``claim`` rests on, in the order it cites them (each night once).

    ``home`` and ``git`` are the store's (``store.home``, ``store.git``; no git:
    the evidence directories only).
    """
    nights: dict[str, PooledNight] = {}
    missing: list[str] = []
    for entry in claim.evidence:
        if entry["kind"] != "eval":
            continue
        report_id = entry["reportId"]
        if not is_manifest_ref(report_id):
            nights.setdefault(report_id, PooledNight(report_id, tuple(entry["caseIds"])))
            continue
        manifest = load_manifest(home, git, report_id, directory)
        if manifest is None:
            missing.append(report_id)
            continue
        for night in manifest.nights:
            nights.setdefault(night.report_id, PooledNight(night.report_id, night.cases))
    return ClaimEvidence(tuple(nights.values()), tuple(missing))
