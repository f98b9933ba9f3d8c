"""Settling a commit a kill interrupted: every writer first finishes or undoes it.

A commit's intent (:mod:`kb.store.commit_window`) names each file with the
sha256 of its new bytes; a writer that finds one decides from the files on
disk and from git (:class:`kb.store.git.GitStoreRepo`) whether the commit
stands (every file complete: finished) or not (undone), and read-only
commands only report it (:meth:`StoreSettling.pending_commit`).
"""

from __future__ import annotations

import hashlib
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from kb.atomicfile import TEMP_SUFFIX
from kb.errors import (
    ConfigError,
)
from kb.store.commit_window import (
    HIDDEN_PATTERNS,
    CommitIntent,
    Decision,
    Settled,
    drop_leftovers,
    restore,
    sweep_orphans,
)

if TYPE_CHECKING:
    pass

from kb.store.home import MANIFESTS_DIR
from kb.store.storefile import HeadRef, StoreFile


class StoreSettling(StoreFile):
    """Finishes or undoes the commit a killed writer left, and reports one pending."""

    @property
    def _intent_base(self) -> Path:
        """What an intent's paths are relative to: the work tree's top, else the store's dir."""
        return self.git.top if self.git is not None else self.path.parent

    @property
    def intent_path(self) -> Path:
        """Where a commit in its window records its intent."""
        git = self.git
        return self.home.intent_file(git.git_dir if git else None, git.rel if git else None)

    @cached_property
    def owner(self) -> str:
        """A tag in the names of this store's temp files and undo copies.

        The hash of the store's path in its work tree (its file name outside
        git): the same when the repository is moved or copied after a crash,
        different for every other store of the repository.
        """
        name = self.git.rel if self.git is not None else self.path.name
        return hashlib.sha256(name.encode()).hexdigest()[:8]

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
        manifests = [d / MANIFESTS_DIR for d in own]  # a manifest's temp is in its folder
        sweep_orphans([self.path.parent, *own, *manifests], self.owner)
        intent = self.intent_path
        for orphan in intent.parent.glob(f".{intent.name}.*{TEMP_SUFFIX}"):
            orphan.unlink(missing_ok=True)

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
