"""Writing a file so that a crash leaves the old bytes or the new ones, never a mix.

The one way kb replaces a file (the store, a cassette, an evidence file, a
file restored from git): the new bytes go to a unique temp file in the same
directory, are fsynced, the temp file takes the target's permission bits
(a ``chmod 444`` store stays 444), ``os.replace`` swaps it in and the
directory is fsynced. A failure removes the temp file and is reported as an
``OSError`` naming the *target*, never the temp file's name.

Split in two (:func:`write_temp_beside`, :func:`replace_with`) because the
store publishes its git commit between the two steps.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

TEMP_SUFFIX = ".kb-tmp"


def temp_files_beside(path: Path) -> list[Path]:
    """Temp files a killed writer may have left next to ``path``."""
    return list(path.parent.glob(f".{path.name}.*{TEMP_SUFFIX}"))


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


def stream_temp_beside(path: Path, fill: Callable[[IO[bytes]], object]) -> tuple[Path, str]:
    """A new, fsynced temp file next to ``path`` (with its mode) that ``fill`` writes.

    Returns the temp file and the sha256 of what was written, so a large file
    is never held in memory to be written or hashed.
    """
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
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
