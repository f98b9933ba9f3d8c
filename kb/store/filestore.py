"""The store on disk: atomic, serialized, compare-and-swap commits, optionally through git.

Guarantees (beyond rulvar's file store, which can lose an update when two
processes commit at once and shares one temp file name between writers):

* **No lost update.** The read-check-write runs under a cross-process
  ``filelock``; :meth:`KnowledgeStore.commit_with_rebase` holds that lock
  from its read through the commit, so kb writers never conflict with each
  other and a CAS error can only come from outside (a hand edit, a ``git
  pull``, a concurrent ``git commit`` moving the branch).
* **Crash safety.** The new text goes to a unique temp file in the store's
  directory, is fsynced, ``os.replace``d over the store and the directory is
  fsynced. A kill at any point leaves the old or the new store. Kernel
  locks die with their process and temp names are unique, so nothing a dead
  writer leaves behind blocks the next commit (and the next commit sweeps
  its orphaned temp files away).
* **Git.** Inside a work tree every store commit is exactly one git commit
  touching only the store (see :mod:`kb.store.git`). The lock then lives in
  the git directory so the work tree gains no untracked file.
"""

from __future__ import annotations

import hashlib
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import IO, TYPE_CHECKING

from kb.atomicfile import TEMP_SUFFIX, replace_problem, stream_temp_beside
from kb.errors import (
    CasAttemptsExhausted,
    ConfigError,
    GitError,
    KnowledgeCasError,
    StoreDirtyError,
)
from kb.schema import DEFAULT_ATTEMPTS, STORE_NAME
from kb.store import verified
from kb.store.commit_window import (
    HIDDEN_PATTERNS,
    CommitIntent,
    CommitWindow,
    Decision,
    PendingFile,
    Settled,
    drop_leftovers,
    restore,
    sweep_orphans,
)
from kb.store.home import StoreHome
from kb.store.ops import (
    DEFAULT_ACTIVE_CLAIMS_CAP,
    ArchiveClaim,
    CompactClaim,
    MarkStale,
    Op,
    OpCounts,
    apply_ops,
)
from kb.store.snapshot import EMPTY_SNAPSHOT, Snapshot
from kb.store.validation import index_store, parse_store
from kb.store.writing import write_store

if TYPE_CHECKING:
    from filelock import FileLock

    from kb.store.git import GitStoreRepo, PreparedCommit, PushTarget

DEFAULT_STORE_NAME = STORE_NAME
#: One per archived claim, ``<claim id> <reason>``: the reason is not a claim field.
REPORT_TRAILER = "Kb-Report"
ARCHIVED_TRAILER = "Kb-Archived"
STALED_TRAILER = "Kb-Staled"
"""One per claim a canary drift flagged, ``<claim id> <reason>``: kept in the history even
when the same commit goes on to supersede or archive the claim."""
COMPACTED_TRAILER = "Kb-Compacted"
"""One per claim ``kb compact`` removed: how ``kb show`` finds it in history."""

HeadRef = tuple[str, str | None]


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


def validate_attempts(attempts: object) -> int:
    """``attempts`` must be a positive integer; checked before anything is read."""
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise ConfigError("attempts", f"must be a positive integer, got {attempts!r}")
    return attempts


FileStamp = tuple[int, int, int] | None
"""(inode, size, mtime in ns) of the store file as read; ``None`` when it did not exist."""


def _stamp(path: Path) -> FileStamp:
    try:
        found = path.stat()
    except FileNotFoundError:
        return None
    return (found.st_ino, found.st_size, found.st_mtime_ns)


def read_store_file(path: Path) -> Snapshot:
    """Read and validate the store at ``path``; a missing file is version 0."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return EMPTY_SNAPSHOT
    except IsADirectoryError:
        raise ConfigError(str(path), "is a directory, not a store file") from None
    content = verified.digest(data)
    if verified.is_verified(content):
        return index_store(data)
    snapshot = parse_store(data, str(path))
    verified.remember(content)
    return snapshot


def read_store_checked(path: Path) -> Snapshot:
    """:func:`read_store_file`, refused when git says the file is not the store.

    In a git work tree, a store git left unmerged (a merge kb's driver did
    not merge) or one older than ``HEAD``'s is refused with what to run
    (:func:`kb.store.git.read_guard_issue`), so no command — ``kb list``
    included — reads one side of a merge, or a stale file, as the store.
    """
    from kb.store.git import read_guard_issue

    snapshot = read_store_file(path)
    if path.exists():
        issue = read_guard_issue(path, snapshot.version)
        if issue is not None:
            raise StoreDirtyError(str(path), issue)
    return snapshot


class ReadOnlyStore:
    """A store handle with no way to write: what jobs that only read receive (card, checkpoint)."""

    __slots__ = ("_path",)

    def __init__(self, path: Path) -> None:
        self._path = path

    @property
    def path(self) -> Path:
        """Where the store lives."""
        return self._path

    def read(self) -> Snapshot:
        """The current snapshot."""
        return read_store_checked(self._path)


class KnowledgeStore:
    """The writable store: reads, and commits batches of ops by compare-and-swap."""

    def __init__(
        self,
        path: Path | str = DEFAULT_STORE_NAME,
        *,
        active_claims_cap: int = DEFAULT_ACTIVE_CLAIMS_CAP,
        lock_timeout: float = 120.0,
    ) -> None:
        if (
            isinstance(active_claims_cap, bool)
            or not isinstance(active_claims_cap, int)
            or active_claims_cap < 0
        ):
            raise ConfigError("active_claims_cap", "must be a nonnegative integer")
        self.path = Path(path).absolute()
        self.active_claims_cap = active_claims_cap
        self.lock_timeout = lock_timeout
        self.warnings: list[str] = []
        """Things a caller should tell the user although the commit succeeded."""
        self.commits: list[str] = []
        """The subject of each commit this handle made (what an interrupt line names)."""

    @cached_property
    def home(self) -> StoreHome:
        """Where the store's neighbours are (evidence, baselines, settings, lock)."""
        return StoreHome.of(self.path)

    @cached_property
    def git(self) -> GitStoreRepo | None:
        """The git work tree holding the store, or ``None`` for a plain file store."""
        from kb.store.git import GitStoreRepo  # GitPython costs ~0.1 s; reads never need it

        return GitStoreRepo.discover(self.path)

    @cached_property
    def _lock(self) -> FileLock:
        from filelock import FileLock  # imported on the write path only: reads stay fast

        if not self.path.parent.is_dir():
            raise ConfigError(str(self.path), "its directory does not exist")
        git = self.git
        where = self.home.lock_file(git.git_dir if git else None, git.rel if git else None)
        return FileLock(str(where), timeout=self.lock_timeout)

    def read(self) -> Snapshot:
        """The current snapshot (validated; a missing file is version 0)."""
        return read_store_checked(self.path)

    @contextmanager
    def lease(self, report_id: str) -> Iterator[None]:
        """Hold the one lease of ``report_id``: a second sweep of it is refused, not raced.

        Two sweeps of one night would both spend everything and then fight over
        the same claim ids; the second one asks for the lease before its first
        call and is refused at once (exit 2). Kernel locks die with their
        process, so a killed sweep never leaves its night locked.
        """
        from filelock import FileLock, Timeout

        git = self.git
        where = self.home.lease_file(
            git.git_dir if git else None, git.rel if git else None, report_id
        )
        lock = FileLock(str(where), timeout=0)
        try:
            lock.acquire()
        except Timeout:
            raise ConfigError(
                "report id",
                f"another sweep of {report_id!r} is running on this store now (it holds "
                f"{where.name}); wait for it to finish, or measure another night with "
                "--observed-at or --report-id",
            ) from None
        try:
            yield
        finally:
            lock.release()

    def _read_with_stamp(self) -> tuple[Snapshot, FileStamp]:
        # The stamp first: a change between the two is then seen at commit time.
        stamp = _stamp(self.path)
        return self.read(), stamp

    def read_only(self) -> ReadOnlyStore:
        """A handle for code that must not write (runs, graders)."""
        return ReadOnlyStore(self.path)

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

    def commit_with_rebase(
        self,
        build_ops: Callable[[Snapshot], Sequence[Op] | Change],
        context: CommitContext,
        *,
        attempts: int = DEFAULT_ATTEMPTS,
        push: bool = False,
    ) -> CommitResult | None:
        """The rebase loop: read, build the ops from that snapshot, commit; retry on CAS.

        ``build_ops`` must be a pure function of the snapshot (it is called
        again after every conflict, under the store lock, so it may also read
        files beside the store); it returns the ops, or a :class:`Change` with
        files to commit beside the store. Returns ``None`` when nothing changes.
        Raises ``CasAttemptsExhausted`` when every attempt met a conflict.

        With ``push`` (a store in a git work tree with a remote), each commit
        is pushed without force; a rejected push fetches, moves the branch
        onto the remote tip (dropping only kb's own unpushed commits), and
        re-applies the ops recomputed from the remote store, with jittered
        back-off, up to ``attempts`` times. When they run out the last local
        commit stays on the branch, unpushed, and the error names it.
        """
        attempts = validate_attempts(attempts)
        target = self._push_target() if push else None
        last: KnowledgeCasError | None = None
        for attempt in range(1, attempts + 1):
            try:
                with self._locked(None):
                    head = self._prepare()
                    if target is not None and (head is None or head[0] != target.local_ref):
                        raise GitError(f"--push: HEAD is no longer {target.local_ref}")
                    snapshot, stamp = self._read_with_stamp()
                    built = build_ops(snapshot)
                    change = built if isinstance(built, Change) else Change(tuple(built))
                    if not change:
                        return None
                    result = self._commit_locked(
                        change, snapshot.version, context, head, current=(snapshot, stamp)
                    )
                    if target is not None:
                        self._push_or_catch_up(target, result, final=attempt == attempts)
                    return replace(result, attempts=attempt)
            except KnowledgeCasError as exc:
                last = exc
                if target is not None and attempt < attempts:
                    time.sleep(random.uniform(0.05, 0.2) * 2 ** (attempt - 1))
        assert last is not None
        raise CasAttemptsExhausted(attempts, last)

    def _push_or_catch_up(self, target: PushTarget, result: CommitResult, *, final: bool) -> None:
        """Push ``result``; when rejected, catch up with the remote and raise a CAS error.

        On the final attempt the local commit is kept (unpublished) and named.
        """
        from kb.errors import PushRejected
        from kb.store.git import catch_up, push

        assert self.git is not None and result.git_commit is not None
        try:
            push(self.git, target)
        except PushRejected as rejected:
            commit = result.git_commit[:12]
            if final:
                raise KnowledgeCasError(
                    f"push to {target.remote}/{target.branch} rejected ({rejected}); the local "
                    f"commit {commit} is kept on {target.local_ref.removeprefix('refs/heads/')}, "
                    "not published"
                ) from None
            catch_up(self.git, target, {result.git_commit})
            raise KnowledgeCasError(
                f"push to {target.remote}/{target.branch} rejected ({rejected}); re-applying "
                "on the remote tip"
            ) from None

    def preflight(
        self, *, push: bool = False, writes: Sequence[Path] = (), clean: Sequence[Path] = ()
    ) -> None:
        """Fail now, not after a sweep's spending, if a commit could not be made.

        Checks what the commit itself would check first: the directory exists,
        the lock can be taken, git agrees with the store file and with each
        tracked file in ``clean`` (the epochs file, the canary baselines: the
        commit rewrites them), the store and every file in ``writes``
        (evidence, baselines) can be replaced, no lock file a killed git left
        is in the way and, with ``push``, the branch has a remote and nothing
        unpublished on it.
        """
        with self._locked(None):
            self._prepare()
            locks = self.git.lock_advice() if self.git is not None else None
            if locks is not None:
                raise ConfigError(str(self.path), f"{locks}; nothing was sent, nothing paid")
            refs = self.git.ref_files() if self.git is not None else []
            check_replaceable([self.path, *writes, *refs])
            if self.git is not None:
                for path in clean:
                    rel = self.git.rel_of(path)
                    if rel is not None:
                        self.git.check_clean(rel)
        if push:
            self._push_target()

    def _push_target(self) -> PushTarget:
        """Where ``--push`` publishes, after checking it can publish only kb's commit."""
        from kb.store.git import check_publishable, push_target

        if self.git is None:
            raise ConfigError("--push", f"{self.path} is not in a git work tree")
        target = push_target(self.git)
        check_publishable(self.git, target)
        return target

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

    # -- under the lock ------------------------------------------------------------

    @contextmanager
    def _locked(self, expected_version: int | None) -> Iterator[None]:
        """Hold the store lock; waiting past ``lock_timeout`` is a (retryable) CAS error."""
        from filelock import Timeout

        try:
            self._lock.acquire()
        except Timeout:
            raise KnowledgeCasError(
                f"another writer held the store lock for over {self.lock_timeout:g}s",
                expected_version,
            ) from None
        try:
            yield
        finally:
            self._lock.release()

    def _prepare(self) -> HeadRef | None:
        """Settle an interrupted commit, check git agrees with the file, and read HEAD.

        HEAD must be read *before* the store file: a ``git pull`` that
        changes the store in between then moves the branch and fails the
        compare-and-swap instead of being silently overwritten.
        """
        settled = self._settle_locked()
        said = settled.describe()
        if said is not None:
            self.warnings.append(said)
        if self.git is None:
            return None
        self.git.exclude_patterns(HIDDEN_PATTERNS)  # before any temp: git add -A never sees one
        self.git.reconcile()
        return self.git.head()

    # -- the commit window ----------------------------------------------------------

    @property
    def _intent_base(self) -> Path:
        """What an intent's paths are relative to: the work tree's top, else the store's dir."""
        return self.git.top if self.git is not None else self.path.parent

    @property
    def intent_path(self) -> Path:
        """Where a commit in its window records its intent."""
        git = self.git
        return self.home.intent_file(git.git_dir if git else None, git.rel if git else None)

    def settle(self) -> Settled:
        """Finish or undo a commit a kill interrupted (:mod:`kb.store.commit_window`).

        What every command that writes does first, under the store lock:
        the commit is finished when every one of its files is complete on
        disk, otherwise undone (a sweep's night then stays resumable from
        its journal). Returns what was done (``none`` when nothing was
        interrupted).
        """
        with self._locked(None):
            return self._settle_locked()

    def _settle_locked(self) -> Settled:
        path = self.intent_path
        intent = self._read_intent(path)
        if intent is None:
            self._sweep_orphans()
            return Settled("none")
        git = self.git if intent.commit is not None else None
        changed = tuple(f.path.name for f in intent.changed_since)
        found = git.decide_intent(intent) if git is not None else Decision.on_disk(intent)
        commit = None
        if found.outcome == "finished":
            intent.finish_files()  # decided first: only files still holding their old bytes
            commit = git.finish_intent(intent, found) if git is not None else None
        else:
            restore(intent.files, found.keep)
            if git is not None:
                git.undo_index(intent)
        drop_leftovers(intent.files)
        path.unlink(missing_ok=True)
        self._sweep_orphans()
        detail = found.detail or (
            " (made again on top of the commit the branch moved to meanwhile)"
            if found.how == "again"
            else ""
        )
        return Settled(
            found.outcome,
            intent.label,
            intent.report_id,
            commit,
            detail,
            changed if found.outcome == "undone" else (),
        )

    def _read_intent(self, path: Path, *, settling: bool = True) -> CommitIntent | None:
        from kb.store.commit_window import looks_legacy, read_intent

        try:
            return read_intent(path, self._intent_base)
        except ConfigError:
            if self.git is None or not looks_legacy(path):
                raise
        legacy = self.git.legacy_intent(path, materialize=settling, owner=self.owner)  # kb 3
        if legacy is None and not settling:
            return None
        if legacy is None:  # its commit is not in git: nothing of it reached the branch
            path.unlink(missing_ok=True)
        return legacy

    def _sweep_orphans(self) -> None:
        """Temps and undo copies this store's writers left when killed before their intent.

        Only this store's own (their names carry :attr:`owner`), in its own
        directory and the evidence directories inside its work tree: another
        store has its own lock and its own commits in flight.
        """
        try:
            evidence = self.home.evidence_dirs()
        except ConfigError:
            evidence = []
        # An evidence directory outside the store's own tree may be shared with a store of
        # the same name elsewhere (same tag): its orphans stay there, where git sees nothing.
        home = self.git.top if self.git is not None else self.path.parent
        own = [d for d in evidence if d.resolve().is_relative_to(home.resolve())]
        sweep_orphans([self.path.parent, *own], self.owner)
        intent = self.intent_path
        for orphan in intent.parent.glob(f".{intent.name}.*{TEMP_SUFFIX}"):
            orphan.unlink(missing_ok=True)

    @cached_property
    def owner(self) -> str:
        """A tag in the names of this store's temp files and undo copies.

        The hash of the store's path in its work tree (its file name outside
        git): the same when the repository is moved or copied after a crash,
        different for every other store of the repository.
        """
        name = self.git.rel if self.git is not None else self.path.name
        return hashlib.sha256(name.encode()).hexdigest()[:8]

    def pending_commit(self) -> str | None:
        """What to tell a command that only reads while a commit a kill interrupted waits.

        ``None`` when none does (a commit another process is making right now,
        holding the lock, is not interrupted). The line names the commit and
        what settles it, or, for a record kb cannot read, what to do with it.
        """
        from kb.store.git import quick_location

        where = quick_location(self.path)  # one git process, no GitPython: reads stay fast
        if not self.home.intent_file(*(where or (None, None))).exists():
            return None
        from filelock import Timeout

        path = self.intent_path
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            return None
        try:
            intent = self._read_intent(path, settling=False)
        except ConfigError as exc:
            return str(exc)
        finally:
            self._lock.release()
        if intent is None:
            return None
        return (
            f"a kb commit was interrupted ({intent.label}); the next kb command that writes "
            "settles it (kb settle does only that; kb sweep SPEC --resume finishes a night)"
        )

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
