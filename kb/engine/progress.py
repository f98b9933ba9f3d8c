"""What a running job has done so far, for a progress line: phase, counts, errors, spend.

Pure data fed one settled run at a time (the scheduler's ``on_settled``);
the CLI renders :meth:`RunTally.describe` beside its bar. The phase is the
kind of the newest run (canary probes come first, then targets, then their
judges), the counts are per kind against the planned worst case (an
adaptive night usually runs fewer targets than planned), and the spend is
what the settled runs cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kb.engine.runs import RunKind, RunResult

_PHASE_WORDS: dict[RunKind, str] = {"canary": "canary", "target": "targets", "judge": "judges"}


@dataclass
class RunTally:
    """Counts of settled runs by kind, their failures and their cost."""

    planned: Mapping[RunKind, int]
    """Runs at most, per kind (the plan's worst case)."""
    done: dict[RunKind, int] = field(default_factory=dict)
    failed: dict[RunKind, int] = field(default_factory=dict)
    spent_usd: float = 0.0
    unpriced: int = 0
    phase: RunKind | None = None

    def add(self, result: RunResult) -> None:
        """Count one settled run."""
        kind = result.kind
        self.phase = kind
        self.done[kind] = self.done.get(kind, 0) + 1
        if result.status != "ok":
            self.failed[kind] = self.failed.get(kind, 0) + 1
        if result.price_source == "unpriced":
            self.unpriced += 1
        else:
            self.spent_usd += result.cost_usd

    def describe(self) -> str:
        """``targets 40/120 · canary 4/4 · 2 errors · $0.0123``."""
        parts = []
        order: tuple[RunKind, ...] = ("canary", "target", "judge")
        current = [self.phase] if self.phase else []
        for kind in [*current, *(k for k in order if k != self.phase)]:
            planned = self.planned.get(kind, 0)
            if planned:
                parts.append(f"{_PHASE_WORDS[kind]} {self.done.get(kind, 0)}/{planned}")
        errors = sum(self.failed.values())
        if errors:
            parts.append(f"{errors} error{'s' if errors != 1 else ''}")
        money = f"${self.spent_usd:.4f}"
        if self.unpriced:
            money += f" + {self.unpriced} unpriced"
        parts.append(money)
        return " · ".join(parts)
