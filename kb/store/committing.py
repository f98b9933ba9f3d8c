"""Making one commit: the ops applied, every file written beside its target, then swapped in.

A commit writes every new file — the evidence, the side files, the store
last — to a hidden temp file beside it and fsyncs it, builds its git commit
without moving a ref, opens the commit window (an intent naming every file),
swaps the files in, stages them and only then moves the branch by
compare-and-swap; a ref that will not move puts the files back. Signals
wait while the window is open.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from kb.atomicfile import replace_problem, stream_temp_beside
from kb.errors import (
    ConfigError,
    GitError,
    KnowledgeCasError,
)
from kb.store import verified
from kb.store.commit_window import (
    CommitIntent,
    CommitWindow,
    PendingFile,
)
from kb.store.ops import (
    ArchiveClaim,
    CompactClaim,
    MarkStale,
    Op,
    OpCounts,
    apply_ops,
)
from kb.store.snapshot import EMPTY_SNAPSHOT, Snapshot
from kb.store.writing import write_store

if TYPE_CHECKING:
    from kb.store.git import PreparedCommit

from kb.store.settling import StoreSettling
from kb.store.storefile import (
    ARCHIVED_TRAILER,
    COMPACTED_TRAILER,
    REPORT_TRAILER,
    STALED_TRAILER,
    FileStamp,
    HeadRef,
    _stamp,
)


@dataclass(frozen=True)
class CommitContext:
    """Who commits and why; becomes the git commit message and trailers."""

    action: str
    """What happened: ``sweep``, ``note``, ``archive``, ``deprecate``, ``canary``, ``init``."""
    committer: str
    """The eval-committer id or the person; the ``Kb-Committer`` trailer."""
    label: str | None = None
    """Shown after the action in the subject line (a report id, a claim id, a model)."""
    report_id: str | None = None
    """The ``Kb-Report`` trailer, when the commit carries a report's measurements."""
    extra_trailers: tuple[tuple[str, str], ...] = ()

    def subject(self, counts: OpCounts | None, version: int, note: str | None = None) -> str:
        """The commit subject line."""
        head = f"kb: {self.action}" + (f" {self.label}" if self.label else "")
        what = counts.describe() if counts is not None else "empty store"
        if note:
            if what == "no changes":
                return f"{head}: {note} (store v{version}, claims unchanged)"
            what = f"{what}, {note}"
        return f"{head}: {what} (store v{version})"

    def trailers(self, version: int) -> list[tuple[str, str]]:
        """The commit trailers, in a fixed order."""
        found = [(REPORT_TRAILER, self.report_id)] if self.report_id else []
        found += [("Kb-Store-Version", str(version)), ("Kb-Committer", self.committer)]
        return found + list(self.extra_trailers)


@dataclass(frozen=True)
class Change:
    """What one commit does: ops on the claims, and files committed beside the store.

    ``files`` maps a path relative to the store's directory to its new bytes
    (evidence, canary baselines). Inside the git work tree they are part of
    the same git commit as the store; outside it they are only written.
    A change with files and no ops commits the files alone (the store's
    version does not move).
    """

    ops: tuple[Op, ...] = ()
    files: Mapping[str, bytes] = field(default_factory=dict)
    note: str | None = None
    """What the files are, for the commit subject (``canary baselines``)."""
    deleted: tuple[str, ...] = ()
    """Files beside the store (paths relative to its directory) the commit removes."""

    def __bool__(self) -> bool:
        return bool(self.ops or self.files or self.deleted)


@dataclass(frozen=True)
class CommitResult:
    """A successful commit."""

    snapshot: Snapshot
    counts: OpCounts
    git_commit: str | None
    message: str
    change: Change = field(default_factory=lambda: Change())
    """What was committed (as the rebase loop built it on its last attempt)."""
    attempts: int = 1
    base: Snapshot | None = None
    """The snapshot the change was applied to."""

    @property
    def ops(self) -> tuple[Op, ...]:
        """The ops this commit applied."""
        return self.change.ops


@contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block ends, then are taken as usual.

    Python runs signal handlers in the main thread whichever thread the
    kernel delivers to (worker readers and litellm start threads), so the
    handlers are swapped for ones that only note the signal, and the first
    one noted is raised again once the old handlers are back. Outside the
    main thread (where handlers cannot be set) this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    watched = (signal.SIGINT, signal.SIGTERM)
    previous = {
        sig: signal.signal(sig, lambda signum, _frame: noted.append(signum)) for sig in watched
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if noted:
            signal.raise_signal(noted[0])


def _writer(content: bytes) -> Callable[[IO[bytes]], object]:
    return lambda handle: handle.write(content)


def check_replaceable(paths: Sequence[Path]) -> None:
    """Refuse, naming every one, paths a commit could not replace (see ``replace_problem``)."""
    problems = [
        f"{path}: {problem}"
        for path in dict.fromkeys(paths)
        if (problem := replace_problem(path)) is not None
    ]
    if problems:
        raise ConfigError("cannot write", problems)


class StoreCommitting(StoreSettling):
    """Applies a batch of ops in one commit (one git commit in a work tree)."""

    def commit(
        self, ops: Sequence[Op], expected_version: int, context: CommitContext
    ) -> CommitResult:
        """Apply ``ops`` if the store is still at ``expected_version``.

        Raises ``KnowledgeCasError`` when it is not (re-read and retry), and
        ``ConfigError`` for an invalid batch; in both cases nothing is written.
        """
        if not ops:
            raise ConfigError("ops", "empty batch: nothing to commit")
        with self._locked(expected_version):
            head = self._prepare()
            return self._commit_locked(ops, expected_version, context, head)

    def initialize(
        self, context: CommitContext, files: Callable[[], Mapping[str, bytes]] | None = None
    ) -> Snapshot:
        """Create the empty store (version 0) and, inside git, commit it.

        ``files`` (called under the lock) gives files to commit beside it
        (``.gitattributes`` for the merge driver). Refuses when a store file
        already exists.
        """
        with self._locked(None):
            head = self._prepare()
            if self.path.exists():
                raise ConfigError(str(self.path), "a store already exists here")
            self._publish(
                EMPTY_SNAPSHOT,
                Change(files=files() if files is not None else {}),
                head,
                context.subject(None, 0),
                context.trailers(0),
            )
        return EMPTY_SNAPSHOT

    def _commit_locked(
        self,
        change: Change | Sequence[Op],
        expected_version: int,
        context: CommitContext,
        head: HeadRef | None,
        current: tuple[Snapshot, FileStamp] | None = None,
    ) -> CommitResult:
        """Apply and publish ``change``.

        ``current`` is the store as read under this lock, with its file stamp:
        the file is read once per commit, and a writer that went around the
        lock meanwhile (a hand edit) is caught by the stamp, not overwritten.
        """
        if not isinstance(change, Change):
            change = Change(tuple(change))
        base, stamp = current if current is not None else self._read_with_stamp()
        if _stamp(self.path) != stamp:
            raise KnowledgeCasError("the store file changed since it was read", expected_version)
        if base.version != expected_version:
            raise KnowledgeCasError(
                f"expected version {expected_version}, the store is at {base.version}",
                expected_version,
            )
        snapshot: Snapshot | None = None
        if change.ops:
            applied = apply_ops(base, change.ops, active_claims_cap=self.active_claims_cap)
            snapshot, counts = applied.snapshot, applied.counts
        else:
            counts = OpCounts()
        version = (snapshot or base).version
        message = context.subject(counts, version, change.note)
        trailers = context.trailers(version) + [
            (ARCHIVED_TRAILER, f"{op.claim_id} {op.reason}")
            for op in change.ops
            if isinstance(op, ArchiveClaim)
        ]
        trailers += [
            (STALED_TRAILER, f"{op.claim_id} {op.reason}")
            for op in change.ops
            if isinstance(op, MarkStale)
        ]
        trailers += [
            (COMPACTED_TRAILER, op.claim_id) for op in change.ops if isinstance(op, CompactClaim)
        ]
        commit_oid = self._publish(snapshot, change, head, message, trailers, context.report_id)
        return CommitResult(snapshot or base, counts, commit_oid, message, change, base=base)

    def _publish(
        self,
        snapshot: Snapshot | None,
        change: Change,
        head: HeadRef | None,
        message: str,
        trailers: Sequence[tuple[str, str]],
        report_id: str | None = None,
    ) -> str | None:
        """Make ``snapshot`` the store (``None``: unchanged); write and delete files beside it.

        The order is what keeps every claim: the new bytes go to temp files;
        inside git the commit is built (objects only); an intent names every
        file with its new bytes' hash and an undo copy of its old ones; every
        file is swapped into the work tree, the store last (readers look at
        it); only then does the ref move, by compare-and-swap. A failure at
        any step undoes the files already swapped and leaves the ref where it
        was; a kill is settled by the next writer (:meth:`settle`). SIGINT and
        SIGTERM wait while the window is open: the commit is made or undone
        whole, and the signal is taken after it (:attr:`commits` says which).
        """
        temps = self._write_temps(snapshot, change)
        deleted = [self.path.parent / name for name in change.deleted]
        try:
            prepared = self._prepare_git_commit(
                {target: temp for target, (temp, _) in temps.items()},
                deleted,
                head,
                message,
                trailers,
            )
            intent = CommitIntent(
                message,
                self._pending_files(temps, deleted, prepared),
                report_id,
                prepared.commit if prepared is not None else None,
                prepared.expected_head if prepared is not None else None,
                prepared.ref if prepared is not None else None,
            )
        except BaseException:
            for temp, _ in temps.values():
                temp.unlink(missing_ok=True)
            raise
        with _signals_held():
            try:
                window = CommitWindow.open(self.intent_path, intent, self._intent_base, self.owner)
            except BaseException:
                for temp, _ in temps.values():
                    temp.unlink(missing_ok=True)
                raise
            # From here the window owns the temps: undone or kept whole, or settled next.
            commit = self._swap_and_publish(window, prepared)
            self.commits.append(message)
        return commit

    def _write_temps(
        self, snapshot: Snapshot | None, change: Change
    ) -> dict[Path, tuple[Path, str]]:
        """Each new file's bytes in an fsynced temp beside it, with their sha256."""
        temps: dict[Path, tuple[Path, str]] = {}
        deleted = [self.path.parent / name for name in change.deleted]
        targets = [self.path.parent / name for name in change.files]
        check_replaceable([*targets, *deleted, *([self.path] if snapshot is not None else [])])
        try:
            for name, content in change.files.items():
                target = self.path.parent / name
                target.parent.mkdir(parents=True, exist_ok=True)
                temps[target] = stream_temp_beside(target, _writer(content), self.owner)
            if snapshot is not None:
                temps[self.path] = stream_temp_beside(
                    self.path, lambda handle: write_store(snapshot, handle), self.owner
                )
                # Built from validated claims with a hash kb computed: as good as a full read.
                verified.remember(temps[self.path][1])
        except BaseException:
            for temp, _ in temps.values():
                temp.unlink(missing_ok=True)
            raise
        return temps

    def _swap_and_publish(
        self, window: CommitWindow, prepared: PreparedCommit | None
    ) -> str | None:
        """Move the files in, point the index at them, then move the ref; the commit that stands.

        The index is updated before the ref moves: a kill between the two then
        leaves the new files staged on the old ``HEAD`` (committing them loses
        nothing), never a new ``HEAD`` over a stale index that a plain ``git
        commit`` would turn into an older store. When the branch moved just
        before the ref (a concurrent ``git commit``), the commit is settled
        at once as the next writer would: made again on top when the branch
        left kb's files alone, else undone and the rebase loop retries.
        """
        staged = False
        try:
            window.swap()
            if prepared is not None:
                assert self.git is not None
                try:
                    indexed = self.git.set_index_blobs(prepared.blobs, prepared.removed)
                except GitError:
                    indexed = False  # git died updating it (killed): its index is not ours
                if not indexed:
                    again = (
                        " (run the sweep again with --resume: it reuses its journaled runs)"
                        if window.intent.report_id is not None
                        else ""
                    )
                    raise GitError(f"{self.git.index_locked()}; nothing was committed{again}")
                staged = True
                self.git.publish(prepared)
        except KnowledgeCasError:
            settled = self._settle_locked()
            if settled.outcome == "finished":
                return settled.git_commit
            raise
        except Exception:
            window.undo()  # the files first: unstaging refreshes the index from them
            if staged and self.git is not None and prepared is not None:
                self.git.unstage(prepared)
            raise
        window.close()
        return prepared.commit if prepared is not None else None

    def _pending_files(
        self,
        temps: Mapping[Path, tuple[Path, str]],
        deleted: Sequence[Path],
        prepared: PreparedCommit | None,
    ) -> tuple[PendingFile, ...]:
        """The commit's files in swap order: removals, then new files, the store last."""
        committed = set(prepared.blobs) | set(prepared.removed) if prepared is not None else set()

        def rel(path: Path) -> str | None:
            found = self.git.rel_of(path) if self.git is not None else None
            return found if found in committed else None

        files = [PendingFile(path, None, rel=rel(path)) for path in deleted]
        order = sorted(temps, key=lambda target: target == self.path)
        files += [PendingFile(t, temps[t][1], temps[t][0], rel=rel(t)) for t in order]
        return tuple(files)

    def _prepare_git_commit(
        self,
        temps: Mapping[Path, Path],
        deleted: Sequence[Path],
        head: HeadRef | None,
        message: str,
        trailers: Sequence[tuple[str, str]],
    ) -> PreparedCommit | None:
        """The one git commit of every file inside the work tree (none outside git)."""
        if self.git is None or head is None:
            return None
        tracked = {}
        for target, temp in temps.items():
            rel = self.git.rel_of(target)
            if rel is None:
                continue  # beside the store but outside the work tree: written, not committed
            if target != self.path:
                self.git.check_clean(rel)
            tracked[rel] = temp
        removed = []
        for target in deleted:
            rel = self.git.rel_of(target)
            if rel is not None:
                self.git.check_clean(rel)
                removed.append(rel)
        if not tracked and not removed:
            return None
        return self.git.prepare_commit(
            tracked,
            ref=head[0],
            expected_head=head[1],
            message=message,
            trailers=trailers,
            removed=removed,
        )
