"""What a running job has done so far, for a progress line: phase, counts, errors, spend.

Pure data fed one settled run at a time (the scheduler's ``on_settled``);
the CLI renders :meth:`RunTally.describe` beside its bar. With ``grade``
it also keeps each cell's running pass rate from the deterministic graders
(a judged case waits for its judge) and names the lowest two. The phase is the
kind of the newest run (canary probes come first, then targets, then their
judges), the counts are per kind against the planned worst case (an
adaptive night usually runs fewer targets than planned), and the spend is
what the settled runs cost.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kb.engine.runs import RunKind, RunResult
from kb.money import usd

if TYPE_CHECKING:
    from kb.engine.batch import BatchState
    from kb.engine.pacing import PaceNote

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
    grade: Callable[[RunResult], tuple[str, bool] | None] | None = None
    """(cell, passed) for a settled target run, when its deterministic graders can tell."""
    cells: dict[str, list[int]] = field(default_factory=dict)
    """Cell → [passed, graded] so far."""
    batches: dict[str, str] = field(default_factory=dict)
    """Batch id → what its last poll said (``in_progress 3/10``), while it is open."""
    pace: PaceNote | None = None
    """The call rate and the 429s so far, once a provider spoke of its rate limits."""

    def add_pace(self, note: PaceNote) -> None:
        """Note what pacing says now."""
        self.pace = note

    def add_batch(self, state: BatchState) -> None:
        """Note one poll of a batch (a finished batch leaves the line)."""
        if state.done:
            self.batches.pop(state.batch_id, None)
        else:
            done = state.completed + state.failed
            self.batches[state.batch_id] = f"{state.status} {done}/{state.total or '?'}"

    def add(self, result: RunResult) -> None:
        """Count one settled run."""
        kind = result.kind
        found = self.grade(result) if self.grade is not None and kind == "target" else None
        if found is not None:
            tally = self.cells.setdefault(found[0], [0, 0])
            tally[0] += found[1]
            tally[1] += 1
        self.phase = kind
        self.done[kind] = self.done.get(kind, 0) + 1
        if result.status != "ok":
            self.failed[kind] = self.failed.get(kind, 0) + 1
        if result.price_source == "unpriced":
            self.unpriced += 1
        else:
            self.spent_usd += result.cost_usd

    def describe(self) -> str:
        """``targets 40/120 · canary 4/4 · 2 errors · $0.0123 · 590 calls/min · 3 × 429``."""
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
        money = usd(self.spent_usd)
        if self.unpriced:
            money += f" + {self.unpriced} unpriced"
        parts.append(money)
        if self.pace is not None:
            parts.append(self.pace.text)
        parts += [f"batch {bid} {said}" for bid, said in sorted(self.batches.items())]
        if self.cells:  # the lowest running pass rates: where a night is going wrong
            lowest = sorted(self.cells.items(), key=lambda item: (item[1][0] / item[1][1], item[0]))
            shown = [
                f"{cell} {passed / graded:.2f} ({graded})" for cell, (passed, graded) in lowest[:2]
            ]
            parts.append("lowest " + ", ".join(shown))
        return " · ".join(parts)
