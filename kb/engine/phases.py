"""A job's plan: the phases the engine will run, in order, and what they may spend.

Every job that calls models (a sweep, ``kb canary``, the checkpoint) is
planned before its first call as a :class:`JobPlan`: a sequence of
:class:`Phase` objects. A phase holds the runs already known (every target
run, every canary probe) and a bound on the runs an earlier phase's results
decide (judge runs: at most one per judge grader of each target that settles
ok). The dry run lists these phases, the spend forecast is computed from
them, and the job executes exactly these runs — so what ``--dry-run``
prints and what the envelope is asked to authorize are the same thing.

:meth:`JobPlan.refuse_overspend` is the one budget refusal: a job whose
worst case (every run costing its full ceiling, authorized in plan order)
does not fit ``max_total_usd`` is refused before any call, unless the user
allows a partial run.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property

from kb.engine.budget import SpendForecast, forecast_spend
from kb.engine.runs import PlannedRun
from kb.errors import ConfigError


@dataclass(frozen=True)
class Phase:
    """One engine phase: runs known now, plus a bound on runs decided later."""

    name: str
    """``canary``, ``targets``, ``judges``, ``orchestrator`` …"""
    runs: tuple[PlannedRun, ...] = ()
    later: int = 0
    """Runs this phase may add, decided by an earlier phase's results (at most)."""
    later_ceiling_usd: float | None = None
    """The ceiling each of the ``later`` runs will carry."""
    later_what: str = ""
    """What the later runs are, for the dry run (``judge runs, one per judge grader …``)."""

    @property
    def size(self) -> int:
        """Runs at most (known and later)."""
        return len(self.runs) + self.later

    def ceilings(self, settled: frozenset[str] = frozenset()) -> Iterator[float | None]:
        """Each run's ceiling, in the order the envelope authorizes them.

        Runs in ``settled`` (served from the journal of a stopped invocation)
        cost this one nothing and ask the envelope for nothing.
        """
        yield from (run.ceiling_usd for run in self.runs if run.label not in settled)
        yield from (self.later_ceiling_usd for _ in range(self.later))


@dataclass(frozen=True)
class JobPlan:
    """The phases of one job, in execution order, under one envelope."""

    phases: tuple[Phase, ...]
    max_total_usd: float | None
    """The envelope's cap (``None``: unbounded)."""
    settled: frozenset[str] = frozenset()
    """Labels of planned runs a journal already holds as settled ok (not paid again)."""

    def phase(self, name: str) -> Phase:
        """The phase called ``name`` (an empty one when the job has none)."""
        return next((p for p in self.phases if p.name == name), Phase(name))

    @property
    def size(self) -> int:
        """Runs at most, over every phase."""
        return sum(phase.size for phase in self.phases)

    @cached_property
    def forecast(self) -> SpendForecast:
        """What the envelope would do if every run cost its full ceiling."""
        return forecast_spend(
            self.max_total_usd,
            [c for phase in self.phases for c in phase.ceilings(self.settled)],
        )

    @property
    def worst_case_usd(self) -> float | None:
        """Worst-case authorized spend (``None``: no envelope, unbounded)."""
        return None if self.max_total_usd is None else self.forecast.worst_usd

    def refuse_overspend(self, *, allow_partial: bool) -> None:
        """Refuse, before any call, a job the envelope could not pay for in full.

        With ``allow_partial`` the job runs and the envelope refuses the
        overflow (those runs settle ``refused``, their cells incomplete).
        """
        if self.forecast.exceeds and not allow_partial:
            raise ConfigError("budgets.max_total_usd", self.forecast.refusal())


def job_plan(
    phases: Sequence[Phase], max_total_usd: float | None, settled: frozenset[str] = frozenset()
) -> JobPlan:
    """A plan of the non-empty ``phases``."""
    return JobPlan(tuple(p for p in phases if p.size), max_total_usd, settled)
