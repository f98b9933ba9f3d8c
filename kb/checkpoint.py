"""The value checkpoint: whether routing by the knowledge beats routing without it.

Two A/B experiments on eval cases **disjoint from the cases that produced
the claims** (a shared name or prompt is leakage and refused as a
``ConfigError``):

* **Criterion 1 — the start rung.** Per (ladder, task class) cell, the
  baseline arm runs the cell's cases at the ladder's default start tier and
  the treatment arm at the tier the verified layer recommends. A cell with a
  recommendation passes by :func:`start_rung_rule`. Cells without one run
  the default tier once and are reported, but neither vote nor enter the
  pooled arms (identical arms would only dilute the comparison). The
  criterion holds when a strict majority of recommended cells pass and the
  pooled arms of those cells pass the same rule; with no recommendation at
  all there is nothing to earn its keep and it does not hold.
* **Criterion 2 — which profile.** For each orchestrated case an
  orchestrator model picks a profile (structured ``{"profile": name}``) once
  with the knowledge card in its prompt and once without; the chosen
  profile's model runs the case. Both orchestrator calls are paid and
  counted in their arm. Passes by :func:`profile_rule`.

Any arm with a refused, exhausted, failed or judge-incomplete run is
*contaminated*: its verdict cannot pass, and the report names the run.
Passed = criterion 1 AND criterion 2.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import Field

from kb.card import (
    Ladder,
    LaddersFile,
    Profile,
    compile_verified_layer,
    load_ladders,
    parse_ladders,
    render_card,
    usable_claims,
)
from kb.engine.budget import SpendEnvelope, SpendForecast, forecast_spend, usd
from kb.engine.requests import ModelSpec, ProviderRequest, build_request
from kb.engine.runs import RunResult
from kb.engine.scheduler import Engine, PlannedRun
from kb.errors import ConfigError
from kb.evals.cases import Case, JudgeGrader, unique_names
from kb.evals.datasets import DatasetSpec, LocatedCase, load_dataset
from kb.evals.suite import CaseRun, CaseVerdict, run_pairs
from kb.schema import ModelRefText, StrictModel, subject_key, validate_into
from kb.store.canonical import to_fixed_2
from kb.store.models import ModelClaim
from kb.sweep.spec import ModelEntry, duplicate_name_issues, load_spec, resolve_models
from kb.tomlfile import read_toml

TOLERANCE = 1e-9
ROUTER_SYSTEM = (
    'You route tasks to agent profiles. Reply with only a JSON object {"profile": "<name>"} '
    "naming one of the listed profiles."
)


def start_rung_rule(
    treatment_rate: float, treatment_cost: float, baseline_rate: float, baseline_cost: float
) -> bool:
    """Criterion 1's rule: match or beat at ≤ 0.90 × cost, or beat by ≥ 0.05 at ≤ 1.00 × cost."""
    cheaper = treatment_rate >= baseline_rate - TOLERANCE and (
        treatment_cost <= 0.90 * baseline_cost + TOLERANCE
    )
    better = treatment_rate >= baseline_rate + 0.05 - TOLERANCE and (
        treatment_cost <= 1.00 * baseline_cost + TOLERANCE
    )
    return cheaper or better


def start_rung_failure(treatment: Arm, baseline: Arm) -> str:
    """Why a start-rung cell failed: which rule, with which numbers."""
    return _failure(treatment, baseline, cheaper=0.90, better=1.00, margin=0.05)


def profile_failure(informed: Arm, blind: Arm) -> str:
    """Why criterion 2 failed: which rule, with which numbers."""
    if informed.pass_rate <= TOLERANCE and not (informed.contamination or blind.contamination):
        return "the informed arm passed nothing (a pass rate of 0 fails outright)"
    return _failure(informed, blind, cheaper=1.05, better=1.15, margin=0.15)


def _failure(treat: Arm, base: Arm, *, cheaper: float, better: float, margin: float) -> str:
    if treat.contamination or base.contamination:
        which = treat if treat.contamination else base
        return f"{which.name} arm contaminated: {which.contamination}"
    rate, cost = to_fixed_2(treat.pass_rate), f"${treat.cost_usd:.4f}"
    return (
        f"{treat.name} {rate} at {cost} needs >= {to_fixed_2(base.pass_rate)} at <= "
        f"${cheaper * base.cost_usd:.4f} ({cheaper:.2f}x) or >= "
        f"{to_fixed_2(base.pass_rate + margin)} at <= ${better * base.cost_usd:.4f} "
        f"({better:.2f}x)"
    )


def profile_rule(
    informed_rate: float, informed_cost: float, blind_rate: float, blind_cost: float
) -> bool:
    """Criterion 2's rule: match or beat at ≤ 1.05 × cost, or beat by ≥ 0.15 at ≤ 1.15 × cost.

    An informed arm at pass rate 0 fails outright.
    """
    if informed_rate <= TOLERANCE:
        return False
    matches = informed_rate >= blind_rate - TOLERANCE and (
        informed_cost <= 1.05 * blind_cost + TOLERANCE
    )
    beats = informed_rate >= blind_rate + 0.15 - TOLERANCE and (
        informed_cost <= 1.15 * blind_cost + TOLERANCE
    )
    return matches or beats


# -- the spec --------------------------------------------------------------------------


class CheckpointSection(StrictModel):
    """``[checkpoint]``."""

    orchestrator: ModelRefText
    """The model that picks profiles in criterion 2."""
    ladders: str | None = None
    """A ladders file (else ``[[ladders]]`` in this file)."""
    seeded_by: list[str] = Field(default_factory=list)
    """Sweep specs whose cases produced the claims (their prompts must not reappear)."""
    concurrency: int = Field(default=8, ge=1)
    allow_unbounded: bool = False


class CheckpointBudgets(StrictModel):
    """``[budgets]``."""

    target_usd: float | None = Field(default=None, gt=0)
    judge_usd: float | None = Field(default=None, gt=0)
    orchestrator_usd: float | None = Field(default=None, gt=0)
    max_total_usd: float | None = Field(default=None, gt=0)


class _CheckpointFile(StrictModel):
    checkpoint: CheckpointSection
    budgets: CheckpointBudgets = Field(default_factory=CheckpointBudgets)
    models: list[ModelEntry] = Field(default_factory=list)
    ladders: list[Ladder] = Field(default_factory=list)
    floors: dict[str, list[str]] = Field(default_factory=dict)
    profiles: list[Profile] = Field(default_factory=list)
    cases: list[Case] = Field(default_factory=list)
    datasets: list[DatasetSpec] = Field(default_factory=list)
    """More eval cases (criterion 1) from JSONL or CSV files, as in a sweep spec."""
    orchestrated: list[Case] = Field(min_length=1)


@dataclass(frozen=True)
class CheckpointSpec:
    """A validated checkpoint spec."""

    path: Path
    section: CheckpointSection
    budgets: CheckpointBudgets
    params: dict[str, dict[str, Any]]
    """Params per ``model@effort`` key (and per bare model as a fallback)."""
    ladders: LaddersFile
    cases: tuple[Case, ...]
    orchestrated: tuple[Case, ...]
    seeding_cases: tuple[Case, ...]

    def model(self, ref: str, effort: str | None = None) -> ModelSpec:
        """A model with the params the spec gives it."""
        params = self.params.get(subject_key(ref, effort), self.params.get(ref, {}))
        return ModelSpec(ref, effort, params)


def load_checkpoint_spec(path: Path | str) -> CheckpointSpec:
    """Load and validate a checkpoint spec (leakage is checked against the store later).

    ``[[models]]`` entries are the sweep's: the same params, with relative
    paths (a scripted ``script``, a local ``model_path``) resolved against
    this spec's directory.
    """
    path = Path(path)
    raw = read_toml(path, str(path))
    issues: list[str] = []
    spec = validate_into(_CheckpointFile, raw, "", issues)
    if spec is None:
        raise ConfigError(str(path), issues)
    base = path.resolve().parent
    ladders = _ladders(spec, base, str(path))
    if not ladders.profiles:
        issues.append("profiles: criterion 2 needs at least one [[profiles]] entry")
    models = resolve_models(list(enumerate(spec.models)), base, issues)
    located = [LocatedCase(case, f"cases[{i}]") for i, case in enumerate(spec.cases)]
    for dataset in spec.datasets:
        located.extend(load_dataset(dataset, base, issues))
    issues += duplicate_name_issues(located)
    issues += _budget_issues(spec, [item.case for item in located])
    if not located:
        issues.append("cases: criterion 1 needs [[cases]] or [[datasets]]")
    seeding: list[Case] = []
    for sweep_path in spec.checkpoint.seeded_by:
        seeding.extend(load_spec(base / sweep_path).cases)
    if issues:
        raise ConfigError(str(path), issues)
    return CheckpointSpec(
        path,
        spec.checkpoint,
        spec.budgets,
        {model.key: dict(model.params) for model in models},
        ladders,
        tuple(item.case for item in located),
        tuple(spec.orchestrated),
        tuple(seeding),
    )


def _ladders(spec: _CheckpointFile, base: Path, source: str) -> LaddersFile:
    if spec.checkpoint.ladders is not None:
        return load_ladders(base / spec.checkpoint.ladders)
    inline = {
        "ladders": [ladder.model_dump() for ladder in spec.ladders],
        "floors": spec.floors,
        "profiles": [p.model_dump() for p in spec.profiles],
    }
    return parse_ladders(inline, source)


def _budget_issues(spec: _CheckpointFile, eval_cases: Sequence[Case]) -> list[str]:
    if spec.checkpoint.allow_unbounded:
        return []
    needed = ["target_usd", "orchestrator_usd", "max_total_usd"]
    cases = [*eval_cases, *spec.orchestrated]
    if any(isinstance(g, JudgeGrader) for case in cases for g in case.graders):
        needed.append("judge_usd")
    return [
        f"budgets.{name}: missing (or set checkpoint.allow_unbounded)"
        for name in needed
        if getattr(spec.budgets, name) is None
    ]


def leakage_issues(spec: CheckpointSpec, claims: Sequence[ModelClaim]) -> list[str]:
    """Checkpoint cases that share a name or prompt with the cases behind the claims."""
    seen_names = {
        case_id
        for claim in claims
        if claim.claim_class == "eval-measured"
        for ev in claim.evidence
        if ev["kind"] == "eval"
        for case_id in ev["caseIds"]
    }
    seen_names |= {case.name for case in spec.seeding_cases}
    seen_prompts = {case.prompt for case in spec.seeding_cases}
    issues = []
    for kind, cases in (("cases", spec.cases), ("orchestrated", spec.orchestrated)):
        for index, case in enumerate(cases):
            if case.name in seen_names:
                issues.append(
                    f"{kind}[{index}].name: {case.name!r} is a case that produced "
                    "the store's claims (measuring on seeding cases is leakage)"
                )
            if case.prompt in seen_prompts:
                issues.append(
                    f"{kind}[{index}].prompt: the same prompt produced the store's "
                    "claims (measuring on seeding cases is leakage)"
                )
    return issues


# -- running it -----------------------------------------------------------------------------


@dataclass
class Arm:
    """One side of an A/B comparison."""

    name: str
    verdicts: list[CaseVerdict] = field(default_factory=list)
    extra_runs: list[RunResult] = field(default_factory=list)
    """Orchestrator calls (criterion 2), paid and counted."""
    invalid_choices: int = 0

    @property
    def runs(self) -> list[RunResult]:
        """Every run of the arm."""
        return [r for v in self.verdicts for r in (v.target, *v.judges)] + self.extra_runs

    @property
    def pass_rate(self) -> float:
        """Passed over planned cases."""
        return sum(v.passed for v in self.verdicts) / len(self.verdicts) if self.verdicts else 0.0

    @property
    def cost_usd(self) -> float:
        """Everything the arm spent."""
        return sum(run.cost_usd for run in self.runs)

    @property
    def contamination(self) -> str | None:
        """The first run that makes the arm's verdict unusable, if any."""
        for verdict in self.verdicts:
            if verdict.judge_incomplete:
                return f"judge-incomplete on {verdict.name}"
        for run in self.runs:
            if run.status != "ok":
                return f"{run.status} run {run.label}"
        return None

    def to_json(self) -> dict[str, Any]:
        """Report form."""
        entry: dict[str, Any] = {
            "arm": self.name,
            "passRate": self.pass_rate,
            "costUsd": self.cost_usd,
            "n": len(self.verdicts),
        }
        if self.contamination:
            entry["contamination"] = self.contamination
        if self.invalid_choices:
            entry["invalidChoices"] = self.invalid_choices
        return entry


def _pooled(name: str, arms: Sequence[Arm]) -> Arm:
    pooled = Arm(name)
    for arm in arms:
        pooled.verdicts += arm.verdicts
        pooled.extra_runs += arm.extra_runs
    return pooled


@dataclass
class StartRungCell:
    """One (ladder, task class) cell of criterion 1."""

    ladder: str
    task_class: str
    default_tier: int
    recommended_tier: int | None
    baseline: Arm
    treatment: Arm

    @property
    def passed(self) -> bool | None:
        """The cell verdict (``None`` for a cell without a recommendation)."""
        if self.recommended_tier is None:
            return None
        return _verdict(self.treatment, self.baseline, start_rung_rule)


def _verdict(treatment: Arm, baseline: Arm, rule: Any) -> bool:
    if treatment.contamination or baseline.contamination:
        return False
    return bool(
        rule(treatment.pass_rate, treatment.cost_usd, baseline.pass_rate, baseline.cost_usd)
    )


@dataclass
class CheckpointReport:
    """Both criteria and the overall verdict."""

    cells: list[StartRungCell]
    pooled_baseline: Arm
    pooled_treatment: Arm
    informed: Arm
    blind: Arm
    card: str
    spent_usd: float

    @property
    def criterion1(self) -> bool:
        """A strict majority of recommended cells pass, and the pooled arms pass."""
        verdicts = [cell.passed for cell in self.cells if cell.passed is not None]
        majority = bool(verdicts) and sum(verdicts) * 2 > len(verdicts)
        return majority and _verdict(self.pooled_treatment, self.pooled_baseline, start_rung_rule)

    @property
    def criterion1_failure(self) -> str:
        """Why criterion 1 does not hold."""
        verdicts = [cell.passed for cell in self.cells if cell.passed is not None]
        if not verdicts:
            return "no cell has a recommendation: the knowledge moved nothing"
        if sum(verdicts) * 2 <= len(verdicts):
            return f"{sum(verdicts)} of {len(verdicts)} recommended cells pass, not a majority"
        return "pooled: " + start_rung_failure(self.pooled_treatment, self.pooled_baseline)

    @property
    def criterion2(self) -> bool:
        """The card-informed orchestrator picks profiles that pay off."""
        return _verdict(self.informed, self.blind, profile_rule)

    @property
    def passed(self) -> bool:
        """Criterion 1 and criterion 2."""
        return self.criterion1 and self.criterion2

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` report."""
        return {
            "passed": self.passed,
            "criterion1": {
                "holds": self.criterion1,
                "cells": [
                    {
                        "ladder": c.ladder,
                        "taskClass": c.task_class,
                        "defaultTier": c.default_tier,
                        "recommendedTier": c.recommended_tier,
                        "passed": c.passed,
                        "baseline": c.baseline.to_json(),
                        "treatment": c.treatment.to_json(),
                    }
                    for c in self.cells
                ],
                "pooled": {
                    "baseline": self.pooled_baseline.to_json(),
                    "treatment": self.pooled_treatment.to_json(),
                },
            },
            "criterion2": {
                "holds": self.criterion2,
                "informed": self.informed.to_json(),
                "blind": self.blind.to_json(),
            },
            "spentUsd": self.spent_usd,
        }


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


ArmKey = tuple[str, str, str]
"""(ladder, task class, arm) — where a criterion-1 verdict belongs."""


def run_checkpoint(
    spec: CheckpointSpec,
    claims: Sequence[ModelClaim],
    engine: Engine,
    *,
    as_of: int,
    allow_partial: bool = False,
) -> CheckpointReport:
    """Run both experiments against the store's ``claims`` at instant ``as_of``.

    Refused before any call when the envelope cannot pay for the worst case,
    unless ``allow_partial`` (a contaminated arm then says which run it lost).
    """
    issues = leakage_issues(spec, usable_claims(claims, as_of))
    if issues:
        raise ConfigError(str(spec.path), issues)
    forecast = checkpoint_forecast(spec, claims, as_of)
    if forecast.exceeds and not allow_partial:
        raise ConfigError("budgets.max_total_usd", forecast.refusal())
    envelope = SpendEnvelope.from_usd(spec.budgets.max_total_usd)
    cells = _start_rung_cells(spec, claims, engine, envelope, as_of)
    card = render_card(claims, spec.ladders, as_of)
    informed, blind = _profile_arms(spec, card, engine, envelope)
    engine.finish()
    tested = [cell for cell in cells if cell.recommended_tier is not None]
    return CheckpointReport(
        cells=cells,
        # Pooled over the cells with a recommendation: the others run the same tier in
        # both arms and would only dilute the comparison.
        pooled_baseline=_pooled("baseline", [c.baseline for c in tested]),
        pooled_treatment=_pooled("treatment", [c.treatment for c in tested]),
        informed=informed,
        blind=blind,
        card=card,
        spent_usd=usd(envelope.debited),
    )


def checkpoint_forecast(
    spec: CheckpointSpec, claims: Sequence[ModelClaim], as_of: int
) -> SpendForecast:
    """The worst case, in the order the envelope authorizes: criterion 1, then criterion 2."""
    budgets = spec.budgets
    ladders = spec.ladders
    recommended = {
        (r.ladder, r.task_class)
        for r in compile_verified_layer(claims, ladders.ladders, as_of, ladders.floors)
    }
    targets = judges = 0
    for ladder in ladders.ladders:
        for case in spec.cases:
            if ladder.task_class in (None, case.task_class):
                arms = 2 if (ladder.name, case.task_class) in recommended else 1
                targets += arms
                judges += arms * sum(isinstance(g, JudgeGrader) for g in case.graders)
    routed = 2 * len(spec.orchestrated)
    routed_judges = 2 * sum(
        isinstance(g, JudgeGrader) for case in spec.orchestrated for g in case.graders
    )
    ceilings = (
        [budgets.target_usd] * targets
        + [budgets.judge_usd] * judges
        + [budgets.orchestrator_usd] * routed
        + [budgets.target_usd] * routed
        + [budgets.judge_usd] * routed_judges
    )
    return forecast_spend(budgets.max_total_usd, ceilings)


def _start_rung_cells(
    spec: CheckpointSpec,
    claims: Sequence[ModelClaim],
    engine: Engine,
    envelope: SpendEnvelope,
    as_of: int,
) -> list[StartRungCell]:
    """Criterion 1: every (ladder, task class) cell that has cases, in one engine phase."""
    ladders = spec.ladders
    recommended = {
        (r.ladder, r.task_class): r.recommended_tier
        for r in compile_verified_layer(claims, ladders.ladders, as_of, ladders.floors)
    }
    named = list(zip(spec.cases, unique_names(spec.cases), strict=True))
    planned: list[tuple[ArmKey, CaseRun]] = []
    layout: list[tuple[Ladder, str, int | None]] = []
    for ladder in ladders.ladders:
        classes = dict.fromkeys(
            c.task_class for c in spec.cases if ladder.task_class in (None, c.task_class)
        )
        for task_class in classes:
            tier = recommended.get((ladder.name, task_class))
            layout.append((ladder, task_class, tier))
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
    verdicts = _run_cases(spec, engine, envelope, [pair for _, pair in planned])
    by_arm: dict[ArmKey, list[CaseVerdict]] = {}
    for (key, _), verdict in zip(planned, verdicts, strict=True):
        by_arm.setdefault(key, []).append(verdict)
    cells = []
    for ladder, task_class, tier in layout:
        baseline = by_arm.get((ladder.name, task_class, "baseline"), [])
        # Without a recommendation the treatment is the default tier: the same runs.
        treatment = by_arm.get((ladder.name, task_class, "treatment"), list(baseline))
        cells.append(
            StartRungCell(
                ladder.name,
                task_class,
                ladder.start_tier,
                tier,
                Arm("baseline", baseline),
                Arm("treatment", treatment),
            )
        )
    return cells


def _run_cases(
    spec: CheckpointSpec,
    engine: Engine,
    envelope: SpendEnvelope,
    pairs: Sequence[CaseRun],
) -> list[CaseVerdict]:
    budgets = spec.budgets
    return run_pairs(
        engine, pairs, envelope, target_usd=budgets.target_usd, judge_usd=budgets.judge_usd
    )


def _profile_arms(
    spec: CheckpointSpec, card: str, engine: Engine, envelope: SpendEnvelope
) -> tuple[Arm, Arm]:
    """Criterion 2: the orchestrator picks a profile with and without the card."""
    routed = [
        (arm, case, name)
        for arm in ("informed", "blind")
        for case, name in zip(spec.orchestrated, unique_names(spec.orchestrated), strict=True)
    ]
    router_runs = engine.run(
        [
            PlannedRun(
                f"orchestrator:{arm}/{name}",
                "target",
                *_router_request(spec, case, card if arm == "informed" else None),
                ceiling_usd=spec.budgets.orchestrator_usd,
            )
            for arm, case, name in routed
        ],
        envelope,
    )
    arms = {"informed": Arm("informed"), "blind": Arm("blind")}
    chosen: list[tuple[str, CaseRun]] = []
    for (arm, case, name), run in zip(routed, router_runs, strict=True):
        arms[arm].extra_runs.append(run)
        profile = _choice(spec, run)
        if profile is None:
            if run.status == "ok":
                arms[arm].invalid_choices += 1
            # The router call is already counted in extra_runs: the case costs nothing more.
            placeholder = replace(run, cost_usd=0.0)
            arms[arm].verdicts.append(
                CaseVerdict(name, case.task_class, placeholder, (), (), False, False)
            )
            continue
        model = spec.model(profile.model, profile.effort)
        chosen.append((arm, CaseRun(model, case, f"{arm}/{name}")))
    verdicts = _run_cases(spec, engine, envelope, [pair for _, pair in chosen])
    for (arm, _), verdict in zip(chosen, verdicts, strict=True):
        arms[arm].verdicts.append(verdict)
    return arms["informed"], arms["blind"]


def checkpoint_table(report: CheckpointReport) -> str:
    """The terminal table: cells, arms, pass rates, costs, verdicts, contamination."""

    def arm_text(arm: Arm) -> str:
        tail = f"  CONTAMINATED: {arm.contamination}" if arm.contamination else ""
        return f"{to_fixed_2(arm.pass_rate)} ${arm.cost_usd:.4f}{tail}"

    def verdict(cell: StartRungCell) -> str:
        if cell.passed is None:
            return "n/a (no recommendation)"
        return (
            "pass" if cell.passed else f"FAIL: {start_rung_failure(cell.treatment, cell.baseline)}"
        )

    lines = [
        "criterion 1: start rung (baseline = default tier, treatment = recommended tier)",
        f"  {'ladder':<14} {'task class':<22} {'tiers':<7} {'baseline':<18} "
        f"{'treatment':<18} verdict",
    ]
    for c in report.cells:
        tiers = (
            f"{c.default_tier}->{c.recommended_tier}"
            if c.recommended_tier is not None
            else f"{c.default_tier}"
        )
        lines.append(
            f"  {c.ladder:<14} {c.task_class:<22} {tiers:<7} "
            f"{arm_text(c.baseline):<18} {arm_text(c.treatment):<18} {verdict(c)}"
        )
    lines.append(
        f"  pooled: baseline {arm_text(report.pooled_baseline)}, treatment "
        f"{arm_text(report.pooled_treatment)}"
    )
    if report.criterion1:
        lines.append("  criterion 1: holds")
    else:
        lines.append(f"  criterion 1: does not hold ({report.criterion1_failure})")
    lines.append("criterion 2: profile choice (informed = card in the orchestrator's prompt)")
    for arm in (report.informed, report.blind):
        invalid = f", {arm.invalid_choices} invalid choices" if arm.invalid_choices else ""
        lines.append(f"  {arm.name:<9} {arm_text(arm)}{invalid}")
    if report.criterion2:
        lines.append("  criterion 2: holds")
    else:
        lines.append(
            f"  criterion 2: does not hold ({profile_failure(report.informed, report.blind)})"
        )
    lines.append(f"spent ${report.spent_usd:.4f}")
    lines.append(f"checkpoint: {'PASSED' if report.passed else 'NOT PASSED'}")
    return "\n".join(lines)
