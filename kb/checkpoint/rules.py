"""The two value rules, each written once as an object with its thresholds.

A rule compares a treatment arm with a baseline arm: the treatment passes
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

from dataclasses import dataclass
from typing import Protocol

from kb.money import usd
from kb.store.canonical import to_fixed_2


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
        return (
            f"{treat.name} {rate} at {cost} needs >= {to_fixed_2(base.pass_rate)} at <= "
            f"${self.cheaper * base.cost_usd:.4f} ({self.cheaper:.2f}x) or >= "
            f"{to_fixed_2(base.pass_rate + self.margin)} at <= "
            f"${self.better * base.cost_usd:.4f} ({self.better:.2f}x)"
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
