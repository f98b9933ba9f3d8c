"""The commit window's git side: build a commit without moving a ref, then move it by CAS.

A store commit never touches the user's index beyond its own files and
never touches any other file. :meth:`GitCommitting.prepare_commit` builds
the commit from ``HEAD``'s tree in a private index (``GIT_INDEX_FILE``)
with only kb's blobs replaced; the file store swaps its files in
(:mod:`kb.store.commit_window`); :meth:`GitCommitting.publish` then moves
the branch with ``git update-ref <ref> <new> <old>``: if anything moved
it meanwhile the update is refused and surfaces as
:class:`~kb.errors.KnowledgeCasError`, which the rebase loop retries.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kb.errors import ConfigError, GitError, KnowledgeCasError, StoreDirtyError

if TYPE_CHECKING:
    pass

from kb.store.git.history import GitHistory
from kb.store.git.runner import _INDEX_LOCK_RETRIES, _LOCK_EXISTS, ZERO_OID


@dataclass(frozen=True)
class PreparedCommit:
    """A commit built in git's object database whose ref has not moved yet."""

    commit: str
    ref: str
    expected_head: str | None
    message: str
    blobs: Mapping[str, str]
    """Each committed path's blob."""
    removed: tuple[str, ...]


def ref_write_problem(err: str, locks: str | None = None) -> str:
    """Why git could not move the branch although nobody else moved it.

    ``locks``: what :meth:`GitStoreRepo.lock_advice` says of the locks left.
    """
    if locks is not None:
        return f"{locks}; nothing was committed"
    found = _LOCK_EXISTS.search(err)
    if found is not None:
        return (
            f"git's lock file {found.group(1)} was in the way (gone now): run the command "
            "again; nothing was committed"
        )
    if not err.strip():
        return "git update-ref died without a word (killed?); nothing was committed"
    return (
        f"git cannot update the ref ({err.strip()}); check that .git/refs and .git/packed-refs "
        "are writable (not read-only or chattr +i); nothing was committed"
    )


class GitCommitting(GitHistory):
    """Builds a store commit in git's object database, stages it, moves the branch."""

    def committed_as_is(self, rel: str) -> bool:
        """Whether the file at ``rel`` is exactly what ``HEAD`` holds (both absent counts)."""
        target = self.top / rel
        _, head = self.head()
        present = self.hash_file(target) if target.exists() else None
        return present == self.blob_in_path(head, rel)

    def check_clean(self, rel: str) -> None:
        """Refuse to overwrite a file beside the store that differs from what git has."""
        target = self.top / rel
        _, head = self.head()
        committed = self.blob_in_path(head, rel)
        present = self.hash_file(target) if target.exists() else None
        if present == committed:
            return
        if committed is None:
            raise StoreDirtyError(
                str(target),
                "is in the way: git does not track it and kb's commit would replace it; move "
                "it away (or delete it) and run the command again",
            )
        raise StoreDirtyError(
            str(target),
            f"has changes git has not committed; commit them (git add {rel} && git "
            f"commit) or discard them (git restore {rel}) before kb commits",
        )

    def set_index_blobs(self, blobs: Mapping[str, str], removed: Sequence[str] = ()) -> bool:
        """Point the user's index entries for these paths (and only them) at their blobs.

        The work tree must hold these blobs already: the entries' stat data is
        refreshed from the files, and git re-reads a file that differs.
        Any git command the user runs meanwhile (even ``git status``) may
        hold ``index.lock`` for a moment, so contention is retried briefly.
        If the index stays locked it returns ``False``: the commit still
        stands and the intent stays, so the next kb command repairs the
        entry (see ``reconcile``); the caller warns the user meanwhile.
        """
        if not blobs and not removed:
            return True
        args = ["update-index", "--add", "--force-remove", *removed]
        for rel, blob in blobs.items():
            args += ["--cacheinfo", f"100644,{blob},{rel}"]
        for attempt in range(_INDEX_LOCK_RETRIES):
            status, _, err = self.call(*args)
            if status == 0:
                # --cacheinfo records no stat data; refreshing it lets later porcelain
                # (git status, git reset --keep) see the entries as up to date.
                self.try_run("update-index", "-q", "--refresh", "--", *blobs)
                return True
            if "index.lock" not in err:
                raise GitError(f"git update-index failed: {err.strip()}")
            time.sleep(0.01 * (attempt + 1))
        return False

    def _point_index(self, blobs: Mapping[str, str | None]) -> None:
        present = {rel: blob for rel, blob in blobs.items() if blob is not None}
        removed = [rel for rel, blob in blobs.items() if blob is None]
        if not self.set_index_blobs(present, removed):
            raise GitError(f"{self.index_locked()} while kb finished an interrupted commit")

    def prepare_commit(
        self,
        files: Mapping[str, Path],
        *,
        ref: str,
        expected_head: str | None,
        message: str,
        trailers: Sequence[tuple[str, str]],
        removed: Sequence[str] = (),
    ) -> PreparedCommit:
        """Build the commit of each file's bytes at its path, without moving any ref.

        ``files`` maps work-tree-relative paths (the store's among them when it
        changes) to files holding the new bytes; ``removed`` paths leave the
        tree. The commit is complete in git's object database before the
        caller writes a single work-tree file.
        """
        blobs = {rel: self.hash_file(path, write=True) for rel, path in files.items()}
        index_path = self.private_index()
        env = {"GIT_INDEX_FILE": str(index_path)}
        try:
            if expected_head is not None:
                self.run("read-tree", expected_head, env=env)
            else:
                self.run("read-tree", "--empty", env=env)
            args = ["update-index", "--add", "--force-remove", *removed]
            for rel, blob in blobs.items():
                args += ["--cacheinfo", f"100644,{blob},{rel}"]
            self.run(*args, env=env)
            tree = self.run("write-tree", env=env).strip()
        finally:
            index_path.unlink(missing_ok=True)
        trailer_text = "\n".join(f"{key}: {value}" for key, value in trailers)
        args = ["commit-tree", tree]
        if expected_head is not None:
            args += ["-p", expected_head]
        args += ["-m", message, "-m", trailer_text]
        commit = self.run(*args, env=self._identity()).strip()
        return PreparedCommit(commit, ref, expected_head, message, blobs, tuple(removed))

    def publish(self, prepared: PreparedCommit) -> None:
        """Advance the ref to the prepared commit by compare-and-swap.

        Raises ``KnowledgeCasError`` when the ref no longer points at the
        commit's parent (the caller puts its files back).
        """
        old = prepared.expected_head or ZERO_OID
        status, _, err = self.call(
            "update-ref", "-m", prepared.message, prepared.ref, prepared.commit, old
        )
        if status != 0:
            _, moved_to = self.head()
            if moved_to == prepared.commit:
                return  # the ref moved; git died after (e.g. before removing HEAD.lock)
            if moved_to == prepared.expected_head:
                # Not a race (the ref is where it was): git could not write it. Retrying
                # cannot help, so this is not a compare-and-swap conflict.
                raise ConfigError(prepared.ref, ref_write_problem(err, self.lock_advice()))
            raise KnowledgeCasError(
                f"git {prepared.ref} moved from {(prepared.expected_head or 'unborn')[:12]} to "
                f"{(moved_to or 'unborn')[:12]} during the commit ({err.strip()})",
            )

    def unstage(self, prepared: PreparedCommit) -> None:
        """Point the index entries a commit staged back at its parent's blobs (it did not land)."""
        rels = [*prepared.blobs, *prepared.removed]
        self.set_index_blobs(
            {rel: blob for rel in rels if (blob := self.blob_in_path(prepared.expected_head, rel))},
            [rel for rel in rels if self.blob_in_path(prepared.expected_head, rel) is None],
        )
