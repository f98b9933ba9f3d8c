"""The checkpoint's arms, cells and report: who ran what, and whether it paid off.

An :class:`Arm` holds one side's case verdicts. Two arms are compared on the
cases both ran (:func:`compare`): **the case is the unit** — a case's score is
the mean of its repeats' passes, its cost the mean of its repeats' costs — and
the paired difference's interval (:mod:`kb.paired`) decides through an
:class:`~kb.checkpoint.rules.IntervalRule`. The seed's point rules
(:data:`~kb.checkpoint.rules.START_RUNG`, :data:`~kb.checkpoint.rules.PROFILE`)
are computed beside them for ``--rule rulvar``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from kb.checkpoint.rules import (
    PROFILE,
    PROFILE_INTERVAL,
    RULES,
    START_RUNG,
    START_RUNG_INTERVAL,
    TOLERANCE,
    IntervalRule,
    RuleName,
    paired_decision,
)
from kb.engine.runs import RunResult
from kb.errors import ConfigError, JobFailedError, JobInconclusive
from kb.evals.suite import CaseVerdict
from kb.paired import (
    PairedDifference,
    PairedScores,
    SequentialDesign,
    paired_difference,
    ratio_of_means_interval,
    seed_from,
)
from kb.schema import DEFAULT_MARGIN


def rounded(value: float | None) -> float | None:
    """A derived figure (a rate, a ratio, an interval bound) for the JSON: 6 significant digits.

    Ratios of float sums carry binary noise (``0.30000000000000004``); the
    report gives what the data can say, and the same digits on every machine.
    Non-finite values (a cost ratio over a free baseline) are ``None``.
    """
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.6g}")


def rounded_usd(value: float | None) -> float | None:
    """A sum or mean of dollars for the JSON: to 10 decimals (a ten-thousandth of a micro-USD)."""
    return None if value is None else round(value, 10)


Verdict = Literal["passed", "failed", "inconclusive", "contaminated", "not applicable"]
"""A criterion's (or a cell's) verdict."""
Overall = Literal["passed", "not passed", "inconclusive"]
"""The checkpoint's verdict: exit 0, 1 and 4."""


@dataclass(frozen=True)
class CheckpointOptions:
    """How the checkpoint decides (the CLI's ``--rule``, ``--margin``, ``--sequential``)."""

    rule: RuleName = "interval"
    margin: float = DEFAULT_MARGIN
    sequential: SequentialDesign | None = None
    """Run criterion 1 in rounds and stop once its confidence sequence decides."""


def checkpoint_options(
    rule: str = "interval",
    margin: float = DEFAULT_MARGIN,
    sequential: bool = False,
    round_size: int | None = None,
) -> CheckpointOptions:
    """The CLI's flags checked and combined (a bad one is a ``ConfigError`` naming it)."""
    if rule not in RULES:
        raise ConfigError("--rule", f"must be one of {', '.join(RULES)}, got {rule!r}")
    if not 0 <= margin < 1:
        raise ConfigError("--margin", f"must be at least 0 and below 1, got {margin}")
    if round_size is not None and not sequential:
        raise ConfigError("--round", "only with --sequential")
    if round_size is not None and round_size < 1:
        raise ConfigError("--round", f"must be a positive integer, got {round_size}")
    if sequential and rule == "rulvar":
        raise ConfigError("--sequential", "decides with intervals; rulvar's point rule has none")
    design = None
    if sequential:
        design = SequentialDesign() if round_size is None else SequentialDesign(round_size)
    chosen: RuleName = "rulvar" if rule == "rulvar" else "interval"
    return CheckpointOptions(chosen, margin, design)


@dataclass
class Arm:
    """One side of an A/B comparison."""

    name: str
    verdicts: list[CaseVerdict] = field(default_factory=list)
    routing: dict[str, RunResult] = field(default_factory=dict)
    """Criterion 2's orchestrator call per case (by case name), paid and counted."""
    invalid_choices: int = 0
    suspects: dict[tuple[str, str], str] = field(default_factory=dict)
    """(model, task class) → why its answers look like an outage (:mod:`.health`)."""

    @property
    def extra_runs(self) -> list[RunResult]:
        """The orchestrator calls."""
        return list(self.routing.values())

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
        for (model, task_class), why in sorted(self.suspects.items()):
            return f"suspect answers from {model} · {task_class} ({why})"
        for verdict in self.verdicts:
            if verdict.judge_incomplete:
                return f"judge-incomplete on {verdict.name}"
            if verdict.unscored:  # no verdict is not a fail: a paired comparison cannot use it
                return f"unscored verdict on {verdict.name}"
        for run in self.runs:
            if run.status != "ok":
                return f"{run.status} run {run.label}"
            if run.price_source == "unpriced":  # its cost is unknown: no cost comparison
                return f"unpriced run {run.label}"
        return None

    def case_scores(self) -> dict[str, float]:
        """Per case (by name): the mean over its repeats of passed (1) or not (0)."""
        grouped: dict[str, list[float]] = {}
        for verdict in self.verdicts:
            grouped.setdefault(verdict.name, []).append(1.0 if verdict.passed else 0.0)
        return {name: sum(scores) / len(scores) for name, scores in grouped.items()}

    def case_costs(self, *, with_routing: bool = True) -> dict[str, float]:
        """Per case: the mean over its repeats of target and judges (and its routing call)."""
        grouped: dict[str, list[float]] = {}
        for v in self.verdicts:
            grouped.setdefault(v.name, []).append(
                v.target.cost_usd + sum(j.cost_usd for j in v.judges)
            )
        costs = {name: sum(c) / len(c) for name, c in grouped.items()}
        if with_routing:
            for name, run in self.routing.items():
                costs[name] = costs.get(name, 0.0) + run.cost_usd
        return costs

    def only(self, task_classes: Iterable[str]) -> Arm:
        """The arm restricted to cases of ``task_classes``."""
        keep = set(task_classes)
        verdicts = [v for v in self.verdicts if v.task_class in keep]
        names = {v.name for v in verdicts}
        routing = {name: run for name, run in self.routing.items() if name in names}
        suspects = {g: why for g, why in self.suspects.items() if g[1] in keep}
        return Arm(self.name, verdicts, routing, self.invalid_choices, suspects)

    def to_json(self) -> dict[str, Any]:
        """Report form."""
        costs = self.case_costs()
        entry: dict[str, Any] = {
            "arm": self.name,
            "passRate": rounded(self.pass_rate),
            "costUsd": rounded_usd(self.cost_usd),
            "costPerCaseUsd": rounded_usd(sum(costs.values()) / len(costs) if costs else None),
            "n": len(self.verdicts),
        }
        if self.contamination:
            entry["contamination"] = self.contamination
        if self.invalid_choices:
            entry["invalidChoices"] = self.invalid_choices
        return entry


def pooled(name: str, arms: Sequence[Arm], prefixes: Sequence[str] | None = None) -> Arm:
    """One arm of many.

    With ``prefixes`` each arm's case names get its prefix, so cells' cases stay
    distinct when one case is in two ladders' cells.
    """
    pooled = Arm(name)
    for index, arm in enumerate(arms):
        prefix = prefixes[index] if prefixes is not None else ""
        pooled.verdicts += [replace(v, name=prefix + v.name) for v in arm.verdicts]
        pooled.routing |= {prefix + key: run for key, run in arm.routing.items()}
        pooled.invalid_choices += arm.invalid_choices
        pooled.suspects |= arm.suspects
    return pooled


def cost_ratio(treatment: float, baseline: float) -> float:
    """``treatment / baseline`` per case.

    A free baseline gives 0 against a free treatment (it costs nothing more, as
    the seed's rule had it) and infinity against any other.
    """
    if baseline > TOLERANCE:
        return treatment / baseline
    return 0.0 if treatment <= TOLERANCE else float("inf")


@dataclass(frozen=True)
class Paired:
    """Two arms on the cases both ran, in name order: scores and costs per case."""

    keys: tuple[str, ...]
    scores: PairedScores
    costs_a: tuple[float, ...]
    costs_b: tuple[float, ...]

    @classmethod
    def of(cls, a: Arm, b: Arm, *, with_routing: bool = True) -> Paired:
        """Pair ``a`` with ``b`` on their shared cases."""
        scores_a, scores_b = a.case_scores(), b.case_scores()
        costs_a = a.case_costs(with_routing=with_routing)
        costs_b = b.case_costs(with_routing=with_routing)
        keys = tuple(sorted(scores_a.keys() & scores_b.keys()))
        return cls(
            keys,
            PairedScores.of([scores_a[k] for k in keys], [scores_b[k] for k in keys]),
            tuple(costs_a.get(k, 0.0) for k in keys),
            tuple(costs_b.get(k, 0.0) for k in keys),
        )

    @property
    def seed(self) -> int:
        """The bootstrap's seed: the cases compared (the same evidence, the same bytes)."""
        return seed_from(*self.keys)

    @property
    def cost_ratio(self) -> float:
        """Mean cost per case of a over b."""
        n = max(1, len(self.keys))
        return cost_ratio(sum(self.costs_a) / n, sum(self.costs_b) / n)


@dataclass(frozen=True)
class Decision:
    """A criterion's (or cell's) verdict, why, and the comparison behind it."""

    verdict: Verdict
    reason: str
    cases_to_decide: int | None = None
    difference: PairedDifference | None = None
    cost_ratio: float | None = None

    def to_json(self) -> dict[str, Any]:
        """Report form."""
        entry: dict[str, Any] = {"verdict": self.verdict, "reason": self.reason}
        if self.verdict == "inconclusive":
            entry["casesToDecide"] = self.cases_to_decide
        if self.difference is not None:
            entry["difference"] = difference_json(self.difference)
        if self.cost_ratio is not None:
            entry["costRatio"] = rounded(self.cost_ratio)
        return entry


def difference_json(diff: PairedDifference) -> dict[str, Any]:
    """A paired difference (treatment − baseline) in report form."""
    return {
        "n": diff.n,
        "difference": rounded(diff.difference),
        "low": rounded(diff.low),
        "high": rounded(diff.high),
        "method": diff.method,
        "discordantTreatment": diff.discordant_a,
        "discordantBaseline": diff.discordant_b,
    }


def compare(
    treatment: Arm,
    baseline: Arm,
    rule: IntervalRule,
    margin: float = DEFAULT_MARGIN,
    *,
    with_routing: bool = True,
    sequence: PairedDifference | None = None,
) -> Decision:
    """The treatment against the baseline on the cases both ran, decided by ``rule``.

    A contaminated arm makes the verdict ``contaminated`` (never a pass).
    ``sequence`` is the sequential checkpoint's always-valid interval, used
    instead of the fixed-n one (which may not be read after peeking).
    """
    for arm in (treatment, baseline):
        if arm.contamination:
            return Decision("contaminated", f"{arm.name} arm contaminated: {arm.contamination}")
    pairs = Paired.of(treatment, baseline, with_routing=with_routing)
    if not pairs.keys:
        return Decision("inconclusive", "no case that both arms ran")
    ratio = pairs.cost_ratio
    if sequence is None:
        diff, result = paired_decision(pairs.scores, ratio, rule, margin, pairs.seed)
    else:
        diff = sequence
        nothing = float(pairs.scores.a.max()) <= TOLERANCE
        result = rule.decide(diff, ratio, margin, passed_nothing=nothing)
    return Decision(result.verdict, result.reason, result.cases_to_decide, diff, ratio)


@dataclass
class StartRungCell:
    """One (ladder, task class) cell of criterion 1."""

    ladder: str
    task_class: str
    default_tier: int
    recommended_tier: int | None
    baseline: Arm
    treatment: Arm
    strongest: Arm | None = None
    """The ladder's top rung on the same cases (a control); ``None`` without a recommendation."""

    @property
    def passed(self) -> bool | None:
        """The seed's point verdict (``None`` for a cell without a recommendation)."""
        if self.recommended_tier is None:
            return None
        return START_RUNG.verdict(self.treatment, self.baseline)

    def decision(self, margin: float = DEFAULT_MARGIN) -> Decision | None:
        """The cell's interval verdict (descriptive: the pooled arms decide)."""
        if self.recommended_tier is None:
            return None
        return compare(self.treatment, self.baseline, START_RUNG_INTERVAL, margin)


@dataclass(frozen=True)
class Estimate:
    """A figure with its 95 % interval."""

    value: float
    low: float
    high: float

    def to_json(self) -> dict[str, float | None]:
        """Report form (:func:`rounded`)."""
        return {"value": rounded(self.value), "low": rounded(self.low), "high": rounded(self.high)}


@dataclass(frozen=True)
class Controls:
    """The treatment against honest controls, from the same paired runs (SPEC 13.3).

    ``quality_retained`` is the treatment's pass rate over the always-strongest
    arm's, its interval the paired difference's (treatment − strongest) over
    the strongest rate. ``cost_saved_*`` is 1 − the treatment's cost per case
    over the other arm's, its interval a paired bootstrap over cases. The
    cost-matched mix sends each case to the strongest arm with probability
    ``mix_share`` (chosen so its expected cost is the treatment's) and to the
    baseline otherwise; its expected score per case comes from the runs both
    made, so it costs no call. ``mix_unavailable`` says why there is no mix.
    """

    n: int
    strongest_rate: float
    quality_retained: Estimate | None
    cost_saved_vs_strongest: Estimate | None
    cost_saved_vs_start: Estimate | None
    mix_share: float | None
    mix_rate: float | None
    versus_mix: PairedDifference | None
    mix_unavailable: str | None

    def to_json(self) -> dict[str, Any]:
        """Report form."""

        def est(e: Estimate | None) -> dict[str, float | None] | None:
            return e.to_json() if e is not None else None

        mix: dict[str, Any]
        if self.versus_mix is None:
            mix = {"unavailable": self.mix_unavailable}
        else:
            mix = {
                "strongestShare": rounded(self.mix_share),
                "passRate": rounded(self.mix_rate),
                "difference": difference_json(self.versus_mix),
            }
        return {
            "n": self.n,
            "strongestPassRate": rounded(self.strongest_rate),
            "qualityRetained": est(self.quality_retained),
            "costSavedVsStrongest": est(self.cost_saved_vs_strongest),
            "costSavedVsStart": est(self.cost_saved_vs_start),
            "costMatchedMix": mix,
        }


def _saved(costs: np.ndarray, other: np.ndarray, seed: int) -> Estimate | None:
    interval = ratio_of_means_interval(costs, other, seed=seed)
    if interval is None:
        return None
    ratio = float(costs.sum() / other.sum())
    return Estimate(1 - ratio, 1 - interval[1], 1 - interval[0])


def controls(treatment: Arm, baseline: Arm, strongest: Arm) -> Controls | None:
    """The controls on the cases all three arms ran (``None``: no such case)."""
    t, b, s = treatment.case_scores(), baseline.case_scores(), strongest.case_scores()
    keys = sorted(t.keys() & b.keys() & s.keys())
    if not keys:
        return None
    ct, cb, cs = treatment.case_costs(), baseline.case_costs(), strongest.case_costs()
    seed = seed_from(*keys)
    score_t = np.array([t[k] for k in keys])
    score_b = np.array([b[k] for k in keys])
    score_s = np.array([s[k] for k in keys])
    cost_t = np.array([ct.get(k, 0.0) for k in keys])
    cost_b = np.array([cb.get(k, 0.0) for k in keys])
    cost_s = np.array([cs.get(k, 0.0) for k in keys])
    strongest_rate = float(score_s.mean())
    retained = None
    if strongest_rate > 0:
        diff = paired_difference(PairedScores(score_t, score_s), seed=seed)
        retained = Estimate(
            float(score_t.mean()) / strongest_rate,
            max(0.0, (strongest_rate + diff.low) / strongest_rate),
            # A pass rate is at most 1: the treatment retains at most 1 / strongest.
            min(1.0, strongest_rate + diff.high) / strongest_rate,
        )
    mean_t, mean_b, mean_s = cost_t.mean(), cost_b.mean(), cost_s.mean()
    share = mix_rate = versus = unavailable = None
    if mean_s - mean_b <= TOLERANCE:
        unavailable = "the strongest arm costs no more than the baseline: nothing to mix"
    elif not mean_b - TOLERANCE <= mean_t <= mean_s + TOLERANCE:
        unavailable = (
            f"the treatment's cost per case ${mean_t:.6f} is outside the baseline's "
            f"${mean_b:.6f} to the strongest's ${mean_s:.6f}: no mix of the two matches it"
        )
    else:
        share = float(min(1.0, max(0.0, (mean_t - mean_b) / (mean_s - mean_b))))
        mix = (1 - share) * score_b + share * score_s
        mix_rate = float(mix.mean())
        versus = paired_difference(PairedScores(score_t, mix), seed=seed)
    return Controls(
        n=len(keys),
        strongest_rate=strongest_rate,
        quality_retained=retained,
        cost_saved_vs_strongest=_saved(cost_t, cost_s, seed),
        cost_saved_vs_start=_saved(cost_t, cost_b, seed),
        mix_share=share,
        mix_rate=mix_rate,
        versus_mix=versus,
        mix_unavailable=unavailable,
    )


@dataclass(frozen=True)
class SequentialRecord:
    """What ``--sequential`` did: rounds, cases and calls, against the full plan."""

    design: SequentialDesign
    rounds: int
    cases: int
    cases_planned: int
    calls: int
    calls_planned: int
    difference: PairedDifference | None
    """The confidence sequence's interval when it stopped (pooled treatment − baseline)."""

    @property
    def calls_saved(self) -> int:
        """Criterion 1's planned calls not made."""
        return self.calls_planned - self.calls

    def to_json(self) -> dict[str, Any]:
        """Report form."""
        return {
            "roundSize": self.design.round_size,
            "alpha": self.design.alpha,
            "rounds": self.rounds,
            "cases": self.cases,
            "casesPlanned": self.cases_planned,
            "calls": self.calls,
            "callsPlanned": self.calls_planned,
            "callsSaved": self.calls_saved,
            "stoppedEarly": self.cases < self.cases_planned,
            "interval": difference_json(self.difference) if self.difference else None,
        }


@dataclass
class CheckpointReport:
    """Both criteria, the controls and the overall verdict, by both rules."""

    cells: list[StartRungCell]
    pooled_baseline: Arm
    pooled_treatment: Arm
    informed: Arm
    blind: Arm
    card: str
    spent_usd: float
    pooled_strongest: Arm | None = None
    card_classes: frozenset[str] | None = None
    """Task classes the card says something about (``None``: all of them)."""
    options: CheckpointOptions = field(default_factory=CheckpointOptions)
    sequential: SequentialRecord | None = None
    asked_again: tuple[str, ...] = ()
    """What the health rule asked again and what came back (:mod:`kb.checkpoint.health`)."""

    # -- the seed's point rule (--rule rulvar) -----------------------------------

    @property
    def criterion1_rulvar(self) -> bool:
        """A strict majority of recommended cells pass, and the pooled arms pass (point rule)."""
        verdicts = [cell.passed for cell in self.cells if cell.passed is not None]
        majority = bool(verdicts) and sum(verdicts) * 2 > len(verdicts)
        return majority and START_RUNG.verdict(self.pooled_treatment, self.pooled_baseline)

    @property
    def criterion1_rulvar_failure(self) -> str:
        """Why criterion 1 does not hold by the point rule."""
        verdicts = [cell.passed for cell in self.cells if cell.passed is not None]
        if not verdicts:
            return "no cell has a recommendation: the knowledge moved nothing"
        if sum(verdicts) * 2 <= len(verdicts):
            return f"{sum(verdicts)} of {len(verdicts)} recommended cells pass, not a majority"
        return "pooled: " + START_RUNG.failure(self.pooled_treatment, self.pooled_baseline)

    @property
    def criterion2_rulvar(self) -> bool:
        """The card-informed orchestrator picks profiles that pay off (point rule)."""
        return PROFILE.verdict(self.informed, self.blind)

    @property
    def rulvar_passed(self) -> bool:
        """Criterion 1 and criterion 2 by the seed's point rule."""
        return self.criterion1_rulvar and self.criterion2_rulvar

    # -- intervals (SPEC 13.3, the default) ---------------------------------------

    @property
    def criterion1(self) -> Decision:
        """The pooled arms of the recommended cells decide; the cells vote descriptively."""
        if not any(cell.recommended_tier is not None for cell in self.cells):
            return Decision("failed", "no cell has a recommendation: the knowledge moved nothing")
        sequence = self.sequential.difference if self.sequential else None
        return compare(
            self.pooled_treatment,
            self.pooled_baseline,
            START_RUNG_INTERVAL,
            self.options.margin,
            sequence=sequence,
        )

    @property
    def applicable_classes(self) -> list[str]:
        """Criterion 2's task classes the card says something about."""
        classes = dict.fromkeys(v.task_class for v in [*self.informed.verdicts])
        return [c for c in classes if self.card_classes is None or c in self.card_classes]

    @property
    def inapplicable_classes(self) -> list[str]:
        """Criterion 2's task classes the card says nothing about (``not applicable``)."""
        classes = dict.fromkeys(v.task_class for v in [*self.informed.verdicts])
        return [c for c in classes if c not in self.applicable_classes]

    @property
    def criterion2(self) -> Decision:
        """Informed against blind on the classes the card speaks of.

        The cost ratio compares what the chosen profiles cost (targets and
        judges): the orchestrator calls, whose informed prompt is longer by the
        card, are reported beside it and never fail the criterion.
        """
        classes = self.applicable_classes
        if not classes:
            skipped = ", ".join(self.inapplicable_classes) or "no task class"
            return Decision("not applicable", f"the card says nothing about {skipped}")
        return compare(
            self.informed.only(classes),
            self.blind.only(classes),
            PROFILE_INTERVAL,
            self.options.margin,
            with_routing=False,
        )

    @property
    def interval_verdict(self) -> Overall:
        """The interval rule's verdict (SPEC 13.3).

        ``passed`` when every applicable criterion passed, ``not passed`` when
        any failed or was contaminated, else ``inconclusive``.
        """
        verdicts = [d.verdict for d in (self.criterion1, self.criterion2)]
        applicable = [v for v in verdicts if v != "not applicable"]
        if any(v in ("failed", "contaminated") for v in applicable):
            return "not passed"
        if applicable and all(v == "passed" for v in applicable):
            return "passed"
        return "inconclusive" if applicable else "not passed"

    @property
    def verdict(self) -> Overall:
        """The verdict of the rule in force (``--rule``)."""
        if self.options.rule == "rulvar":
            return "passed" if self.rulvar_passed else "not passed"
        return self.interval_verdict

    @property
    def passed(self) -> bool:
        """The rule in force passed."""
        return self.verdict == "passed"

    def raise_for_verdict(self) -> None:
        """Raise what the verdict means for the exit code: not passed (1), inconclusive (4)."""
        if self.verdict == "not passed":
            if self.options.rule == "rulvar":
                raise JobFailedError("checkpoint not passed (rulvar's point rule)")
            failed = [
                f"criterion {i}: {d.verdict} ({d.reason})"
                for i, d in ((1, self.criterion1), (2, self.criterion2))
                if d.verdict in ("failed", "contaminated")
            ]
            raise JobFailedError("checkpoint not passed: " + "; ".join(failed))
        if self.verdict == "inconclusive":
            open_ = []
            for i, d in ((1, self.criterion1), (2, self.criterion2)):
                if d.verdict != "inconclusive":
                    continue
                more = ""
                if d.cases_to_decide and i == 1 and self.sequential is not None:
                    # The estimate is a fixed-n one; the confidence sequence needs more.
                    more = (
                        f" needs more cases (its confidence sequence spans the margin after "
                        f"{self.sequential.cases}; a fixed-n run would need about "
                        f"{d.cases_to_decide} more)"
                    )
                elif d.cases_to_decide:
                    more = f" needs about {d.cases_to_decide} more cases"
                open_.append(f"criterion {i}{more}")
            # Not a failure: the CLI prints it without "Error:" (exit 4).
            raise JobInconclusive("checkpoint inconclusive: " + "; ".join(open_))

    @property
    def controls(self) -> Controls | None:
        """The pooled treatment against the always-strongest arm and the cost-matched mix."""
        if self.pooled_strongest is None:
            return None
        return controls(self.pooled_treatment, self.pooled_baseline, self.pooled_strongest)

    def _cell_json(self, c: StartRungCell) -> dict[str, Any]:
        """One (ladder, task class) cell of the ``--json`` report."""
        decision = c.decision(self.options.margin)
        rulvar = self.options.rule == "rulvar"
        entry: dict[str, Any] = {
            "ladder": c.ladder,
            "taskClass": c.task_class,
            "defaultTier": c.default_tier,
            "recommendedTier": c.recommended_tier,
            "passed": c.passed if rulvar else (decision and decision.verdict == "passed"),
            "verdict": decision.to_json() if decision else None,
            "rulvarPassed": c.passed,
            "baseline": c.baseline.to_json(),
            "treatment": c.treatment.to_json(),
        }
        if c.strongest is not None:
            entry["strongest"] = c.strongest.to_json()
        return entry

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` report."""
        margin = self.options.margin
        c1, c2 = self.criterion1, self.criterion2
        rulvar = self.options.rule == "rulvar"
        controls_ = self.controls
        cells = [self._cell_json(c) for c in self.cells]
        return {
            "verdict": self.verdict,
            "passed": self.passed,
            "rule": self.options.rule,
            "margin": margin,
            "verdicts": {
                "interval": self.interval_verdict,
                "rulvar": "passed" if self.rulvar_passed else "not passed",
            },
            "criterion1": {
                "holds": self.criterion1_rulvar if rulvar else c1.verdict == "passed",
                **c1.to_json(),
                "rulvar": {
                    "holds": self.criterion1_rulvar,
                    "reason": None if self.criterion1_rulvar else self.criterion1_rulvar_failure,
                },
                "cells": cells,
                "pooled": {
                    "baseline": self.pooled_baseline.to_json(),
                    "treatment": self.pooled_treatment.to_json(),
                    "strongest": (
                        self.pooled_strongest.to_json() if self.pooled_strongest else None
                    ),
                },
                "controls": controls_.to_json() if controls_ else None,
            },
            "criterion2": {
                "holds": self.criterion2_rulvar if rulvar else c2.verdict == "passed",
                **c2.to_json(),
                "rulvar": {
                    "holds": self.criterion2_rulvar,
                    "reason": (
                        None
                        if self.criterion2_rulvar
                        else PROFILE.failure(self.informed, self.blind)
                    ),
                },
                "applicableClasses": self.applicable_classes,
                "notApplicableClasses": self.inapplicable_classes,
                "informed": self.informed.to_json(),
                "blind": self.blind.to_json(),
            },
            "sequential": self.sequential.to_json() if self.sequential else None,
            "askedAgain": list(self.asked_again),
            "spentUsd": self.spent_usd,
        }
