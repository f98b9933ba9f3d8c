"""The checkpoint's arms, cells and report: who ran what, and whether it paid off."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kb.checkpoint.rules import PROFILE, START_RUNG
from kb.engine.runs import RunResult
from kb.evals.suite import CaseVerdict


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
            if run.price_source == "unpriced":  # its cost is unknown: no cost comparison
                return f"unpriced run {run.label}"
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


def pooled(name: str, arms: Sequence[Arm]) -> Arm:
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
        return START_RUNG.verdict(self.treatment, self.baseline)


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
        return majority and START_RUNG.verdict(self.pooled_treatment, self.pooled_baseline)

    @property
    def criterion1_failure(self) -> str:
        """Why criterion 1 does not hold."""
        verdicts = [cell.passed for cell in self.cells if cell.passed is not None]
        if not verdicts:
            return "no cell has a recommendation: the knowledge moved nothing"
        if sum(verdicts) * 2 <= len(verdicts):
            return f"{sum(verdicts)} of {len(verdicts)} recommended cells pass, not a majority"
        return "pooled: " + START_RUNG.failure(self.pooled_treatment, self.pooled_baseline)

    @property
    def criterion2(self) -> bool:
        """The card-informed orchestrator picks profiles that pay off."""
        return PROFILE.verdict(self.informed, self.blind)

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
