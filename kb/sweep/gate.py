"""When a measured cell may become a claim, and when it retires one.

Two gates (``[sweep] gate``):

* ``interval`` (the default) — a complete cell claims **strength** when the
  lower bound of its 95 % interval (:mod:`kb.stats`) is at least
  ``strength − tolerance``, **weakness** when the upper bound is at most
  ``weakness + tolerance``. With **hysteresis**: a prior claim is retired
  only by a measurement that confidently contradicts it — a strength when
  the interval's upper bound falls below ``strength``, a weakness when the
  lower bound rises above ``weakness`` — or by a claim of the opposite
  polarity. A merely uncertain night leaves prior claims as they are.
* ``point`` — rulvar's rule: pass rate ≥ ``strength`` → strength, ≤
  ``weakness`` → weakness, and (as in kb v1) every complete cell retires the
  prior claims it does not renew. Claims are byte-identical to rulvar's.

Why: with ten cases a cell's pass rate moves ±0.2 from night to night on
noise alone, so the point rule hands a 0.78 model a strength on some nights
and flips a 0.85 model between strength and nothing on others. The interval
says what the evidence supports at 95 %; the tolerance admits a model whose
interval reaches near the band; hysteresis keeps a belief until the evidence
turns against it. ``bench/truth_sim.py`` measures both gates on models of
known pass rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kb.stats import min_cases_for_strength, min_cases_for_weakness, wilson_interval
from kb.store.records import GateRecord

GateKind = Literal["interval", "point"]
Band = Literal["strength", "weakness", "none"]
DEFAULT_TOLERANCE = 0.1


@dataclass(frozen=True)
class CellEstimate:
    """What a complete cell measured: the mean case score over ``n`` distinct cases."""

    successes: float
    """Sum of case scores (a whole number with one run per case)."""
    n: int
    known_interval: tuple[float, float] | None = None
    """The interval when it was computed already (for many cells at once, vectorized)."""

    @property
    def pass_rate(self) -> float:
        """Mean case score (0 when nothing was measured)."""
        return self.successes / self.n if self.n else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        """The 95 % interval every report shows and the interval gate uses."""
        if self.known_interval is not None:
            return self.known_interval
        return wilson_interval(self.successes, self.n)


@dataclass(frozen=True)
class GatePolicy:
    """A gate and its bands."""

    kind: GateKind = "interval"
    strength: float = 0.9
    weakness: float = 0.5
    tolerance: float = DEFAULT_TOLERANCE

    def record(self) -> GateRecord:
        """The gate as a report records it (which also words and computes its bars)."""
        return GateRecord(
            kind=self.kind,
            tolerance=self.tolerance,
            strength=self.strength,
            weakness=self.weakness,
        )

    @property
    def strength_floor(self) -> float:
        """The lowest 95 % lower bound a strength needs (the interval gate)."""
        return self.record().strength_floor

    @property
    def weakness_ceiling(self) -> float:
        """The highest 95 % upper bound a weakness allows (the interval gate)."""
        return self.record().weakness_ceiling

    def describe(self) -> str:
        """The rule in one sentence."""
        return self.record().describe()

    def band(self, estimate: CellEstimate) -> Band:
        """The claim a complete cell earns (``none``: no claim)."""
        if estimate.n == 0:
            return "none"
        if self.kind == "point":
            if estimate.pass_rate >= self.strength:
                return "strength"
            if estimate.pass_rate <= self.weakness:
                return "weakness"
            return "none"
        low, high = estimate.interval
        if low >= self.strength_floor:
            return "strength"
        if high <= self.weakness_ceiling:
            return "weakness"
        return "none"

    def retires(self, prior: str, estimate: CellEstimate) -> bool:
        """Whether a complete cell that earned no claim of ``prior``'s polarity retires it.

        The point gate retires every prior it does not renew (rulvar-style
        falsification); the interval gate only a confidently contradicted one.
        """
        if self.kind == "point":
            return True
        earned = self.band(estimate)
        if earned not in ("none", prior):
            return True  # a claim of the opposite polarity
        low, high = estimate.interval
        if prior == "strength":
            return high < self.strength
        return low > self.weakness

    def cases_needed(self) -> dict[str, int | None]:
        """Fewest cases with which a cell can reach each claim at all (the power warning)."""
        if self.kind == "point":
            return {"strength": 1, "weakness": 1}
        return {
            "strength": min_cases_for_strength(self.strength_floor),
            "weakness": min_cases_for_weakness(self.weakness_ceiling),
        }

    def power_warnings(self, cases_per_class: dict[str, int]) -> list[str]:
        """One line per task class whose case count can never reach a claim."""
        needed = self.cases_needed()
        lines = []
        for task_class, count in cases_per_class.items():
            short = [(band, need) for band, need in needed.items() if need is None or count < need]
            if not short:
                continue
            reasons = ", ".join(
                f"a {band} needs at least {need}" if need else f"a {band} is unreachable"
                for band, need in short
            )
            lines.append(
                f"task class {task_class!r} has {count} case{'s' if count != 1 else ''}: "
                f"the {self.kind} gate can never claim {' or '.join(b for b, _ in short)} "
                f"({reasons})"
            )
        return lines
