"""The commit window: the files of one store commit go in as one step that a kill cannot split.

A commit writes several files — the night's evidence, the canary baselines,
the epochs file, the settings, the store last — and, inside git, then moves
the branch. Between the first rename and the ref move a kill leaves some
files new and some old. The window makes that state recognizable and
decidable:

1. every new file is written to a temp file beside its target and fsynced
   (and, inside git, the commit is built in the object database);
2. every target that exists gets an undo copy (a hard link, O(1) whatever
   its size) — the temps and undo copies are hidden files that git ignores
   (``.git/info/exclude``), so ``git add -A`` never commits them;
3. the **intent** is written atomically: each target with the sha256 of
   its new bytes, its temp and its undo copy, and the git commit it
   belongs to (in the git directory, or beside a plain store);
4. the temps are renamed over their targets, the store last, each rename
   made durable; inside git the ref then moves by compare-and-swap;
5. the undo copies and the intent go.

Whoever holds the store lock next **settles** a leftover intent before
anything else (``KnowledgeStore.settle``): when every file of the commit is
complete on disk — renamed in, or whole in its fsynced temp, which the
intent is written only after — the commit is finished: the remaining
temps are renamed in and, inside git, the ref moves to it (or, when the
branch moved meanwhile because the user committed what ``git status``
showed, the same change is committed again on top of the branch).
Otherwise (a file of it was edited or removed since) it is undone, every
file put back as it was; a sweep undone this way loses nothing paid: its
journal is still there, and ``kb sweep --resume`` commits the night from
it.

Only :mod:`kb.store.git` talks to git; this module decides and moves files.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from kb.atomicfile import BACKUP_SUFFIX, TEMP_SUFFIX, fsync_directory, write_atomic
from kb.errors import ConfigError
from kb.sidefile import SideFormat

INTENT = SideFormat("commit intent", key="intent")
INTENT_SUFFIX = ".kb-intent"
HIDDEN_PATTERNS = (f".*{TEMP_SUFFIX}", f".*{BACKUP_SUFFIX}", f".*{INTENT_SUFFIX}")
"""What ``.git/info/exclude`` lists so that ``git add -A`` never sees a commit's leftovers."""


FileState = Literal["new", "old", "other"]


@dataclass(frozen=True)
class PendingFile:
    """One target of the commit: what it will hold, and how to put it back."""

    path: Path
    """The target (absolute)."""
    sha256: str | None
    """The sha256 of the bytes the commit puts there (``None``: the commit removes it)."""
    temp: Path | None = None
    """The fsynced temp file holding those bytes, until it is renamed in."""
    backup: Path | None = None
    """The undo copy of what the target held (``None``: it did not exist)."""
    rel: str | None = None
    """Its path in the git work tree (``None``: not part of the git commit)."""
    old_stamp: tuple[int, int] | None = None
    """(size, mtime in ns) of the old file when the undo copy was made: an edit in place
    (which a hard-linked undo copy would share) changes it."""

    def holds_new(self) -> bool:
        """Whether the target holds what the commit puts there (is absent, for a removal)."""
        if self.sha256 is None:
            return not self.path.exists()
        return file_sha256(self.path) == self.sha256

    def holds_old(self) -> bool:
        """Whether the target still holds what it held before the commit (absent: absent)."""
        if self.backup is None:
            return not self.path.exists()
        if not self.backup.exists() or not self.path.exists():
            return False
        if self.old_stamp is not None:
            return file_stamp(self.path) == self.old_stamp  # untouched since (no edit in place)
        return file_sha256(self.path) == file_sha256(self.backup)

    def state(self) -> FileState:
        """Where the target stands: ``new``, ``old`` or ``other``.

        ``new``: the commit's bytes are in place; ``old``: nothing moved it
        yet; ``other``: someone changed it since (a pull, a checkout, an edit).
        """
        if self.holds_new():
            return "new"
        return "old" if self.holds_old() else "other"

    def finishable(self) -> bool:
        """In place, or still old with the new bytes whole in the fsynced temp."""
        found = self.state()
        if found == "new":
            return True
        if found == "other":
            return False
        return self.sha256 is None or (
            self.temp is not None and file_sha256(self.temp) == self.sha256
        )


@dataclass(frozen=True)
class CommitIntent:
    """What a commit in its window is doing; written before the first file moves."""

    label: str
    """What the commit is (its subject line), for the messages that name it."""
    files: tuple[PendingFile, ...]
    """In swap order: removals first, then the new files, the store last."""
    report_id: str | None = None
    commit: str | None = None
    """The git commit built for it (``None``: outside git, or nothing git tracks)."""
    parent: str | None = None
    """The commit's parent: where the branch stood when the commit was built."""
    ref: str | None = None
    """The branch the commit advances."""

    def render(self, base: Path) -> bytes:
        """The intent file's bytes; paths under ``base`` are written relative to it.

        So a repository moved or copied after a crash (a CI workspace) still
        names its own files.
        """
        top = base.resolve()

        def named(path: Path | None) -> str | None:
            if path is None:
                return None
            try:
                return path.resolve().relative_to(top).as_posix()
            except ValueError:
                return str(path)

        document: dict[str, Any] = {
            **INTENT.stamp(),
            "label": self.label,
            "reportId": self.report_id,
            "commit": self.commit,
            "parent": self.parent,
            "ref": self.ref,
            "files": [
                {
                    "path": named(f.path),
                    "sha256": f.sha256,
                    "temp": named(f.temp),
                    "backup": named(f.backup),
                    "oldStamp": list(f.old_stamp) if f.old_stamp else None,
                    "rel": f.rel,
                }
                for f in self.files
            ],
        }
        return (json.dumps(document, indent=1) + "\n").encode("utf-8")

    @classmethod
    def parse(cls, data: bytes, where: str, base: Path) -> CommitIntent:
        """Read an intent file (``ConfigError`` naming ``where`` when it is not one)."""

        def path(text: str | None) -> Path | None:
            return base / text if text else None

        try:
            document = INTENT.load(data, where)
            files = tuple(
                PendingFile(
                    base / item["path"],
                    item["sha256"],
                    path(item.get("temp")),
                    path(item.get("backup")),
                    item.get("rel"),
                    tuple(item["oldStamp"]) if item.get("oldStamp") else None,
                )
                for item in document["files"]
            )
            return cls(
                str(document["label"]),
                files,
                document.get("reportId"),
                document.get("commit"),
                document.get("parent"),
                document.get("ref"),
            )
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            problem = str(exc)
        except ConfigError as exc:
            problem = "; ".join(exc.issues)
        raise ConfigError(
            where,
            f"kb's record of an interrupted commit cannot be read ({problem}); move it away "
            "and check git status",
        )

    @property
    def complete(self) -> bool:
        """Whether every file of the commit is complete on disk.

        Renamed in, or untouched with its new bytes whole in the fsynced temp
        (a removal: removing it finishes it). A file someone changed since
        (neither the old nor the new bytes) makes the commit incomplete.
        """
        return all(f.finishable() for f in self.files)

    @property
    def changed_since(self) -> tuple[PendingFile, ...]:
        """The files that hold neither the commit's bytes nor their old ones."""
        return tuple(f for f in self.files if f.state() == "other")

    def finish_files(self) -> None:
        """Move in, in order, each file of a complete commit still holding its old bytes."""
        for pending in self.files:
            if pending.state() != "old":
                continue
            if pending.temp is not None:
                os.replace(pending.temp, pending.path)
            else:
                pending.path.unlink(missing_ok=True)
            fsync_directory(pending.path.parent)

    @property
    def tracked(self) -> tuple[PendingFile, ...]:
        """The files that are part of the git commit."""
        return tuple(f for f in self.files if f.rel is not None)


def file_sha256(path: Path) -> str | None:
    """The sha256 of a file's bytes (``None``: there is no such file)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    return digest.hexdigest()


def file_stamp(path: Path) -> tuple[int, int] | None:
    """(size, mtime in ns) of a file (``None``: there is none).

    No inode: a repository copied or moved after a crash keeps sizes and
    modification times (``cp -a``), not inodes.
    """
    try:
        found = path.stat()
    except OSError:
        return None
    return (found.st_size, found.st_mtime_ns)


def read_intent(path: Path, base: Path) -> CommitIntent | None:
    """The intent at ``path``, its relative paths under ``base`` (``None``: none is pending)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return CommitIntent.parse(data, str(path), base)


def looks_legacy(path: Path) -> bool:
    """Whether ``path`` is kb 3's intent marker (a commit oid, then paths; no JSON)."""
    try:
        first = path.read_bytes()[:41]
    except OSError:
        return False
    return len(first) >= 40 and all(chr(b) in "0123456789abcdef" for b in first[:40])


def _undo_copy(path: Path, owner: str) -> Path | None:
    """A hidden hard link to ``path`` beside it (a copy where links are refused)."""
    if not path.exists():
        return None
    for _ in range(100):
        backup = path.with_name(f".{path.name}.{owner}-{secrets.token_hex(4)}{BACKUP_SUFFIX}")
        try:
            os.link(path, backup)
            return backup
        except FileExistsError:
            continue  # a name another writer left: draw again
        except OSError:
            break
    try:
        with open(path, "rb") as source, open(backup, "xb") as copy:
            shutil.copyfileobj(source, copy)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    return backup


@dataclass
class CommitWindow:
    """One commit's files, swapped in under a durable intent (see the module docstring)."""

    intent_path: Path
    intent: CommitIntent
    _moved: list[PendingFile] = field(default_factory=list)

    @classmethod
    def open(cls, intent_path: Path, intent: CommitIntent, base: Path, owner: str) -> CommitWindow:
        """Make each target's undo copy, then write the intent: nothing has moved yet."""
        files: list[PendingFile] = []
        try:
            for pending in intent.files:
                backup = _undo_copy(pending.path, owner)
                stamp = file_stamp(pending.path) if backup is not None else None
                files.append(replace(pending, backup=backup, old_stamp=stamp))
            opened = replace(intent, files=tuple(files))
            write_atomic(intent_path, opened.render(base))
        except BaseException:
            for made in files:
                if made.backup is not None:
                    made.backup.unlink(missing_ok=True)
            raise
        return cls(intent_path, opened)

    def swap(self) -> None:
        """Move every file in, in the intent's order, each rename made durable."""
        for pending in self.intent.files:
            try:
                if pending.temp is not None:
                    os.replace(pending.temp, pending.path)
                else:
                    pending.path.unlink(missing_ok=True)
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, str(pending.path)) from None
            self._moved.append(pending)
            fsync_directory(pending.path.parent)

    def undo(self) -> None:
        """Put every file back as it was (the commit did not happen)."""
        restore(self.intent.files)
        drop_leftovers(self.intent.files)
        self.intent_path.unlink(missing_ok=True)

    def close(self) -> None:
        """The commit stands: drop the undo copies and the intent."""
        drop_leftovers(self.intent.files)
        self.intent_path.unlink(missing_ok=True)


def restore(files: Sequence[PendingFile], keep: Iterable[Path] = ()) -> None:
    """Undo: each target that holds the commit's bytes gets its old bytes back.

    A target the commit never reached (still old) is left alone, and so is
    one in ``keep`` (what git's branch holds already). A target that holds
    neither the old nor the new bytes is someone else's (a pull, an edit) and
    is never touched; nor is one whose undo copy is gone (nothing to put back).
    """
    kept = set(keep)
    for pending in reversed(files):
        if pending.path in kept or pending.state() != "new":
            continue
        if pending.backup is not None:
            if not pending.backup.exists():
                continue
            os.replace(pending.backup, pending.path)
        elif pending.sha256 is not None:
            pending.path.unlink(missing_ok=True)
        else:
            continue  # a removal of a file that was not there: nothing to put back
        fsync_directory(pending.path.parent)


def drop_leftovers(files: Sequence[PendingFile]) -> None:
    """Remove the temps and undo copies the commit made (those that are still there)."""
    for pending in files:
        for leftover in (pending.temp, pending.backup):
            if leftover is not None and os.path.lexists(leftover):
                leftover.unlink(missing_ok=True)


Outcome = Literal["none", "finished", "undone"]


@dataclass(frozen=True)
class Decision:
    """How an interrupted commit is settled."""

    outcome: Literal["finished", "undone"]
    commit: str | None = None
    """The git commit that stands for it (finished inside git)."""
    how: Literal["stands", "move", "again", "files"] = "files"
    """Finished: the branch holds it already (``stands``), the ref moves to it
    (``move``), it is committed again on a branch that moved (``again``), or
    outside git only its files (``files``)."""
    keep: tuple[Path, ...] = ()
    """Files an undo leaves as they are: git's branch holds their new bytes already."""
    detail: str = ""

    @classmethod
    def on_disk(cls, intent: CommitIntent) -> Decision:
        """Outside git: finished when every file is complete, else undone."""
        if intent.complete:
            return cls("finished")
        return cls("undone", detail=incomplete_detail(intent))


def incomplete_detail(intent: CommitIntent) -> str:
    """Why an interrupted commit cannot be finished, in a few words."""
    changed = intent.changed_since
    if changed:
        names = ", ".join(f.path.name for f in changed[:3])
        return f"{names} changed since; left as they are"
    return "the new bytes of a file are gone"


@dataclass(frozen=True)
class Settled:
    """What settling an interrupted commit did."""

    outcome: Outcome
    """``none`` (nothing was interrupted), ``finished`` or ``undone``."""
    label: str = ""
    """The interrupted commit's subject line."""
    report_id: str | None = None
    git_commit: str | None = None
    """The commit that now stands for it (finished inside git)."""
    detail: str = ""
    """How it was finished or why it was undone."""
    changed: tuple[str, ...] = ()
    """Files of it someone changed since (left as they are)."""

    def describe(self) -> str | None:
        """One line for the user (``None``: nothing was interrupted)."""
        if self.outcome == "none":
            return None
        where = f" [git {self.git_commit[:12]}]" if self.git_commit else ""
        if self.outcome == "finished":
            return f"finished an interrupted commit: {self.label}{where}{self.detail}"
        resume = (
            f"; its runs are journaled: kb sweep SPEC --resume --report-id {self.report_id} "
            "commits the night"
            if self.report_id
            else f"; check {', '.join(self.changed)} before running that command again"
            if self.changed
            else "; nothing of it was committed: run that command again"
        )
        return f"undid an interrupted commit ({self.detail}): {self.label}{resume}"


def sweep_orphans(directories: Iterable[Path], owner: str) -> None:
    """Remove the temps and undo copies ``owner``'s writers killed before their intent left.

    Only names carrying ``owner`` (see :func:`kb.atomicfile.stream_temp_beside`):
    another store writing into the same directory (or a shared evidence
    directory), a merge driver or a cassette keeps its own.
    """
    for directory in dict.fromkeys(directories):
        if not directory.is_dir():
            continue
        for suffix in (TEMP_SUFFIX, BACKUP_SUFFIX):
            for orphan in directory.glob(f".*.{glob_escape(owner)}-*{suffix}"):
                orphan.unlink(missing_ok=True)


def glob_escape(name: str) -> str:
    """``name`` with glob's special characters matched literally."""
    return "".join(f"[{ch}]" if ch in "*?[" else ch for ch in name)
