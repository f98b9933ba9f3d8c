"""Evidence from git: a claim's history, and integrity of every stored version.

Both read git through :class:`kb.store.git.GitStoreRepo` and never write.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kb.errors import ConfigError
from kb.store.canonical import js_stringify
from kb.store.diff import Side, StoreDiff, diff_snapshots
from kb.store.filestore import (
    ARCHIVED_TRAILER,
    COMPACTED_TRAILER,
    REPORT_TRAILER,
    STALED_TRAILER,
    KnowledgeStore,
)
from kb.store.layout import conflict_lines
from kb.store.models import ModelClaim
from kb.store.snapshot import EMPTY_SNAPSHOT, Snapshot, construct_claim
from kb.store.validation import parse_store
from kb.store.verify_note import VerifiedThrough, epoch_drops

if TYPE_CHECKING:
    from kb.store.git import GitStoreRepo, StoreCommit


@dataclass(frozen=True)
class ClaimEvent:
    """One git commit that changed a claim."""

    commit: str
    date: str
    subject: str
    change: str
    """``added``, ``status active → superseded``, ``edited`` …"""


def claim_history(store: KnowledgeStore, claim_id: str) -> list[ClaimEvent] | None:
    """Commits that added, changed or compacted ``claim_id``, oldest first (``None``: no git).

    A claim's life only moves forward (absent, active, stale, superseded or
    archived, compacted), so the commits where it changed are found by
    binary search over the store's first-parent history: a few versions are
    read, not all of them, which keeps ``kb show`` fast after a year of
    nightly commits.
    """
    git = store.git
    if git is None:
        return None
    commits = git.store_history()
    if not commits:
        return []
    probe = _ClaimProbe(store, commits, claim_id)
    end = len(commits) - 1
    compacted_at: int | None = None
    if probe.state(end) is None:
        compacted_at = probe.compaction_index()
        if compacted_at is None:
            return []  # never in the file (or removed by hand, which kb verify reports)
        end = compacted_at - 1
    if end < 0 or probe.state(end) is None:
        return probe.scan()  # not kb's doing: read every version
    first = _first_true(0, end, lambda i: probe.state(i) is not None)
    events = [probe.event(first, None)]
    at = first
    while True:
        nxt = _first_true(at + 1, end + 1, functools.partial(probe.moved_past, _rank(probe, at)))
        if nxt > end:
            break
        events.append(probe.event(nxt, probe.state(at)))
        at = nxt
    if compacted_at is not None:
        commit = commits[compacted_at]
        blob = git.blob_in(commit.oid)
        version = _version_of(git.read_blob(blob)) if blob else None
        where = f" at store v{version}" if version is not None else ""
        events.append(
            ClaimEvent(
                commit.oid, commit.date, commit.subject, f"compacted{where} (in git history)"
            )
        )
    return events


_RANK = {"active": 1, "stale": 2, "superseded": 3, "archived": 3}


def _rank(probe: _ClaimProbe, index: int) -> int:
    return _RANK.get(str(probe.status(index)), 0)


def _first_true(low: int, high: int, test: Callable[[int], bool]) -> int:
    """The first index in ``[low, high)`` where the monotone ``test`` holds (``high``: none)."""
    while low < high:
        middle = (low + high) // 2
        if test(middle):
            high = middle
        else:
            low = middle + 1
    return low


class _ClaimProbe:
    """One claim as each version of the store held it (each version read at most once)."""

    def __init__(self, store: KnowledgeStore, commits: Sequence[StoreCommit], claim_id: str):
        self._git = store.git
        self._commits = commits
        self._claim_id = claim_id
        self._needle = b'\n      "id": ' + js_stringify(claim_id).encode("utf-8", "surrogatepass")
        self._states: dict[int, dict[str, Any] | None] = {}

    def state(self, index: int) -> dict[str, Any] | None:
        if index not in self._states:
            assert self._git is not None
            blob = self._git.blob_in(self._commits[index].oid)
            data = self._git.read_blob(blob) if blob else b""
            self._states[index] = _claim_in(data, self._needle, self._claim_id)
        return self._states[index]

    def status(self, index: int) -> object:
        found = self.state(index)
        return found.get("status") if found is not None else "compacted"

    def moved_past(self, rank: int, index: int) -> bool:
        """Whether the claim's status at ``index`` is further along its life than ``rank``."""
        return _RANK.get(str(self.status(index)), 0) > rank

    def event(self, index: int, before: dict[str, Any] | None) -> ClaimEvent:
        commit = self._commits[index]
        current = self.state(index)
        change = _describe(before, current)
        if current is not None and current.get("status") == "archived" and "→" in change:
            reason = _archive_reason(commit.body, self._claim_id)
            change += f" ({reason})" if reason else ""
        elif current is not None and current.get("status") == "stale" and "→" in change:
            change += " (canary-drift)"
        if (
            current is not None
            and current.get("status") != "stale"
            and "active → " in change
            and _trailer_for(commit.body, STALED_TRAILER, self._claim_id) is not None
        ):
            # the commit flagged the drift and re-measured the claim: both steps are told
            change = change.replace("active → ", "active → stale (canary-drift) → ", 1)
        return ClaimEvent(commit.oid, commit.date, commit.subject, change)

    def compaction_index(self) -> int | None:
        """Where ``kb compact`` removed the claim (its ``Kb-Compacted`` trailer)."""
        assert self._git is not None
        found = self._git.commits_with_trailer(COMPACTED_TRAILER, self._claim_id)
        positions = {commit.oid: i for i, commit in enumerate(self._commits)}
        for commit in found:
            if commit.oid in positions:
                return positions[commit.oid]
        return None

    def scan(self) -> list[ClaimEvent]:
        events = []
        previous: dict[str, Any] | None = None
        for index in range(len(self._commits)):
            current = self.state(index)
            if current != previous:
                events.append(self.event(index, previous))
            previous = current
        return events


def compacted_claim(store: KnowledgeStore, claim_id: str) -> tuple[ModelClaim, ClaimEvent] | None:
    """A claim ``kb compact`` removed: as the file last held it, and the compaction commit."""
    history = claim_history(store, claim_id)
    if not history or not history[-1].change.startswith("compacted"):
        return None
    git = store.git
    assert git is not None
    parent = git.resolve(f"{history[-1].commit}^1")
    blob = git.blob_in(parent)
    needle = b'\n      "id": ' + js_stringify(claim_id).encode("utf-8", "surrogatepass")
    wire = _claim_in(git.read_blob(blob), needle, claim_id) if blob else None
    if wire is None:
        return None
    return construct_claim(wire), history[-1]


def _claim_in(data: bytes, needle: bytes, claim_id: str) -> dict[str, Any] | None:
    """The claim ``claim_id`` in a store file's bytes (found by its id line when it can be)."""
    at = data.find(needle)
    if at >= 0:
        start = data.rfind(b"\n    {\n", 0, at + 1)
        end = data.find(b"\n    }", at)
        if start >= 0 and end >= 0:
            try:
                found = json.loads(data[start + 5 : end + 6])
            except ValueError:
                found = None
            if isinstance(found, dict) and found.get("id") == claim_id:
                return found
    return _find_claim(data, claim_id) if b'"id"' in data else None


def _version_of(data: bytes) -> int | None:
    found = re.match(rb'\{\s*"version":\s*([0-9]+)', data)
    return int(found.group(1)) if found else None


def archive_reasons(store: KnowledgeStore) -> dict[str, str]:
    """Claim id → the reason its archive gave (``Kb-Archived``), from the store's history.

    Empty outside git: the reason is a trailer of the commit, not a claim field.
    """
    if store.git is None:
        return {}
    # newest first in the log: where two branches archived one claim, the later word counts
    return dict(reversed(claim_values(store.git.store_trailer_values(ARCHIVED_TRAILER))))


def claim_values(trailers: Sequence[str]) -> list[tuple[str, str]]:
    """``Kb-Archived``/``Kb-Staled`` trailer values (``<claim id> <reason>``) as pairs."""
    pairs = [value.rpartition(" ") for value in trailers]
    return [(claim_id, reason) for claim_id, _, reason in pairs if claim_id]


def _archive_reason(body: str, claim_id: str) -> str | None:
    """The reason a commit's ``Kb-Archived`` trailer gives for ``claim_id``."""
    return _trailer_for(body, ARCHIVED_TRAILER, claim_id)


def _trailer_for(body: str, trailer: str, claim_id: str) -> str | None:
    """The value after ``claim_id`` in a commit's ``trailer: <claim id> <value>`` line."""
    prefix = f"{trailer}: {claim_id} "
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
    """The store validated in full (never through the record of verified bytes).

    Refused, like every read, when git holds it unmerged or ahead of the file.
    """
    from kb.store.git import read_guard_issue

    try:
        data = store.path.read_bytes()
    except FileNotFoundError:
        return None
    snapshot = parse_store(data, str(store.path))
    issue = read_guard_issue(store.path, snapshot.version)
    if issue is not None:
        raise ConfigError(str(store.path), issue)
    return snapshot


@dataclass(frozen=True)
class VerifyReport:
    """What ``verify_store`` checked."""

    version: int
    claims: int
    history_checked: int
    """How many historical versions in git were parsed (0 outside git)."""
    warnings: tuple[str, ...] = ()
    """What the current file holds that rulvar accepts but kb would never write."""
    since: str | None = None
    """The commit an earlier ``kb verify`` checked through (``None``: every version was read)."""


def _verified_through(
    git: GitStoreRepo | None, full: bool, warnings: list[str]
) -> VerifiedThrough | None:
    """Where an earlier verify checked through, when it is still in ``HEAD``'s history."""
    through = None if git is None or full else VerifiedThrough.read(git)
    if git is not None and through is not None and not git.is_ancestor(through.commit, "HEAD"):
        warnings.append(
            f"the commit the last kb verify checked through ({through.commit[:12]}) is no "
            "longer in HEAD's history (rewritten?): every version was checked"
        )
        return None
    return through


def verify_store(store: KnowledgeStore, *, full: bool = False) -> VerifyReport:
    """Check the store and its versions in git; raise one ``ConfigError`` if any fail.

    Each historical version must parse and hash-check, and consecutive
    versions on the first-parent line must rise by exactly 1. Incremental
    (SPEC 14.3): after a verify that passed, a note under ``.git`` says the
    commit it checked through, and the next one reads only the commits after
    it (when that commit is still in ``HEAD``'s history; else everything).
    ``full`` reads every version whatever the note says (``kb verify --all``).
    The work tree's store, its neighbours and an interrupted commit are
    checked every time.
    """
    issues: list[str] = []
    try:
        current = _read_fully(store) or EMPTY_SNAPSHOT
    except ConfigError as exc:
        issues.extend(f"work tree: {issue}" for issue in exc.issues)
        current = None
    checked = 0
    warnings: list[str] = []
    git = store.git
    through = _verified_through(git, full, warnings)
    since = through.commit if through is not None else None
    last = through.version if through is not None else None
    if git is not None:
        compacted = set(git.trailer_values(COMPACTED_TRAILER, None, "HEAD"))
        checked, last = _history_issues(git, current, compacted, issues, warnings, since, last)
        # Every merge, including one that kept a side's store as it was (git lists it under
        # no store change): did it drop claims a branch had?
        for commit in git.merges(since):
            blob = git.blob_in(commit.oid)
            if blob is None:
                continue
            try:
                merged = parse_store(git.read_blob(blob), f"{commit.oid[:12]}:{git.rel}")
            except ConfigError:
                continue  # told above, with the version it holds
            lost, redone = _dropped_by_merge(git, commit, merged, current, compacted)
            issues += lost
            warnings += redone
    issues.extend(_beside_issues(store))
    if git is not None:
        issues.extend(epoch_drops(git, git.rel_of(store.home.epochs_file), since))
    pending = store.pending_commit()
    if pending is not None:
        issues.append(pending)
    if issues:
        raise ConfigError(str(store.path), issues)
    assert current is not None
    head = git.head()[1] if git is not None else None
    if git is not None and head is not None:
        VerifiedThrough(head, last).write(git)
    return VerifyReport(
        current.version, len(current), checked, (*current.warnings, *warnings), since
    )


def _history_issues(
    git: GitStoreRepo,
    current: Snapshot | None,
    compacted: set[str],
    issues: list[str],
    warnings: list[str],
    since: str | None = None,
    last_version: int | None = None,
) -> tuple[int, int | None]:
    """Every store version on the first-parent line: it parses, versions rise by one.

    ``since``: only the versions after that commit, whose store was at
    ``last_version``. Adds what it finds to ``issues`` and ``warnings``;
    returns how many versions it read and the last one's version.
    """
    checked = 0
    for commit in git.store_history(since):
        short = commit.oid[:12]
        blob = git.blob_in(commit.oid)
        if blob is None:
            last_version = None
            continue
        checked += 1
        data = git.read_blob(blob)
        try:
            snapshot = parse_store(data, f"{short}:{git.rel}")
        except ConfigError as exc:
            if conflict_lines(data.decode("utf-8", "replace")):
                missing = _missing_from(git, commit.parents, set(), current, compacted)
                if current is not None and not missing:
                    warnings.append(
                        f"commit {short}: a store with git conflict markers was committed; "
                        "the store was made whole since and holds every claim of both sides"
                    )
                else:
                    issues.append(_committed_conflict(short, git.rel, missing))
            else:
                issues.extend(f"commit {short}: {issue}" for issue in exc.issues)
            last_version = None
            continue
        if len(commit.parents) > 1:
            issues += _merge_issues(git, commit, snapshot.version)
        elif last_version is not None and snapshot.version != last_version + 1:
            issues.append(
                f"commit {short}: version {snapshot.version} follows version "
                f"{last_version} (must rise by exactly 1)"
            )
        last_version = snapshot.version
    return checked, last_version


def _committed_conflict(short: str, rel: str, missing: Sequence[str]) -> str:
    shown = ", ".join(repr(i) for i in missing[:3]) + (" …" if len(missing) > 3 else "")
    lost = f"; {len(missing)} claims of its sides are not in the store ({shown})" if missing else ""
    return (
        f"commit {short}: a store with git conflict markers was committed (a merge kb's driver "
        f"could not merge){lost}: make the work-tree store whole again (git checkout "
        f"{short}^1 -- {rel}), re-add each missing claim under its id (kb note --id ID …; kb "
        "show ID reads it from history) and commit"
    )


def _missing_from(
    git: GitStoreRepo,
    parents: Sequence[str],
    present: set[str],
    current: Snapshot | None,
    compacted: set[str],
) -> list[str]:
    """Claims the ``parents`` had that are not in ``present``, compacted or ``current``.

    ``current`` is the store now (``None``: not checked). Sorted.
    """
    missing: set[str] = set()
    for parent in parents:
        blob = git.blob_in(parent)
        if blob is None:
            continue
        try:
            side = parse_store(git.read_blob(blob), f"{parent[:12]}:{git.rel}")
        except ConfigError:
            continue  # an unreadable side is told where it was committed
        missing |= {i for i in side.index if i not in present and i not in compacted}
    return sorted(i for i in missing if current is None or not current.has(i))


def _dropped_by_merge(
    git: GitStoreRepo,
    commit: StoreCommit,
    merged: Snapshot,
    current: Snapshot | None,
    compacted: set[str],
) -> tuple[list[str], list[str]]:
    """Claims a parent had that the merge left out (not compacted): lost, or since redone.

    A merge that kept one side's store as it was (a driver that did not run, or
    ``git checkout --ours``) drops every claim the other side added; it is an
    issue while any of them is still missing from the store, a warning once
    they are all back.
    """
    present = set(merged.index)
    dropped = _missing_from(git, commit.parents, present, None, compacted)
    if not dropped:
        return [], []
    still = [i for i in dropped if current is None or not current.has(i)]
    shown = ", ".join(repr(i) for i in dropped[:3]) + (" …" if len(dropped) > 3 else "")
    line = (
        f"commit {commit.oid[:12]}: the merge dropped {len(dropped)} claim"
        f"{'s' if len(dropped) != 1 else ''} a branch had ({shown})"
    )
    if not still:
        return [], [f"{line}; they were redone since"]
    return [
        f"{line}: re-add each under its id (kb note --id ID …; kb show ID reads it from "
        "history), or merge again with kb's driver (kb merge-driver --install)"
    ], []


def _merge_issues(git: GitStoreRepo, commit: StoreCommit, version: int) -> list[str]:
    """A merge of two stores must be newer than each (kb's merge driver: max + 1)."""
    issues = []
    merged = git.blob_in(commit.oid)
    for parent in commit.parents:
        blob = git.blob_in(parent)
        if blob is None or blob == merged:
            continue  # that side's store taken as it was (the other never changed it)
        theirs = _version_of(git.read_blob(blob))
        if theirs is not None and version <= theirs:
            issues.append(
                f"commit {commit.oid[:12]}: merge at version {version} is not above parent "
                f"{parent[:12]} at version {theirs} (kb merge-driver --install merges stores)"
            )
    return issues


def _beside_issues(store: KnowledgeStore) -> list[str]:
    """The settings, epochs, labels and canary baselines files beside the store: readable."""
    from kb.store.epochs import read_epochs
    from kb.store.home import read_settings
    from kb.store.labels import read_labels

    try:
        read_settings(store.home.settings_file)
    except ConfigError as exc:
        return [str(exc)]
    try:
        read_epochs(store.home.epochs_file)
    except ConfigError as exc:
        return [f"{store.home.epochs_file.name}: {issue}" for issue in exc.issues]
    try:
        read_labels(store.home.labels_file)
    except ConfigError as exc:
        return [f"{store.home.labels_file.name}: {issue}" for issue in exc.issues]
    path = store.home.canary_baselines
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
    night = git.newest_trailer(REPORT_TRAILER, commit)
    side = Side(rev, snapshot.version, git.commit_seconds(commit) * 1000, night)
    return snapshot, side, commit


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
    if commit_b != "HEAD" and commit_a != commit_b and git.is_ancestor(commit_b, commit_a):
        # read the other way round, every claim added since would look compacted away
        raise ConfigError(
            "diff",
            f"{rev_b} is older than {rev_a or 'HEAD~1'}: give the earlier revision first "
            f"(kb diff {rev_b} {rev_a or 'HEAD~1'})",
        )
    reasons = dict(claim_values(git.trailer_values(ARCHIVED_TRAILER, commit_a, commit_b)))
    staled = [
        claim_id
        for claim_id, _ in claim_values(git.trailer_values(STALED_TRAILER, commit_a, commit_b))
    ]
    return diff_snapshots(before, after, before_side, after_side, reasons, staled)
