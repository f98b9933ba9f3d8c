"""Merging two branches' stores: theirs' changes re-applied onto ours, as ``--push`` does.

git calls kb's merge driver (``kb merge-driver --install``) with three
versions of the store: the merge base, ours and theirs. What theirs did since
the base is read off the two files — claims added, statuses changed
(superseded, archived, stale), claims compacted — and done again on ours,
claim by claim; the result's version is ``max(ours, theirs) + 1`` and its
hash is computed, so ``kb verify`` accepts the merge commit.

The rules, per claim theirs changed:

* **added** on theirs: appended after ours' claims (in theirs' order). The
  same id added on both sides is one claim when both added the same bytes,
  else a conflict.
* **status** ``b → t`` on theirs, ours at ``o``: if ours did not touch it
  (``o == b``) it becomes ``t``; if both did the same, nothing; if the two
  changes happen one after the other in a claim's life (``stale`` then
  ``superseded`` or ``archived``), the later one stands; anything else (the
  same claim archived on one side and superseded on the other) is a conflict.
* **compacted** on either side: it stays out of the file (only a superseded
  or archived claim is compacted, and that is final).
* **both sides re-measured the same claim** (each superseded it by a claim
  of its own): both replacements are kept; the one observed earlier becomes
  ``superseded``, so one measurement stays active, the latest.
* any other change to a claim (an edit outside kb) is a conflict.

After the merge at most ``cap`` active claims per (model, task class) unless
a side already had more. A conflict leaves git's usual conflict markers and
one line saying why (:class:`kb.errors.MergeConflict`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from kb.atomicfile import replace_with, stream_temp_beside, write_atomic
from kb.errors import ConfigError, MergeClash, MergeConflict
from kb.store.claim_texts import PatchedTexts, claims_hash_of
from kb.store.filestore import KnowledgeStore
from kb.store.ops import DEFAULT_ACTIVE_CLAIMS_CAP
from kb.store.snapshot import EMPTY_SNAPSHOT, ClaimEntry, Snapshot, entry_of
from kb.store.ttl import stored_instant
from kb.store.validation import parse_store
from kb.store.writing import write_store

Side = TypeVar("Side")

_TERMINAL = frozenset({"superseded", "archived"})
# Statuses a claim can move between, in the order its life allows.
_FOLLOWS = {("active", "stale"), ("active", "superseded"), ("active", "archived")}
_FOLLOWS |= {("stale", "superseded"), ("stale", "archived")}


@dataclass(frozen=True)
class MergedStore:
    """The merged snapshot and what came from theirs."""

    snapshot: Snapshot
    added: int
    changed: int
    removed: int


def read_side(data: bytes | None, side: str) -> Snapshot:
    """One side of a merge (``None``: the file did not exist there, an empty store)."""
    if data is None or not data.strip():
        return EMPTY_SNAPSHOT
    try:
        return parse_store(data, side)
    except ConfigError as exc:
        raise MergeClash(f"{side} cannot be read: {exc.issues[0]}") from None


def merge_snapshots(
    base: Snapshot,
    ours: Snapshot,
    theirs: Snapshot,
    *,
    active_claims_cap: int = DEFAULT_ACTIVE_CLAIMS_CAP,
) -> MergedStore:
    """Theirs' changes since ``base`` re-applied onto ``ours`` (see the module)."""
    base_at = base.index
    ours_at = ours.index
    theirs_at = theirs.index
    statuses: dict[int, str] = {}
    removed: set[int] = set()
    appended: list[dict[str, Any]] = []
    conflicts: list[str] = []
    changed = 0

    for claim_id, b_index in base_at.items():
        t_index = theirs_at.get(claim_id)
        o_index = ours_at.get(claim_id)
        if o_index is None:
            continue  # compacted on ours: final
        if t_index is None:
            removed.add(o_index)  # compacted on theirs
            continue
        if theirs.texts.text(t_index) == base.texts.text(b_index):
            continue  # theirs did not touch it (the common case: compare bytes, parse nothing)
        if _without_status(theirs.wire_at(t_index)) != _without_status(base.wire_at(b_index)):
            conflicts.append(f"claim {claim_id!r} was edited on theirs outside kb")
            continue
        b = base.entries[b_index].status
        t = theirs.entries[t_index].status
        o = ours.entries[o_index].status
        if t == b or t == o or (t, o) in _FOLLOWS:
            continue
        if o == b or (o, t) in _FOLLOWS:
            statuses[o_index] = t
            changed += 1
            continue
        conflicts.append(f"claim {claim_id!r} is {o} on ours but {t} on theirs")

    for t_index, entry in enumerate(theirs.entries):
        if entry.id in base_at:
            continue
        o_index = ours_at.get(entry.id)
        if o_index is not None:
            if ours.texts.text(o_index) != theirs.texts.text(t_index):
                conflicts.append(f"claim {entry.id!r} was added on both sides, differently")
            continue
        appended.append(theirs.wire_at(t_index))

    if conflicts:
        more = f" (and {len(conflicts) - 1} more)" if len(conflicts) > 1 else ""
        raise MergeClash(conflicts[0] + more)

    _one_replacement_active(base, ours, statuses, appended)
    entries = [
        _with_status(entry, statuses.get(i))
        for i, entry in enumerate(ours.entries)
        if i not in removed
    ] + [entry_of(wire) for wire in appended]
    _check_cap(entries, ours.entries, theirs.entries, active_claims_cap)
    texts = PatchedTexts(ours.texts, statuses, appended, removed)
    merged = Snapshot(
        max(ours.version, theirs.version) + 1,
        claims_hash_of(texts),
        texts=texts,
        entries=entries,
        extra=ours.extra,
    )
    return MergedStore(merged, len(appended), changed, len(removed))


def _without_status(wire: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in wire.items() if key != "status"}


def _with_status(entry: ClaimEntry, status: str | None) -> ClaimEntry:
    return entry if status is None else entry._replace(status=status)


def _one_replacement_active(
    base: Snapshot,
    ours: Snapshot,
    statuses: dict[int, str],
    appended: list[dict[str, Any]],
) -> None:
    """Where both sides superseded the same claim, only the later replacement stays active."""
    ours_new: dict[str, int] = {}
    for index, entry in enumerate(ours.entries):
        if entry.id not in base.index and entry.status == "active":
            replaced = ours.wire_at(index).get("supersedes")
            if isinstance(replaced, str):
                ours_new[replaced] = index
    for wire in appended:
        replaced = wire.get("supersedes")
        mine_at = ours_new.get(replaced) if isinstance(replaced, str) else None
        if mine_at is None or wire.get("status") != "active" or statuses.get(mine_at):
            continue
        mine = ours.entries[mine_at]
        theirs_key = (stored_instant(str(wire["observedAt"])), str(wire["id"]))
        ours_key = (stored_instant(mine.observed_at), mine.id)
        if theirs_key < ours_key:
            wire["status"] = "superseded"
        else:
            statuses[mine_at] = "superseded"


def _check_cap(
    merged: list[ClaimEntry],
    ours: tuple[ClaimEntry, ...],
    theirs: tuple[ClaimEntry, ...],
    cap: int,
) -> None:
    def active(entries: Any) -> Counter[tuple[str, str]]:
        return Counter((e.model, e.task_class) for e in entries if e.status == "active")

    before = active(ours) | active(theirs)
    for (model, task_class), count in sorted(active(merged).items()):
        if count > cap and count > before.get((model, task_class), 0):
            raise MergeClash(
                f"{count} active claims for ({model}, {task_class}) after the merge, over the "
                f"cap of {cap}",
            )


def merge_store_files(base: Path, ours: Path, theirs: Path, name: str) -> MergedStore:
    """Git's merge driver for the store: merge into ``ours`` (git's ``%A``), in place.

    Raises :class:`MergeConflict` after leaving git's textual merge, with
    conflict markers, in ``ours``.
    """
    sides = [_read_bytes(path) for path in (base, ours, theirs)]
    try:
        snapshots = [read_side(data, side) for data, side in zip(sides, _SIDES, strict=True)]
        merged = merge_snapshots(*snapshots)
    except MergeClash as clash:
        leave_textual_conflict(base, ours, theirs, name)
        raise MergeConflict(name, str(clash)) from None
    write_atomic_stream(ours, merged.snapshot)
    return merged


_SIDES = ("the merge base", "ours", "theirs")


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def read_sides(
    base: Path, ours: Path, theirs: Path, name: str, read: Callable[[Path], Side]
) -> tuple[Side, Side, Side]:
    """A side file's three sides for the merge driver, each read by ``read``.

    One that cannot be read leaves git's textual merge in ``ours`` and raises
    :class:`MergeConflict` naming the file, so the merge stops as a visible conflict.
    """
    sides = []
    for path in (base, ours, theirs):
        try:
            sides.append(read(path))
        except ConfigError as exc:
            leave_textual_conflict(base, ours, theirs, name)
            raise MergeConflict(name, f"cannot be read: {exc.issues[0]}") from None
    return sides[0], sides[1], sides[2]


def leave_textual_conflict(base: Path, ours: Path, theirs: Path, name: str) -> None:
    """Write git's own line merge of the three into ``ours`` (markers where they clash)."""
    from kb.store.git import textual_merge

    for path in (base, theirs):
        if not path.exists():
            path.write_bytes(b"")
    merged = textual_merge(ours, base, theirs, [f"ours:{name}", "base", f"theirs:{name}"])
    write_atomic(ours, merged)


def write_atomic_stream(path: Path, snapshot: Snapshot) -> None:
    """Replace ``path`` with the rendered ``snapshot`` (never a half-written file)."""
    temp, _ = stream_temp_beside(path, lambda handle: write_store(snapshot, handle))
    replace_with(temp, path)


def attributes_with_driver(existing: bytes | None, names: Sequence[str]) -> bytes | None:
    """``.gitattributes`` beside the store with ``merge=kb`` for each of ``names``.

    Keeps what is there; ``None`` when every line is already present.
    """
    from kb.store.git import MERGE_DRIVER

    text = (existing or b"").decode("utf-8", "replace")
    lines = text.splitlines()
    wanted = [f"/{name} merge={MERGE_DRIVER}" for name in names]
    missing = [line for line in wanted if line not in lines]
    if not missing:
        return None
    prefix = text if not text or text.endswith("\n") else text + "\n"
    return (prefix + "\n".join(missing) + "\n").encode("utf-8")


def driver_files(store: KnowledgeStore) -> dict[str, bytes]:
    """The ``.gitattributes`` beside the store that routes kb's merged files to the driver."""
    home = store.home
    path = home.attributes
    existing = path.read_bytes() if path.exists() else None
    content = attributes_with_driver(existing, [file.name for file in home.merged_files])
    return {path.name: content} if content is not None else {}


def install_merge_driver(store: KnowledgeStore, command: str, committer: str) -> bool:
    """Register the driver in the repository's config and commit ``.gitattributes``.

    Returns whether ``.gitattributes`` changed (``False``: it already routed both files).
    """
    from kb.store.filestore import Change, CommitContext
    from kb.store.git import register_merge_driver

    git = store.git
    if git is None:
        raise ConfigError(str(store.path), "not in a git work tree: there is nothing to merge")
    context = CommitContext("merge-driver", committer)
    result = store.commit_with_rebase(
        lambda _: Change(files=driver_files(store), note="merge driver in .gitattributes"),
        context,
    )
    register_merge_driver(git, command)  # last: a refused commit leaves the config as it was
    return result is not None
