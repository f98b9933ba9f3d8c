"""Evidence from git: a claim's history, and integrity of every stored version.

Both read git through :class:`kb.store.git.GitStoreRepo` and never write.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kb.errors import ConfigError
from kb.store.diff import Side, StoreDiff, diff_snapshots
from kb.store.filestore import ARCHIVED_TRAILER, KnowledgeStore, canary_baselines_path
from kb.store.snapshot import EMPTY_SNAPSHOT, Snapshot, parse_store


@dataclass(frozen=True)
class ClaimEvent:
    """One git commit that changed a claim."""

    commit: str
    date: str
    subject: str
    change: str
    """``added``, ``status active → superseded``, ``edited`` …"""


def claim_history(store: KnowledgeStore, claim_id: str) -> list[ClaimEvent] | None:
    """Commits that added or changed ``claim_id``, oldest first (``None`` outside git)."""
    git = store.git
    if git is None:
        return None
    events = []
    previous: dict[str, Any] | None = None
    for commit in git.store_history():
        blob = git.blob_in(commit.oid)
        current = _find_claim(git.read_blob(blob), claim_id) if blob else None
        if current != previous:
            change = _describe(previous, current)
            if current is not None and current.get("status") == "archived" and "→" in change:
                reason = _archive_reason(commit.body, claim_id)
                change += f" ({reason})" if reason else ""
            elif current is not None and current.get("status") == "stale" and "→" in change:
                change += " (canary-drift)"
            events.append(ClaimEvent(commit.oid, commit.date, commit.subject, change))
        previous = current
    return events


def _archive_reason(body: str, claim_id: str) -> str | None:
    """The reason a commit's ``Kb-Archived`` trailer gives for ``claim_id``."""
    prefix = f"{ARCHIVED_TRAILER}: {claim_id} "
    for line in body.splitlines():
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    return None


def _find_claim(data: bytes, claim_id: str) -> dict[str, Any] | None:
    try:
        document = json.loads(data)
    except ValueError:
        return None
    for claim in document.get("claims", []) if isinstance(document, dict) else []:
        if isinstance(claim, dict) and claim.get("id") == claim_id:
            return claim
    return None


def _describe(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    if before is None:
        return "added" if after is not None else "unchanged"
    if after is None:
        return "removed"
    if before.get("status") != after.get("status"):
        return f"status {before.get('status')} → {after.get('status')}"
    return "edited"


def _read_fully(store: KnowledgeStore) -> Snapshot | None:
    """The store validated in full (never through the record of verified bytes)."""
    try:
        data = store.path.read_bytes()
    except FileNotFoundError:
        return None
    return parse_store(data, str(store.path))


@dataclass(frozen=True)
class VerifyReport:
    """What ``verify_store`` checked."""

    version: int
    claims: int
    history_checked: int
    """How many historical versions in git were parsed (0 outside git)."""
    warnings: tuple[str, ...] = ()
    """What the current file holds that rulvar accepts but kb would never write."""


def verify_store(store: KnowledgeStore) -> VerifyReport:
    """Check the store and every version of it in git; raise one ``ConfigError`` if any fail.

    Each historical version must parse and hash-check, and consecutive
    versions on the first-parent line must rise by exactly 1.
    """
    issues: list[str] = []
    try:
        current = _read_fully(store) or EMPTY_SNAPSHOT
    except ConfigError as exc:
        issues.extend(f"work tree: {issue}" for issue in exc.issues)
        current = None
    checked = 0
    git = store.git
    if git is not None:
        last_version: int | None = None
        for commit in git.store_history():
            short = commit.oid[:12]
            blob = git.blob_in(commit.oid)
            if blob is None:
                last_version = None
                continue
            checked += 1
            try:
                snapshot = parse_store(git.read_blob(blob), f"{short}:{git.rel}")
            except ConfigError as exc:
                issues.extend(f"commit {short}: {issue}" for issue in exc.issues)
                last_version = None
                continue
            if last_version is not None and snapshot.version != last_version + 1:
                issues.append(
                    f"commit {short}: version {snapshot.version} follows version "
                    f"{last_version} (must rise by exactly 1)"
                )
            last_version = snapshot.version
    issues.extend(_beside_issues(store))
    if issues:
        raise ConfigError(str(store.path), issues)
    assert current is not None
    return VerifyReport(current.version, len(current), checked, current.warnings)


def _beside_issues(store: KnowledgeStore) -> list[str]:
    """The canary baselines file beside the store must be one kb can read."""
    path = canary_baselines_path(store.path)
    if not path.exists():
        return []
    try:
        document = json.loads(path.read_text("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        return [f"{path.name}: not valid JSON: {exc}"]
    if not isinstance(document, dict) or not isinstance(document.get("subjects"), dict):
        return [f"{path.name}: not a canary baselines file (no subjects table)"]
    return []


def snapshot_at(store: KnowledgeStore, rev: str) -> tuple[Snapshot, Side, str]:
    """The store as commit ``rev`` holds it, with its side and the commit (read from git)."""
    git = store.git
    if git is None:
        raise ConfigError("diff", f"{store.path} is not in a git work tree; no revision {rev!r}")
    commit = git.resolve(rev)
    if commit is None:
        raise ConfigError("diff", f"no commit {rev!r}")
    blob = git.blob_in(commit)
    snapshot = (
        parse_store(git.read_blob(blob).decode("utf-8"), f"{rev}:{git.rel}")
        if blob
        else EMPTY_SNAPSHOT
    )
    return snapshot, Side(rev, snapshot.version, git.commit_seconds(commit) * 1000), commit


def diff_revisions(
    store: KnowledgeStore, rev_a: str | None, rev_b: str | None, as_of: int
) -> StoreDiff:
    """``kb diff``: ``HEAD~1`` vs ``HEAD`` by default; with one revision, it vs the work tree.

    Archive reasons come from the ``Kb-Archived`` trailers of the commits in between.
    """
    before, before_side, commit_a = snapshot_at(store, rev_a or "HEAD~1")
    if rev_a is not None and rev_b is None:
        after = _read_fully(store) or EMPTY_SNAPSHOT
        after_side = Side("work tree", after.version, as_of)
        commit_b = "HEAD"
    else:
        after, after_side, commit_b = snapshot_at(store, rev_b or "HEAD")
    git = store.git
    assert git is not None
    reasons = {}
    for value in git.trailer_values(ARCHIVED_TRAILER, commit_a, commit_b):
        claim_id, _, reason = value.rpartition(" ")
        reasons[claim_id] = reason
    return diff_snapshots(before, after, before_side, after_side, reasons)
