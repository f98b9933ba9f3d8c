"""The store file on disk: reading it, and the handle every part of the writable store shares.

:class:`StoreFile` knows where the store is, its home (the files beside it),
its git repository, its cross-process lock and how to read it; the layers
above it settle an interrupted commit (:mod:`kb.store.settling`), make a
commit (:mod:`kb.store.committing`) and rebase and publish one
(:mod:`kb.store.filestore`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from kb.errors import (
    ConfigError,
    KnowledgeCasError,
    StoreDirtyError,
)
from kb.schema import STORE_NAME
from kb.store import verified
from kb.store.home import StoreHome
from kb.store.ops import (
    DEFAULT_ACTIVE_CLAIMS_CAP,
)
from kb.store.snapshot import EMPTY_SNAPSHOT, Snapshot
from kb.store.validation import index_store, parse_store

if TYPE_CHECKING:
    from filelock import FileLock

    from kb.store.git import GitStoreRepo


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


def validate_attempts(attempts: object) -> int:
    """``attempts`` must be a positive integer; checked before anything is read."""
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise ConfigError("attempts", f"must be a positive integer, got {attempts!r}")
    return attempts


class StoreFile:
    """The store file, its lock, its home and its git: what every layer above reads."""

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

    def _read_with_stamp(self) -> tuple[Snapshot, FileStamp]:
        # The stamp first: a change between the two is then seen at commit time.
        stamp = _stamp(self.path)
        return self.read(), stamp

    def read_only(self) -> ReadOnlyStore:
        """A handle for code that must not write (runs, graders)."""
        return ReadOnlyStore(self.path)

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
