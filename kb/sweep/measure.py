"""Steps 4–7 of a sweep: spend the money — canary, targets, judges — into cells and claims.

:func:`measure` runs the plan's phases exactly as planned (the canary probes,
the target runs, then the judges the targets' answers call for) under one
spend envelope, groups the verdicts into cells and lets the gate decide each
cell's claim. It never sees the store: runs and graders read nothing and
write nothing there, and what they produced is a :class:`Measurement`,
which the commit step turns into ops.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from kb.engine.budget import SpendEnvelope, usd
from kb.engine.phases import Phase
from kb.engine.requests import endpoint
from kb.engine.runs import PlannedRun
from kb.engine.scheduler import Engine
from kb.evals.suite import CaseRun, CaseVerdict, run_pairs
from kb.money import usd as dollars
from kb.stats import wilson_arrays
from kb.store.baselines import BaselinesFile, CanaryBaselines
from kb.store.models import ModelClaim
from kb.store.records import RunRecord
from kb.store.ttl import format_instant
from kb.sweep.canary import CanaryResult, SensitiveTier, canary_change, measure_canaries
from kb.sweep.cells import SweepCell, cell_claim, group_cells
from kb.sweep.evidence import EvidenceContext, canary_records, cell_records
from kb.sweep.health import RECHECKS, answer_health, model_answer, not_an_answer, reply_kind
from kb.sweep.nightly import nightly_rule
from kb.sweep.plan import SweepPlan
from kb.sweep.resume import ResumedModel, ResumeGuard
from kb.sweep.sampling import CellEpochNight, CellKey, NightSampler
from kb.textwidth import shorten

MeasuredCell = tuple[SweepCell, ModelClaim | None]


@dataclass(frozen=True)
class Measurement:
    """What the sweep's runs found, before anything is committed."""

    canaries: tuple[CanaryResult, ...]
    cells: tuple[MeasuredCell, ...]
    """Each cell with the claim it earned (``None``: mid-band or incomplete)."""
    runs: tuple[RunRecord, ...]
    """Every run's evidence record: canary probes, then each cell's targets and judges."""
    spent_usd: float
    reused: int = 0
    """Runs served from the journal of a stopped invocation (paid then, not now)."""
    resumed: tuple[ResumedModel, ...] = ()
    """Models whose journaled runs a resume asked again (their canary changed or could not
    be compared: :class:`kb.sweep.resume.ResumeGuard`)."""
    rechecks: tuple[str, ...] = ()
    """What was asked again to tell a canned answer from an outage (:class:`Recheck`)."""

    @property
    def measured_any(self) -> bool:
        """At least one cell was measured completely (only then does a sweep commit)."""
        return any(cell.complete for cell, _ in self.cells)

    @property
    def fingerprints(self) -> dict[str, str]:
        """Each member's usable canary fingerprint (all-ok and stable)."""
        return {c.member.key: c.fingerprint for c in self.canaries if c.may_flip}


def measure(
    plan: SweepPlan,
    engine: Engine,
    baselines: BaselinesFile | None = None,
    *,
    resumed: ResumeGuard | None = None,
) -> Measurement:
    """Run the plan's phases and decide each cell's claim.

    Under the interval gate the targets run in passes after the canary
    (:mod:`kb.sweep.sampling`): the cases each cell's epoch asks for, then
    more, look by look, where the nightly rule goes on (a suspicious detector,
    an unclear cold start, an alarm's new epoch).
    ``baselines`` (the canary baselines file) tells which subjects drifted
    tonight: their epochs start over. ``resumed`` (a resumed night) checks
    each model's canary against the stopped invocation's before any of its
    journaled runs is reused; a model that changed meanwhile starts over too.
    """
    spec = plan.spec
    envelope = SpendEnvelope.from_usd(spec.budgets.max_total_usd)
    canaries = _canaries(plan, engine, baselines, envelope)
    changed = resumed.check(canaries) if resumed is not None else ()
    recheck = Recheck(engine, plan, plan.job.phase("targets"), envelope, canaries)
    if not plan.suites:
        verdicts = run_pairs(
            engine,
            plan.pairs,
            plan.job.phase("targets"),
            envelope,
            judge_usd=spec.budgets.judge_usd,
        )
        recheck.after(dict(enumerate(verdicts)))
        pairs = list(plan.pairs)
        nights: dict[CellKey, CellEpochNight] = {}
    else:
        restart = _drifted(plan, canaries, baselines) | {m.member for m in changed if m.changed}
        sampler = NightSampler(
            plan.suites,
            spec.sweep.sampling,
            restart,
            shifted=frozenset(c.member.key for c in canaries if c.shifted),
            report_id=plan.report_id,
            observed_at=format_instant(plan.observed_at),
            nightly=nightly_rule(spec),
        )
        merged = _passes(plan, engine, sampler, recheck, envelope)
        nights = sampler.finish()
        verdicts = [merged[index] for index in sorted(merged)]
        pairs = [plan.pairs[index] for index in sorted(merged)]
    engine.finish()
    fingerprints = {c.member.key: c.fingerprint for c in canaries if c.may_flip}
    cells = measured_cells(plan, pairs, verdicts, fingerprints, nights, recheck)
    return _measurement(plan, canaries, cells, usd(envelope.debited), changed, recheck.notes)


def _measurement(
    plan: SweepPlan,
    canaries: Sequence[CanaryResult],
    cells: Sequence[MeasuredCell],
    spent: float,
    changed: tuple[ResumedModel, ...],
    rechecks: Sequence[str],
) -> Measurement:
    """The night's measurement, with every run's evidence record and what was reused."""
    context = EvidenceContext.of([*(m.spec for m in plan.pool), *plan.judge_models])
    runs = canary_records(canaries, context) + [
        record for cell, _ in cells for record in cell_records(cell, context)
    ]
    reused = sum(1 for cell, _ in cells for run in cell.runs if run.reused)
    reused += sum(1 for c in canaries for probe in c.probes for run in probe.runs if run.reused)
    return Measurement(
        tuple(canaries), tuple(cells), tuple(runs), spent, reused, changed, tuple(rechecks)
    )


def _canaries(
    plan: SweepPlan, engine: Engine, baselines: BaselinesFile | None, envelope: SpendEnvelope
) -> list[CanaryResult]:
    """Step 4: the canary of every member (both tiers when the canary has ``[sensitive]``)."""
    spec = plan.spec
    if spec.canary is None:
        return []
    tier = None
    if plan.probes is not None and spec.canary.sensitive is not None:
        known = baselines.parsed if baselines is not None else CanaryBaselines()
        tier = SensitiveTier(plan.probes, spec.canary.sensitive.settings(), known)
    return measure_canaries(
        engine,
        plan.members,
        spec.canary.prompts,
        envelope,
        repeats=spec.canary.repeats,
        probes=plan.job.phase("canary"),
        tier=tier,
    )


def _passes(
    plan: SweepPlan,
    engine: Engine,
    sampler: NightSampler,
    recheck: Recheck,
    envelope: SpendEnvelope,
) -> dict[int, CaseVerdict]:
    """Step 5 under the interval gate: passes of target runs until the sampler asks no more."""
    targets = plan.job.phase("targets")
    judge_usd = plan.spec.budgets.judge_usd
    merged: dict[int, CaseVerdict] = {}
    names, only = sampler.first(), False
    while names or not only:
        ran = _run_some(engine, plan, _chosen(plan, names, only=only), targets, envelope, judge_usd)
        merged.update(ran)
        recheck.after(merged)
        names, only = sampler.more(*_pass_scores(plan, ran, recheck.accepted)), True
    return merged


def _drifted(
    plan: SweepPlan, canaries: Sequence[CanaryResult], baselines: BaselinesFile | None
) -> frozenset[str]:
    """The members whose canary says tonight that the provider changed the model."""
    if not canaries or baselines is None or plan.spec.canary is None:
        return frozenset()
    found = canary_change(canaries, plan.snapshot, baselines, tuple(plan.spec.canary.prompts))
    return frozenset(key for key, (status, _) in found.outcomes.items() if status == "drift")


def _chosen(
    plan: SweepPlan, names: Mapping[CellKey, Sequence[str]], *, only: bool = False
) -> list[int]:
    """The plan indices of the pairs ``names`` picks.

    A cell ``names`` does not mention runs whole, unless ``only``.
    """
    picked = {key: set(found) for key, found in names.items()}
    chosen = []
    for index, pair in enumerate(plan.pairs):
        wanted = picked.get((pair.member.key, pair.case.task_class))
        if (wanted is None and not only) or (wanted is not None and pair.name in wanted):
            chosen.append(index)
    return chosen


def _run_some(
    engine: Engine,
    plan: SweepPlan,
    indices: Sequence[int],
    targets: Phase,
    envelope: SpendEnvelope,
    judge_usd: float | None,
) -> dict[int, CaseVerdict]:
    """Run the planned pairs at ``indices`` (targets, then their judges): verdicts by index."""
    if not indices:
        return {}
    phase = Phase(targets.name, tuple(targets.runs[i] for i in indices))
    pairs = [plan.pairs[i] for i in indices]
    verdicts = run_pairs(engine, pairs, phase, envelope, judge_usd=judge_usd)
    return dict(zip(indices, verdicts, strict=True))


def _pass_scores(
    plan: SweepPlan,
    verdicts: Mapping[int, CaseVerdict],
    accepted: Mapping[CellKey, frozenset[str]] | None = None,
) -> tuple[dict[CellKey, dict[str, float]], frozenset[CellKey]]:
    """Each cell's case scores from one pass, and which cells the pass measured completely."""
    indices = sorted(verdicts)
    members = [plan.pairs[i].member for i in indices]
    grouped = group_cells(members, [verdicts[i] for i in indices], plan.spec.sweep.repeats)
    cases = {pair.name: pair.case for pair in plan.pairs}
    scores: dict[CellKey, dict[str, float]] = {}
    complete = set()
    for cell in grouped:
        key = (cell.member.key, cell.task_class)
        known = (accepted or {}).get(key, frozenset())
        checked = replace(cell, suspicion=answer_health(cell.verdicts, cases, known))
        scores[key] = {case.name: case.score for case in cell.cases if case.measured}
        if checked.complete:
            complete.add(key)
    return scores, frozenset(complete)


def measured_cells(
    plan: SweepPlan,
    pairs: Sequence[CaseRun],
    verdicts: Sequence[CaseVerdict],
    fingerprints: dict[str, str],
    nights: Mapping[CellKey, CellEpochNight] | None = None,
    recheck: Recheck | None = None,
) -> list[MeasuredCell]:
    """Steps 6–7: the cells of the verdicts (aligned with ``pairs``) and the claim each emits.

    Every cell's interval comes from one vectorized call over all cells;
    ``nights`` gives each cell its epoch (the interval gate decides on it).
    """
    nights = nights or {}
    grouped = group_cells([pair.member for pair in pairs], verdicts, plan.spec.sweep.repeats)
    lows, highs = wilson_arrays(
        np.array([cell.passed for cell in grouped], dtype=np.float64),
        np.array([cell.n for cell in grouped], dtype=np.float64),
    )
    cases = {pair.name: pair.case for pair in pairs}
    accepted = recheck.accepted if recheck is not None else {}
    cells = [
        replace(
            cell,
            interval=(float(low), float(high)),
            suspicion=answer_health(
                cell.verdicts, cases, accepted.get((cell.member.key, cell.task_class), frozenset())
            ),
            epoch=nights.get((cell.member.key, cell.task_class)),
        )
        for cell, low, high in zip(grouped, lows, highs, strict=True)
    ]
    if recheck is not None:
        cells = [recheck.explained(cell) for cell in cells]
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
        for cell in cells
    ]


AGAIN = "~again"
"""What a suspect reply's run is labelled when it is asked a second time."""


class Recheck:
    """A reply that made a cell suspect is asked again once: a model's answer or an outage's.

    After each pass of target runs, a reply that makes a cell suspect because
    one text answered many prompts (:mod:`kb.sweep.health`) is first judged
    without a call (:func:`~kb.sweep.health.not_an_answer`: a page, a text
    other models on the endpoint or the model's canary got too, or one that
    answered everything from some request on is an outage's); if it may be
    the model's own, up to :data:`~kb.sweep.health.RECHECKS` of its prompts
    are asked a second time, each reply once a night, paid from the
    envelope's room (a refused re-ask leaves the cell suspect). The same text
    again is the model's answer — a canned refusal — and is scored
    (:attr:`accepted`); otherwise the cell stays suspect and its reason says
    why (:attr:`rejected`). :attr:`notes` says what was asked again.
    """

    def __init__(
        self,
        engine: Engine,
        plan: SweepPlan,
        targets: Phase,
        envelope: SpendEnvelope,
        canaries: Sequence[CanaryResult] = (),
    ) -> None:
        self.engine = engine
        self.plan = plan
        self.runs = {run.label: run for run in targets.runs}
        self.envelope = envelope
        self.canary = {
            c.member.key: {reply_kind(o) for probe in c.probes for o in probe.outputs}
            for c in canaries
        }
        self.accepted: dict[CellKey, frozenset[str]] = {}
        self.rejected: dict[CellKey, str] = {}
        self.notes: list[str] = []
        self._asked: set[tuple[CellKey, str]] = set()

    def after(self, verdicts: Mapping[int, CaseVerdict]) -> None:
        """Judge, and ask again, what makes a cell suspect in ``verdicts`` (every pass so far)."""
        cases = {pair.name: pair.case for pair in self.plan.pairs}
        by_cell: dict[CellKey, list[CaseVerdict]] = {}
        for index in sorted(verdicts):
            pair = self.plan.pairs[index]
            by_cell.setdefault((pair.member.key, pair.case.task_class), []).append(verdicts[index])
        replies = _replies_by_endpoint(self.plan, verdicts)
        asks: list[tuple[CellKey, str, list[str]]] = []
        for cell, found in by_cell.items():
            suspicion = answer_health(found, cases, self.accepted.get(cell, frozenset()))
            if suspicion is None or suspicion.reply is None:
                continue
            reply = suspicion.reply
            if (cell, reply) in self._asked:
                continue
            self._asked.add((cell, reply))
            labels = [v.target.label for v in found if v.target.label in suspicion.labels]
            where = _endpoint_of(self.runs[labels[0]])
            others = {
                k for m, kinds in replies.get(where, {}).items() if m != cell[0] for k in kinds
            }
            sent = sorted(
                (v.target for v in found if v.target.status == "ok"),
                key=lambda run: run.started_at or 0.0,
            )
            why = not_an_answer(
                reply, [r.output for r in sent], others, self.canary.get(cell[0], ())
            )
            if why is not None:
                self.rejected[cell] = why
                continue
            asks.append((cell, reply, labels[:RECHECKS]))
        if asks:
            self._ask(asks)

    def _ask(self, asks: Sequence[tuple[CellKey, str, list[str]]]) -> None:
        again = [
            replace(self.runs[label], label=f"{label}{AGAIN}")
            for _, _, labels in asks
            for label in labels
        ]
        ran = self.engine.run(again, self.envelope)
        said = {
            run.label.removesuffix(AGAIN): run.output if run.status == "ok" else None for run in ran
        }
        cost = sum(run.cost_usd for run in ran)
        for cell, reply, labels in asks:
            shown = shorten(reply, 40)
            asked = f"{cell[0]} · {cell[1]}: {len(labels)} prompts answered {shown!r} asked again"
            if model_answer(reply, [said.get(label) for label in labels]):
                self.accepted[cell] = self.accepted.get(cell, frozenset()) | {reply}
                self.notes.append(f"{asked}: the same text, the model's own answer (scored)")
            else:
                self.rejected[cell] = "asked again, it did not come back the same"
                self.notes.append(f"{asked}: another text came back (the cell stays suspect)")
        self.notes.append(f"asking again cost {dollars(cost)}")

    def explained(self, cell: SweepCell) -> SweepCell:
        """``cell`` with its suspect reason saying why the reply is not the model's answer."""
        why = self.rejected.get((cell.member.key, cell.task_class))
        found = cell.suspicion
        if why is None or found is None or found.reply is None:
            return cell
        return replace(cell, suspicion=replace(found, reason=f"{found.reason}; {why}"))


def _endpoint_of(run: PlannedRun) -> tuple[str, str]:
    return run.spec.provider, endpoint(run.request) or ""


def _replies_by_endpoint(
    plan: SweepPlan, verdicts: Mapping[int, CaseVerdict]
) -> dict[tuple[str, str], dict[str, set[str]]]:
    """Every reply tonight (:func:`reply_kind`), by endpoint and model."""
    found: dict[tuple[str, str], dict[str, set[str]]] = {}
    for index, verdict in verdicts.items():
        run = verdict.target
        if run.status != "ok" or run.request is None:
            continue
        member = plan.pairs[index].member
        where = (member.provider, endpoint(run.request) or "")
        found.setdefault(where, {}).setdefault(member.key, set()).add(reply_kind(run.output))
    return found
