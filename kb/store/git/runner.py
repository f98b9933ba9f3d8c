"""Running git in one work tree: the runner every other part of the store's git uses.

:class:`GitRunner` finds the repository that holds a store, runs git in it
(through GitPython's process wrapper: one way in, so a lock a killed git
left is told the same everywhere, :meth:`GitRunner.lock_advice`), keeps
kb's working files out of ``git status`` and reads where ``HEAD`` points.
It knows nothing of the store's history or its commits.
"""

from __future__ import annotations

import posixpath
import re
import secrets
import shlex
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from kb.atomicfile import write_atomic
from kb.errors import GitError

if TYPE_CHECKING:
    from git import Git

from typing import Self

from kb.store.git.quick import _refuse_broken_repository, running_git

ZERO_OID = "0" * 40

_INDEX_LOCK_RETRIES = 20

_FALLBACK_IDENTITY = {
    "GIT_AUTHOR_NAME": "kb",
    "GIT_AUTHOR_EMAIL": "kb@localhost",
    "GIT_COMMITTER_NAME": "kb",
    "GIT_COMMITTER_EMAIL": "kb@localhost",
}

_LOCK_EXISTS = re.compile(r"Unable to create '([^']+\.lock)': File exists")


class GitRunner:
    """Runs git in the work tree that holds a store file."""

    def __init__(self, top: Path, rel: str, store_path: Path) -> None:
        self.top = top
        self.rel = rel
        self.store_path = store_path
        from git import Git  # GitPython costs ~0.1 s to import: only where git is driven

        self._git: Git = Git(str(top))
        self._identity_env: dict[str, str] | None = None

    @classmethod
    def discover(cls, store_path: Path) -> Self | None:
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

    def head(self) -> tuple[str, str | None]:
        """The ref a commit advances (``refs/heads/X`` or ``HEAD`` when detached), and its oid."""
        ref = self.try_run("symbolic-ref", "-q", "HEAD")
        ref = ref.strip() if ref else "HEAD"
        oid = self.try_run("rev-parse", "-q", "--verify", "HEAD^{commit}")
        return ref, (oid.strip() if oid else None)

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
