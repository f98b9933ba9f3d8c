"""Running the checkpoint: planned first (every phase, one budget refusal), then measured.

:func:`plan_checkpoint` decides everything before the first call: criterion
1's cells and their case runs (baseline at the default tier, treatment at the
recommended one), the card, the orchestrator's routing calls (with and
without the card) and the bounds on what those calls decide. Its
:class:`JobPlan` is what the budget refusal reads and what
:func:`run_checkpoint` then runs, phase by phase:

1. criterion 1's targets (baseline, treatment and the always-strongest
   control — the ladder's top rung, planned only where it is neither of the
   other two rungs), then their judges;
2. the orchestrator's routing calls;
3. the chosen profiles' targets, then their judges.

With a :class:`~kb.paired.SequentialDesign` (``--sequential``) step 1 runs in
rounds of cases (in an order shuffled by a seed from the case names, so a
spec sorted by difficulty cannot bias the early rounds) and stops once the
pooled confidence sequence decides; the budget refusal still reads the whole
plan.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from kb.card import (
    Ladder,
    LaddersFile,
    Profile,
    compile_verified_layer,
    render_card,
    usable_claims,
)
from kb.checkpoint.arms import (
    Arm,
    CheckpointOptions,
    CheckpointReport,
    SequentialRecord,
    StartRungCell,
    compare,
    pooled,
)
from kb.checkpoint.health import ArmHealth
from kb.checkpoint.rules import START_RUNG_INTERVAL
from kb.checkpoint.spec import CheckpointSpec, leakage_issues
from kb.engine.budget import SpendEnvelope, usd
from kb.engine.phases import JobPlan, Phase, job_plan
from kb.engine.requests import ModelSpec, ProviderRequest, build_request
from kb.engine.runs import PlannedRun, RunResult
from kb.engine.scheduler import Engine
from kb.errors import ConfigError
from kb.evals.cases import Case, unique_names
from kb.evals.suite import CaseRun, CaseVerdict, judge_phase, run_pairs, target_phase
from kb.paired import SequentialDesign, seed_from
from kb.store.filestore import ReadOnlyStore
from kb.store.home import StoreHome
from kb.store.manifests import claim_evidence
from kb.store.models import ModelClaim

ROUTER_SYSTEM = (
    'You route tasks to agent profiles. Reply with only a JSON object {"profile": "<name>"} '
    "naming one of the listed profiles."
)

ArmKey = tuple[str, str, str]
"""(ladder, task class, arm) — where a criterion-1 verdict belongs."""


@dataclass(frozen=True)
class CellLayout:
    """One criterion-1 cell before any call: its ladder, task class and tiers."""

    ladder: Ladder
    task_class: str
    recommended_tier: int | None

    @property
    def strongest_tier(self) -> int:
        """The ladder's top rung: the always-strongest control."""
        return len(self.ladder.rungs) - 1

    @property
    def arms(self) -> list[tuple[str, int]]:
        """The arms this cell runs, each on its rung: the strongest only where it is new."""
        arms = [("baseline", self.ladder.start_tier)]
        if self.recommended_tier is not None:
            arms.append(("treatment", self.recommended_tier))
            if self.strongest_tier not in (self.ladder.start_tier, self.recommended_tier):
                arms.append(("strongest", self.strongest_tier))
        return arms

    @property
    def prefix(self) -> str:
        """How the cell's case names read in the pooled arms."""
        return f"{self.ladder.name}/{self.task_class}/"


@dataclass(frozen=True)
class RoutedCase:
    """One orchestrated case in one arm (``informed`` sees the card, ``blind`` does not)."""

    arm: str
    case: Case
    name: str


@dataclass(frozen=True)
class CheckpointPlan:
    """Everything decided before the first provider call."""

    spec: CheckpointSpec
    claims: tuple[ModelClaim, ...]
    card: str
    layout: tuple[CellLayout, ...]
    pairs: tuple[tuple[ArmKey, CaseRun], ...]
    """Criterion 1's case runs, each with the arm it belongs to."""
    routed: tuple[RoutedCase, ...]
    job: JobPlan
    """``targets``, ``judges``, ``orchestrator``, ``profile targets``, ``profile judges``."""


def _router_request(
    spec: CheckpointSpec, case: Case, card: str | None
) -> tuple[ModelSpec, ProviderRequest]:
    profiles = "\n".join(f"- {p.name} (task class: {p.task_class})" for p in spec.ladders.profiles)
    knowledge = f"\nKnowledge card:\n{card}\n" if card is not None else ""
    prompt = (
        f"Profiles:\n{profiles}\n{knowledge}\nTask (task class: {case.task_class}):\n"
        f"{case.prompt}\n\nWhich profile should handle this task?"
    )
    schema = {
        "type": "object",
        "properties": {
            "profile": {"type": "string", "enum": [p.name for p in spec.ladders.profiles]}
        },
        "required": ["profile"],
        "additionalProperties": False,
    }
    orchestrator = spec.model(spec.section.orchestrator)
    return orchestrator, build_request(
        orchestrator,
        prompt,
        system=ROUTER_SYSTEM,
        response_schema=schema,
        overrides={"temperature": 0},
    )


def _choice(spec: CheckpointSpec, run: RunResult) -> Profile | None:
    if run.status != "ok":
        return None
    try:
        name = json.loads((run.output or "").strip()).get("profile")
    except (ValueError, AttributeError):
        return None
    return next((p for p in spec.ladders.profiles if p.name == name), None)


def _start_rung_pairs(
    spec: CheckpointSpec, claims: Sequence[ModelClaim], as_of: int
) -> tuple[list[CellLayout], list[tuple[ArmKey, CaseRun]]]:
    """Criterion 1: every (ladder, task class) cell that has cases, and its case runs."""
    ladders = spec.ladders
    recommended = {
        (r.ladder, r.task_class): r.recommended_tier
        for r in compile_verified_layer(claims, ladders.ladders, as_of, ladders.floors)
    }
    named = list(zip(spec.cases, unique_names(spec.cases), strict=True))
    planned: list[tuple[ArmKey, CaseRun]] = []
    layout: list[CellLayout] = []
    for ladder in ladders.ladders:
        classes = dict.fromkeys(
            c.task_class for c in spec.cases if ladder.task_class in (None, c.task_class)
        )
        for task_class in classes:
            cell = CellLayout(ladder, task_class, recommended.get((ladder.name, task_class)))
            layout.append(cell)
            for arm, rung_index in cell.arms:
                rung = ladder.rungs[rung_index]
                planned += [
                    (
                        (ladder.name, task_class, arm),
                        CaseRun(spec.model(rung.model, rung.effort), c, n),
                    )
                    for c, n in named
                    if c.task_class == task_class
                ]
    return layout, planned


def card_task_classes(
    claims: Sequence[ModelClaim], ladders: LaddersFile, as_of: int
) -> frozenset[str]:
    """Task classes the card says something about.

    A verified start tier, a profile's evidence line (an eval-measured claim
    about a profile's model) or an editorial note on a ladder's rung: what
    :func:`kb.card.render_card` can print about a class.
    """
    said = {
        r.task_class for r in compile_verified_layer(claims, ladders.ladders, as_of, ladders.floors)
    }
    profiles = {(p.model, p.effort) for p in ladders.profiles}
    rungs = {(r.model, r.effort) for ladder in ladders.ladders for r in ladder.rungs}
    for claim in usable_claims(claims, as_of):
        subject = (claim.model, claim.effort)
        if claim.claim_class == "eval-measured" and subject in profiles:
            said.add(claim.task_class)
        elif claim.claim_class == "human-editorial" and subject in rungs:
            said.add(claim.task_class)
    return frozenset(said)


def plan_checkpoint(spec: CheckpointSpec, store: ReadOnlyStore, *, as_of: int) -> CheckpointPlan:
    """Both experiments planned against the store at ``as_of`` (leakage refused here)."""
    claims = store.read().claims
    usable = usable_claims(claims, as_of)
    home = StoreHome.of(store.path)
    pooled = {c for claim in usable for c in claim_evidence(home, None, claim).cases}
    issues = leakage_issues(spec, usable, pooled)
    if issues:
        raise ConfigError(str(spec.path), issues)
    budgets = spec.budgets
    layout, pairs = _start_rung_pairs(spec, claims, as_of)
    card = render_card(claims, spec.ladders, as_of)
    routed = [
        RoutedCase(arm, case, name)
        for arm in ("informed", "blind")
        for case, name in zip(spec.orchestrated, unique_names(spec.orchestrated), strict=True)
    ]
    orchestrator = Phase(
        "orchestrator",
        tuple(
            PlannedRun(
                f"orchestrator:{r.arm}/{r.name}",
                "target",
                *_router_request(spec, r.case, card if r.arm == "informed" else None),
                ceiling_usd=budgets.orchestrator_usd,
            )
            for r in routed
        ),
    )
    routed_judges = sum(len(r.case.judges) for r in routed)
    case_runs = [pair for _, pair in pairs]
    phases = [
        target_phase(case_runs, budgets.target_usd),
        judge_phase(case_runs, budgets.judge_usd),
        orchestrator,
        Phase(
            "profile targets",
            later=len(routed),
            later_ceiling_usd=budgets.target_usd,
            later_what="target runs, one per routed case on the profile the orchestrator picks",
        ),
        Phase(
            "profile judges",
            later=routed_judges,
            later_ceiling_usd=budgets.judge_usd,
            later_what="judge runs, one per judge grader of each routed target that settles ok",
        ),
    ]
    return CheckpointPlan(
        spec,
        tuple(claims),
        card,
        tuple(layout),
        tuple(pairs),
        tuple(routed),
        job_plan(phases, budgets.max_total_usd),
    )


def run_checkpoint(
    spec: CheckpointSpec,
    store: ReadOnlyStore,
    engine: Engine,
    *,
    as_of: int,
    allow_partial: bool = False,
    options: CheckpointOptions | None = None,
) -> CheckpointReport:
    """Run both experiments against the store's claims at instant ``as_of``.

    Refused before any call when the envelope cannot pay for the worst case,
    unless ``allow_partial`` (a contaminated arm then says which run it lost).
    ``options`` picks the rule, the margin and the sequential design.
    """
    options = options or CheckpointOptions()
    engine.keep_secrets(spec.priced_models())
    plan = plan_checkpoint(spec, store, as_of=as_of)
    plan.job.refuse_overspend(allow_partial=allow_partial)
    envelope = SpendEnvelope.from_usd(spec.budgets.max_total_usd)
    health = ArmHealth(engine, envelope)
    sequential = None
    if options.sequential is None:
        cells = _cells(plan, _run_case_runs(plan, list(plan.pairs), health), health)
    else:
        cells, sequential = _sequential_cells(plan, health, options.sequential, options.margin)
    informed, blind = _profile_arms(plan, health)
    engine.finish()
    tested = [cell for cell in cells if cell.recommended_tier is not None]
    strongest = [cell.strongest for cell in tested if cell.strongest is not None]
    return CheckpointReport(
        cells=cells,
        pooled_baseline=_pool("baseline", [c.baseline for c in tested], tested),
        pooled_treatment=_pool("treatment", [c.treatment for c in tested], tested),
        informed=informed,
        blind=blind,
        card=plan.card,
        spent_usd=usd(envelope.debited),
        pooled_strongest=(
            _pool("strongest", strongest, tested) if len(strongest) == len(tested) else None
        ),
        card_classes=card_task_classes(plan.claims, spec.ladders, as_of),
        options=options,
        sequential=sequential,
        asked_again=tuple(health.notes),
    )


def _pool(name: str, arms: Sequence[Arm], cells: Sequence[StartRungCell]) -> Arm:
    # Pooled over the cells with a recommendation: the others run the same tier in
    # both arms and would only dilute the comparison.
    return pooled(name, arms, [f"{c.ladder}/{c.task_class}/" for c in cells])


Planned = tuple[ArmKey, CaseRun]


def _run_case_runs(
    plan: CheckpointPlan, pairs: Sequence[Planned], health: ArmHealth
) -> dict[ArmKey, list[CaseVerdict]]:
    """Criterion 1's ``pairs`` in one engine phase (targets, then judges), by arm."""
    case_runs = [pair for _, pair in pairs]
    targets = target_phase(case_runs, plan.spec.budgets.target_usd)
    health.sent(targets.runs)
    verdicts = run_pairs(
        health.engine, case_runs, targets, health.envelope, judge_usd=plan.spec.budgets.judge_usd
    )
    by_arm: dict[ArmKey, list[CaseVerdict]] = {}
    for (key, _), verdict in zip(pairs, verdicts, strict=True):
        by_arm.setdefault(key, []).append(verdict)
    return by_arm


def _cells(
    plan: CheckpointPlan, by_arm: dict[ArmKey, list[CaseVerdict]], health: ArmHealth
) -> list[StartRungCell]:
    """Criterion 1's cells from the verdicts so far (a rung two arms share: the same runs).

    Every answer so far goes through the health rule first (:mod:`.health`): an
    arm with a suspect group is contaminated.
    """
    cases = {pair.name: pair.case for _, pair in plan.pairs}
    health.check([v for verdicts in by_arm.values() for v in verdicts], cases)

    def arm(name: str, verdicts: list[CaseVerdict]) -> Arm:
        return Arm(name, verdicts, suspects=health.of(verdicts))

    cells = []
    for cell in plan.layout:
        name = cell.ladder.name
        rungs = dict(cell.arms)
        baseline = by_arm.get((name, cell.task_class, "baseline"), [])
        # Without a recommendation the treatment is the default tier: the same runs.
        treatment = by_arm.get((name, cell.task_class, "treatment"), list(baseline))
        strongest = None
        if cell.recommended_tier is not None:
            tier = cell.strongest_tier
            reused = treatment if tier == rungs["treatment"] else baseline
            runs = by_arm.get((name, cell.task_class, "strongest"), list(reused))
            strongest = arm("strongest", runs)
        cells.append(
            StartRungCell(
                name,
                cell.task_class,
                cell.ladder.start_tier,
                cell.recommended_tier,
                arm("baseline", baseline),
                arm("treatment", treatment),
                strongest,
            )
        )
    return cells


class SequentialUnits(NamedTuple):
    """Criterion 1's runs for ``--sequential``, in run order.

    The untested cells' runs (all in the first round) and the tested cases,
    each unit holding every arm's runs of one case in one cell.
    """

    untested: list[Planned]
    units: list[list[Planned]]


def sequential_order(plan: CheckpointPlan) -> SequentialUnits:
    """The tested cases shuffled by a seed from their names (the same spec, the same order)."""
    tested = {(c.ladder.name, c.task_class) for c in plan.layout if c.recommended_tier is not None}
    units: dict[tuple[str, str, str], list[Planned]] = {}
    untested: list[Planned] = []
    for key, run in plan.pairs:
        if (key[0], key[1]) in tested:
            units.setdefault((key[0], key[1], run.name), []).append((key, run))
        else:
            untested.append((key, run))
    names = sorted(units)
    rng = np.random.default_rng(seed_from(*("/".join(name) for name in names)))
    return SequentialUnits(untested, [units[names[i]] for i in rng.permutation(len(names))])


def _sequential_cells(
    plan: CheckpointPlan, health: ArmHealth, design: SequentialDesign, margin: float
) -> tuple[list[StartRungCell], SequentialRecord]:
    """Criterion 1 in rounds.

    After each round the pooled confidence sequence either decides (passed or
    failed), or a contaminated arm ends it, or the next round runs.
    """
    untested, units = sequential_order(plan)
    sequence = design.start()
    by_arm: dict[ArmKey, list[CaseVerdict]] = {}
    rounds = cases = 0
    cells: list[StartRungCell] = []
    for start in range(0, max(1, len(units)), design.round_size):
        fresh = units[start : start + design.round_size]
        batch = (untested if rounds == 0 else []) + [run for unit in fresh for run in unit]
        for key, verdicts in _run_case_runs(plan, batch, health).items():
            by_arm.setdefault(key, []).extend(verdicts)
        rounds += 1
        cases += len(fresh)
        cells = _cells(plan, by_arm, health)
        sequence.add(_unit_differences(cells, fresh))
        tested = [c for c in cells if c.recommended_tier is not None]
        decision = compare(
            _pool("treatment", [c.treatment for c in tested], tested),
            _pool("baseline", [c.baseline for c in tested], tested),
            START_RUNG_INTERVAL,
            margin,
            sequence=sequence.current(),
        )
        decided = decision.verdict in ("passed", "failed") and cases >= design.min_cases
        if decided or decision.verdict == "contaminated":
            break
    made = sum(1 + len(v.judges) for verdicts in by_arm.values() for v in verdicts)
    record = SequentialRecord(
        design=design,
        rounds=rounds,
        cases=cases,
        cases_planned=len(units),
        calls=made,
        calls_planned=len(plan.pairs) + plan.job.phase("judges").later,
        difference=sequence.current() if sequence.n else None,
    )
    return cells, record


def _unit_differences(
    cells: Sequence[StartRungCell], units: Sequence[list[Planned]]
) -> list[float]:
    """Treatment − baseline score of each unit's case (its repeats averaged)."""
    by_cell = {(c.ladder, c.task_class): c for c in cells}
    differences = []
    for unit in units:
        (ladder, task_class, _), run = unit[0]
        cell = by_cell[(ladder, task_class)]
        treat = cell.treatment.case_scores().get(run.name)
        base = cell.baseline.case_scores().get(run.name)
        if treat is not None and base is not None:
            differences.append(treat - base)
    return differences


def _profile_arms(plan: CheckpointPlan, health: ArmHealth) -> tuple[Arm, Arm]:
    """Criterion 2: the orchestrator picks a profile with and without the card."""
    spec = plan.spec
    engine, envelope = health.engine, health.envelope
    router_runs = engine.run(plan.job.phase("orchestrator").runs, envelope)
    arms = {"informed": Arm("informed"), "blind": Arm("blind")}
    chosen: list[tuple[str, str, CaseRun]] = []
    for routed, run in zip(plan.routed, router_runs, strict=True):
        arm = arms[routed.arm]
        arm.routing[routed.name] = run
        profile = _choice(spec, run)
        if profile is None:
            if run.status == "ok":
                arm.invalid_choices += 1
            # The router call is already counted in routing: the case costs nothing more.
            placeholder = replace(run, cost_usd=0.0)
            arm.verdicts.append(
                CaseVerdict(routed.name, routed.case.task_class, placeholder, (), (), False, False)
            )
            continue
        model = spec.model(profile.model, profile.effort)
        case_run = CaseRun(model, routed.case, f"{routed.arm}/{routed.name}")
        chosen.append((routed.arm, routed.name, case_run))
    pairs = [pair for _, _, pair in chosen]
    targets = target_phase(pairs, spec.budgets.target_usd)
    health.sent(targets.runs)
    verdicts = run_pairs(engine, pairs, targets, envelope, judge_usd=spec.budgets.judge_usd)
    for (arm_name, name, _), verdict in zip(chosen, verdicts, strict=True):
        # Named by the routed case in both arms, so the two arms pair case by case.
        arms[arm_name].verdicts.append(replace(verdict, name=name))
    health.check(verdicts, {pair.name: pair.case for _, _, pair in chosen})
    for arm in arms.values():
        arm.suspects = health.of(v for v in arm.verdicts if v.target.status == "ok")
    return arms["informed"], arms["blind"]
