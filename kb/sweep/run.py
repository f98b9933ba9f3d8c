"""One nightly sweep: plan → measure → decide the change → commit → report.

:func:`kb.sweep.plan.prepare_sweep` does everything before the first
provider call; :func:`execute_sweep` is then a short sequence:

1. :func:`kb.sweep.measure.measure` runs the plan's phases (canary, targets,
   judges) into cells and claims — it never sees the store;
2. :func:`decide_change` turns the measurement into the commit against a
   snapshot — the canary's flips and baselines, the claims and retirements,
   the evidence files and the report — a pure function of its inputs, which
   the rebase loop calls again on every compare-and-swap conflict;
3. the store commits it (one CAS commit, one git commit);
4. the report is the one the committed change carries, and the diff is
   computed from the commit's own result (its base, its snapshot, its ops).

:func:`run_sweep` is all of it. No function here reads a clock.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from hashlib import sha256
from pathlib import Path

from kb.engine.batch import BatchForecast
from kb.engine.journal import RunJournal, read_journal
from kb.engine.scheduler import Engine, journaled
from kb.errors import ConfigError, JournalUnwritable
from kb.schema import DEFAULT_ATTEMPTS
from kb.store.baselines import BaselinesFile
from kb.store.changes import (
    Falsified,
    drift_reason,
    exact_drifts,
    falsified_claims,
    falsified_line,
)
from kb.store.diff import Side, StoreDiff, diff_snapshots
from kb.store.epochs import EpochsAt, EpochsFile, cell_key, merge_cell, read_epochs
from kb.store.evidence import evidence_paths
from kb.store.filestore import (
    REPORT_TRAILER,
    CommitContext,
    CommitResult,
    KnowledgeStore,
    validate_attempts,
)
from kb.store.labels import read_labels
from kb.store.manifests import manifest_path
from kb.store.merge import driver_files
from kb.store.models import ModelClaim
from kb.store.ops import AddClaim, ArchiveClaim, EvalCommitterGate, MarkStale, Op, SupersedeClaim
from kb.store.records import ReportFile, RunRecord
from kb.store.runs_file import in_case_order, render_runs
from kb.store.snapshot import Snapshot
from kb.store.ttl import format_instant, parse_flag_instant
from kb.sweep.canary import CanaryChange, canary_change, classified
from kb.sweep.cells import SweepCell, epoch_manifest
from kb.sweep.evidence import EvidenceContext
from kb.sweep.falsify import sweep_ops
from kb.sweep.measure import MeasuredCell, Measurement, measure
from kb.sweep.order import CellKey, cells_with_newer, newer_nights
from kb.sweep.plan import SweepPlan, prepare_sweep, refuse_future_instant, refuse_used_report_id
from kb.sweep.report import sweep_report
from kb.sweep.resume import (
    JOURNAL_SUFFIX,
    NothingToResume,
    Resume,
    ResumeGuard,
    SweptSpec,
    find_resume,
    journal_path,
)
from kb.sweep.shard_join import join_recorded, recorded_night
from kb.sweep.spec import SweepSpec, judge_models


@dataclass(frozen=True)
class EvidenceTarget:
    """Where this sweep's evidence goes, and the settings file that records the choice."""

    directory: Path
    settings: dict[str, bytes] = field(default_factory=dict)
    """The new settings file (by name), when the spec chose a directory not yet recorded."""


def evidence_target(spec: SweepSpec, store: KnowledgeStore) -> EvidenceTarget:
    """Where a sweep of ``spec`` keeps its evidence.

    A spec's ``evidence_dir`` (relative to the spec) is recorded beside the
    store, so ``kb show``, ``kb report`` and ``kb compact`` find the files
    later without being told; without one, the recorded directory (or the
    default beside the store) is used.
    """
    home = store.home
    if spec.sweep.evidence_dir is None:
        return EvidenceTarget(home.evidence_dir())
    chosen = Path(spec.sweep.evidence_dir).expanduser()
    chosen = chosen if chosen.is_absolute() else spec.path.resolve().parent / chosen
    git = store.git
    inside = git is not None and git.rel_of(chosen / "_") is not None
    settings = home.record_evidence_dir(chosen, inside)
    if settings == home.settings:
        return EvidenceTarget(chosen)
    return EvidenceTarget(chosen, {home.settings_file.name: settings.render()})


@dataclass(frozen=True)
class SweepChange(CanaryChange):
    """One sweep's commit: the canary's flips and baselines, claims, retirements, evidence."""

    report: ReportFile | None = None
    """The report of this change (without its runs)."""


def decide_change(
    plan: SweepPlan,
    measurement: Measurement,
    snapshot: Snapshot,
    baselines: BaselinesFile,
    evidence: EvidenceTarget | None,
    *,
    committing: bool,
    epochs: EpochsAt | None = None,
    manifests: Path | None = None,
) -> SweepChange:
    """What the sweep commits against ``snapshot`` (pure: the rebase loop calls it again).

    The canary's flips come first, then the claims and retirements; with
    ``evidence``, the runs file and the report file go into the same commit,
    and with ``epochs`` (the epochs file as it is now) each complete cell's
    epoch; with ``manifests`` (the evidence directory) the manifest each new
    claim cites (:mod:`kb.store.manifests`), with or without run evidence.
    """
    spec = plan.spec
    cells = [cell for cell, _ in measurement.cells if cell.complete]
    newer = newer_nights(cells, plan.observed_at, snapshot, epochs.file if epochs else None)
    found, shown = _canary_decided(plan, measurement, snapshot, baselines, newer)
    decided = replace(
        measurement,
        cells=tuple(
            (cell, None if (cell.member.key, cell.task_class) in newer else claim)
            for cell, claim in measurement.cells
        ),
    )
    gate = EvalCommitterGate(committer_id=spec.sweep.committer, report_id=plan.report_id)
    judged = [c for c in decided.cells if (c[0].member.key, c[0].task_class) not in newer]
    ops = (*found.ops, *sweep_ops(snapshot, judged, gate, spec.gate))
    version = (snapshot.version + 1 if ops else snapshot.version) if committing else None
    not_applied = {
        key: f"not applied: the store holds a newer night ({night})"
        for (key, _), night in newer.items()
    }
    canary = classified(measurement.canaries, shown, version, not_applied)
    report = sweep_report(plan, decided, ops, canary, version, newer, snapshot)
    files = dict(found.files)
    notes = [found.note] if found.note else []
    if evidence is not None:
        report = _with_evidence(plan, measurement, report, evidence, files)
        if not ops:
            notes.append("evidence only")
    if manifests is not None:
        files.update(_manifest_files(decided, ops, manifests))
    if epochs is not None:
        updated = epochs_after(epochs.file, measurement)
        if updated != epochs.file:
            files[epochs.path.name] = updated.render()
            files.update(epochs.attributes)
    return SweepChange(ops, files, ", ".join(notes) or None, outcomes=found.outcomes, report=report)


def _manifest_files(
    measurement: Measurement, ops: Sequence[Op], directory: Path
) -> dict[str, bytes]:
    """The manifest file of every claim ``ops`` add that cites one."""
    added = {op.claim.id for op in ops if isinstance(op, AddClaim)}
    added |= {op.by.id for op in ops if isinstance(op, SupersedeClaim)}
    files: dict[str, bytes] = {}
    for cell, claim in measurement.cells:
        manifest = epoch_manifest(cell) if claim is not None and claim.id in added else None
        if manifest is not None:
            files[str(manifest_path(directory, manifest.ref))] = manifest.render()
    return files


def _canary_decided(
    plan: SweepPlan,
    measurement: Measurement,
    snapshot: Snapshot,
    baselines: BaselinesFile,
    newer: Mapping[CellKey, str],
) -> tuple[CanaryChange, CanaryChange]:
    """The canary's change (flips, baselines) and what each member's canary is shown as.

    An older night's canary (the store holds a newer night of its cells) is
    judged — what it saw is said — but never applied.
    """
    prompts = tuple(plan.spec.canary.prompts) if plan.spec.canary is not None else ()
    held_back = cells_with_newer(newer)
    mine = [c for c in measurement.canaries if c.member.key not in held_back]
    found = canary_change(mine, snapshot, baselines, prompts)
    older = canary_change(
        [c for c in measurement.canaries if c.member.key in held_back], snapshot, baselines, prompts
    )
    judged = {key: (status, ()) for key, (status, _) in older.outcomes.items()}
    return found, replace(found, outcomes={**judged, **found.outcomes})


def _with_evidence(
    plan: SweepPlan,
    measurement: Measurement,
    report: ReportFile,
    evidence: EvidenceTarget,
    files: dict[str, bytes],
) -> ReportFile:
    """The night's runs file and report file into ``files``; the report of this sweep.

    The night's evidence already in the work tree (another shard's, committed on
    the tip this attempt commits on) is joined in the files, never replaced
    (:mod:`.shard_join`); the report returned (what the sweep prints) stays this
    sweep's own, as when no other shard had committed.
    """
    runs_file, report_file = evidence_paths(evidence.directory, plan.report_id)
    own = night_runs(plan, measurement)
    recorded = recorded_night(evidence.directory, plan.report_id)
    joined, records = join_recorded(recorded, report, own)
    runs = render_runs(records)
    joined = joined.model_copy(
        update={"run_count": len(records), "runs_sha256": sha256(runs).hexdigest()}
    )
    files[str(runs_file)] = runs
    files[str(report_file)] = joined.render()
    files.update(evidence.settings)
    if len(joined.cells) == len(report.cells):  # nothing of another shard's joined
        return joined
    mine = render_runs(own)
    return report.model_copy(
        update={"run_count": len(own), "runs_sha256": sha256(mine).hexdigest()}
    )


def _epochs_at(store: KnowledgeStore) -> EpochsAt:
    """The epochs file now, with the ``.gitattributes`` that routes it to kb's merge driver.

    Only when the store is routed already and the epochs file (new in kb 3) is not.
    """
    found = EpochsAt.read(store.home.epochs_file)
    attributes = store.home.attributes
    routed = f"/{store.home.store_path.name} merge="
    if store.git is not None and attributes.exists() and routed in attributes.read_text("utf-8"):
        return replace(found, attributes=driver_files(store))
    return found


def epochs_after(epochs: EpochsFile, measurement: Measurement) -> EpochsFile:
    """The epochs file after the night: each cell's epoch merged with tonight's.

    Tonight's epoch of a complete cell is merged three ways
    (:func:`kb.store.epochs.merge_cell`) with the file as it is now — the
    base is the epoch the plan read — so nights another writer pooled
    meanwhile (another clone's push, an older night committed late) all
    stay. A cell measured incompletely keeps its epoch, unless tonight was to
    start a new one (its cases changed, its canary drifted, ``--new-epoch``):
    then the old epoch goes, and the next complete night begins afresh.
    A cell the store holds a newer night of keeps that night's epoch, with
    tonight's runs pooled in where tonight measured that same epoch (the
    merge orders nights by their instants).
    """
    cells = dict(epochs.cells)
    for cell, _ in measurement.cells:
        night = cell.epoch
        if night is None:
            continue
        key = cell_key(cell.member.key, cell.task_class)
        base = night.suite.found
        if cell.complete:
            merged = merge_cell(base, night.epoch, cells.get(key), rebasing=True)
        elif night.suite.restart is not None or (
            night.restarted is not None and night.restarted != "alarm"
        ):
            merged = merge_cell(base, None, cells.get(key), rebasing=True)  # the old one goes
        else:
            continue
        if merged is None:
            cells.pop(key, None)
        else:
            cells[key] = merged
    return EpochsFile(cells=cells)


@dataclass(frozen=True)
class SweepReport:
    """What a sweep did: its plan, measurement, report, and commit."""

    plan: SweepPlan
    measurement: Measurement
    report: ReportFile
    """The ``--json`` report (with its runs)."""
    commit: CommitResult | None = None
    evidence_files: tuple[Path, ...] = field(default=())
    """Where the evidence was written (empty when not committed or turned off)."""
    store_diff: StoreDiff | None = None
    """What the sweep's commit changed in the store (``None``: nothing committed)."""
    history_dir: Path | None = None
    """Where this spec's sweeps keep their reports (earlier ones give deltas and trends)."""
    already_committed: bool = False
    """A ``--resume`` of a night the store already holds whole: nothing was measured."""
    options: SweepOptions | None = None
    """How it ran (what :meth:`failures` judges by)."""

    def failures(self) -> list[str]:
        """Why the sweep failed its job (exit 1; empty: it did not).

        An exact canary drift under ``fail_on_drift`` or ``fail_on_change``; a held
        claim falsified under ``fail_on_change`` (:mod:`kb.store.changes`); an
        incomplete cell unless ``allow_incomplete``. Judged on the report, after
        the commit: the night is in the store whatever this says.
        """
        options = self.options or SweepOptions()
        found = []
        drifted = self.drifted
        if drifted and (options.fail_on_drift or options.fail_on_change):
            found.append(drift_reason(drifted))
        falsified = self.falsified if options.fail_on_change else []
        if falsified:
            found.append(falsified_line(falsified))
        incomplete = self.report.incomplete_line()
        if incomplete and not options.allow_incomplete:
            found.append(incomplete)
        return found

    @property
    def drifted(self) -> list[str]:
        """The members whose exact canary fingerprint drifted tonight."""
        return exact_drifts(self.report)

    @property
    def falsified(self) -> list[Falsified]:
        """The held claims the night falsified (:func:`kb.store.changes.falsified_claims`)."""
        return falsified_claims(self.report)

    @property
    def cells(self) -> Sequence[MeasuredCell]:
        """Each cell with the claim it earned."""
        return self.measurement.cells

    @property
    def claims(self) -> list[ModelClaim]:
        """The claims the sweep emitted."""
        return [claim for _, claim in self.cells if claim is not None]

    @property
    def git_commit(self) -> str | None:
        """The git commit the sweep made (``None``: none)."""
        return self.commit.git_commit if self.commit is not None else None

    @property
    def committed_version(self) -> int | None:
        """The store version the sweep committed (``None``: nothing committed)."""
        return self.commit.snapshot.version if self.commit is not None else None

    def cell(self, key: str, task_class: str) -> SweepCell | None:
        """The cell of a member and task class, if the sweep measured it."""
        return next(
            (c for c, _ in self.cells if c.member.key == key and c.task_class == task_class), None
        )


def resume_night(
    spec: SweepSpec, store: KnowledgeStore, *, report_id: str | None, observed_at: int | None
) -> Resume:
    """What ``--resume`` builds on: the named night, else the newest one a journal holds.

    The night is named by ``report_id`` (or the spec's), else by the default
    id of ``observed_at``; with neither, the newest journal in the spec's
    evidence directory names it. Raises :class:`kb.sweep.resume.NothingToResume`
    when there is nothing (:func:`plan_sweep` then starts the night).
    """
    if report_id is None and spec.sweep.report_id is None and observed_at is not None:
        report_id = f"kb-sweep-{format_instant(observed_at)}"
    directory = evidence_target(spec, store).directory
    swept = SweptSpec.of(spec.path, store)
    found = find_resume(store, directory, report_id or spec.sweep.report_id, swept)
    if found.journal is not None and not swept.swept(found.journal.spec):
        raise ConfigError(
            "--resume",
            f"the stopped night {found.report_id!r} is a sweep of {found.journal.spec}, not of "
            f"{swept.name}: resume it with that spec (its journal is kept)",
        )
    return found


def outage_answers(measurement: Measurement) -> list[str]:
    """Runs a resume must ask again (their answers were an outage's, :mod:`kb.sweep.health`).

    The replies that made a cell suspect, and every probe of a canary whose
    answers were an outage's; the cells' other answers are real and reused.
    """
    labels = [
        label
        for cell, _ in measurement.cells
        if cell.suspicion is not None
        for label in sorted(cell.suspicion.labels)
    ]
    labels += [
        run.label
        for canary in measurement.canaries
        if canary.unhealthy is not None
        for probe in canary.probes
        for run in probe.runs
    ]
    return labels


def night_runs(plan: SweepPlan, measurement: Measurement) -> list[RunRecord]:
    """Every run of the night (a stopped invocation's committed cells' too), in case order."""
    done = plan.resume.done_runs() if plan.resume is not None else []
    return in_case_order([*done, *measurement.runs])  # the runs file's order


def execute_sweep(
    plan: SweepPlan,
    store: KnowledgeStore,
    engine: Engine,
    *,
    commit: bool = True,
    attempts: int = DEFAULT_ATTEMPTS,
    push: bool = False,
    evidence: bool = True,
) -> SweepReport:
    """Steps 4–9: measure, decide, one CAS commit (pushed with ``push``), report.

    A committing sweep holds the night's lease (:meth:`KnowledgeStore.lease`)
    and journals every settled run (:mod:`kb.engine.journal`) from before its
    first call; the journal goes once every cell is committed complete.
    Nothing is committed unless at least one cell was measured completely: a
    sweep that measured nothing changes nothing.
    """
    target = evidence_target(plan.spec, store)
    writes = target if evidence and plan.spec.sweep.evidence else None
    if commit and plan.resume is not None and plan.resume.committed and not plan.pairs:
        return _already_committed(plan, target)
    if not commit:
        measured = measure(plan, engine, BaselinesFile.read(store.home.canary_baselines))
        return _report(plan, measured, store, target, None, None)
    journal = journal_path(target.directory, plan.report_id)
    with store.lease(plan.report_id):
        _ready_to_spend(plan, store, journal, writes, push)
        created = not journal.parent.exists()
        measurement = _measure_journaled(plan, store, engine, journal)
        result = None
        if measurement.measured_any:
            result = store.commit_with_rebase(
                lambda snapshot: decide_change(
                    plan,
                    measurement,
                    snapshot,
                    BaselinesFile.read(store.home.canary_baselines),
                    writes,
                    committing=True,
                    epochs=_epochs_at(store) if plan.suites else None,
                    manifests=target.directory,
                ),
                CommitContext(
                    "sweep",
                    plan.spec.sweep.committer,
                    label=plan.report_id,
                    report_id=plan.report_id,
                ),
                attempts=attempts,
                push=push,
            )
        if result is not None and all(cell.complete for cell, _ in measurement.cells):
            journal.unlink(missing_ok=True)  # the night is whole: nothing left to resume
            if created and not any(journal.parent.iterdir()):
                journal.parent.rmdir()  # made only for the journal (evidence turned off)
    return _report(plan, measurement, store, target, result, writes)


def _measure_journaled(
    plan: SweepPlan, store: KnowledgeStore, engine: Engine, journal: Path
) -> Measurement:
    """Measure with every settled run journaled, a stopped night's journal reused.

    A resume asks the canary again before it reuses any journaled run
    (:class:`~kb.sweep.resume.ResumeGuard`); afterwards an outage's answers
    are marked not to be reused, or a night measured whole and clean is
    marked so (a resume of it then asks nothing).
    """
    if store.git is not None:
        store.git.exclude(journal)  # a working file of this clone, never committed
    context = EvidenceContext.of([*(m.spec for m in plan.pool), *plan.judge_models])
    opened = RunJournal.open(
        journal,
        plan.report_id,
        format_instant(plan.observed_at),
        spec=SweptSpec.of(plan.spec.path, store).name,
        cut=context.cut,
    )
    earlier = plan.resume.journal if plan.resume is not None else None
    canary = plan.spec.canary
    try:
        served = ResumeGuard.served(earlier) if earlier and canary else earlier
        with journaled(engine, opened, served) as kept:
            guard = None
            if earlier is not None and canary is not None:
                guard = ResumeGuard(earlier, kept.forget, canary.repeats)
            baselines = BaselinesFile.read(store.home.canary_baselines)
            measurement = measure(plan, engine, baselines, resumed=guard)
        outage = outage_answers(measurement)
        if outage:
            opened.discard(outage)
        elif all(cell.complete for cell, _ in measurement.cells):
            with contextlib.suppress(JournalUnwritable):  # then a resume probes again
                opened.record_measured()  # a resume asks nothing: only the commit is left
    finally:
        opened.close()
    return measurement


def _already_committed(plan: SweepPlan, target: EvidenceTarget) -> SweepReport:
    """A resumed night the store holds whole: its journal goes, its committed report stands."""
    assert plan.resume is not None and plan.resume.committed is not None
    journal_path(target.directory, plan.report_id).unlink(missing_ok=True)
    empty = Measurement(canaries=(), cells=(), runs=(), spent_usd=0.0)
    report = plan.resume.committed.with_runs(plan.resume.committed_runs)
    return SweepReport(plan, empty, report, history_dir=target.directory, already_committed=True)


def restart_warning(plan: SweepPlan, store: KnowledgeStore, *, commit: bool = True) -> str | None:
    """What a sweep that does not ``--resume`` a stopped night would pay again (say it first)."""
    if plan.resume is not None and plan.resume.journal is not None:
        return None
    left = read_journal(journal_path(evidence_target(plan.spec, store).directory, plan.report_id))
    count = len(left.settled) if left is not None else 0
    batches = sorted(left.batches.values()) if left is not None else []
    if not count and not batches:
        return None
    how = (
        "starts the night over and pays" if commit else "(--no-commit) does not reuse them and pays"
    )
    said = []
    if count:
        said.append(f"had {count} runs settled ok")
    if batches:
        # the provider bills an open batch whether or not anyone collects its answers
        said.append(f"left batch {', '.join(batches)} open at the provider (billed as it runs)")
    return (
        f"a stopped sweep of {plan.report_id} {' and '.join(said)}; this sweep {how} "
        "for them again (kb sweep --resume reuses them)"
    )


def stopped_nights(plan: SweepPlan, store: KnowledgeStore) -> list[str]:
    """Other nights of this spec that stopped with paid runs in their journals (say so).

    A Ctrl-C or a crash leaves a night's journal; nothing else would remind
    anyone that those runs can still be committed with ``--resume``.
    """
    directory = evidence_target(plan.spec, store).directory
    swept = SweptSpec.of(plan.spec.path, store)
    found = []
    for path in sorted(directory.glob(f"*{JOURNAL_SUFFIX}")):
        try:
            journal = read_journal(path)
        except ConfigError:
            continue  # told by the resume that reads it
        if journal is None or journal.report_id == plan.report_id:
            continue
        if not swept.swept(journal.spec) or not (journal.settled or journal.batches):
            continue
        resume = f"kb sweep {plan.spec.path.name} --resume --report-id {journal.report_id}"
        if journal.settled:
            found.append(
                f"the stopped night {journal.report_id} has {len(journal.settled)} paid runs "
                f"in its journal: {resume} commits it"
            )
        if journal.batches:  # stopped while it waited: no run settled, the batch still billed
            open_ids = ", ".join(sorted(set(journal.batches.values())))
            found.append(
                f"the stopped night {journal.report_id} left batch {open_ids} open at the "
                f"provider (billed whether or not it is read): {resume} collects it"
            )
    return found


def _ready_to_spend(
    plan: SweepPlan,
    store: KnowledgeStore,
    journal: Path,
    writes: EvidenceTarget | None,
    push: bool,
) -> None:
    """Before the first call, under the lease: the night is free, and its commit can be made."""
    if plan.resume is not None and not plan.pairs:
        raise ConfigError("--resume", f"the night {plan.report_id!r} has nothing left to measure")
    refuse_used_report_id(store.read(), plan.report_id, plan.pairs)
    if writes is not None and plan.resume is None:
        _, report_file = evidence_paths(writes.directory, plan.report_id)
        if report_file.exists():  # a night that committed evidence and no claim
            raise ConfigError(
                "report id",
                f"{plan.report_id!r} was already used: its evidence is in {report_file} "
                "(kb report shows it); pass a new --report-id or --observed-at (or --resume, "
                "to finish a night that stopped)",
            )
    if journal.exists() and (plan.resume is None or plan.resume.journal is None):
        journal.unlink()  # a fresh start of the night: its journal starts over too
    files = [*evidence_paths(writes.directory, plan.report_id)] if writes else []
    files += [store.home.directory / name for name in (writes.settings if writes else {})]
    canary = [store.home.canary_baselines] if plan.spec.canary is not None else []
    epochs = [store.home.epochs_file] if plan.suites else []
    refuse_uncommitted_labels(store)
    # A file at one of the commit's paths that git does not hold as it is would stop the
    # commit after every call was paid: found now.
    store.preflight(
        push=push, writes=[*files, journal, *canary, *epochs], clean=[*files, *canary, *epochs]
    )


def refuse_uncommitted_labels(store: KnowledgeStore) -> None:
    """A night grades only by labels git holds: a hand edit never grades a night unreviewed."""
    labels = store.home.labels_file
    git = store.git
    rel = git.rel_of(labels) if git is not None else None
    if git is not None and rel is not None and not git.committed_as_is(rel):
        raise ConfigError(
            str(labels),
            "differs from what git has committed, and a night is graded only by committed "
            f"labels: record labels with kb label (it commits them), or git restore {rel}",
        )


def _report(
    plan: SweepPlan,
    measurement: Measurement,
    store: KnowledgeStore,
    target: EvidenceTarget,
    result: CommitResult | None,
    writes: EvidenceTarget | None,
) -> SweepReport:
    """The sweep's report: the one its commit carried (else decided against the plan's store)."""
    change = (
        result.change
        if result is not None
        else decide_change(
            plan,
            measurement,
            plan.snapshot,
            BaselinesFile.read(store.home.canary_baselines),
            None,
            committing=False,
        )
    )
    assert isinstance(change, SweepChange) and change.report is not None
    return SweepReport(
        plan,
        measurement,
        change.report.with_runs(night_runs(plan, measurement)),
        commit=result,
        evidence_files=(
            evidence_paths(target.directory, plan.report_id)
            if result is not None and writes is not None
            else ()
        ),
        store_diff=(
            commit_diff(result, plan, night_before(store, result)) if result is not None else None
        ),
        history_dir=target.directory,
    )


def night_before(store: KnowledgeStore, result: CommitResult) -> str | None:
    """The night (report id) the store stood on before the sweep's commit, when git says."""
    git = store.git
    if git is None or not result.git_commit:
        return None
    parent = git.resolve(f"{result.git_commit}~1")
    return git.newest_trailer(REPORT_TRAILER, parent) if parent else None


def commit_diff(
    result: CommitResult, plan: SweepPlan, before_night: str | None = None
) -> StoreDiff:
    """``kb diff`` of the sweep's own commit, from the commit's base, result and ops.

    ``before_night``: the night the base stood on (:func:`night_before`).
    """
    assert result.base is not None
    commit = result.git_commit[:12] if result.git_commit else None
    before = Side(
        f"{commit}~1" if commit else "before", result.base.version, plan.observed_at, before_night
    )
    after = Side(
        commit or plan.report_id, result.snapshot.version, plan.observed_at, plan.report_id
    )
    reasons = {op.claim_id: op.reason for op in result.ops if isinstance(op, ArchiveClaim)}
    staled = [op.claim_id for op in result.ops if isinstance(op, MarkStale)]
    return diff_snapshots(result.base, result.snapshot, before, after, reasons, staled)


@dataclass(frozen=True)
class SweepOptions:
    """How one sweep runs (the ``kb sweep`` flags a Python caller sets the same way)."""

    report_id: str | None = None
    shard: tuple[int, int] | None = None
    commit: bool = True
    resume: bool = False
    """Finish the night that stopped (``--resume``): its committed cells, its journal."""
    new_epoch: bool = False
    dry_run: bool = False
    allow_partial: bool = False
    attempts: int = DEFAULT_ATTEMPTS
    push: bool = False
    evidence: bool = True
    fail_on_drift: bool = False
    allow_incomplete: bool = False
    fail_on_change: bool = False
    """Fail (after committing) on a falsified held claim or an exact canary drift."""


@dataclass(frozen=True)
class PlannedSweep:
    """What a sweep will do, before its first call (what ``on_plan`` is shown)."""

    plan: SweepPlan
    batches: BatchForecast | None
    """What batch mode will send (``None``: off, or a replay that calls no provider)."""
    warnings: tuple[str, ...]
    """What a stopped night this sweep does not resume would cost, and stopped nights waiting."""


def run_sweep(
    spec: SweepSpec,
    store: KnowledgeStore,
    engine: Engine,
    options: SweepOptions | None = None,
    *,
    observed_at: int | None = None,
    as_of: int | None = None,
    on_plan: Callable[[PlannedSweep], None] | None = None,
    on_ready: Callable[[PlannedSweep], None] | None = None,
) -> SweepReport | None:
    """A whole sweep: :func:`plan_sweep`, the budget, then :func:`execute_sweep`.

    ``on_plan`` sees the plan before the budget is checked (to print it),
    ``on_ready`` once it passed (to start a progress bar). Returns ``None``
    for a dry run. Reads no clock.
    """
    options = options or SweepOptions()
    validate_attempts(options.attempts)
    engine.keep_secrets([*spec.models, *judge_models(spec.cases)])
    planned = plan_sweep(spec, store, engine, options, observed_at=observed_at, as_of=as_of)
    if on_plan is not None:
        on_plan(planned)
    planned.plan.check_budget(allow_partial=options.allow_partial)
    if on_ready is not None:
        on_ready(planned)
    if options.dry_run:
        return None
    done = execute_sweep(
        planned.plan,
        store,
        engine,
        commit=options.commit,
        attempts=options.attempts,
        push=options.push,
        evidence=options.evidence,
    )
    return replace(done, options=options)


def plan_sweep(
    spec: SweepSpec,
    store: KnowledgeStore,
    engine: Engine,
    options: SweepOptions,
    *,
    observed_at: int | None,
    as_of: int | None,
) -> PlannedSweep:
    """The night's plan (``--resume``: the stopped night's), before any call.

    ``observed_at`` is the night's instant (``None``: a resumed night's own,
    else ``as_of``); one given that lies past ``as_of`` is refused.
    """
    stopped, fresh = None, None
    if options.resume:
        try:
            stopped = resume_night(
                spec, store, report_id=options.report_id, observed_at=observed_at
            )
        except NothingToResume as nothing:  # one safe CI command: the night starts
            fresh = f"{nothing}: the night starts now"
    if observed_at is not None and as_of is not None:
        refuse_future_instant(observed_at, as_of, "--observed-at")
    night = stopped.observed_at if stopped is not None else None
    instant = (
        observed_at if observed_at is not None else parse_flag_instant(night) if night else as_of
    )
    if instant is None:
        raise ConfigError("observed_at", "a sweep needs its instant (observed_at or as_of)")
    plan = prepare_sweep(
        spec,
        store.read(),
        observed_at=instant,
        report_id=options.report_id,
        shard=options.shard,
        commit=options.commit,
        resume=stopped,
        epochs=read_epochs(store.home.epochs_file),
        new_epoch=options.new_epoch,
        labels=read_labels(store.home.labels_file),
    )
    said = [
        fresh,
        restart_warning(plan, store, commit=options.commit),
        *stopped_nights(plan, store),
    ]
    return PlannedSweep(
        plan, _batches_forecast(plan, engine, stopped), tuple(w for w in said if w is not None)
    )


def _batches_forecast(
    plan: SweepPlan, engine: Engine, stopped: Resume | None
) -> BatchForecast | None:
    """What batch mode will send (``None`` when the engine has no batch transport)."""
    if engine.batches is None:
        return None
    from kb.engine.batch import batch_forecast

    journal = stopped.journal if stopped is not None else None
    return batch_forecast(
        plan.job.phase("targets").runs,
        engine.batches.accepts,
        lambda run: (
            journal is not None and journal.reusable(run.label, run.request.key) is not None
        ),
        judged=plan.job.phase("judges").later > 0,
    )
