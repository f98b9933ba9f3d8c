"""Where a report's evidence files are, and reading them back (work tree or git history).

Each report has two files in the evidence directory (:meth:`StoreHome.evidence_dir`):
``<stem>.jsonl`` (its runs) and ``<stem>.report.json`` (its report), where
the stem is the report id with ``%`` and ``/`` escaped. They are read into
the types of :mod:`kb.store.records`; a file that is gone from the work tree
(compacted, or never checked out) is read from the newest commit that held
it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kb.errors import ConfigError
from kb.store.filestore import KnowledgeStore
from kb.store.records import ReportFile, RunRecord, parse_report
from kb.store.runs_file import check_runs_match, parse_runs

RUNS_SUFFIX = ".jsonl"
REPORT_SUFFIX = ".report.json"
SUFFIXES = (REPORT_SUFFIX, RUNS_SUFFIX)


def evidence_stem(report_id: str) -> str:
    """The file name stem for a report id (a ``/`` in the id cannot be a path separator)."""
    return report_id.replace("%", "%25").replace("/", "%2F")


def evidence_paths(directory: Path, report_id: str) -> tuple[Path, Path]:
    """The runs file and the report file of ``report_id`` in ``directory``."""
    stem = evidence_stem(report_id)
    return directory / f"{stem}{RUNS_SUFFIX}", directory / f"{stem}{REPORT_SUFFIX}"


@dataclass(frozen=True)
class LoadedEvidence:
    """A past report's evidence, and where it was found."""

    report: ReportFile | None
    """The report file (``None`` when only the runs were found)."""
    runs: list[RunRecord]
    source: str
    """``the work tree`` or ``git <commit>``."""

    def full_report(self) -> ReportFile | None:
        """The ``--json`` report again: the report with its runs."""
        return self.report.with_runs(self.runs) if self.report is not None else None


def load_evidence(
    store: KnowledgeStore, report_id: str, directory: Path | None = None
) -> LoadedEvidence | None:
    """A report's evidence from its directory, else from git history (``None``: nowhere).

    A format-2 report records how many runs its runs file holds and the
    file's sha256: a file cut short or edited is refused, never read as a
    smaller night.
    """
    git = store.git
    places = [evidence_paths(where, report_id) for where in store.home.evidence_dirs(directory)]
    for runs_path, report_path in places:
        if runs_path.is_file() or report_path.is_file():
            inside = git is not None and git.rel_of(runs_path) is not None
            return _loaded(
                report_path.read_bytes() if report_path.is_file() else None,
                runs_path.read_bytes() if runs_path.is_file() else None,
                runs_path,
                report_path,
                "the work tree" if inside else str(runs_path.parent),
            )
    if git is None:
        return None
    located = next(
        (
            (runs_path, report_path, found)
            for runs_path, report_path in places
            if (found := git.last_version_of(runs_path)) is not None
        ),
        None,
    )
    if located is None:
        return None
    runs_path, report_path, (commit, data) = located
    short = commit[:12]
    blob = git.blob_in_path(commit, git.rel_of(report_path) or "")
    report = git.read_blob(blob) if blob else None
    named = (Path(f"{short}:{runs_path.name}"), Path(f"{short}:{report_path.name}"))
    return _loaded(report, data, *named, f"git {short}")


def _loaded(
    report: bytes | None, runs: bytes | None, runs_path: Path, report_path: Path, source: str
) -> LoadedEvidence:
    parsed = parse_report(report, str(report_path)) if report is not None else None
    return LoadedEvidence(parsed, _checked_runs(parsed, runs, runs_path), source)


def _checked_runs(
    report: ReportFile | None, runs: bytes | None, runs_path: Path
) -> list[RunRecord]:
    """The runs file's records, refused when they do not match what ``report`` recorded."""
    if runs is None:
        if report is not None and report.run_count:
            raise ConfigError(
                str(runs_path),
                f"is missing, but its report recorded {report.run_count} runs (restore it)",
            )
        return []
    records = parse_runs(runs, str(runs_path))
    if report is not None:
        check_runs_match(report, runs, len(records), str(runs_path))
    return records


def report_runs(directory: Path, report: ReportFile) -> list[RunRecord]:
    """The runs of a report already read from ``directory`` (its runs file, checked).

    What :func:`load_evidence` does for a night found in ``directory``, without
    reading and validating its report file a second time.
    """
    runs_path, _ = evidence_paths(directory, report.report_id)
    runs = runs_path.read_bytes() if runs_path.is_file() else None
    return _checked_runs(report, runs, runs_path)


def earlier_reports(directory: Path, observed_at: str) -> list[ReportFile]:
    """Reports in ``directory`` observed before ``observed_at``, oldest first.

    For trends: a report file kb cannot read is left out (it never stops
    tonight's report), as is anything that is not a report file.
    """
    found = []
    for path in directory.glob(f"*{REPORT_SUFFIX}") if directory.is_dir() else ():
        try:
            report = parse_report(path.read_bytes(), str(path))
        except (OSError, ConfigError):
            continue
        if report.observed_at < observed_at:
            found.append(report)
    return sorted(found, key=lambda report: report.observed_at)


def report_observed_at(path: Path) -> str | None:
    """When the report in ``path`` was observed (``None``: unreadable)."""
    try:
        return parse_report(path.read_bytes(), str(path)).observed_at
    except (OSError, ConfigError):
        return None


class RunsReader:
    """A report id's runs, each report read once (``None``: its evidence is nowhere).

    :class:`kb.evidence_index.EvidenceIndex` names the reports whose evidence was
    not found (what they would have told — cost, latency — is unknown).
    """

    def __init__(self, store: KnowledgeStore, directory: Path | None = None) -> None:
        self._store = store
        self._directory = directory
        self._cache: dict[str, list[RunRecord] | None] = {}

    def __call__(self, report_id: str) -> list[RunRecord] | None:
        if report_id not in self._cache:
            loaded = load_evidence(self._store, report_id, self._directory)
            runs = loaded.runs if loaded is not None and loaded.runs else None
            self._cache[report_id] = runs
        return self._cache[report_id]


def runs_reader(store: KnowledgeStore, directory: Path | None = None) -> RunsReader:
    """A :class:`RunsReader` over ``store``'s evidence (``directory`` first when given)."""
    return RunsReader(store, directory)
