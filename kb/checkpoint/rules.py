"""The value rules, each written once as an object with its thresholds.

Two families. The **interval rules** (SPEC 13.3, the default) decide from the
paired difference's interval: :class:`IntervalRule`, :data:`START_RUNG_INTERVAL`
and :data:`PROFILE_INTERVAL`, each deciding with
:func:`kb.paired.checkpoint_criterion` — ``passed``, ``failed`` or
``inconclusive`` (with how many more cases would decide). The **point rules**
below are the seed's (rulvar's), kept for ``--rule rulvar`` and parity:

A point rule compares a treatment arm with a baseline arm: the treatment passes
when it **matches or beats** the baseline's pass rate at no more than
``cheaper`` × the baseline's cost, or **beats it by** ``margin`` at no more
than ``better`` × the cost (every comparison with a 1e-9 tolerance).

* :data:`START_RUNG` (criterion 1): match at ≤ 0.90 ×, or +0.05 at ≤ 1.00 ×.
* :data:`PROFILE` (criterion 2): match at ≤ 1.05 ×, or +0.15 at ≤ 1.15 ×; an
  informed arm that passes nothing fails outright.

Any arm with a refused, exhausted, failed or judge-incomplete run is
*contaminated* and cannot pass (:meth:`ValueRule.verdict`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, Protocol

from kb.money import usd
from kb.paired import (
    CriterionResult,
    PairedDifference,
    PairedScores,
    checkpoint_criterion,
    margin_text,
    paired_difference,
)
from kb.schema import DEFAULT_MARGIN
from kb.store.canonical import to_fixed_2

RuleName = Literal["interval", "rulvar"]
"""Which rule decides: SPEC 13.3's intervals (default) or the seed's point rule."""
RULES: tuple[RuleName, ...] = ("interval", "rulvar")


class Arm(Protocol):
    """What a rule reads of an arm (:class:`kb.checkpoint.arms.Arm` is one)."""

    @property
    def name(self) -> str:
        """The arm's name."""
        ...

    @property
    def pass_rate(self) -> float:
        """Passed over planned cases."""
        ...

    @property
    def cost_usd(self) -> float:
        """Everything the arm spent."""
        ...

    @property
    def contamination(self) -> str | None:
        """Why the arm cannot pass (``None``: it can)."""
        ...


TOLERANCE = 1e-9


def signed_2(value: float) -> str:
    """``+0.05``, ``-0.49``: a difference in pass rate as kb prints it (:func:`to_fixed_2`)."""
    text = to_fixed_2(value)
    return text if text.startswith("-") else f"+{text}"


def interval_text(diff: PairedDifference) -> str:
    """``[-0.49, +0.49]``: a paired difference's interval, two decimals as everywhere in kb."""
    return f"[{signed_2(diff.low)}, {signed_2(diff.high)}]"


@dataclass(frozen=True)
class ValueRule:
    """When a treatment earns its keep against a baseline."""

    cheaper: float
    """Matching the baseline's pass rate is enough at ≤ this × its cost."""
    margin: float
    """Or beating the baseline's pass rate by this much …"""
    better: float
    """… at ≤ this × its cost."""
    zero_fails: bool = False
    """A treatment that passes nothing fails whatever the costs (criterion 2)."""

    def passes(
        self, treat_rate: float, treat_cost: float, base_rate: float, base_cost: float
    ) -> bool:
        """Whether the treatment's figures pass against the baseline's."""
        if self.zero_fails and treat_rate <= TOLERANCE:
            return False
        matches = treat_rate >= base_rate - TOLERANCE and (
            treat_cost <= self.cheaper * base_cost + TOLERANCE
        )
        beats = treat_rate >= base_rate + self.margin - TOLERANCE and (
            treat_cost <= self.better * base_cost + TOLERANCE
        )
        return matches or beats

    def verdict(self, treat: Arm, base: Arm) -> bool:
        """The arms' verdict: contaminated arms never pass."""
        if treat.contamination or base.contamination:
            return False
        return self.passes(treat.pass_rate, treat.cost_usd, base.pass_rate, base.cost_usd)

    def failure(self, treat: Arm, base: Arm) -> str:
        """Why the treatment failed: which part of the rule, with which numbers."""
        if treat.contamination or base.contamination:
            which = treat if treat.contamination else base
            return f"{which.name} arm contaminated: {which.contamination}"
        if self.zero_fails and treat.pass_rate <= TOLERANCE:
            return f"the {treat.name} arm passed nothing (a pass rate of 0 fails outright)"
        rate, cost = to_fixed_2(treat.pass_rate), usd(treat.cost_usd)
        line = (
            f"{treat.name} {rate} at {cost} needs >= {to_fixed_2(base.pass_rate)} at <= "
            f"${self.cheaper * base.cost_usd:.4f} ({self.cheaper:.2f}x)"
        )
        # A pass rate is at most 1: never ask for more (the "beats by" arm is then out of reach).
        if base.pass_rate + self.margin <= 1 + TOLERANCE:
            return line + (
                f" or >= {to_fixed_2(base.pass_rate + self.margin)} at <= "
                f"${self.better * base.cost_usd:.4f} ({self.better:.2f}x)"
            )
        return (
            line
            + f" (beating {to_fixed_2(base.pass_rate)} by {margin_text(self.margin)} is impossible)"
        )


START_RUNG = ValueRule(cheaper=0.90, margin=0.05, better=1.00)
"""Criterion 1: the recommended start rung against the default one."""
PROFILE = ValueRule(cheaper=1.05, margin=0.15, better=1.15, zero_fails=True)
"""Criterion 2: the card-informed profile choice against the blind one."""


def start_rung_rule(
    treatment_rate: float, treatment_cost: float, baseline_rate: float, baseline_cost: float
) -> bool:
    """Criterion 1's rule: match or beat at ≤ 0.90 × cost, or beat by ≥ 0.05 at ≤ 1.00 × cost."""
    return START_RUNG.passes(treatment_rate, treatment_cost, baseline_rate, baseline_cost)


def profile_rule(
    informed_rate: float, informed_cost: float, blind_rate: float, blind_cost: float
) -> bool:
    """Criterion 2's rule: match or beat at ≤ 1.05 × cost, or beat by ≥ 0.15 at ≤ 1.15 × cost.

    An informed arm at pass rate 0 fails outright.
    """
    return PROFILE.passes(informed_rate, informed_cost, blind_rate, blind_cost)


@dataclass(frozen=True)
class IntervalRule:
    """A criterion decided with the paired interval (SPEC 13.3).

    The treatment passes when non-inferior (lower bound ≥ −margin) at ≤
    ``cheaper`` × the baseline's cost per case, or better (lower bound > 0) at ≤
    ``better`` ×; it fails when inferior (upper bound < −margin), or dearer than
    ``better`` ×, or dearer than ``cheaper`` × and not better; otherwise it is
    inconclusive and says how many more cases would decide. The CLI and
    ``bench/paired_sim.py`` both decide through :meth:`decide`.
    """

    cheaper: float
    better: float
    zero_fails: bool = False
    """A treatment that passes nothing fails whatever the interval (criterion 2)."""

    def decide(
        self,
        diff: PairedDifference,
        cost_ratio: float,
        margin: float = DEFAULT_MARGIN,
        *,
        passed_nothing: bool = False,
    ) -> CriterionResult:
        """The verdict on treatment − baseline ``diff`` at ``cost_ratio`` (treatment/baseline)."""
        if self.zero_fails and passed_nothing:
            return CriterionResult("failed", "passed nothing (a pass rate of 0 fails outright)")
        result = checkpoint_criterion(diff, cost_ratio, margin, self.cheaper, self.better)
        # The reason's interval as kb prints every interval: two decimals.
        written = f"[{diff.low:+.3f}, {diff.high:+.3f}]"
        return replace(result, reason=result.reason.replace(written, interval_text(diff)))


START_RUNG_INTERVAL = IntervalRule(cheaper=0.90, better=1.00)
"""Criterion 1 with intervals: non-inferior at ≤ 0.90 ×, or better at ≤ 1.00 ×."""
PROFILE_INTERVAL = IntervalRule(cheaper=1.05, better=1.15, zero_fails=True)
"""Criterion 2 with intervals: rulvar's cost factors, 1.05 × and (better) 1.15 ×."""


def paired_decision(
    scores: PairedScores,
    cost_ratio: float,
    rule: IntervalRule = START_RUNG_INTERVAL,
    margin: float = DEFAULT_MARGIN,
    seed: int = 0,
) -> tuple[PairedDifference, CriterionResult]:
    """Treatment (``scores.a``) against baseline (``scores.b``): the interval and the verdict.

    What the checkpoint computes for a fixed set of cases (the bench calls it
    too, so its verdict rates are the CLI's).
    """
    diff = paired_difference(scores, seed=seed)
    passed_nothing = bool(scores.n) and float(scores.a.max()) <= TOLERANCE
    return diff, rule.decide(diff, cost_ratio, margin, passed_nothing=passed_nothing)
