"""Writing a file so that a crash leaves the old bytes or the new ones, never a mix.

The one way kb replaces a file (the store, a cassette, an evidence file, a
file restored from git): the new bytes go to a unique temp file in the same
directory, are fsynced, the temp file takes the target's permission bits
(a ``chmod 444`` store stays 444), ``os.replace`` swaps it in and the
directory is fsynced. A failure removes the temp file and is reported as an
``OSError`` naming the *target*, never the temp file's name.

Split in two (:func:`stream_temp_beside`, :func:`replace_with`) because a
store commit writes every file before it publishes its git commit: the
commit window (:mod:`kb.store.commit_window`) swaps a set of files in under
an intent, so that until the ref moves every step can be undone, and a kill
is settled by the next writer.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

TEMP_SUFFIX = ".kb-tmp"
BACKUP_SUFFIX = ".kb-old"


def temp_files_beside(path: Path) -> list[Path]:
    """Temp files (and undo copies) a killed writer may have left next to ``path``."""
    return [
        found
        for suffix in (TEMP_SUFFIX, BACKUP_SUFFIX)
        for found in path.parent.glob(f".{path.name}.*{suffix}")
    ]


def _mode_for(path: Path) -> int:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


@contextmanager
def _target_named(temp: Path, path: Path) -> Iterator[None]:
    """On any failure remove ``temp``; an ``OSError`` names ``path``, not the temp file."""
    try:
        yield
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def write_temp_beside(path: Path, data: bytes) -> Path:
    """``data`` in a new, fsynced temp file next to ``path`` with ``path``'s mode."""
    temp, _ = stream_temp_beside(path, lambda handle: handle.write(data))
    return temp


class _Digesting(io.RawIOBase):
    """A write-only stream that hashes what passes through it."""

    def __init__(self, target: IO[bytes]) -> None:
        self._target = target
        self.sha256 = hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = bytes(data)
        self.sha256.update(view)
        self._target.write(view)
        return len(view)


def stream_temp_beside(
    path: Path, fill: Callable[[IO[bytes]], object], owner: str = ""
) -> tuple[Path, str]:
    """A new, fsynced temp file next to ``path`` (with its mode) that ``fill`` writes.

    Returns the temp file and the sha256 of what was written, so a large file
    is never held in memory to be written or hashed. ``owner`` goes into the
    name (``.<name>.<owner>-<random>.kb-tmp``) so that whoever made it can
    tell its own leftovers from another writer's.
    """
    prefix = f".{path.name}.{owner}-" if owner else f".{path.name}."
    try:
        fd, name = tempfile.mkstemp(prefix=prefix, suffix=TEMP_SUFFIX, dir=path.parent)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    temp = Path(name)
    with _target_named(temp, path):
        with os.fdopen(fd, "wb") as raw:
            digesting = _Digesting(raw)
            with io.BufferedWriter(digesting, buffer_size=1 << 20) as buffered:
                fill(buffered)
                buffered.flush()
            raw.flush()
            os.fsync(raw.fileno())
        os.chmod(temp, _mode_for(path))
    return temp, digesting.sha256.hexdigest()


def replace_with(temp: Path, path: Path) -> None:
    """Swap ``temp`` in as ``path`` and make the rename durable."""
    with _target_named(temp, path):
        os.replace(temp, path)
    fsync_directory(path.parent)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path``'s content with ``data`` atomically and durably."""
    replace_with(write_temp_beside(path, data), path)


def fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_FS_IOC_GETFLAGS = 0x80086601
_IMMUTABLE_FL = 0x10
_APPEND_FL = 0x20


def replace_problem(path: Path) -> str | None:
    """Why ``path`` could not be replaced by kb's atomic write (``None``: it can).

    Checked before a commit (and before a sweep spends anything): the
    nearest existing directory must take a new file, ``path`` must not be a
    directory, and an existing file must not be immutable or append-only
    (``chattr +i``/``+a``), which no rename can replace.
    """
    directory = path.parent
    while not directory.exists():
        directory = directory.parent
    if not directory.is_dir():
        return f"{directory} is a file, not a directory"
    if path.is_dir():
        return "is a directory"
    for stale in directory.glob(f".kb-probe.*{TEMP_SUFFIX}"):
        # a probe a killed kb left (empty, hidden from git): another kb's live probe may go
        # too, and its unlink below tolerates that
        with contextlib.suppress(OSError):
            stale.unlink()
    try:
        fd, name = tempfile.mkstemp(prefix=".kb-probe.", suffix=TEMP_SUFFIX, dir=directory)
    except OSError as exc:
        return f"cannot write in {directory}: {exc.strerror}"
    os.close(fd)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name)
    if path.exists() and _inode_flags(path) & (_IMMUTABLE_FL | _APPEND_FL):
        return "is immutable or append-only (chattr +i/+a): no write can replace it"
    if path.exists() and _is_mount_point(path):
        return "is a mount point (a bind mount?): no rename can replace it"
    return None


def _is_mount_point(path: Path) -> bool:
    """Whether ``path`` itself is mounted on (a file bind-mounted into a container, say).

    Read from ``/proc/self/mountinfo`` (field 5, octal-escaped); ``False``
    where the system does not tell.
    """
    try:
        lines = Path("/proc/self/mountinfo").read_text("utf-8", "replace").splitlines()
    except OSError:
        return False
    target = os.path.realpath(path)
    for line in lines:
        fields = line.split(" ")
        if len(fields) > 4 and _unescape_mount(fields[4]) == target:
            return True
    return False


def _unescape_mount(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def _inode_flags(path: Path) -> int:
    """The file's inode flags (0 where the system or file system does not tell)."""
    try:
        import array
        import fcntl

        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (ImportError, OSError):
        return 0
    try:
        flags = array.array("l", [0])
        fcntl.ioctl(fd, _FS_IOC_GETFLAGS, flags)
        return int(flags[0])
    except OSError:
        return 0
    finally:
        os.close(fd)
