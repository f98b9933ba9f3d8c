"""The files kb keeps beside the store, and the one way their versions are read.

Evidence reports and runs, the epochs file, canary baselines, the run
journal, cassettes, the store settings and the commit intent are JSON kb
writes and reads back later, maybe with a newer or older kb. Each names its
format with one integer under one key. The keys differ for history (the
baselines file says ``version``, a journal's header ``journal``, the intent
``intent``; the rest ``format``) and stay as they are on disk, but every
reader asks the same question through :class:`SideFormat`, so every file
answers a format it cannot read the same way: a newer one asks to upgrade
kb, anything else says what it is not. One line, naming the file.

A file kb wrote before it stamped a format (evidence runs, cassettes) has no
key; ``absent`` says which format such a file is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from kb.errors import ConfigError

Shape = TypeVar("Shape", bound=BaseModel)


@dataclass(frozen=True)
class SideFormat:
    """One kind of side file: what it is called, its version key and what this kb reads."""

    what: str
    """The file's kind in messages (``epochs``, ``cassette``, ...)."""
    current: int = 1
    """The format this kb writes."""
    key: str = "format"
    older: tuple[int, ...] = ()
    """Earlier formats this kb still reads."""
    absent: int | None = None
    """The format of a file without the key (``None``: the key is required)."""

    @property
    def readable(self) -> tuple[int, ...]:
        """Every format this kb reads, oldest first."""
        return (*self.older, self.current)

    def stamp(self) -> dict[str, int]:
        """The key and value a file of the current format starts with."""
        return {self.key: self.current}

    def issue(self, document: Mapping[str, Any]) -> str | None:
        """Why ``document`` is not a format this kb reads (``None``: it is)."""
        if self.key not in document and self.absent is not None:
            return None
        found = document.get(self.key)
        if isinstance(found, int) and not isinstance(found, bool):
            if found in self.readable:
                return None
            newer = found > max(self.readable)
        else:
            newer = False
        *rest, last = (str(f) for f in self.readable)
        names = f"{', '.join(rest)} and {last}" if rest else last
        if newer:
            return (
                f"{self.what} format {found} was written by a newer kb "
                f"(this kb reads format {names}): upgrade kb to read it"
            )
        if self.key not in document:
            return f"{self.key}: missing (not a kb {self.what} file?)"
        return f"{self.key}: {found!r} is not a {self.what} format (this kb reads format {names})"

    def version(self, document: Mapping[str, Any]) -> int:
        """The format ``document`` says it is (after :meth:`issue` found none)."""
        found = document.get(self.key, self.absent)
        assert isinstance(found, int)
        return found

    def check(self, document: Any, source: str) -> dict[str, Any]:
        """``document`` when it is a JSON object of a readable format, else a ``ConfigError``."""
        if not isinstance(document, dict):
            raise ConfigError(source, f"not a kb {self.what} file (a JSON object)")
        issue = self.issue(document)
        if issue is not None:
            raise ConfigError(source, issue)
        return document

    def load(self, raw: bytes | str, source: str) -> dict[str, Any]:
        """Parse ``raw`` as one JSON object of a readable format (else one ``ConfigError``)."""
        return self.check(parse_json(raw, source), source)

    def load_as(self, raw: bytes | str, source: str, shape: type[Shape]) -> Shape:
        """:meth:`load`, validated into ``shape`` (its issues in one ``ConfigError``)."""
        from kb.schema import validation_issues

        value = self.load(raw, source)
        try:
            return shape.model_validate(value)
        except ValidationError as exc:
            raise ConfigError(source, validation_issues("", exc)) from None

    def read_bytes(self, path: Path) -> bytes | None:
        """The file's bytes, ``None`` when there is none; a folder there is a ``ConfigError``."""
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            raise ConfigError(str(path), f"is a directory, not kb's {self.what} file") from None


def parse_json(raw: bytes | str, source: str) -> Any:
    """JSON text as Python, or one ``ConfigError`` line (never a traceback, however deep)."""
    try:
        return json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
    except RecursionError:
        # json's parser recurses once per level: a hostile or broken file must not be a traceback
        raise ConfigError(source, "nested too deep to read") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(source, f"not valid JSON: {exc}") from None
