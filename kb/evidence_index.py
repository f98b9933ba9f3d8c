"""The evidence behind every current epoch, read once per command and indexed (SPEC 14.2).

Every decision kb shows — ``kb compare``, ``kb matrix --cost``, ``kb route
--policy evidence``, the site's models page, a Python caller — reads the same
thing: each cell's current epoch (the epochs file) and the target runs of
the nights it pooled (the evidence files). :class:`EvidenceIndex` is that,
loaded once: each night's runs are read once and grouped by (model, task
class, case), so a cell's cost per case, its latency percentiles and its
interval are properties of its :class:`CellEvidence` (as httpx's
``Response.is_success`` lives on the response) and no view computes one.

**The unit.** A model's score on a case is the mean over its repeats and
its nights in the current epoch; an older epoch measured a model that may
since have changed and is not read.

**Cost and latency** come from the target runs of the epoch's nights on the
cases asked about: mean cost per case (a case's cost is the mean over its
runs, as its score is) and nearest-rank p50/p90 latency over ok runs, so a
reported p90 is a latency that occurred. A night without evidence files
(``--no-evidence``, a directory moved away) or an unpriced run leaves the
cost unknown, never zero; the index names such nights (:meth:`EvidenceIndex.warning`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from kb.errors import ConfigError
from kb.paired import nearest_rank_percentile
from kb.stats import wilson_interval
from kb.store.epochs import CellEpoch, EpochsFile, read_epochs
from kb.store.records import ReportFile, RunRecord

if TYPE_CHECKING:
    from kb.store.evidence import LoadedEvidence
    from kb.store.filestore import KnowledgeStore
    from kb.store.models import ModelClaim

RunsOf = Callable[[str], Sequence[RunRecord] | None]
"""A report id's runs (``None``: its evidence is nowhere to be found)."""


@dataclass(frozen=True)
class ArmCosts:
    """What a model's answers on a set of cases cost and how long they took."""

    cost_per_case: float | None
    """Mean USD per case (``None``: unknown — no evidence, or a run nobody priced)."""
    p50_ms: float | None
    p90_ms: float | None
    ok_runs: int
    """The ok runs the latencies are over."""


@dataclass(frozen=True)
class CaseRuns:
    """One case's target runs over the nights of a cell's epoch that ran it."""

    costs: tuple[float, ...] = ()
    latencies_ms: tuple[float, ...] = ()
    """Of the runs that settled ok."""
    unknown: bool = False
    """A night that ran the case has no evidence, or one of its runs was unpriced."""


@dataclass(frozen=True)
class CellEvidence:
    """One model's current epoch on one task class: its case scores and their runs."""

    subject: str
    task_class: str
    epoch: CellEpoch
    scores: Mapping[str, float] = field(default_factory=dict)
    """Case name → mean score over its repeats and nights (measured cases only)."""
    runs: Mapping[str, CaseRuns] = field(default_factory=dict)
    """Case name → its target runs in the epoch (empty: the runs were not read)."""

    @classmethod
    def of(
        cls,
        subject: str,
        task_class: str,
        epoch: CellEpoch,
        runs: Mapping[str, CaseRuns] | None = None,
    ) -> CellEvidence:
        """The cell with its measured cases' mean scores."""
        scores = {
            case: score / count
            for case, score, count in zip(epoch.cases, epoch.scores, epoch.counts, strict=True)
            if count > 0
        }
        return cls(subject, task_class, epoch, scores, dict(runs or {}))

    @property
    def n(self) -> int:
        """Distinct cases measured in the epoch."""
        return len(self.scores)

    @property
    def pass_rate(self) -> float:
        """The mean of the measured cases' scores (what the interval gate judged)."""
        return math.fsum(self.scores.values()) / len(self.scores) if self.scores else 0.0

    @cached_property
    def interval(self) -> tuple[float, float]:
        """The 95 % interval of the pass rate, cases the unit of sampling (the gate's)."""
        return wilson_interval(math.fsum(self.scores.values()), len(self.scores))

    @cached_property
    def cost(self) -> ArmCosts:
        """Cost per case and latency over every measured case."""
        return self.costs(self.scores)

    def costs(self, cases: Iterable[str]) -> ArmCosts:
        """Cost per case and latency of the cell's target runs on ``cases``."""
        wanted = set(cases)
        per_case: list[float] = []
        latencies: list[float] = []
        unknown = False
        for case in wanted:
            found = self.runs.get(case)
            if found is None:
                continue
            unknown |= found.unknown
            if found.costs:
                per_case.append(math.fsum(found.costs) / len(found.costs))
            latencies.extend(found.latencies_ms)
        known = not unknown and per_case and len(per_case) == len(wanted)
        return ArmCosts(
            cost_per_case=math.fsum(per_case) / len(per_case) if known else None,
            p50_ms=nearest_rank_percentile(latencies, 0.5),
            p90_ms=nearest_rank_percentile(latencies, 0.9),
            ok_runs=len(latencies),
        )


Key = tuple[str, str, str]
"""(subject key, task class, case)."""


class RunCost(NamedTuple):
    """What the index keeps of one target run: its cost and latency, not its texts."""

    cost_usd: float
    latency_ms: float | None
    """Of a run that settled ok (else ``None``)."""
    unpriced: bool

    @classmethod
    def of(cls, run: RunRecord) -> RunCost:
        latency = run.latency_ms if run.status == "ok" else None
        return cls(run.cost_usd, latency, run.price_source == "unpriced")


NightCosts = dict[Key, list[RunCost]]
"""A night's target runs as the index keeps them."""
CostsOf = Callable[[str], "NightCosts | None"]
"""A night's :data:`NightCosts` by report id (``None``: no evidence of it)."""


def night_costs(runs: Iterable[RunRecord] | None) -> NightCosts | None:
    """A night's target runs by (subject, task class, case): cost and latency, no texts."""
    if runs is None:
        return None
    by_case: NightCosts = {}
    for run in runs:
        if run.kind == "target" and run.case is not None and run.task_class is not None:
            by_case.setdefault((run.subject_key, run.task_class, run.case), []).append(
                RunCost.of(run)
            )
    return by_case


class NightCostsReader:
    """Each night's :data:`NightCosts`, read once per version of its runs file.

    A night's runs file is parsed (and checked against its report) the first
    time; what the index keeps of it goes to ``.git/kb-index/<sha256>.json``,
    keyed by the runs file's sha256 its report records, so the next command
    reads a few bytes per run instead of every answer again (SPEC 14.3:
    reading linear in runs, and cheap). The note records the runs file's
    size: a file whose size changed since is read again (and refused when it
    no longer matches its report); an edit that keeps the size is caught by
    every reader of the answers (``kb show``, ``kb report``, the site), not
    by the index. A note kb cannot read is ignored and written again; outside
    git, or for a night read from history, nothing is kept.
    """

    def __init__(
        self,
        store: KnowledgeStore,
        directory: Path | None = None,
        only: Collection[str] | None = None,
    ) -> None:
        """``only``: the nights that may be read (any other reads as missing)."""
        self._only = only
        self._store = store
        self._directory = directory
        git = store.git
        self._notes = git.git_dir / "kb-index" if git is not None else None

    def __call__(self, report_id: str) -> NightCosts | None:
        if self._only is not None and report_id not in self._only:
            return None
        located = self._located(report_id)
        if located is None:  # outside git, one file alone, or only in history: read it
            from kb.store.evidence import load_evidence

            loaded = load_evidence(self._store, report_id, self._directory)
            return night_costs(loaded.runs if loaded is not None and loaded.runs else None)
        directory, report, note, size = located
        if note is not None:
            try:
                data = json.loads(note.read_text("utf-8"))
                # a size changed since: the runs file was edited (read it, and refuse it)
                if data["format"] == NOTE_FORMAT and data["size"] == size:
                    return {
                        (str(subject), str(task_class), str(case)): [_run_cost(*r) for r in runs]
                        for subject, task_class, case, runs in data["runs"]
                    }
            except (OSError, ValueError, TypeError, KeyError, RecursionError):
                pass  # a note kb cannot read: the night is read again
        from kb.store.evidence import report_runs

        found = night_costs(report_runs(directory, report) or None)
        if note is not None and found is not None:
            _write_note(note, size, found)
        return found

    def _located(self, report_id: str) -> tuple[Path, ReportFile, Path | None, int] | None:
        """The night's directory, report, note and runs file size (a note keeps its costs).

        The directory is where :func:`~kb.store.evidence.load_evidence` reads; the
        note is named by the runs file's recorded sha256. ``None``: no note can be
        kept (outside git; one file alone where the night is read; a report that
        cannot be read, which the reader then names).
        """
        from kb.store.evidence import evidence_paths
        from kb.store.records import parse_report

        if self._notes is None:
            return None
        for directory in self._store.home.evidence_dirs(self._directory):
            runs_path, report_path = evidence_paths(directory, report_id)
            if not (report_path.is_file() or runs_path.is_file()):
                continue
            if not (report_path.is_file() and runs_path.is_file()):
                return None
            try:
                report = parse_report(report_path.read_bytes(), str(report_path))
                size = runs_path.stat().st_size
            except (OSError, ConfigError):
                return None
            digest = report.runs_sha256
            return directory, report, (self._notes / f"{digest}.json" if digest else None), size
        return None


NOTE_FORMAT = 1
"""What a note holds; another kb's notes are read again, not trusted."""


def _run_cost(cost: Any, latency: Any, unpriced: Any) -> RunCost:
    """A noted run, its types checked (a hand-edited note is read again, not believed)."""
    if not isinstance(cost, int | float) or not isinstance(unpriced, bool):
        raise ValueError("not a noted run")
    if latency is not None and not isinstance(latency, int | float):
        raise ValueError("not a noted run")
    return RunCost(float(cost), None if latency is None else float(latency), unpriced)


def _write_note(note: Path, size: int, costs: NightCosts) -> None:
    rows = {
        "format": NOTE_FORMAT,
        "size": size,
        "runs": [[*k, [list(run) for run in v]] for k, v in costs.items()],
    }
    try:
        note.parent.mkdir(parents=True, exist_ok=True)
        temporary = note.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps(rows, separators=(",", ":")), "utf-8")
        os.replace(temporary, note)
    except OSError:
        pass  # a cache: the next command parses the night again


@dataclass(frozen=True)
class EvidenceIndex:
    """Every current epoch's cell, by task class and model, with the runs behind it."""

    cells: Mapping[str, Mapping[str, CellEvidence]]
    """Task class → subject → its current epoch (cells that measured nothing left out)."""
    missing: tuple[str, ...] = ()
    """Nights an epoch pooled whose evidence is nowhere (their cost is unknown)."""

    @classmethod
    def build(
        cls,
        epochs: EpochsFile,
        runs_of: RunsOf | None = None,
        *,
        costs_of: CostsOf | None = None,
        task_class: str | None = None,
        subjects: Collection[str] | None = None,
    ) -> EvidenceIndex:
        """The index of ``epochs``, each night read once through ``costs_of`` (or ``runs_of``).

        ``costs_of`` gives a night's :data:`NightCosts` (:class:`NightCostsReader`
        keeps them noted); ``runs_of`` gives its runs. ``task_class`` and
        ``subjects`` keep only those cells (and read only their nights). With
        neither reader only the scores are indexed (costs are unknown).
        """
        reader = costs_of
        if reader is None and runs_of is not None:
            given = runs_of

            def from_runs(report_id: str) -> NightCosts | None:
                return night_costs(given(report_id))

            reader = from_runs

        kept = {
            key: epoch
            for key, epoch in epochs.cells.items()
            if (task_class is None or key.partition("|")[2] == task_class)
            and (subjects is None or key.partition("|")[0] in subjects)
        }
        epochs = EpochsFile(cells=kept)
        nights = sorted({n.report_id for e in epochs.cells.values() for n in e.nights})
        grouped: dict[str, NightCosts | None] = {}
        if reader is not None:
            grouped = {report_id: reader(report_id) for report_id in nights}
        missing = [report_id for report_id, costs in grouped.items() if costs is None]
        found: dict[str, dict[str, CellEvidence]] = {}
        for name, epoch in sorted(epochs.cells.items()):
            subject, _, measured = name.partition("|")
            case_runs = _case_runs(subject, measured, epoch, grouped) if reader else None
            cell = CellEvidence.of(subject, measured, epoch, case_runs)
            if cell.scores:
                found.setdefault(measured, {})[subject] = cell
        return cls(found, tuple(missing))

    @classmethod
    def load(
        cls,
        store: KnowledgeStore,
        evidence_dir: Path | None = None,
        *,
        runs: bool = True,
        task_class: str | None = None,
        subjects: Collection[str] | None = None,
    ) -> EvidenceIndex:
        """The store's epochs and their evidence (``evidence_dir`` first when given).

        ``runs=False`` indexes the scores only (no evidence file is read);
        ``task_class`` and ``subjects`` keep only those cells.
        """
        epochs = read_epochs(store.home.epochs_file)
        reader = NightCostsReader(store, evidence_dir) if runs else None
        return cls.build(epochs, costs_of=reader, task_class=task_class, subjects=subjects)

    def cell(self, subject: str, task_class: str) -> CellEvidence | None:
        """One model's current epoch on one task class (``None``: none measured)."""
        return self.cells.get(task_class, {}).get(subject)

    def warning(self) -> str | None:
        """One line naming the nights without evidence (``None``: every night had it)."""
        if not self.missing:
            return None
        count = len(self.missing)
        shown = ", ".join(self.missing[:3]) + (" …" if count > 3 else "")
        return (
            f"no evidence for {count} night{'s' if count != 1 else ''} ({shown}): their cost "
            "and latency are unknown (kb sweep wrote none with --no-evidence, or the "
            "directory moved: --evidence-dir)"
        )


def _case_runs(
    subject: str,
    task_class: str,
    epoch: CellEpoch,
    grouped: Mapping[str, Mapping[Key, list[RunCost]] | None],
) -> dict[str, CaseRuns]:
    """Each case's target runs over the epoch's nights that ran it."""
    costs: dict[str, list[float]] = {}
    latencies: dict[str, list[float]] = {}
    unknown: set[str] = set()
    for night in epoch.nights:
        by_case = grouped.get(night.report_id)
        for case in night.cases:
            if by_case is None:
                unknown.add(case)
                continue
            for run in by_case.get((subject, task_class, case), ()):
                if run.unpriced:
                    unknown.add(case)
                costs.setdefault(case, []).append(run.cost_usd)
                if run.latency_ms is not None:
                    latencies.setdefault(case, []).append(run.latency_ms)
    return {
        case: CaseRuns(tuple(costs.get(case, ())), tuple(latencies.get(case, ())), case in unknown)
        for case in {*costs, *unknown, *latencies}
    }


@dataclass(frozen=True)
class RecordedNight:
    """One night's report with its runs, as its evidence files hold them."""

    report: ReportFile
    runs: tuple[RunRecord, ...]


@dataclass(frozen=True)
class RecordedReport:
    """One night's report as its evidence directory holds it; its runs read on demand.

    A team's month of runs does not fit in memory at once: a reader that goes
    night by night (``kb site``) reads each night's runs when it needs them.
    """

    report: ReportFile
    directory: Path
    identity: str
    """sha256 of the report file's bytes (a format-2 report records its runs file's
    sha256) and the runs file's size: the same identity, the same night."""

    def runs(self) -> tuple[RunRecord, ...]:
        """The night's runs (a ``ConfigError`` or ``OSError`` when they cannot be read)."""
        from kb.store.evidence import report_runs

        return tuple(report_runs(self.directory, self.report))


UNREADABLE = (OSError, ValueError, KeyError, TypeError, RecursionError, ConfigError)
"""What reading a night's evidence files may raise: the night is left out, named."""


def recorded_reports(store: KnowledgeStore) -> tuple[list[RecordedReport], list[str]]:
    """Every night's report in the store's evidence directories, oldest first.

    The second list says, per night left out, which file could not be read and why
    (a broken file never hides the other nights).
    """
    from kb.store.evidence import REPORT_SUFFIX, evidence_paths
    from kb.store.records import parse_report

    found: list[RecordedReport] = []
    left_out: list[str] = []
    seen: set[str] = set()
    for directory in store.home.evidence_dirs():
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob(f"*{REPORT_SUFFIX}")):
            try:
                data = path.read_bytes()
                report_id = json.loads(data.decode("utf-8"))["reportId"]
            except json.JSONDecodeError as exc:
                left_out.append(
                    f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}); "
                    "its night is left out"
                )
                continue
            except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
                left_out.append(f"{path}: cannot be read ({str(exc)[:160]}); its night is left out")
                continue
            try:
                report = parse_report(data, str(path))
                runs_path, _ = evidence_paths(directory, str(report_id))
                size = runs_path.stat().st_size if runs_path.is_file() else -1
            except UNREADABLE as exc:
                left_out.append(f"{report_id}: {str(exc)[:200]}; its night is left out")
                continue
            if report_id in seen:
                continue
            seen.add(report_id)
            identity = hashlib.sha256(data + f"\0{size}".encode()).hexdigest()
            found.append(RecordedReport(report, directory, identity))
    found.sort(key=lambda n: n.report.observed_at)
    return found, left_out


def recorded_nights(store: KnowledgeStore) -> tuple[list[RecordedNight], list[str]]:
    """Every night with readable evidence in the store's evidence directories, oldest first.

    The second list says, per night left out, which file could not be read and why
    (a broken file never hides the other nights).
    """
    reports, left_out = recorded_reports(store)
    nights: list[RecordedNight] = []
    for recorded in reports:
        try:
            runs = recorded.runs()
        except UNREADABLE as exc:
            report_id = recorded.report.report_id
            left_out.append(f"{report_id}: {str(exc)[:200]}; its night is left out")
            continue
        nights.append(RecordedNight(recorded.report, runs))
    return nights, left_out


@dataclass(frozen=True)
class ClaimNight:
    """The target runs behind an eval claim in one of the nights it cites."""

    report_id: str
    runs: tuple[RunRecord, ...] | None
    """The claim's subject's runs on its task class (``None``: no evidence found)."""
    source: str = ""
    """Where the evidence was read: ``the work tree`` or ``git <commit>``."""


def claim_nights(
    store: KnowledgeStore, claim: ModelClaim, directory: Path | None = None
) -> list[ClaimNight]:
    """The runs behind each night ``claim`` rests on, its epoch manifest expanded.

    An editorial claim has none; a manifest that is nowhere (neither in the
    evidence directory nor in git history) is one night with no runs, named
    by its ref.
    """
    from kb.store.evidence import load_evidence
    from kb.store.manifests import claim_evidence

    cited = claim_evidence(store.home, store.git, claim, directory)
    found: list[ClaimNight] = []
    for night in cited.nights:
        loaded = load_evidence(store, night.report_id, directory)
        if loaded is None:
            found.append(ClaimNight(night.report_id, None))
            continue
        runs = tuple(
            run
            for run in loaded.runs
            if run.kind == "target"
            and run.model == claim.model
            and run.effort == claim.effort
            and run.task_class == claim.task_class
        )
        found.append(ClaimNight(night.report_id, runs, loaded.source))
    found += [ClaimNight(ref, None) for ref in cited.missing]
    return found


def night_evidence(
    store: KnowledgeStore, report_id: str, directory: Path | None = None
) -> LoadedEvidence | None:
    """One night's report and runs (work tree, else git history; ``None``: nowhere)."""
    from kb.store.evidence import load_evidence

    return load_evidence(store, report_id, directory)


def reports_before(directory: Path, observed_at: str) -> list[ReportFile]:
    """The reports in evidence ``directory`` observed before ``observed_at``, oldest first.

    Reports only (no runs are read): a trend needs each night's cells, not its answers.
    """
    from kb.store.evidence import earlier_reports

    return earlier_reports(directory, observed_at)
