"""Compaction: superseded and archived claims leave the file, and stay in git history.

A store that gains a thousand claims a night never shrinks on its own, and
every command pays for every claim in the file. ``kb compact --keep-days N``
removes, in one commit (version + 1), each superseded or archived claim
whose last change is more than N days old, with the evidence files of the
reports no claim left in the file refers to.

"Last change" is read from git, not from the claim (a claim records when it
was observed, not when it was retired): a claim qualifies when it already
had its current status in the store as committed N days before ``as_of``
(the newest first-parent commit at or before that instant). So a claim
retired yesterday stays for N more days whatever its age, and the rule
needs the store in git, which is also where the removed claims live on:
``kb show ID`` finds them there (the commit carries one ``Kb-Compacted``
trailer per claim).

Evidence: a report's files (``<report>.jsonl`` and ``<report>.report.json``
in the evidence directory) go when no claim left in the file cites the
report, no open epoch (:mod:`kb.store.epochs`) pools it, and the report was
observed before the same cut-off, so a recent night that produced no claim
keeps its evidence for ``kb report``. Only files git tracks are removed.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from pathlib import Path

from kb.errors import ConfigError
from kb.schema import DEFAULT_ATTEMPTS
from kb.store.epochs import read_epochs
from kb.store.evidence import SUFFIXES, evidence_stem, report_observed_at
from kb.store.filestore import (
    Change,
    CommitContext,
    CommitResult,
    KnowledgeStore,
)
from kb.store.home import MANIFESTS_DIR
from kb.store.manifests import is_manifest_ref, load_manifest, manifest_path
from kb.store.ops import CompactClaim
from kb.store.snapshot import Snapshot
from kb.store.ttl import MIN_INSTANT, format_instant, stored_instant
from kb.store.validation import index_store, parse_store

TERMINAL = frozenset({"superseded", "archived"})
_DAY_MS = 86_400_000


@dataclass(frozen=True)
class CompactionPlan:
    """What one ``kb compact`` removes, and the store version the rule looked back to."""

    claim_ids: tuple[str, ...]
    evidence_files: tuple[Path, ...]
    cutoff: str
    """The instant ``as_of - keep_days`` (kb's instant form)."""

    def change(self, store_dir: Path) -> Change:
        """The commit: the claims out of the file, the evidence files out of the tree."""
        return Change(
            ops=tuple(CompactClaim(claim_id) for claim_id in self.claim_ids),
            deleted=tuple(os.path.relpath(path, store_dir) for path in self.evidence_files),
            note=(
                f"{len(self.evidence_files)} evidence files removed"
                if self.evidence_files
                else None
            ),
        )


def validate_keep_days(keep_days: object) -> int:
    """``keep_days`` must be a nonnegative integer (checked before anything is read)."""
    if isinstance(keep_days, bool) or not isinstance(keep_days, int) or keep_days < 0:
        raise ConfigError("--keep-days", f"must be a nonnegative integer, got {keep_days!r}")
    return keep_days


def plan_compaction(
    store: KnowledgeStore,
    snapshot: Snapshot,
    keep_days: int,
    as_of: int,
    evidence_dir: Path | None = None,
) -> CompactionPlan:
    """What to remove from ``snapshot`` (read under the store lock: the rebase loop calls this)."""
    keep_days = validate_keep_days(keep_days)
    git = store.git
    if git is None:
        raise ConfigError(
            str(store.path),
            "kb compact needs the store in a git work tree: compacted claims live on "
            "in its history, and the last change of each claim is read from there",
        )
    cutoff_ms = as_of - keep_days * _DAY_MS
    if cutoff_ms < MIN_INSTANT:
        raise ConfigError("--keep-days", f"{keep_days} days before --as-of is before the year 1")
    cutoff = format_instant(cutoff_ms)
    commit = git.store_commit_before(cutoff_ms // 1000)
    blob = git.blob_in(commit)
    if blob is None:
        return CompactionPlan((), (), cutoff)
    then = _entries_at(git.read_blob(blob), f"{commit}:{git.rel}")
    status_then = {entry.id: entry.status for entry in then.entries}
    removed = tuple(
        entry.id
        for entry in snapshot.entries
        if entry.status in TERMINAL and status_then.get(entry.id) == entry.status
    )
    gone = set(removed)
    cited: set[str] = set()
    for index, entry in enumerate(snapshot.entries):
        if entry.id not in gone:
            cited.update(
                str(item.get("reportId"))
                for item in snapshot.wire_at(index).get("evidence", [])
                if isinstance(item, dict) and item.get("reportId") is not None
            )
    manifests = {ref for ref in cited if is_manifest_ref(ref)}
    cited -= manifests
    cited.update(_manifest_nights(store, manifests, evidence_dir))
    # An open epoch pools its nights' evidence (claim or none): every night stays.
    cited.update(
        night.report_id
        for epoch in read_epochs(store.home.epochs_file).cells.values()
        for night in epoch.nights
    )
    stems = {evidence_stem(r) for r in cited}
    files = tuple(
        path
        for directory in store.home.evidence_dirs(evidence_dir)
        for path in (
            *_unreferenced_evidence(store, directory, stems, cutoff_ms),
            *_unreferenced_manifests(store, directory, manifests),
        )
    )
    return CompactionPlan(removed, files, cutoff)


def _manifest_nights(store: KnowledgeStore, refs: set[str], evidence_dir: Path | None) -> set[str]:
    """Every night the cited epoch manifests list (a manifest not found stops the compaction)."""
    nights: set[str] = set()
    for ref in sorted(refs):
        manifest = load_manifest(store.home, store.git, ref, evidence_dir)
        if manifest is None:
            raise ConfigError(
                "compact",
                f"the epoch manifest {ref} a claim cites is not in the evidence directory "
                "nor in git history: without it kb cannot tell which nights' evidence "
                "the claim rests on, so nothing is removed",
            )
        nights.update(manifest.reports)
    return nights


def _unreferenced_manifests(
    store: KnowledgeStore, directory: Path, cited: set[str]
) -> tuple[Path, ...]:
    """Tracked manifests no claim left in the file cites.

    A manifest has no age of its own: it is as old as the newest claim citing it.
    """
    git = store.git
    assert git is not None
    folder = directory / MANIFESTS_DIR
    rel_file = git.rel_of(folder / "_")
    if rel_file is None or not folder.is_dir():
        return ()
    keep = {manifest_path(directory, ref) for ref in cited}
    return tuple(
        path
        for rel in sorted(git.tracked_files(posixpath.dirname(rel_file)))
        if (path := git.top / rel).parent == folder and path.suffix == ".json" and path not in keep
    )


def _entries_at(data: bytes, source: str) -> Snapshot:
    """A committed version's claims (kb wrote and verified it; the full check is the fallback)."""
    try:
        return index_store(data)
    except (ValueError, KeyError, TypeError, AttributeError):
        return parse_store(data, source)


def _unreferenced_evidence(
    store: KnowledgeStore, directory: Path, cited_stems: set[str], cutoff_ms: int
) -> tuple[Path, ...]:
    git = store.git
    assert git is not None
    rel_file = git.rel_of(directory / "_")
    if rel_file is None or not directory.is_dir():
        return ()  # outside the work tree: not in history, so never removed
    tracked = {git.top / rel for rel in git.tracked_files(posixpath.dirname(rel_file) or ".")}
    by_stem: dict[str, list[Path]] = {}
    for path in sorted(tracked):
        if path.parent != directory:
            continue
        for suffix in SUFFIXES:
            if path.name.endswith(suffix):
                by_stem.setdefault(path.name[: -len(suffix)], []).append(path)
                break
    found: list[Path] = []
    for stem, paths in sorted(by_stem.items()):
        if stem in cited_stems:
            continue
        observed = _report_observed_ms(directory / f"{stem}.report.json")
        if observed is not None and observed < cutoff_ms:
            found += paths
    return tuple(found)


def _report_observed_ms(path: Path) -> int | None:
    """When the report was observed (``None``: unknown, so its files are kept)."""
    observed = report_observed_at(path)
    try:
        return stored_instant(observed) if observed is not None else None
    except ValueError:
        return None


def compact(
    store: KnowledgeStore,
    keep_days: int,
    as_of: int,
    committer: str,
    evidence_dir: Path | None = None,
    *,
    attempts: int = DEFAULT_ATTEMPTS,
    push: bool = False,
) -> tuple[CompactionPlan, CommitResult | None]:
    """Plan and commit the compaction through the rebase loop (``None``: nothing to remove)."""
    keep_days = validate_keep_days(keep_days)
    plans: list[CompactionPlan] = []

    def build(snapshot: Snapshot) -> Change:
        plan = plan_compaction(store, snapshot, keep_days, as_of, evidence_dir)
        plans.append(plan)
        return plan.change(store.path.parent)

    context = CommitContext(action="compact", committer=committer, label=f"--keep-days {keep_days}")
    result = store.commit_with_rebase(build, context, attempts=attempts, push=push)
    return plans[-1], result
