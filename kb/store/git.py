"""The only module that talks to git: one store commit = one git commit, by plumbing.

A store commit never touches the user's index beyond the store's own entry
and never touches any other file. The new commit is built from ``HEAD``'s
tree in a private index (``GIT_INDEX_FILE``) with only the store blob
replaced, then published with ``git update-ref <ref> <new> <old>``: if
anything moved the branch since we read it (a concurrent ``git commit``,
another kb writer on a clone sharing the repository), the update is refused
and surfaces as :class:`KnowledgeCasError`, which the rebase loop retries.

Commit order: every file of a commit is written into the work tree
before the branch ref moves. :meth:`prepare_commit` builds the commit in
git's object database (no ref moves); the file store then swaps its files
in under an intent (:mod:`kb.store.commit_window`) and only then
:meth:`publish` moves the ref by compare-and-swap — a ref that will not
move puts the files back. A process killed anywhere in between leaves an
intent the next writer settles (:meth:`settle_intent`): finished when every
file is complete, else undone; it never leaves ``HEAD`` ahead of the
work-tree store, and a user who deliberately checks out an older store is
never "rolled forward" (that is refused with :class:`StoreDirtyError`).
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import secrets
import shlex
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from kb.atomicfile import BACKUP_SUFFIX, write_atomic
from kb.errors import ConfigError, GitError, KnowledgeCasError, PushRejected, StoreDirtyError
from kb.store.commit_window import CommitIntent, Decision, PendingFile, incomplete_detail
from kb.store.layout import conflict_advice, conflict_lines

if TYPE_CHECKING:
    from git import Git

ZERO_OID = "0" * 40
_INDEX_LOCK_RETRIES = 20
_FALLBACK_IDENTITY = {
    "GIT_AUTHOR_NAME": "kb",
    "GIT_AUTHOR_EMAIL": "kb@localhost",
    "GIT_COMMITTER_NAME": "kb",
    "GIT_COMMITTER_EMAIL": "kb@localhost",
}


@dataclass(frozen=True)
class StoreCommit:
    """One git commit that touched the store file."""

    oid: str
    parents: tuple[str, ...]
    date: str
    subject: str
    body: str


class GitStoreRepo:
    """A store file that lives in a git work tree."""

    def __init__(self, top: Path, rel: str, store_path: Path) -> None:
        self.top = top
        self.rel = rel
        self.store_path = store_path
        from git import Git  # GitPython costs ~0.1 s to import: only where git is driven

        self._git: Git = Git(str(top))
        self._identity_env: dict[str, str] | None = None

    @classmethod
    def discover(cls, store_path: Path) -> GitStoreRepo | None:
        """The repository whose work tree holds ``store_path``, or ``None`` outside git."""
        from git import Git
        from git.exc import GitCommandNotFound

        directory = store_path.parent
        if not directory.is_dir():
            return None
        try:
            status, out, err = Git(str(directory)).execute(
                ["git", "rev-parse", "--is-inside-work-tree", "--show-toplevel"],
                with_extended_output=True,
                with_exceptions=False,
            )
        except GitCommandNotFound:
            return None
        lines = out.splitlines()
        if status != 0 or len(lines) < 2 or lines[0] != "true":
            _refuse_broken_repository(directory, err if status != 0 else "")
            return None
        top = Path(lines[1]).resolve()
        resolved = directory.resolve() / store_path.name
        try:
            rel = resolved.relative_to(top).as_posix()
        except ValueError:
            return None
        return cls(top, rel, store_path)

    @cached_property
    def git_dir(self) -> Path:
        """The repository's git directory (where kb keeps its lock and temp index)."""
        return Path(self.run("rev-parse", "--absolute-git-dir").strip())

    def private_index(self) -> Path:
        """A fresh name for an index of kb's own in the git directory (git creates the file)."""
        return self.git_dir / f"kb-index-{secrets.token_hex(8)}"

    def left_locks(self) -> list[Path]:
        """Lock files a git that died may have left: the branch, HEAD, any ref, the index."""
        ref, _ = self.head()
        common = Path(self.run("rev-parse", "--path-format=absolute", "--git-common-dir").strip())
        found = [
            common / f"{ref}.lock",
            self.git_dir / "HEAD.lock",
            common / "packed-refs.lock",
            self.git_dir / "index.lock",
            *sorted((common / "refs").rglob("*.lock")),
        ]
        return [lock for lock in dict.fromkeys(found) if lock.exists()]

    def lock_advice(self) -> str | None:
        """Every lock file git left here, at once, and what to do (``None``: there is none).

        Whether a git process is running in this repository is told (then its
        locks are its own: wait for it); otherwise a git that was killed left
        them, and the line names the command that removes them all. kb never
        removes one itself: only the user can know no git is about to use it.
        """
        locks = self.left_locks()
        if not locks:
            return None
        many = len(locks) > 1
        named = ", ".join(str(lock) for lock in locks)
        running = running_git(self.top, self.git_dir)
        if running:
            holder = (
                f"a git process is running in this repository ({running}): let it finish, "
                "then run the command again"
            )
        else:
            paths = " ".join(shlex.quote(str(lock)) for lock in locks)
            holder = (
                "no git process is running in this repository: a git that was killed left "
                f"{'them' if many else 'it'}; remove {'them' if many else 'it'} (rm {paths}) "
                "and run the command again (kb never removes a git lock itself)"
            )
        return f"git's lock file{'s' if many else ''} {named}: {holder}"

    def index_locked(self) -> str:
        """What to say when git's index could not be updated (every lock file named)."""
        return self.lock_advice() or "git could not update its index (git update-index died)"

    @cached_property
    def exclude_file(self) -> Path:
        """The clone's own ``info/exclude`` (in the common git directory of a linked work tree)."""
        found = Path(self.run("rev-parse", "--git-path", "info/exclude").strip())
        return found if found.is_absolute() else self.top / found

    # -- running git (the one runner; the push and merge helpers below use it too) ----

    def call(
        self, *args: str, env: dict[str, str] | None = None, strip: bool = True
    ) -> tuple[int, str, str]:
        """Run ``git args``; its exit status, stdout and stderr (never raises on failure)."""
        status, out, err = self._git.execute(
            ["git", *args],
            env=env,
            with_extended_output=True,
            with_exceptions=False,
            strip_newline_in_stdout=strip,
        )
        return int(status), str(out), str(err)

    def run(self, *args: str, env: dict[str, str] | None = None, strip: bool = True) -> str:
        """Run ``git args``; its stdout (a failure is a :class:`GitError` with git's words)."""
        status, out, err = self.call(*args, env=env, strip=strip)
        if status != 0:
            locked = self.lock_advice() if _LOCK_EXISTS.search(err) else None
            raise GitError(f"git {args[0]} failed: {locked or err.strip() or out.strip()}")
        return out

    def try_run(self, *args: str, env: dict[str, str] | None = None) -> str | None:
        """Run ``git args``; its stdout, or ``None`` when git failed (a question, not an order)."""
        status, out, _ = self.call(*args, env=env)
        return out if status == 0 else None

    def _identity(self) -> dict[str, str]:
        """Use the user's git identity; fall back to ``kb`` only where none is configured."""
        if self._identity_env is None:
            missing = self.try_run("var", "GIT_COMMITTER_IDENT") is None or (
                self.try_run("var", "GIT_AUTHOR_IDENT") is None
            )
            self._identity_env = dict(_FALLBACK_IDENTITY) if missing else {}
        return self._identity_env

    # -- reading -----------------------------------------------------------------

    def head(self) -> tuple[str, str | None]:
        """The ref a commit advances (``refs/heads/X`` or ``HEAD`` when detached), and its oid."""
        ref = self.try_run("symbolic-ref", "-q", "HEAD")
        ref = ref.strip() if ref else "HEAD"
        oid = self.try_run("rev-parse", "-q", "--verify", "HEAD^{commit}")
        return ref, (oid.strip() if oid else None)

    def ref_files(self) -> list[Path]:
        """The files moving the branch writes (its loose ref, the packed refs): for preflight."""
        ref, _ = self.head()
        common = Path(self.run("rev-parse", "--path-format=absolute", "--git-common-dir").strip())
        files = [common / ref]
        if (common / "packed-refs").exists():
            files.append(common / "packed-refs")
        return files

    def blob_in(self, commit: str | None) -> str | None:
        """The store's blob oid in ``commit`` (``None`` when absent or no commit)."""
        if commit is None:
            return None
        out = self.try_run("rev-parse", "-q", "--verify", f"{commit}:{self.rel}")
        return out.strip() if out else None

    def blob_in_index(self) -> str | None:
        """The store's blob oid in the user's index."""
        out = self.run("ls-files", "-s", "--", self.rel)
        return out.split()[1] if out else None

    def hash_file(self, path: Path, *, write: bool = False) -> str:
        """The blob oid of a file's bytes (stored in the object database with ``write``)."""
        args = ["hash-object", "--no-filters"] + (["-w"] if write else []) + ["--", str(path)]
        return self.run(*args).strip()

    def read_blob(self, oid: str) -> bytes:
        """Raw bytes of a blob."""
        status, out, err = self._git.execute(
            ["git", "cat-file", "blob", oid],
            with_extended_output=True,
            with_exceptions=False,
            as_process=False,
            stdout_as_string=False,
            strip_newline_in_stdout=False,
        )
        if status != 0:
            raise GitError(f"git cat-file failed: {err!r}")
        assert isinstance(out, bytes)
        return out

    def resolve(self, rev: str) -> str | None:
        """The commit ``rev`` names (``None`` when it names none)."""
        out = self.try_run("rev-parse", "-q", "--verify", f"{rev}^{{commit}}")
        return out.strip() if out else None

    def commit_seconds(self, commit: str) -> int:
        """When ``commit`` was made (committer time, seconds since the epoch)."""
        return int(self.run("show", "-s", "--format=%ct", commit).strip())

    def trailer_values(self, key: str, since: str | None, until: str) -> list[str]:
        """Every ``key:`` trailer value in commits after ``since`` up to ``until``."""
        span = f"{since}..{until}" if since else until
        # Not --first-parent: an archive made on a merged branch counts too.
        return self._trailers(key, span)

    def store_trailer_values(self, key: str) -> list[str]:
        """Every ``key:`` trailer value of the commits that changed the store file, newest first.

        ``--full-history``: a commit made on a branch and merged later counts,
        even where the merge's result matches the main line's file.
        """
        return self._trailers(key, "--full-history", "HEAD", "--", self.rel)

    def _trailers(self, key: str, *log_args: str) -> list[str]:
        status, out, _ = self.call("log", "--format=%(trailers:only,unfold)", *log_args)
        prefix = f"{key}: "
        return [
            line[len(prefix) :].strip()
            for line in (out.splitlines() if status == 0 else [])
            if line.startswith(prefix)
        ]

    def is_ancestor(self, older: str, newer: str) -> bool:
        """``older`` is an ancestor of ``newer`` (or the same commit)."""
        status, _, _ = self.call("merge-base", "--is-ancestor", older, newer)
        return status == 0

    def newest_trailer(self, key: str, commit: str, depth: int = 50) -> str | None:
        """The ``key:`` trailer of ``commit`` or of its nearest ancestor that has one.

        Looks back ``depth`` commits at most (``None``: none found there).
        """
        status, out, _ = self.call(
            "log", f"-n{depth}", f"--format=%(trailers:key={key},valueonly,unfold)", commit
        )
        found = [line.strip() for line in out.splitlines() if line.strip()] if status == 0 else []
        return found[0] if found else None

    def last_version_of(self, path: Path) -> tuple[str, bytes] | None:
        """The newest commit on ``HEAD``'s history that holds ``path``, and its bytes there.

        Finds a file that was later removed from the work tree (or compacted away).
        """
        rel = self.rel_of(path)
        if rel is None or self.head()[1] is None:
            return None
        status, out, _ = self.call("log", "--format=%H", "HEAD", "--", rel)
        for commit in out.split() if status == 0 else []:
            blob = self.blob_in_path(commit, rel)
            if blob is not None:
                return commit, self.read_blob(blob)
        return None

    def store_commit_before(self, seconds: int) -> str | None:
        """The newest first-parent commit that changed the store at or before ``seconds``."""
        if self.head()[1] is None:
            return None
        status, out, _ = self.call(
            "log",
            "--first-parent",
            "-1",
            "--format=%H",
            f"--before={seconds}",
            "HEAD",
            "--",
            self.rel,
        )
        return out.strip() or None if status == 0 else None

    def tracked_files(self, rel_dir: str) -> list[str]:
        """Paths git tracks under ``rel_dir`` (work-tree relative)."""
        status, out, _ = self.call("ls-files", "-z", "--", rel_dir)
        return [p for p in out.split("\0") if p] if status == 0 else []

    def commits_with_trailer(
        self, key: str, value: str, *, first_parent: bool = True
    ) -> list[StoreCommit]:
        """Commits whose message has the line ``key: value``, newest first.

        First-parent commits only, unless ``first_parent`` is false (then a
        commit made on a branch that was merged counts too).
        """
        if self.head()[1] is None:
            return []
        status, out, _ = self.call(
            "log",
            *(["--first-parent"] if first_parent else []),
            "-z",
            "--fixed-strings",
            f"--grep={key}: {value}",
            "--format=%H%x1f%P%x1f%aI%x1f%s%x1f%b",
            "HEAD",
        )
        found = []
        for commit in _parse_log(out if status == 0 else ""):
            if any(line.strip() == f"{key}: {value}" for line in commit.body.splitlines()):
                found.append(commit)
        return found

    def merges(self) -> list[StoreCommit]:
        """Merge commits on the first-parent line of ``HEAD`` (whatever their store)."""
        if self.head()[1] is None:
            return []
        out = self.run(
            "log",
            "--first-parent",
            "--merges",
            "-z",
            "--format=%H%x1f%P%x1f%aI%x1f%s%x1f%b",
            "HEAD",
            strip=False,
        )
        return _parse_log(out)

    def store_history(self) -> list[StoreCommit]:
        """Commits on the first-parent line of ``HEAD`` that touched the store, oldest first."""
        if self.head()[1] is None:
            return []
        out = self.run(
            "log",
            "--first-parent",
            "--reverse",
            "-z",
            "--format=%H%x1f%P%x1f%aI%x1f%s%x1f%b",
            "HEAD",
            "--",
            self.rel,
            strip=False,
        )
        return _parse_log(out)

    def path_history(self, rel: str) -> list[StoreCommit]:
        """Every commit of ``HEAD``'s history that changed ``rel`` (merges too), oldest first."""
        if self.head()[1] is None:
            return []
        out = self.run(
            "log",
            "--full-history",
            "--reverse",
            "-z",
            "--format=%H%x1f%P%x1f%aI%x1f%s%x1f%b",
            "HEAD",
            "--",
            rel,
            strip=False,
        )
        return _parse_log(out)

    # -- keeping the work tree honest -------------------------------------------------

    def rel_of(self, path: Path) -> str | None:
        """``path`` relative to the work tree's top (``None`` when outside it)."""
        try:
            return (path.parent.resolve() / path.name).relative_to(self.top).as_posix()
        except ValueError:
            return None

    def exclude(self, path: Path, suffix: str = ".journal.jsonl") -> None:
        """Keep files like ``path`` (working files: run journals) out of ``git status``.

        Written once to ``info/exclude`` in the git directory — this clone's
        own list, never committed; a path outside the work tree needs nothing.
        """
        rel = self.rel_of(path)
        if rel is None:
            return
        folder = posixpath.dirname(rel)
        self.exclude_patterns([f"/{folder}/*{suffix}" if folder else f"/*{suffix}"])

    def exclude_patterns(self, patterns: Sequence[str]) -> None:
        """Add ``patterns`` to this clone's ``info/exclude`` (each once; never committed)."""
        exclude = self.exclude_file
        existing = exclude.read_text("utf-8") if exclude.exists() else ""
        missing = [p for p in patterns if p not in existing.splitlines()]
        if not missing:
            return
        exclude.parent.mkdir(parents=True, exist_ok=True)
        prefix = existing if not existing or existing.endswith("\n") else existing + "\n"
        write_atomic(exclude, (prefix + "\n".join(missing) + "\n").encode("utf-8"))

    def unmerged(self, rel: str | None = None) -> bool:
        """Whether git's index holds ``rel`` (the store by default) as unmerged."""
        out = self.try_run("ls-files", "-u", "--", rel or self.rel)
        return bool(out and out.strip())

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

    # -- settling a commit a kill interrupted -------------------------------------------

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

    def _point_index(self, blobs: Mapping[str, str | None]) -> None:
        present = {rel: blob for rel, blob in blobs.items() if blob is not None}
        removed = [rel for rel, blob in blobs.items() if blob is None]
        if not self.set_index_blobs(present, removed):
            raise GitError(f"{self.index_locked()} while kb finished an interrupted commit")

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

    def blob_in_path(self, commit: str | None, rel: str) -> str | None:
        """The blob of ``rel`` in ``commit`` (``None`` when absent)."""
        if commit is None:
            return None
        out = self.try_run("rev-parse", "-q", "--verify", f"{commit}:{rel}")
        return out.strip() if out else None

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

    # -- writing ----------------------------------------------------------------------

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


_LOCK_EXISTS = re.compile(r"Unable to create '([^']+\.lock)': File exists")


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


def running_git(top: Path, git_dir: Path) -> str | None:
    """A git process running in this repository, described (``None``: none, or cannot tell).

    Read from ``/proc``: a process named ``git`` whose working directory is
    inside the work tree or the git directory, or whose command line names
    either.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    places = (str(top), str(git_dir))
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if (entry / "comm").read_text().strip() != "git":
                continue
            words = (entry / "cmdline").read_bytes().split(b"\0")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        line = " ".join(w.decode("utf-8", "replace") for w in words if w)
        if cwd.startswith(places) or any(place in line for place in places):
            shown = line if len(line) <= 60 else line[:59] + "…"
            return f"pid {entry.name}: {shown}"
    return None


def _refuse_broken_repository(directory: Path, said: str) -> None:
    """A ``.git`` git cannot use (a file pointing nowhere) is an error, not a plain-file store.

    Otherwise every commit would silently become a plain file write beside a
    repository the user thinks holds the store's history. Only the nearest
    ``.git`` itself is judged: git declining to look above a ceiling
    (``GIT_CEILING_DIRECTORIES``, a file-system boundary) leaves a plain store.
    """
    for folder in (directory.resolve(), *directory.resolve().parents):
        marker = folder / ".git"
        if not (marker.exists() or marker.is_symlink()):
            continue
        checked = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "--git-dir"],
            capture_output=True,
            text=True,
            check=False,
        )
        if checked.returncode == 0:
            return  # a usable repository: git chose not to treat the store as in it
        where = ""
        if marker.is_file():
            where = f" (it says {marker.read_text('utf-8', 'replace').strip()[:120]!r})"
        reason = checked.stderr.strip() or said.strip() or "not a repository"
        raise ConfigError(
            str(marker),
            f"git cannot use this repository{where}: {reason}; repair it (or remove it to "
            "keep the store as a plain file): kb will not write the store outside the git "
            "history it lives in",
        )


def store_version(head: bytes) -> int | None:
    """The version a store file's first bytes declare (``None``: not a store's header)."""
    found = re.match(rb'\s*\{\s*"version"\s*:\s*([0-9]+)', head)
    return int(found.group(1)) if found else None


def unmerged_advice(rel: str, driver: bool = False) -> str:
    """What to do about a store git left unmerged (``driver``: kb's driver is registered)."""
    if driver:
        return (
            "git left this file unmerged: kb's merge driver could not merge it (git merge said "
            f"why); kb will not read it as the store: take one side (git checkout --ours {rel} "
            "or --theirs), git add it, finish the merge with git commit, then redo what still "
            "applies of the other side's change with kb (or git merge --abort)"
        )
    return (
        "git left this file unmerged (a merge whose store kb's merge driver did not merge); "
        f"kb will not read it as the store: git merge --abort, kb merge-driver --install, "
        f"then merge again (or resolve it: git checkout --merge -- {rel} shows the conflict)"
    )


MERGE_DRIVER = "kb"
"""The merge driver's name in ``.gitattributes`` (``merge=kb``) and git config."""


def register_merge_driver(repo: GitStoreRepo, command: str) -> None:
    """Register kb's merge driver in the repository's config (``merge.kb.driver``)."""
    repo.run("config", f"merge.{MERGE_DRIVER}.name", "kb: re-apply the other branch's store ops")
    repo.run("config", f"merge.{MERGE_DRIVER}.driver", command)


def textual_merge(ours: Path, base: Path, theirs: Path, labels: Sequence[str]) -> bytes:
    """Git's own line-based merge of three files, conflict markers included."""
    args = ["git", "merge-file", "-p"]
    for label in labels:
        args += ["-L", label]
    from git import Git

    status, out, err = Git(str(ours.parent)).execute(
        [*args, str(ours), str(base), str(theirs)],
        with_extended_output=True,
        with_exceptions=False,
        stdout_as_string=False,
        strip_newline_in_stdout=False,
    )
    if int(status) < 0 or not isinstance(out, bytes):
        raise GitError(f"git merge-file failed: {err!r}")
    return out


def _parse_log(out: str) -> list[StoreCommit]:
    """Records of ``git log -z --format=%H%x1f%P%x1f%aI%x1f%s%x1f%b``."""
    commits = []
    for record in out.split("\0"):
        record = record.strip("\n")
        if not record:
            continue
        oid, parents, date, subject, body = record.split("\x1f", 4)
        commits.append(StoreCommit(oid, tuple(parents.split()), date, subject, body.strip()))
    return commits


@dataclass(frozen=True)
class PushTarget:
    """Where ``--push`` publishes: a remote and the branch on it."""

    remote: str
    branch: str
    local_ref: str

    @property
    def remote_ref(self) -> str:
        """The remote-tracking ref fetched into (``refs/remotes/<remote>/<branch>``)."""
        return f"refs/remotes/{self.remote}/{self.branch}"


def push_target(repo: GitStoreRepo) -> PushTarget:
    """The branch's upstream (``git branch --set-upstream-to``), else ``origin/<branch>``."""
    ref, _ = repo.head()
    if not ref.startswith("refs/heads/"):
        raise GitError("--push needs a branch checked out, not a detached HEAD")
    branch = ref.removeprefix("refs/heads/")
    remote = repo.try_run("config", f"branch.{branch}.remote")
    merge = repo.try_run("config", f"branch.{branch}.merge")
    remote_name = remote.strip() if remote else "origin"
    remote_branch = merge.strip().removeprefix("refs/heads/") if merge else branch
    if repo.try_run("remote", "get-url", remote_name) is None:
        raise GitError(f"--push: no remote {remote_name!r} is configured")
    return PushTarget(remote_name, remote_branch, ref)


#: Messages git prints are matched only in the C locale.
_C_LOCALE = {"LC_ALL": "C", "LANGUAGE": "C"}

_RACE = re.compile(
    r"\[rejected\] \((fetch first|non-fast-forward|stale info)\)"
    r"|\[remote rejected\] \((cannot lock ref|failed to update ref|failed to lock)"
)


def push(repo: GitStoreRepo, target: PushTarget) -> None:
    """Push the branch without force; :class:`PushRejected` when another push won a race.

    The verdict comes from ``--porcelain`` status lines in the C locale, never
    from advice text: a hook that refuses the push is a :class:`GitError`
    (exit 1), not a race to retry.
    """
    status, out, err = repo.call(
        "push",
        "--porcelain",
        target.remote,
        f"{target.local_ref}:refs/heads/{target.branch}",
        env=_C_LOCALE,
    )
    if status == 0:
        return
    refused = [line for line in out.splitlines() if line.startswith("!")]
    if refused and all(_RACE.search(line) for line in refused):
        raise PushRejected(refused[0].split("\t")[-1])
    detail = refused[0].split("\t")[-1] if refused else (err.strip().splitlines() or [""])[-1]
    raise GitError(f"git push to {target.remote} failed: {detail}")


def fetch(repo: GitStoreRepo, target: PushTarget) -> str | None:
    """Fetch the remote branch; its tip (``None`` when the remote has no such branch)."""
    status, _, err = repo.call(
        "fetch",
        "--quiet",
        target.remote,
        f"+refs/heads/{target.branch}:{target.remote_ref}",
        env=_C_LOCALE,
    )
    if status != 0:
        if "couldn't find remote ref" in err:
            return None
        raise GitError(f"git fetch {target.remote} failed: {err.strip()}")
    return repo.run("rev-parse", target.remote_ref).strip()


def unpublished(repo: GitStoreRepo, target: PushTarget, remote_tip: str | None) -> list[str]:
    """Local commits on the branch that the remote does not have."""
    base = [f"^{remote_tip}"] if remote_tip else []
    return repo.run("rev-list", target.local_ref, *base).split()


def check_publishable(repo: GitStoreRepo, target: PushTarget) -> None:
    """Before a ``--push`` commit: the branch must carry nothing unpublished already.

    Otherwise the push would publish work the user never asked kb to publish
    (or an earlier run's kept commit, which they should look at first).
    """
    if repo.head()[0] != target.local_ref:
        raise GitError(f"--push: HEAD is no longer {target.local_ref}")
    remote_tip = fetch(repo, target)
    if remote_tip is None:
        raise GitError(
            f"--push: {target.remote} has no branch {target.branch!r} yet; push it once yourself"
        )
    ahead = unpublished(repo, target, remote_tip)
    if ahead:
        raise GitError(
            f"--push: {target.local_ref.removeprefix('refs/heads/')} has {len(ahead)} "
            f"unpublished commit(s) (e.g. {ahead[0][:12]}); push or drop them first, kb only "
            "publishes its own commit"
        )


def catch_up(repo: GitStoreRepo, target: PushTarget, droppable: set[str]) -> str:
    """Fetch the remote branch and move the local branch onto it.

    The local branch may be ahead of the remote only by ``droppable`` — the
    kb commit the rejected push carried, whose *ops* the caller re-applies on
    the fresh remote store. Anything else stops everything: kb never discards
    work this call did not make. The move is a two-tree ``read-tree -m -u``
    (the user's staged and unstaged changes elsewhere are kept; a conflicting
    one stops it) and a compare-and-swap ``update-ref`` of the branch itself,
    so a branch switched or moved meanwhile is never touched.
    """
    ref, old = repo.head()
    if ref != target.local_ref or old is None:
        raise GitError(
            f"--push: HEAD moved off {target.local_ref} during the push; nothing was reset"
        )
    remote_tip = fetch(repo, target)
    if remote_tip is None:
        raise GitError(f"--push: {target.remote} has no branch {target.branch!r}")
    foreign = [oid for oid in unpublished(repo, target, remote_tip) if oid not in droppable]
    if foreign:
        raise GitError(
            f"--push: the local branch has {len(foreign)} unpublished commit(s) this push did "
            f"not make (e.g. {foreign[0][:12]}); push or rebase them onto {target.remote}/"
            f"{target.branch} first"
        )
    repo.try_run("update-index", "-q", "--refresh")
    repo.run("read-tree", "-m", "-u", old, remote_tip)
    repo.run("update-ref", "-m", "kb: catch up with the remote", target.local_ref, remote_tip, old)
    return remote_tip


def quick_location(store_path: Path) -> tuple[Path, str] | None:
    """The git directory and the store's work-tree path, by one git process (no GitPython).

    For the checks every read makes (an interrupted commit waiting); ``None``
    outside a work tree or where git cannot tell.
    """
    directory = store_path.parent
    try:
        found = subprocess.run(
            ["git", "-C", str(directory), "rev-parse", "--absolute-git-dir", "--show-toplevel"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return None
    lines = found.stdout.splitlines()
    if found.returncode != 0 or len(lines) < 2:
        return None
    try:
        rel = (directory.resolve() / store_path.name).relative_to(Path(lines[1]).resolve())
    except ValueError:
        return None
    return Path(lines[0]), rel.as_posix()


def read_guard_issue(store_path: Path, file_version: int) -> str | None:
    """Why a work-tree store must not be read as the store (``None``: it may).

    Asked on every read, so it is two quick git processes and no GitPython:
    git's index holding the store unmerged (a merge kb's driver did not
    merge: the file may be one side only), or ``HEAD`` holding a newer store
    than the file (committing the file would drop claims).
    """
    directory = store_path.parent
    try:
        unmerged = subprocess.run(
            ["git", "-C", str(directory), "ls-files", "-u", "--", store_path.name],
            capture_output=True,
            check=False,
        )
    except OSError:
        return None  # no git on this machine: a plain file store
    if unmerged.returncode != 0:
        return None  # not in a git work tree
    rel = store_path.name
    if unmerged.stdout.strip():
        driver = subprocess.run(
            ["git", "-C", str(directory), "config", "--get", f"merge.{MERGE_DRIVER}.driver"],
            capture_output=True,
            check=False,
        )
        return unmerged_advice(rel, b"kb merge-driver" in driver.stdout)
    # A blob above core.bigFileThreshold is streamed rather than inflated whole: the
    # first bytes of a packed 100 MB store then cost nothing (0.15 s inflated whole).
    with subprocess.Popen(
        ["git", "-C", str(directory), "-c", "core.bigFileThreshold=1m", "cat-file", "blob"]
        + [f"HEAD:./{store_path.name}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    ) as shown:
        assert shown.stdout is not None
        first = shown.stdout.read(200)
        shown.kill()
    committed = store_version(first)
    if committed is None or committed <= file_version:
        return None
    return (
        f"the work-tree store is v{file_version} but git's HEAD holds v{committed}: the file "
        "is behind (committing it would drop claims); restore it with git restore "
        f"--staged --worktree {rel}"
    )
