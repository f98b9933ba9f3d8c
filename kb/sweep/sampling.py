"""A night of epochs: which cases each cell runs, and what the night does to its epoch.

The rule itself — the detectors, the sampler, the pooled estimate — is
:mod:`kb.sweep.epochs`, vectorized over cells; this module is the part that
knows kb's cells. Before the first call the plan builds each cell's
:class:`CellSuite` (its cases, their fingerprint, its rotation, the epoch
the epochs file holds, and why tonight must start a new one). After the
canary, :class:`NightSampler` says which cases each cell runs, takes the
first pass's scores, asks for a second pass where a detector is raised, and
returns each cell's :class:`CellEpochNight`: the estimate the gate decides
on, the alarm, how many cases ran and why, and the epoch to write.

A cell that could not be measured completely tonight keeps its epoch as it
was; when tonight was to start a new epoch (the suite changed, the canary
drifted, ``--new-epoch``), its old epoch is dropped instead: whatever the
next complete night measures begins afresh.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from kb.engine.requests import ModelSpec
from kb.evals.cases import Case, suite_fingerprint
from kb.store.epochs import CellEpoch, EpochNight, EpochReason, EpochStart, suite_grader_id
from kb.sweep.epochs import (
    HELD_NONE,
    HELD_STRENGTH,
    HELD_WEAKNESS,
    BoolArray,
    EpochArrays,
    EpochRule,
    IntArray,
    NightResult,
    combine,
    confirm,
    night,
    rotation,
    tonight,
)

CellKey = tuple[str, str]
"""(member key, task class)."""
Held = Literal["strength", "weakness", "none"]
Sampling = Literal["adaptive", "full"]
_HELD_CODE = {"none": HELD_NONE, "strength": HELD_STRENGTH, "weakness": HELD_WEAKNESS}


@dataclass(frozen=True)
class CellSuite:
    """One cell's cases and epoch, as the plan found them (before any call)."""

    member: ModelSpec
    task_class: str
    names: tuple[str, ...]
    """The cell's case names (unique in the suite), sorted: the epoch's columns."""
    suite: str
    """The fingerprint of the cell's cases."""
    prior: CellEpoch | None
    """The open epoch this night continues (``None``: tonight starts one)."""
    restart: EpochReason | None
    """Why tonight starts a new epoch, when known before the canary."""
    held: Held
    """The polarity of the cell's live claim (it sets the sample and what is watched)."""

    @property
    def key(self) -> CellKey:
        """(member key, task class)."""
        return (self.member.key, self.task_class)

    @property
    def grader_id(self) -> str:
        """The graderId of the cell's claims."""
        return suite_grader_id(self.suite)


def cell_suite(
    member: ModelSpec,
    task_class: str,
    cases: Sequence[tuple[Case, str]],
    found: CellEpoch | None,
    held: Held,
    *,
    new_epoch: bool = False,
) -> CellSuite:
    """The suite of one cell: its ``(case, unique name)`` pairs and the epoch the file holds."""
    names = tuple(sorted(name for _, name in cases))
    suite = suite_fingerprint([case for case, _ in cases])
    restart: EpochReason | None = None
    if found is None:
        restart = "first"
    elif found.suite != suite or found.cases != names:
        restart = "suite"
    elif new_epoch:
        restart = "manual"
    return CellSuite(
        member, task_class, names, suite, found if restart is None else None, restart, held
    )


@dataclass(frozen=True)
class CellEpochNight:
    """What tonight did to one cell's epoch (complete cells; see :meth:`NightSampler.finish`)."""

    suite: CellSuite
    epoch: CellEpoch
    """The epoch after tonight (what the epochs file gets)."""
    restarted: EpochReason | None
    """Why the epoch began tonight (``None``: it went on)."""
    alarm: Literal["down", "up"] | None
    """The detector that alarmed tonight: ``down`` retires a strength, ``up`` a weakness."""
    pool: int
    """Cases the epoch draws from (the cell's cases, cut to ``max_cases``)."""
    ran: int
    """Distinct cases the cell ran tonight."""
    why: str
    """Why it ran that many (for the report)."""

    @property
    def successes(self) -> float:
        """The sum of the epoch's case means."""
        return self.epoch.successes

    @property
    def n(self) -> int:
        """Distinct cases the epoch measured."""
        return self.epoch.n

    @property
    def nights(self) -> int:
        """Nights the epoch pooled."""
        return len(self.epoch.nights)

    @property
    def blocked(self) -> str | None:
        """The polarity the alarm retired: it cannot be re-earned tonight."""
        return {"down": "strength", "up": "weakness", None: None}[self.alarm]

    @property
    def grader_id(self) -> str:
        """The graderId of the claim the epoch earns."""
        return self.suite.grader_id


class NightSampler:
    """One night of every epoch-carrying cell of a sweep, in two passes.

    Call :meth:`first`, run those cases, give their scores to :meth:`second`,
    run those, and give their scores to :meth:`finish`.
    """

    def __init__(
        self,
        suites: Sequence[CellSuite],
        rule: EpochRule,
        sampling: Sampling,
        drifted: frozenset[str],
        *,
        report_id: str,
        observed_at: str,
    ) -> None:
        self.suites = tuple(suites)
        self.report_id = report_id
        self.observed_at = observed_at
        self.restarts: list[EpochReason | None] = [
            s.restart or ("drift" if s.member.key in drifted else None) for s in self.suites
        ]
        width = max((len(s.names) for s in self.suites), default=1) or 1
        if sampling == "full":  # every case every night: the sampler asks for everything
            rule = replace(
                rule,
                strength_sample=width,
                other_sample=width,
                raised_sample=width,
                max_cases=width,
            )
        self.rule = rule
        self.sampling = sampling
        self.width = width
        self.orders = np.tile(np.arange(width, dtype=np.int64), (len(self.suites), 1))
        sizes = np.array([len(s.names) for s in self.suites], dtype=np.int64)
        self.state = EpochArrays.empty(sizes, width)
        for row, suite in enumerate(self.suites):
            size = len(suite.names)
            if size:
                self.orders[row, :size] = rotation(suite.suite, size)
            prior = suite.prior if self.restarts[row] is None else None
            if prior is not None:
                self.state.scores[row, :size] = prior.scores
                self.state.counts[row, :size] = prior.counts
                self.state.down[row], self.state.up[row] = prior.down, prior.up
                self.state.cursor[row] = prior.cursor
                self.state.level[row] = np.nan if prior.level is None else prior.level
        self.new: BoolArray = np.array([r is not None for r in self.restarts], dtype=bool)
        self.held: IntArray = np.array([_HELD_CODE[s.held] for s in self.suites], dtype=np.int64)
        self._first_selected: BoolArray | None = None
        self._first_scores: np.ndarray | None = None
        self._first: NightResult | None = None
        self._second_selected: BoolArray | None = None

    def _names(self, selected: BoolArray) -> dict[CellKey, tuple[str, ...]]:
        return {
            suite.key: tuple(
                suite.names[i] for i in np.flatnonzero(selected[row, : len(suite.names)])
            )
            for row, suite in enumerate(self.suites)
        }

    def _scores(self, scores: Mapping[CellKey, Mapping[str, float]]) -> np.ndarray:
        found = np.zeros((len(self.suites), self.width))
        for row, suite in enumerate(self.suites):
            cell = scores.get(suite.key, {})
            for column, name in enumerate(suite.names):
                found[row, column] = cell.get(name, 0.0)
        return found

    def first(self) -> dict[CellKey, tuple[str, ...]]:
        """The cases each cell runs first tonight."""
        self._first_selected = tonight(self.state, self.orders, self.new, self.held, self.rule)
        return self._names(self._first_selected)

    def second(
        self, scores: Mapping[CellKey, Mapping[str, float]], complete: frozenset[CellKey]
    ) -> dict[CellKey, tuple[str, ...]]:
        """The cases each cell whose detector the first pass raised runs to confirm or clear it.

        ``scores``: each complete cell's case scores (pass fraction over its repeats).
        """
        assert self._first_selected is not None
        self._first_scores = self._scores(scores)
        self._first = night(
            self.state,
            self.orders,
            self._first_selected,
            self._first_scores,
            self.new,
            self.held,
            self.rule,
        )
        more = confirm(
            self.state,
            self.orders,
            self._first_selected,
            self._first,
            self.new,
            self.held,
            self.rule,
        )
        ok = np.array([s.key in complete for s in self.suites], dtype=bool)
        self._second_selected = more & ok[:, None]
        return {key: names for key, names in self._names(self._second_selected).items() if names}

    def finish(
        self, scores: Mapping[CellKey, Mapping[str, float]]
    ) -> dict[CellKey, CellEpochNight]:
        """Each cell's night, from the second pass's ``scores`` (only cells that ran one)."""
        assert self._first is not None and self._second_selected is not None
        assert self._first_selected is not None and self._first_scores is not None
        result = self._first
        confirmed: BoolArray = np.asarray(self._second_selected.any(axis=1), dtype=bool)
        if confirmed.any():
            second = night(
                self._first.state,
                self.orders,
                self._second_selected,
                self._scores(scores),
                np.zeros(len(self.suites), dtype=bool),
                self.held,
                self.rule,
            )
            result = combine(
                self._first, second, confirmed, self._first_selected, self._first_scores
            )
        nights: dict[CellKey, CellEpochNight] = {}
        for row, suite in enumerate(self.suites):
            nights[suite.key] = self._cell_night(row, suite, result, bool(confirmed[row]))
        return nights

    def _cell_night(
        self, row: int, suite: CellSuite, result: NightResult, confirmed: bool
    ) -> CellEpochNight:
        assert self._first_selected is not None and self._second_selected is not None
        size = len(suite.names)
        state = result.state
        alarm: Literal["down", "up"] | None = (
            "down" if result.alarm_down[row] else "up" if result.alarm_up[row] else None
        )
        restarted = self.restarts[row] or ("alarm" if alarm else None)
        first_ran = int(self._first_selected[row, :size].sum())
        second_ran = int(self._second_selected[row, :size].sum())
        ran_names = tuple(
            suite.names[i]
            for i in np.flatnonzero((self._first_selected[row] | self._second_selected[row])[:size])
        )
        tonight_night = EpochNight(
            report_id=self.report_id, observed_at=self.observed_at, cases=ran_names
        )
        if restarted is not None:
            start = EpochStart(
                report_id=self.report_id, observed_at=self.observed_at, reason=restarted
            )
            nights: tuple[EpochNight, ...] = (tonight_night,)
        else:
            assert suite.prior is not None
            start = suite.prior.start
            nights = (*suite.prior.nights, tonight_night)
        level = float(state.level[row])
        epoch = CellEpoch(
            suite=suite.suite,
            start=start,
            nights=nights,
            cases=suite.names,
            scores=tuple(float(v) for v in state.scores[row, :size]),
            counts=tuple(int(v) for v in state.counts[row, :size]),
            down=float(state.down[row]),
            up=float(state.up[row]),
            cursor=int(state.cursor[row]),
            level=None if np.isnan(level) else level,
        )
        pool = min(size, self.rule.max_cases)
        return CellEpochNight(
            suite,
            epoch,
            restarted,
            alarm,
            pool,
            first_ran + second_ran,
            self._why(row, suite, pool, first_ran, second_ran, confirmed),
        )

    def _why(
        self, row: int, suite: CellSuite, pool: int, first: int, second: int, confirmed: bool
    ) -> str:
        restart = self.restarts[row]
        if self.sampling == "full":
            why = f"sampling = full: all {pool} cases"
        elif restart is not None:
            why = f"new epoch ({_REASONS[restart]}): all {pool} cases"
        elif suite.prior is not None and suite.prior.n < pool:
            why = f"the epoch has measured {suite.prior.n} of its {pool} cases: the rest"
        elif (
            max(suite.prior.down, suite.prior.up) > self.rule.raise_level if suite.prior else False
        ):
            why = f"a detector is raised: {first} of {pool} in rotation"
        else:
            held = {"strength": "a held strength", "weakness": "a held weakness"}.get(
                suite.held, "no claim held"
            )
            why = f"settled ({held}): {first} of {pool} in rotation"
        if confirmed and second:
            why += f", then {second} more to confirm a raised detector"
        return why


_REASONS: dict[EpochReason, str] = {
    "first": "first measurement",
    "suite": "the cases changed",
    "drift": "the canary drifted",
    "alarm": "the detector alarmed",
    "manual": "--new-epoch",
}
