"""Remembering which store files kb has already validated in full.

Validating a 10,000-claim store (every field, then the JCS hash) is most of
``kb list``'s time, and the same bytes are read again and again between
commits. kb records the sha256 of each file it validated completely, in the
user's cache directory (``$XDG_CACHE_HOME/kb/verified``, else
``~/.cache/kb/verified``), keyed also by kb's version and the validation rules'
version. Bytes with a recorded digest are parsed without re-validating;
anything else — a hand edit, a pull, a truncated file — is validated in full
as always. The record only vouches for bytes whose hash it names, so it can
never make a changed file pass. ``KB_NO_CACHE=1`` turns it off; a cache that
cannot be written is silently skipped.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import kb

#: Bump when the read-time validation rules change, so older records stop counting.
RULES_VERSION = "1"


def digest(data: bytes) -> str:
    """The content hash a record is keyed by."""
    return hashlib.sha256(data).hexdigest()


def _record(content_digest: str) -> Path | None:
    if os.environ.get("KB_NO_CACHE") == "1":
        return None
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kb" / "verified" / f"{kb.__version__}-{RULES_VERSION}-{content_digest}"


def is_verified(content_digest: str) -> bool:
    """Whether bytes with this digest passed full validation before."""
    record = _record(content_digest)
    return record is not None and record.exists()


def remember(content_digest: str) -> None:
    """Record that bytes with this digest passed full validation (best effort)."""
    record = _record(content_digest)
    if record is None:
        return
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        record.touch()
    except OSError:
        pass  # a read-only home is no reason to fail a read
