"""The store's neighbours: every file kb keeps beside the store, resolved in one place.

A store ``rulvar.models.json`` lives with

* ``rulvar.models.canary.json`` — the canary baselines per probe set;
* ``rulvar.models.epochs.json`` — each cell's open epoch (:mod:`kb.store.epochs`);
* ``rulvar.models.labels.json`` — people's verdicts on answers (:mod:`kb.store.labels`);
* ``rulvar.models.settings.json`` — what a sweep spec chose that every
  later command must honour without a flag (today: where the evidence
  goes, when a spec set ``evidence_dir``);
* ``kb-evidence/`` — each report's runs and report file (or the directory
  the settings name);
* ``.gitattributes`` — the lines that route the store, its baselines and its
  epochs to kb's merge driver;
* the lock (in the git directory inside a work tree, else
  ``.rulvar.models.json.lock`` beside the store).

Commands and the core ask :class:`StoreHome` for these paths and never
build them themselves, so a setting one command honours every command
honours. The settings file is small, tracked and committed with the sweep
that changed it; kb never writes it by hand-edit and refuses one it cannot
read.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from kb.errors import ConfigError
from kb.sidefile import SideFormat, parse_json
from kb.store.canonical import js_stringify

DEFAULT_EVIDENCE_DIR = "kb-evidence"
ATTRIBUTES_FILE = ".gitattributes"
SETTINGS = SideFormat("settings")

MANIFESTS_DIR = "manifests"
"""The folder of epoch manifests inside an evidence directory (:mod:`kb.store.manifests`)."""


@dataclass(frozen=True)
class StoreSettings:
    """What the settings file records (empty: nothing recorded, the defaults apply)."""

    evidence_dirs: tuple[str, ...] = ()
    """Where evidence went, newest first: the first is where it goes now; the others
    are still searched, so moving ``evidence_dir`` never loses an older night's files.
    Each is relative to the store's directory, or absolute."""

    def render(self) -> bytes:
        """Deterministic JSON (two-space indent, trailing newline)."""
        document: dict[str, Any] = SETTINGS.stamp()
        if self.evidence_dirs:
            document["evidenceDirs"] = list(self.evidence_dirs)
        return (js_stringify(document, indent=2) + "\n").encode("utf-8")


@dataclass(frozen=True)
class StoreHome:
    """Where each of a store's neighbours is."""

    store_path: Path
    """The store file (absolute)."""

    @classmethod
    def of(cls, store_path: Path | str) -> StoreHome:
        """The home of the store at ``store_path``."""
        return cls(Path(store_path).absolute())

    @property
    def directory(self) -> Path:
        """The store's directory: every neighbour's path is relative to it."""
        return self.store_path.parent

    @property
    def _stem(self) -> str:
        return self.store_path.name.removesuffix(".json")

    @property
    def canary_baselines(self) -> Path:
        """``rulvar.models.canary.json``."""
        return self.directory / f"{self._stem}.canary.json"

    @property
    def epochs_file(self) -> Path:
        """``rulvar.models.epochs.json``."""
        return self.directory / f"{self._stem}.epochs.json"

    @property
    def labels_file(self) -> Path:
        """``rulvar.models.labels.json``."""
        return self.directory / f"{self._stem}.labels.json"

    @property
    def settings_file(self) -> Path:
        """``rulvar.models.settings.json``."""
        return self.directory / f"{self._stem}.settings.json"

    @property
    def attributes(self) -> Path:
        """The ``.gitattributes`` beside the store."""
        return self.directory / ATTRIBUTES_FILE

    @property
    def merged_files(self) -> tuple[Path, ...]:
        """The files kb's merge driver merges (the store first)."""
        return (self.store_path, self.canary_baselines, self.epochs_file, self.labels_file)

    def lock_file(self, git_dir: Path | None, rel: str | None) -> Path:
        """The store lock: in the git directory inside a work tree (no untracked file)."""
        if git_dir is not None and rel is not None:
            tag = hashlib.sha256(rel.encode()).hexdigest()[:12]
            return git_dir / f"kb-store-{tag}.lock"
        return self.directory / f".{self.store_path.name}.lock"

    def intent_file(self, git_dir: Path | None, rel: str | None) -> Path:
        """Where a commit in its window records its intent (:mod:`kb.store.commit_window`).

        In the git directory inside a work tree (git never sees it), else a
        hidden file beside the store.
        """
        if git_dir is not None and rel is not None:
            tag = hashlib.sha256(rel.encode()).hexdigest()[:12]
            return git_dir / f"kb-intent-{tag}"
        return self.directory / f".{self.store_path.name}.kb-intent"

    def lease_file(self, git_dir: Path | None, rel: str | None, report_id: str) -> Path:
        """The lease one sweep of ``report_id`` holds while it runs (beside the lock)."""
        tag = hashlib.sha256(f"{rel or self.store_path.name}\0{report_id}".encode()).hexdigest()
        if git_dir is not None:
            return git_dir / f"kb-lease-{tag[:16]}.lock"
        return self.directory / f".{self.store_path.name}.lease-{tag[:16]}.lock"

    @cached_property
    def settings(self) -> StoreSettings:
        """The recorded settings (defaults when there is no settings file)."""
        return read_settings(self.settings_file)

    def evidence_dir(self, override: Path | None = None) -> Path:
        """Where evidence goes: ``override``, else the recorded directory, else the default."""
        return override if override is not None else self.evidence_dirs()[0]

    def evidence_dirs(self, override: Path | None = None) -> list[Path]:
        """Every directory that may hold a report's evidence, where it goes now first."""
        if override is not None:
            return [override]
        recorded = [self._resolve(text) for text in self.settings.evidence_dirs]
        return recorded or [self.directory / DEFAULT_EVIDENCE_DIR]

    def _resolve(self, text: str) -> Path:
        chosen = Path(text).expanduser()
        return chosen if chosen.is_absolute() else self.directory / chosen

    def record_evidence_dir(self, chosen: Path, inside_work_tree: bool) -> StoreSettings:
        """The settings with ``chosen`` as where evidence goes now (earlier ones kept).

        Recorded relative to the store's directory when it is inside the work
        tree (so every clone finds it), else as the absolute path.
        """
        value = (
            os.path.relpath(chosen, self.directory) if inside_work_tree else str(chosen.absolute())
        )
        known = list(self.settings.evidence_dirs) or [DEFAULT_EVIDENCE_DIR]
        same = [text for text in known if self._resolve(text) == self._resolve(value)]
        if same and known[0] == same[0]:
            return self.settings
        return StoreSettings((value, *(text for text in known if text not in same)))


def read_settings(path: Path) -> StoreSettings:
    """The settings file at ``path`` (defaults when absent; malformed: ``ConfigError``)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return StoreSettings()
    except IsADirectoryError:
        raise ConfigError(str(path), "is a directory, not kb's settings file") from None
    data = parse_json(raw, str(path))
    if not isinstance(data, dict):
        raise ConfigError(str(path), f"must be a JSON object, got {type(data).__name__}")
    issues = [f"{key}: unknown key" for key in sorted(set(data) - {"format", "evidenceDirs"})]
    found = SETTINGS.issue(data)
    if found is not None:
        issues.insert(0, found)
    dirs = data.get("evidenceDirs", [])
    if not isinstance(dirs, list) or not all(isinstance(d, str) and d for d in dirs):
        issues.append("evidenceDirs: must be a list of non-empty paths")
    if issues:
        raise ConfigError(str(path), issues)
    return StoreSettings(tuple(dirs))
