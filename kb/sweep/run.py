"""One nightly sweep, steps 1–9: pool, plan, canary, measure, cells, claims, falsify, commit.

:func:`prepare_sweep` does everything before the first provider call (read
the store, build the pool, compute the worst-case authorized spend) so the
CLI can print it first, or stop there with ``--dry-run``;
:func:`execute_sweep` spends the money and commits. :func:`run_sweep` is
both. No function here reads a clock: the sweep instant is a parameter.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kb.canary import CanaryChange, CanaryResult, canary_change, classified, measure_canaries
from kb.canary_baselines import baselines_path
from kb.engine.budget import SpendEnvelope, SpendForecast, forecast_spend, usd
from kb.engine.requests import ModelSpec
from kb.engine.scheduler import Engine, PlannedRun
from kb.errors import ConfigError
from kb.evals.cases import JudgeGrader, unique_names
from kb.evals.graders import judge_spec
from kb.evals.suite import CaseRun, CaseVerdict, run_pairs, target_run
from kb.store.audit import diff_revisions
from kb.store.diff import Side, StoreDiff, diff_snapshots
from kb.store.filestore import CommitContext, CommitResult, KnowledgeStore, validate_attempts
from kb.store.models import ModelClaim
from kb.store.ops import EvalCommitterGate
from kb.store.snapshot import Snapshot
from kb.store.ttl import format_instant, stored_instant
from kb.sweep.cells import SweepCell, cell_claim, claim_id, group_cells
from kb.sweep.evidence import (
    DEFAULT_EVIDENCE_DIR,
    EvidenceContext,
    canary_records,
    cell_records,
    evidence_paths,
    render_report,
    render_runs,
)
from kb.sweep.falsify import Retirement, live_eval_claims, retirements, sweep_ops
from kb.sweep.pool import PoolMember, build_pool
from kb.sweep.report_json import report_body
from kb.sweep.spec import SweepSpec


@dataclass(frozen=True)
class SweepPlan:
    """Everything decided before the first provider call."""

    spec: SweepSpec
    report_id: str
    observed_at: int
    snapshot: Snapshot
    pool: tuple[PoolMember, ...]
    pairs: tuple[CaseRun, ...]
    """Every run this sweep (or shard) makes, in plan order (a case's repeats together)."""
    target_runs: tuple[PlannedRun, ...]
    judge_runs_max: int
    canary_probes: int
    forecast: SpendForecast
    """What the envelope would do if every run cost its full ceiling."""
    shard: tuple[int, int] | None = None

    @property
    def worst_case_usd(self) -> float | None:
        """Worst-case authorized spend (``None``: no envelope, unbounded)."""
        if self.spec.budgets.max_total_usd is None:
            return None
        return self.forecast.worst_usd

    def check_budget(self, *, allow_partial: bool = False) -> None:
        """Refuse, before any call, a sweep the envelope could not pay for in full.

        With ``allow_partial`` (or ``[sweep] allow_partial``) the sweep runs and
        the envelope refuses the overflow, leaving those cells incomplete.
        """
        if self.forecast.exceeds and not (allow_partial or self.spec.sweep.allow_partial):
            raise ConfigError("budgets.max_total_usd", self.forecast.refusal())

    @property
    def pool_specs(self) -> list[ModelSpec]:
        """Every pool member's model spec."""
        return [member.spec for member in self.pool]

    @property
    def members(self) -> list[ModelSpec]:
        """The pool members with at least one cell in this sweep (or shard)."""
        keys = {pair.member.key for pair in self.pairs}
        return [member.spec for member in self.pool if member.spec.key in keys]


@dataclass
class SweepReport:
    """What a sweep did; ``to_json`` is the ``--json`` report."""

    plan: SweepPlan
    cells: list[tuple[SweepCell, ModelClaim | None]] = field(default_factory=list)
    retired: list[Retirement] = field(default_factory=list)
    canary: list[dict[str, Any]] = field(default_factory=list)
    spent_usd: float = 0.0
    committed_version: int | None = None
    git_commit: str | None = None
    commit_message: str | None = None
    runs: list[dict[str, Any]] = field(default_factory=list)
    """Every run's evidence record (``runs[]`` of ``--json``, the evidence file's lines)."""
    evidence_files: list[Path] = field(default_factory=list)
    """Where the evidence was written (empty when not committed or turned off)."""
    store_diff: StoreDiff | None = None
    """What the sweep's commit changed in the store (``None``: nothing committed)."""

    @property
    def claims(self) -> list[ModelClaim]:
        """The claims the sweep emitted."""
        return [claim for _, claim in self.cells if claim is not None]

    @property
    def provider_errors(self) -> int:
        """Target runs that failed at the provider (for ``--strict``)."""
        return sum(cell.non_ok_runs for cell, _ in self.cells)


def parse_shard(text: str) -> tuple[int, int]:
    """``I/N`` with 1 ≤ I ≤ N."""
    index, sep, total = text.partition("/")
    if not (sep and index.isdigit() and total.isdigit()) or not 1 <= int(index) <= int(total):
        raise ConfigError("--shard", f"{text!r} must be I/N with 1 <= I <= N")
    return int(index), int(total)


def shard_of(member_key: str, task_class: str, total: int) -> int:
    """The shard (1-based) a cell belongs to.

    A hash of the cell itself, not its position: shards that start at
    different moments may read slightly different pools (another shard
    already superseded a queued claim), yet every cell still lands in exactly
    one shard. Cells are never split, so each shard's claims are complete.
    """
    digest = hashlib.sha256(f"{member_key}\0{task_class}".encode()).hexdigest()
    return int(digest, 16) % total + 1


def _refuse_backdating(snapshot: Snapshot, pairs: Sequence[CaseRun], observed_at: int) -> None:
    """A committing sweep may not be older than the live claims it would retire.

    Otherwise a replayed old night would supersede newer knowledge with an
    older, possibly expired, measurement.
    """
    live = live_eval_claims(snapshot)
    cells = {(p.member.ref, p.member.effort, p.case.task_class) for p in pairs}
    newer = [
        claim
        for key in cells
        for _, claim in live.get(key, [])
        if stored_instant(claim.observed_at) > observed_at
    ]
    if newer:
        first = min(newer, key=lambda claim: claim.id)
        raise ConfigError(
            "--observed-at",
            f"{format_instant(observed_at)} is older than {len(newer)} live claim"
            f"{'s' if len(newer) != 1 else ''} this sweep would retire (e.g. {first.id}, "
            f"observed {first.observed_at}); measure at a later instant, or replay the old "
            "night with --no-commit",
        )


def plan_case_runs(
    spec: SweepSpec, pool: Sequence[PoolMember], shard: tuple[int, int] | None = None
) -> list[CaseRun]:
    """Every run of the sweep (or shard) in plan order: member, case, repeat.

    Only measured members run; a shard keeps whole cells (member × task class).
    """
    repeats = spec.sweep.repeats
    named = list(zip(spec.cases, unique_names(spec.cases), strict=True))
    return [
        CaseRun(member.spec, case, name, repeat if repeats > 1 else None)
        for member in pool
        if member.measured
        for case, name in named
        if shard is None or shard_of(member.spec.key, case.task_class, shard[1]) == shard[0]
        for repeat in range(repeats)
    ]


def prepare_sweep(
    spec: SweepSpec,
    store: KnowledgeStore,
    *,
    observed_at: int,
    report_id: str | None = None,
    shard: tuple[int, int] | None = None,
    commit: bool = True,
) -> SweepPlan:
    """Steps 1–3: read the store, build the pool, plan the runs, bound the spend.

    A report id already used in the store is refused only when the sweep will
    commit (``commit``): a replay of a past night under its own id may measure.
    """
    snapshot = store.read()
    pool = build_pool(spec.models, snapshot, observed_at)
    budgets = spec.budgets
    pairs = plan_case_runs(spec, pool, shard)
    targets = [target_run(pair, budgets.target_usd) for pair in pairs]
    judges = sum(1 for p in pairs for g in p.case.graders if isinstance(g, JudgeGrader))
    probes = len(spec.canary.prompts) * spec.canary.repeats if spec.canary else 0
    members = len({p.member.key for p in pairs})
    # The envelope authorizes in this order: canary probes, targets, then judges.
    ceilings = (
        [budgets.canary_usd] * (probes * members)
        + [budgets.target_usd] * len(targets)
        + [budgets.judge_usd] * judges
    )
    forecast = forecast_spend(budgets.max_total_usd, ceilings)
    report_id = report_id or spec.sweep.report_id or f"kb-sweep-{format_instant(observed_at)}"
    taken = sorted(
        {
            cid
            for pair in pairs
            if snapshot.has(cid := claim_id(report_id, pair.member, pair.case.task_class))
        }
    )
    if taken and commit:  # found now, before any money is spent, not at commit time
        raise ConfigError(
            "report id",
            f"{report_id!r} was already used: claim {taken[0]!r} exists; pass a new "
            "--report-id or --observed-at",
        )
    if commit:
        _refuse_backdating(snapshot, pairs, observed_at)
    return SweepPlan(
        spec=spec,
        report_id=report_id,
        observed_at=observed_at,
        snapshot=snapshot,
        pool=tuple(pool),
        pairs=tuple(pairs),
        target_runs=tuple(targets),
        judge_runs_max=judges,
        canary_probes=probes * members,
        forecast=forecast,
        shard=shard,
    )


def execute_sweep(
    plan: SweepPlan,
    store: KnowledgeStore,
    engine: Engine,
    *,
    commit: bool = True,
    attempts: int = 3,
    push: bool = False,
    evidence: bool = True,
) -> SweepReport:
    """Steps 4–9: canary, measure, cells, claims, falsify, one CAS commit (pushed with ``push``).

    The canary's flips and the claims go into one commit, flips first, with
    the evidence files (unless ``evidence`` is off or ``[sweep] evidence =
    false``), and only when at least one cell was measured completely: a
    sweep that measured nothing changes nothing.
    """
    spec = plan.spec
    if commit:
        store.preflight(push=push)
    envelope = SpendEnvelope.from_usd(spec.budgets.max_total_usd)
    report = SweepReport(plan)
    canaries: list[CanaryResult] = []
    prompts: tuple[str, ...] = ()
    if spec.canary is not None:
        prompts = tuple(spec.canary.prompts)
        canaries = measure_canaries(
            engine,
            plan.members,
            prompts,
            envelope,
            canary_usd=spec.budgets.canary_usd,
            repeats=spec.canary.repeats,
        )
    verdicts = run_pairs(
        engine,
        plan.pairs,
        envelope,
        target_usd=spec.budgets.target_usd,
        judge_usd=spec.budgets.judge_usd,
    )
    engine.finish()
    fingerprints = {c.member.key: c.fingerprint for c in canaries if c.may_flip}
    report.cells = measured_cells(plan, verdicts, fingerprints)
    report.spent_usd = usd(envelope.debited)
    context = EvidenceContext.of([*plan.pool_specs, *judge_models(spec)])
    report.runs = canary_records(canaries, context) + [
        record for cell, _ in report.cells for record in cell_records(cell, context)
    ]
    gate = EvalCommitterGate(committer_id=spec.sweep.committer, report_id=plan.report_id)
    baselines = baselines_path(store.path)
    evidence_dir = _evidence_dir(spec, store, evidence)

    def build(snapshot: Snapshot) -> CanaryChange:
        found = canary_change(canaries, snapshot, baselines, prompts)
        ops = (*found.ops, *sweep_ops(snapshot, report.cells, gate, spec.gate))
        version = snapshot.version + 1 if ops else snapshot.version
        files = dict(found.files)
        notes = [found.note] if found.note else []
        if evidence_dir is not None:
            body = report_body(
                plan,
                report.cells,
                retired=retirements(ops),
                canary=[c.to_json() for c in classified(canaries, found, version)],
                spent_usd=report.spent_usd,
                committed_version=version,
            )
            runs_file, report_file = evidence_paths(evidence_dir, plan.report_id)
            files[str(runs_file)] = render_runs(report.runs)
            files[str(report_file)] = render_report(body)
            if not ops:
                notes.append("evidence only")
        return CanaryChange(ops, files, ", ".join(notes) or None, outcomes=found.outcomes)

    measured = any(cell.complete for cell, _ in report.cells)
    result = None
    if commit and measured:
        context_ = CommitContext(
            "sweep", spec.sweep.committer, label=plan.report_id, report_id=plan.report_id
        )
        result = store.commit_with_rebase(build, context_, attempts=attempts, push=push)
    change = result.change if result is not None else build(plan.snapshot)
    assert isinstance(change, CanaryChange)
    version = result.snapshot.version if result is not None else None
    report.canary = [c.to_json() for c in classified(canaries, change, version)]
    report.retired = retirements(change.ops)
    if result is not None:
        report.committed_version = version
        report.git_commit = result.git_commit
        report.commit_message = result.message
        if evidence_dir is not None:
            report.evidence_files = list(evidence_paths(evidence_dir, plan.report_id))
        report.store_diff = commit_diff(store, result, plan)
    return report


def commit_diff(store: KnowledgeStore, result: CommitResult, plan: SweepPlan) -> StoreDiff:
    """``kb diff`` of the sweep's own commit (outside git: before and after, no expiries)."""
    git = store.git
    if git is not None and result.git_commit is not None and git.resolve(f"{result.git_commit}~1"):
        commit = result.git_commit[:12]
        return diff_revisions(store, f"{commit}~1", commit, plan.observed_at)
    assert result.base is not None
    before = Side("before", result.base.version, plan.observed_at)
    after = Side(plan.report_id, result.snapshot.version, plan.observed_at)
    return diff_snapshots(result.base, result.snapshot, before, after)


def report_history_dir(spec: SweepSpec, store: KnowledgeStore) -> Path:
    """Where earlier reports of this spec's sweeps are (for deltas and trends)."""
    found = _evidence_dir(spec, store, True)
    return found if found is not None else store.path.parent / DEFAULT_EVIDENCE_DIR


def _evidence_dir(spec: SweepSpec, store: KnowledgeStore, evidence: bool) -> Path | None:
    """Where this sweep's evidence goes (``None``: turned off)."""
    if not evidence or not spec.sweep.evidence:
        return None
    if spec.sweep.evidence_dir is None:
        return store.path.parent / DEFAULT_EVIDENCE_DIR
    chosen = Path(spec.sweep.evidence_dir).expanduser()
    return chosen if chosen.is_absolute() else spec.path.resolve().parent / chosen


def judge_models(spec: SweepSpec) -> list[ModelSpec]:
    """The judges the spec's cases call."""
    return [
        judge_spec(grader)
        for case in spec.cases
        for grader in case.graders
        if isinstance(grader, JudgeGrader)
    ]


def measured_cells(
    plan: SweepPlan, verdicts: Sequence[CaseVerdict], fingerprints: dict[str, str]
) -> list[tuple[SweepCell, ModelClaim | None]]:
    """Steps 6–7: the cells of the verdicts and the claim each emits."""
    return [
        (
            cell,
            cell_claim(
                cell,
                gate=plan.spec.gate,
                report_id=plan.report_id,
                observed_at=plan.observed_at,
                committer=plan.spec.sweep.committer,
                canary_fingerprint=fingerprints.get(cell.member.key),
            ),
        )
        for cell in group_cells(
            [pair.member for pair in plan.pairs], verdicts, plan.spec.sweep.repeats
        )
    ]


def run_sweep(
    spec: SweepSpec,
    store: KnowledgeStore,
    engine: Engine,
    *,
    observed_at: int,
    report_id: str | None = None,
    commit: bool = True,
    attempts: int = 3,
    push: bool = False,
) -> SweepReport:
    """A whole sweep: :func:`prepare_sweep` then :func:`execute_sweep`."""
    validate_attempts(attempts)
    plan = prepare_sweep(spec, store, observed_at=observed_at, report_id=report_id, commit=commit)
    plan.check_budget()
    return execute_sweep(plan, store, engine, commit=commit, attempts=attempts, push=push)
