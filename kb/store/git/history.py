"""Reading the store's history from git: blobs, commits, trailers (never writing)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kb.errors import GitError

if TYPE_CHECKING:
    pass

from kb.store.git.runner import GitRunner


@dataclass(frozen=True)
class StoreCommit:
    """One git commit that touched the store file."""

    oid: str
    parents: tuple[str, ...]
    date: str
    subject: str
    body: str


_LOG_FORMAT = "%H%x1f%P%x1f%aI%x1f%s%x1f%b"
"""Hash, parents, author date, subject, body: one record per commit (``git log -z``)."""


def _parse_log(out: str) -> list[StoreCommit]:
    """Records of ``git log -z --format=`` :data:`_LOG_FORMAT`."""
    commits = []
    for record in out.split("\0"):
        record = record.strip("\n")
        if not record:
            continue
        oid, parents, date, subject, body = record.split("\x1f", 4)
        commits.append(StoreCommit(oid, tuple(parents.split()), date, subject, body.strip()))
    return commits


class GitHistory(GitRunner):
    """What git holds of the store: blobs, the commits that touched it, their trailers."""

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

    def blob_in_path(self, commit: str | None, rel: str) -> str | None:
        """The blob of ``rel`` in ``commit`` (``None`` when absent)."""
        if commit is None:
            return None
        out = self.try_run("rev-parse", "-q", "--verify", f"{commit}:{rel}")
        return out.strip() if out else None

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
            f"--format={_LOG_FORMAT}",
            "HEAD",
        )
        found = []
        for commit in _parse_log(out if status == 0 else ""):
            if any(line.strip() == f"{key}: {value}" for line in commit.body.splitlines()):
                found.append(commit)
        return found

    def merges(self, since: str | None = None) -> list[StoreCommit]:
        """Merge commits on the first-parent line of ``HEAD`` (whatever their store).

        ``since``: only those after that commit (an ancestor of ``HEAD``).
        """
        return self._log("--first-parent", "--merges", _range(since))

    def store_history(self, since: str | None = None) -> list[StoreCommit]:
        """Commits on the first-parent line of ``HEAD`` that touched the store, oldest first.

        ``since``: only those after that commit (an ancestor of ``HEAD``).
        """
        return self._log("--first-parent", "--reverse", _range(since), "--", self.rel)

    def path_history(self, rel: str, since: str | None = None) -> list[StoreCommit]:
        """Every commit of ``HEAD``'s history that changed ``rel`` (merges too), oldest first.

        ``since``: only those not reachable from that commit.
        """
        return self._log("--full-history", "--reverse", _range(since), "--", rel)

    def _log(self, *args: str) -> list[StoreCommit]:
        """``git log ARGS`` as commits (none before the first commit)."""
        if self.head()[1] is None:
            return []
        return _parse_log(self.run("log", "-z", f"--format={_LOG_FORMAT}", *args, strip=False))

    def unmerged(self, rel: str | None = None) -> bool:
        """Whether git's index holds ``rel`` (the store by default) as unmerged."""
        out = self.try_run("ls-files", "-u", "--", rel or self.rel)
        return bool(out and out.strip())


def _range(since: str | None) -> str:
    """``HEAD``, or the commits of ``HEAD`` not reachable from ``since``."""
    return "HEAD" if since is None else f"{since}..HEAD"
