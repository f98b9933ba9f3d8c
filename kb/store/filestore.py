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

import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from kb.errors import (
    CasAttemptsExhausted,
    ConfigError,
    GitError,
    KnowledgeCasError,
)
from kb.schema import DEFAULT_ATTEMPTS
from kb.store.ops import (
    Op,
)
from kb.store.snapshot import Snapshot

if TYPE_CHECKING:
    from kb.store.git import PushTarget

from kb.store.committing import (
    Change,
    CommitContext,
    CommitResult,
    StoreCommitting,
    check_replaceable,
)
from kb.store.storefile import (
    ARCHIVED_TRAILER,
    COMPACTED_TRAILER,
    DEFAULT_STORE_NAME,
    REPORT_TRAILER,
    STALED_TRAILER,
    FileStamp,
    HeadRef,
    ReadOnlyStore,
    read_store_checked,
    read_store_file,
    validate_attempts,
)

__all__ = [
    "ARCHIVED_TRAILER",
    "COMPACTED_TRAILER",
    "DEFAULT_STORE_NAME",
    "REPORT_TRAILER",
    "STALED_TRAILER",
    "Change",
    "CommitContext",
    "CommitResult",
    "FileStamp",
    "HeadRef",
    "KnowledgeStore",
    "ReadOnlyStore",
    "check_replaceable",
    "read_store_checked",
    "read_store_file",
    "validate_attempts",
]


class KnowledgeStore(StoreCommitting):
    """The writable store: reads, and commits batches of ops by compare-and-swap.

    Its layers: :class:`~kb.store.storefile.StoreFile` (the file, its lock, its
    home, its git), :class:`~kb.store.settling.StoreSettling` (an interrupted
    commit), :class:`~kb.store.committing.StoreCommitting` (one commit); here
    the rebase loop, the lease of a night and publishing (``--push``).
    """

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
