"""Running the checkpoint: planned first (every phase, one budget refusal), then measured.

:func:`plan_checkpoint` decides everything before the first call: criterion
1's cells and their case runs (baseline at the default tier, treatment at the
recommended one), the card, the orchestrator's routing calls (with and
without the card) and the bounds on what those calls decide. Its
:class:`JobPlan` is what the budget refusal reads and what
:func:`run_checkpoint` then runs, phase by phase:

1. criterion 1's targets, then their judges;
2. the orchestrator's routing calls;
3. the chosen profiles' targets, then their judges.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

from kb.card import Ladder, Profile, compile_verified_layer, render_card, usable_claims
from kb.checkpoint.arms import Arm, CheckpointReport, StartRungCell, pooled
from kb.checkpoint.spec import CheckpointSpec, leakage_issues
from kb.engine.budget import SpendEnvelope, usd
from kb.engine.phases import JobPlan, Phase, job_plan
from kb.engine.requests import ModelSpec, ProviderRequest, build_request
from kb.engine.runs import PlannedRun, RunResult
from kb.engine.scheduler import Engine
from kb.errors import ConfigError
from kb.evals.cases import Case, JudgeGrader, unique_names
from kb.evals.suite import CaseRun, CaseVerdict, judge_phase, run_pairs, target_phase
from kb.store.filestore import ReadOnlyStore
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
            tier = recommended.get((ladder.name, task_class))
            layout.append(CellLayout(ladder, task_class, tier))
            arms = [("baseline", ladder.start_tier)]
            if tier is not None:
                arms.append(("treatment", tier))
            for arm, rung_index in arms:
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


def plan_checkpoint(spec: CheckpointSpec, store: ReadOnlyStore, *, as_of: int) -> CheckpointPlan:
    """Both experiments planned against the store at ``as_of`` (leakage refused here)."""
    claims = store.read().claims
    issues = leakage_issues(spec, usable_claims(claims, as_of))
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
    routed_judges = sum(1 for r in routed for g in r.case.graders if isinstance(g, JudgeGrader))
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
) -> CheckpointReport:
    """Run both experiments against the store's claims at instant ``as_of``.

    Refused before any call when the envelope cannot pay for the worst case,
    unless ``allow_partial`` (a contaminated arm then says which run it lost).
    """
    plan = plan_checkpoint(spec, store, as_of=as_of)
    plan.job.refuse_overspend(allow_partial=allow_partial)
    envelope = SpendEnvelope.from_usd(spec.budgets.max_total_usd)
    cells = _start_rung_cells(plan, engine, envelope)
    informed, blind = _profile_arms(plan, engine, envelope)
    engine.finish()
    tested = [cell for cell in cells if cell.recommended_tier is not None]
    return CheckpointReport(
        cells=cells,
        # Pooled over the cells with a recommendation: the others run the same tier in
        # both arms and would only dilute the comparison.
        pooled_baseline=pooled("baseline", [c.baseline for c in tested]),
        pooled_treatment=pooled("treatment", [c.treatment for c in tested]),
        informed=informed,
        blind=blind,
        card=plan.card,
        spent_usd=usd(envelope.debited),
    )


def _start_rung_cells(
    plan: CheckpointPlan, engine: Engine, envelope: SpendEnvelope
) -> list[StartRungCell]:
    """Criterion 1: the planned case runs in one engine phase, grouped into cells."""
    verdicts = run_pairs(
        engine,
        [pair for _, pair in plan.pairs],
        plan.job.phase("targets"),
        envelope,
        judge_usd=plan.spec.budgets.judge_usd,
    )
    by_arm: dict[ArmKey, list[CaseVerdict]] = {}
    for (key, _), verdict in zip(plan.pairs, verdicts, strict=True):
        by_arm.setdefault(key, []).append(verdict)
    cells = []
    for cell in plan.layout:
        name = cell.ladder.name
        baseline = by_arm.get((name, cell.task_class, "baseline"), [])
        # Without a recommendation the treatment is the default tier: the same runs.
        treatment = by_arm.get((name, cell.task_class, "treatment"), list(baseline))
        cells.append(
            StartRungCell(
                name,
                cell.task_class,
                cell.ladder.start_tier,
                cell.recommended_tier,
                Arm("baseline", baseline),
                Arm("treatment", treatment),
            )
        )
    return cells


def _profile_arms(plan: CheckpointPlan, engine: Engine, envelope: SpendEnvelope) -> tuple[Arm, Arm]:
    """Criterion 2: the orchestrator picks a profile with and without the card."""
    spec = plan.spec
    router_runs = engine.run(plan.job.phase("orchestrator").runs, envelope)
    arms = {"informed": Arm("informed"), "blind": Arm("blind")}
    chosen: list[tuple[str, CaseRun]] = []
    for routed, run in zip(plan.routed, router_runs, strict=True):
        arm = arms[routed.arm]
        arm.extra_runs.append(run)
        profile = _choice(spec, run)
        if profile is None:
            if run.status == "ok":
                arm.invalid_choices += 1
            # The router call is already counted in extra_runs: the case costs nothing more.
            placeholder = replace(run, cost_usd=0.0)
            arm.verdicts.append(
                CaseVerdict(routed.name, routed.case.task_class, placeholder, (), (), False, False)
            )
            continue
        model = spec.model(profile.model, profile.effort)
        chosen.append((routed.arm, CaseRun(model, routed.case, f"{routed.arm}/{routed.name}")))
    pairs = [pair for _, pair in chosen]
    verdicts = run_pairs(
        engine,
        pairs,
        target_phase(pairs, spec.budgets.target_usd),
        envelope,
        judge_usd=spec.budgets.judge_usd,
    )
    for (arm_name, _), verdict in zip(chosen, verdicts, strict=True):
        arms[arm_name].verdicts.append(verdict)
    return arms["informed"], arms["blind"]
