"""Settling a commit a kill interrupted: finish it or undo it, and keep HEAD honest.

A process killed inside the commit window leaves an intent
(:mod:`kb.store.commit_window`); the next writer decides from git and the
files on disk whether the commit is finished (every file complete) or
undone, and never leaves ``HEAD`` ahead of the work-tree store; a user who
deliberately checks out an older store is never "rolled forward".
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from kb.atomicfile import BACKUP_SUFFIX
from kb.errors import ConfigError, KnowledgeCasError, StoreDirtyError
from kb.store.commit_window import CommitIntent, Decision, PendingFile, incomplete_detail
from kb.store.layout import conflict_advice, conflict_lines

if TYPE_CHECKING:
    pass

from kb.store.git.commit import GitCommitting
from kb.store.git.quick import MERGE_DRIVER, store_version, unmerged_advice
from kb.store.git.runner import _LOCK_EXISTS, ZERO_OID


class GitSettling(GitCommitting):
    """Finishes or undoes an interrupted commit; refuses a work tree behind ``HEAD``."""

    def reconcile(self) -> None:
        """Check the work-tree store is what ``HEAD`` holds before a commit; else refuse.

        Call with the store lock held, after any interrupted commit was
        settled (:mod:`kb.store.commit_window`). A store git holds unmerged,
        a merge in progress, or a store file that differs from ``HEAD``'s
        (edited, staged, deleted, older) is refused, never overwritten. An
        index entry that only lags ``HEAD`` (the file is ``HEAD``'s) is
        pointed at ``HEAD``'s blob.
        """
        if self.unmerged():
            text = self.store_path.read_text("utf-8", "replace") if self.store_path.exists() else ""
            markers = conflict_lines(text)
            driver = "kb merge-driver" in (
                self.try_run("config", "--get", f"merge.{MERGE_DRIVER}.driver") or ""
            )
            advice = (
                conflict_advice(self.rel, markers) if markers else unmerged_advice(self.rel, driver)
            )
            raise StoreDirtyError(str(self.store_path), advice)
        if self.try_run("rev-parse", "-q", "--verify", "MERGE_HEAD") is not None:
            raise StoreDirtyError(
                str(self.store_path),
                "a git merge is in progress: finish it (git commit) or abort it (git merge "
                "--abort) before kb commits (a kb commit now would land beside the merge)",
            )
        _, head = self.head()
        head_blob = self.blob_in(head)
        index_blob = self.blob_in_index()
        exists = self.store_path.exists()
        file_blob = self.hash_file(self.store_path) if exists else None
        if file_blob == head_blob and index_blob == head_blob:
            return
        if file_blob == head_blob and head_blob is not None:
            self.set_index_blobs({self.rel: head_blob})
            return
        where = "staged" if index_blob != head_blob else "unstaged"
        markers = conflict_lines(self.store_path.read_text("utf-8", "replace")) if exists else []
        if markers:
            raise StoreDirtyError(str(self.store_path), conflict_advice(self.rel, markers))
        if not exists and head_blob is not None:
            detail = "the store file was deleted from the work tree"
        elif head_blob is None and index_blob is None:
            detail = "the store file is not committed in git"
        else:
            detail = f"the store file has {where} changes git has not committed"
            behind = self._behind_head(head_blob)
            if behind:
                detail += f" ({behind})"
        raise StoreDirtyError(
            str(self.store_path),
            f"{detail}; commit or restore it (git restore --staged --worktree "
            f"{self.rel}) before kb commits",
        )

    def _behind_head(self, head_blob: str | None) -> str | None:
        """``it is store v3, HEAD holds v4 …`` when the work-tree store is older than HEAD's."""
        if head_blob is None:
            return None
        ours = store_version(self.store_path.read_bytes()[:200])
        theirs = store_version(self.read_blob(head_blob)[:200])
        if ours is None or theirs is None or ours >= theirs:
            return None
        return (
            f"it is store v{ours} while HEAD holds v{theirs}: committing it would drop "
            "the claims HEAD has"
        )

    def decide_intent(self, intent: CommitIntent) -> Decision:
        """How the git side of an interrupted commit settles (reads only; see the module).

        * the branch holds the commit (points at it, or the user committed on top):
          it stands;
        * the branch is where the commit was built: finished (the ref will move)
          when every file is complete on disk, else undone;
        * the branch moved meanwhile (the user committed what ``git status``
          showed): when every file is complete and the branch holds, for each,
          the commit's bytes or its parent's, the same change is committed again
          on top; otherwise undone, keeping each file whose new bytes the branch
          holds already;
        * the commit is gone from git (``git gc`` pruned it): undone.
        """
        assert intent.commit is not None
        ref, head = self.head()
        if self.resolve(intent.commit) is None:
            return Decision("undone", detail="its commit is gone from git (git gc pruned it)")
        if head is not None and self.is_ancestor(intent.commit, head):
            return Decision("finished", intent.commit, "stands")
        complete = intent.complete
        if ref == intent.ref and head == intent.parent:
            if not complete:
                return Decision("undone", detail=incomplete_detail(intent))
            return Decision("finished", intent.commit, "move")
        blobs = self._intent_blobs(intent)
        holds = {rel: self.blob_in_path(head, rel) for rel in blobs}
        whole = all(holds[r] == blobs[r] for r in blobs)  # the branch holds all of it
        if head is not None and whole and self._made_again(intent, head):
            # the branch tip holds it (a settle killed after it moved the ref), not the
            # commit first built, which is on no branch: name what the branch holds
            return Decision("finished", head, "stands", detail=" (made again on the branch)")
        parents = {rel: self.blob_in_path(intent.parent, rel) for rel in blobs}
        kept = tuple(f.path for f in intent.tracked if f.rel and holds[f.rel] == blobs[f.rel])
        if ref != intent.ref or head is None:
            where = ref.removeprefix("refs/heads/")
            return Decision("undone", keep=kept, detail=f"HEAD is on {where} now")
        moved = f"{ref.removeprefix('refs/heads/')} moved to {head[:12]} meanwhile"
        if not complete or any(holds[r] not in (blobs[r], parents[r]) for r in blobs):
            why = incomplete_detail(intent) if not complete else "it changed kb's files"
            return Decision("undone", keep=kept, detail=f"{moved} and {why}")
        if intent.report_id is None and whole:
            # your commit holds all of it: that commit stands for it (the one kb built
            # first is on no branch, and naming it would send you looking for it)
            return Decision(
                "finished", head, "stands", detail=" (your own commit holds every file of it)"
            )
        # A night's commit is made again even when your commit holds every file of it:
        # the night counts as committed by its Kb-Report trailer (an empty commit records it).
        return Decision("finished", intent.commit, "again")

    def _made_again(self, intent: CommitIntent, head: str) -> bool:
        """Whether ``HEAD``'s history since the commit's parent holds it made again already.

        (A settle killed after it moved the ref: the same message and trailers.)
        """
        assert intent.commit is not None
        message = self.run("show", "-s", "--format=%B", intent.commit, strip=False)
        since = f"{intent.parent}..{head}" if intent.parent else head
        status, out, _ = self.call("log", "--format=%B%x00", since, strip=False)
        return status == 0 and message.strip() in [m.strip() for m in out.split("\0")]

    def finish_intent(self, intent: CommitIntent, decision: Decision) -> str:
        """Carry out a finished decision once the files are in place; the commit that stands."""
        assert intent.commit is not None
        ref, head = self.head()
        blobs = self._intent_blobs(intent)
        if decision.how == "stands":
            if head == intent.commit:
                self._point_index(blobs)
            return decision.commit or intent.commit
        if decision.how == "move":
            self._move_ref(ref, intent.commit, head)
            self._point_index(blobs)
            return intent.commit
        assert head is not None
        again = self._commit_again(intent.commit, head, blobs)
        self._move_ref(ref, again, head)
        self._point_index(blobs)
        return again

    def undo_index(self, intent: CommitIntent) -> None:
        """Unstage what an undone commit staged (the index is updated before the ref moves).

        Each of its files whose index entry holds the commit's blob goes back
        to ``HEAD``'s; entries the user changed since are left as they are.
        """
        _, head = self.head()
        back = []
        for pending in intent.tracked:
            assert pending.rel is not None
            staged = self._index_blob(pending.rel)
            # By content, not by the commit's blobs: the commit may be gone (git gc).
            if (
                staged is not None
                and pending.sha256 is not None
                and (hashlib.sha256(self.read_blob(staged)).hexdigest() == pending.sha256)
            ):
                back.append(pending.rel)
        self._point_index({rel: self.blob_in_path(head, rel) for rel in back})

    def _index_blob(self, rel: str) -> str | None:
        out = self.try_run("ls-files", "-s", "--", rel)
        return out.split()[1] if out else None

    def _intent_blobs(self, intent: CommitIntent) -> dict[str, str | None]:
        return {f.rel: self.blob_in_path(intent.commit, f.rel) for f in intent.tracked if f.rel}

    def legacy_intent(
        self, path: Path, *, materialize: bool = True, owner: str = ""
    ) -> CommitIntent | None:
        """An intent kb 3 wrote (its commit's oid, then the files beside the store), as today's.

        kb 3 kept no undo copies in its intent: each file's old bytes are
        taken from the commit's parent and kept as the undo copy now — only
        with ``materialize`` (settling, under the lock): a read that only
        names the commit writes nothing.
        """
        try:
            lines = path.read_text("utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            return None
        commit = lines[0].strip() if lines else ""
        if re.fullmatch(r"[0-9a-f]{40}", commit) is None or self.resolve(commit) is None:
            return None
        parent = self.resolve(f"{commit}^1")
        files = []
        for rel in [*(x for x in lines[1:] if x), self.rel]:
            target = self.top / rel
            new, old = self.blob_in_path(commit, rel), self.blob_in_path(parent, rel)
            sha = hashlib.sha256(self.read_blob(new)).hexdigest() if new else None
            backup = None
            if materialize and old is not None and target.parent.is_dir():
                fd, name = tempfile.mkstemp(
                    prefix=f".{target.name}.{owner}-", suffix=BACKUP_SUFFIX, dir=target.parent
                )
                with os.fdopen(fd, "wb") as handle:
                    handle.write(self.read_blob(old))
                backup = Path(name)
            files.append(PendingFile(target, sha, backup=backup, rel=rel))
        subject = self.run("show", "-s", "--format=%s", commit).strip()
        return CommitIntent(subject, tuple(files), None, commit, parent, self.head()[0])

    def _commit_again(self, commit: str, head: str, blobs: Mapping[str, str | None]) -> str:
        """``commit``'s change to ``blobs``, with its message, as a new child of ``head``."""
        index_path = self.private_index()
        env = {"GIT_INDEX_FILE": str(index_path)}
        try:
            self.run("read-tree", head, env=env)
            args = ["update-index", "--add", "--force-remove"]
            args += [rel for rel, blob in blobs.items() if blob is None]
            for rel, blob in blobs.items():
                if blob is not None:
                    args += ["--cacheinfo", f"100644,{blob},{rel}"]
            self.run(*args, env=env)
            tree = self.run("write-tree", env=env).strip()
        finally:
            index_path.unlink(missing_ok=True)
        message = self.run("show", "-s", "--format=%B", commit, strip=False).rstrip("\n")
        return self.run(
            "commit-tree", tree, "-p", head, "-m", message, env=self._identity()
        ).strip()

    def _move_ref(self, ref: str, new: str, old: str | None) -> None:
        status, _, err = self.call(
            "update-ref", "-m", "kb: finish an interrupted commit", ref, new, old or ZERO_OID
        )
        if status != 0:
            lock = self.lock_advice() if _LOCK_EXISTS.search(err) else None
            if lock is not None:
                raise ConfigError(ref, f"{lock} (kb is finishing an interrupted commit)")
            raise KnowledgeCasError(f"finishing an interrupted commit: {err.strip()}")
