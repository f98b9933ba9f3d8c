"""A night of epochs: which cases each cell runs, and what the night does to its epoch.

The rule itself — the detectors, the sampler, the pooled estimate — is the
nightly rule of :mod:`kb.sweep.nightly` (SPEC 13.7), vectorized over cells:
``sampling = "adaptive"`` runs it as it is, ``"full"`` with every case of the
pool every night (the same detectors, the same epochs); this module is the
part that knows kb's cells. Before the first
call the plan builds each cell's :class:`CellSuite` (its cases, their
fingerprint, its rotation, the epoch the epochs file holds, and why tonight
must start a new one). After the canary, :class:`NightSampler` says which
cases each cell runs, takes each pass's scores, asks for more where the rule
goes on (a suspicious or raised detector, an unclear cold start, an alarm's
new epoch), and returns each cell's :class:`CellEpochNight`: the estimate the gate decides
on, the alarm, how many cases ran and why, and the epoch to write.

A cell that could not be measured completely tonight keeps its epoch as it
was; when tonight was to start a new epoch (the suite changed, the canary
drifted, ``--new-epoch``), its old epoch is dropped instead: whatever the
next complete night measures begins afresh.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from kb.engine.requests import ModelSpec
from kb.evals.cases import Case, suite_fingerprint
from kb.store.epochs import CellEpoch, EpochNight, EpochReason, EpochStart, suite_grader_id
from kb.store.manifests import is_manifest_ref
from kb.store.models import ModelClaim
from kb.store.ttl import stored_instant
from kb.sweep.epochs import (
    HELD_NONE,
    HELD_STRENGTH,
    HELD_WEAKNESS,
    BoolArray,
    FloatArray,
    IntArray,
    NightPass,
    rotation,
)
from kb.sweep.nightly import DEFAULT_NIGHTLY, NightlyArrays, NightlyResult, NightlyRule, run_nightly

CellKey = tuple[str, str]
"""(member key, task class)."""
Held = Literal["strength", "weakness", "none"]
Sampling = Literal["adaptive", "full"]
"""``adaptive``: the nightly rule (:mod:`kb.sweep.nightly`, SPEC 13.7); ``full``: the same
rule with every case of the pool every night."""
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
    found: CellEpoch | None = None
    """The epoch the epochs file held for the cell when the plan read it, whatever tonight
    does with it: the base of the commit's three-way merge (:func:`kb.store.epochs.merge_cell`)."""
    labelled: int = 0
    """Cases a person's label grades (``kb label``): part of the suite fingerprint."""

    def reason_words(self, restart: EpochReason) -> str:
        """Why the epoch starts over, in words (labels named when the cell has them)."""
        words = _REASONS[restart]
        if restart == "suite" and self.labelled:
            plural = "s" if self.labelled != 1 else ""
            words += f"; {self.labelled} case{plural} now graded by a person's label"
        return words

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
    held_claim: ModelClaim | None = None,
) -> CellSuite:
    """The suite of one cell: its ``(case, unique name)`` pairs and the epoch the file holds.

    ``held_claim`` is the cell's newest live eval claim. When it was earned in
    the epoch's time from a night the epoch does not hold, the store and the
    epochs file disagree — a merge kept one side's store and the other side's
    epochs, say — and the epoch starts over (``resync``) rather than pool
    nights the store does not stand on.
    """
    names = tuple(sorted(name for _, name in cases))
    suite = suite_fingerprint([case for case, _ in cases])
    restart: EpochReason | None = None
    if found is None:
        restart = "first"
    elif found.suite != suite or found.cases != names:
        restart = "suite"
    elif new_epoch:
        restart = "manual"
    elif held_claim is not None and not _claim_in_epoch(held_claim, found):
        restart = "resync"
    labelled = sum(1 for case, _ in cases if any(g.kind == "label" for g in case.graders))
    return CellSuite(
        member,
        task_class,
        names,
        suite,
        found if restart is None else None,
        restart,
        held,
        found,
        labelled,
    )


def _claim_in_epoch(claim: ModelClaim, epoch: CellEpoch) -> bool:
    """Whether the claim predates the epoch or rests only on nights the epoch holds.

    A claim citing an epoch manifest (:mod:`kb.store.manifests`) is judged by
    the night it names beside it: the manifest is the epoch as that night
    left it, written from the epochs file, and reading it here would make
    the plan depend on files outside the store.
    """
    if stored_instant(claim.observed_at) < stored_instant(epoch.start.observed_at):
        return True
    reports = set(epoch.reports)
    return all(
        e["reportId"] in reports
        for e in claim.evidence
        if e["kind"] == "eval" and not is_manifest_ref(e["reportId"])
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
        sampling: Sampling,
        drifted: frozenset[str],
        *,
        report_id: str,
        observed_at: str,
        nightly: NightlyRule = DEFAULT_NIGHTLY,
        shifted: frozenset[str] = frozenset(),
    ) -> None:
        self.suites = tuple(suites)
        self.nightly = nightly
        self.report_id = report_id
        self.observed_at = observed_at
        self.restarts: list[EpochReason | None] = [
            s.restart or ("drift" if s.member.key in drifted else None) for s in self.suites
        ]
        width = max((len(s.names) for s in self.suites), default=1) or 1
        if sampling == "full":  # every case every night (max_cases cuts adaptive pools only)
            nightly = replace(
                nightly,
                first_night=width,
                strength_sample=width,
                other_sample=width,
                max_cases=width,
            )
        self.nightly = nightly
        self.sampling = sampling
        self.width = width
        self.orders = np.tile(np.arange(width, dtype=np.int64), (len(self.suites), 1))
        sizes = np.array([len(s.names) for s in self.suites], dtype=np.int64)
        self.state = NightlyArrays.blank(sizes, width, nightly.ring)
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
                _carry(self.state, row, prior, nightly.ring)
        self.new: BoolArray = np.array([r is not None for r in self.restarts], dtype=bool)
        self.held: IntArray = np.array([_HELD_CODE[s.held] for s in self.suites], dtype=np.int64)
        self.forced: BoolArray = np.array(
            [s.member.key in shifted for s in self.suites], dtype=bool
        )
        """Cells suspicious tonight because the canary's sensitive tier saw a shift."""
        cells, width = len(self.suites), self.width
        self._passes: Generator[tuple[NightPass, BoolArray], FloatArray, NightlyResult] | None
        self._passes = None
        self._pending: BoolArray | None = None
        self._kind: NightPass = "first"
        self._result: NightlyResult | None = None
        self._ok: BoolArray = np.ones(cells, dtype=bool)
        self._ran: dict[NightPass, BoolArray] = {
            kind: np.zeros((cells, width), dtype=bool)
            for kind in ("first", "confirm", "refill", "more")
        }
        """The cases each cell ran tonight, by the pass that ran them."""
        self._tonight = np.zeros((cells, width))
        """Tonight's case scores (where ``_ran``)."""

    def _names(self, selected: BoolArray) -> dict[CellKey, tuple[str, ...]]:
        return {
            suite.key: tuple(
                suite.names[i] for i in np.flatnonzero(selected[row, : len(suite.names)])
            )
            for row, suite in enumerate(self.suites)
        }

    def _scores(self, scores: Mapping[CellKey, Mapping[str, float]]) -> np.ndarray:
        """[B, K] scores; NaN where a case has none (unscored, or not asked in the pass)."""
        found = np.full((len(self.suites), self.width), np.nan)
        for row, suite in enumerate(self.suites):
            cell = scores.get(suite.key, {})
            for column, name in enumerate(suite.names):
                found[row, column] = cell.get(name, np.nan)
        return found

    def first(self) -> dict[CellKey, tuple[str, ...]]:
        """The cases each cell runs first tonight."""
        self._passes = run_nightly(
            self.state, self.orders, self.new, self.held, self.nightly, forced=self.forced
        )
        self._kind, self._pending = next(self._passes)
        return self._names(self._pending)

    def more(
        self, scores: Mapping[CellKey, Mapping[str, float]], complete: frozenset[CellKey]
    ) -> dict[CellKey, tuple[str, ...]]:
        """Give the last pass's ``scores``; the cases the night runs next (empty: it is done).

        ``scores``: each cell's case scores (pass fraction over its repeats);
        ``complete``: the cells the pass measured completely. A cell that was
        not is sent nothing more (its night is discarded).
        """
        assert self._passes is not None and self._pending is not None and self._result is None
        ok = np.array([s.key in complete for s in self.suites], dtype=bool)
        self._ok &= ok | ~self._pending.any(axis=1)
        found = self._scores(scores)
        scored = self._pending & self._ok[:, None] & ~np.isnan(found)
        self._ran[self._kind] |= scored
        self._tonight = np.where(scored, found, self._tonight)
        try:
            self._kind, wanted = self._passes.send(found)
        except StopIteration as done:
            self._result = done.value
            self._pending = None
            return {}
        self._pending = wanted & self._ok[:, None]
        names = {key: found for key, found in self._names(self._pending).items() if found}
        if not names:  # nothing to run for a complete cell: answer the pass with nothing
            return self.more({}, complete)
        return names

    def finish(self) -> dict[CellKey, CellEpochNight]:
        """Each cell's night (call once :meth:`more` returned nothing)."""
        assert self._result is not None
        return {
            suite.key: self._cell_night(row, suite, self._result)
            for row, suite in enumerate(self.suites)
        }

    def _cell_night(self, row: int, suite: CellSuite, result: NightlyResult) -> CellEpochNight:
        size = len(suite.names)
        state = result.state
        alarm: Literal["down", "up"] | None = (
            "down" if result.alarm_down[row] else "up" if result.alarm_up[row] else None
        )
        restarted = self.restarts[row] or ("alarm" if alarm else None)
        every = self._ran["first"] | self._ran["confirm"] | self._ran["refill"] | self._ran["more"]
        ran_names = tuple(suite.names[i] for i in np.flatnonzero(every[row, :size]))
        passes = float(np.where(every[row], self._tonight[row], 0.0).sum())
        tonight_night = EpochNight(
            report_id=self.report_id,
            observed_at=self.observed_at,
            cases=ran_names,
            passes=passes,
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
            paired=float(state.paired[row]),
        )
        pool = min(size, self.nightly.max_cases)
        why = self._why(row, suite, pool, result, alarm)
        return CellEpochNight(suite, epoch, restarted, alarm, pool, len(ran_names), why)

    def _why(
        self,
        row: int,
        suite: CellSuite,
        pool: int,
        result: NightlyResult,
        alarm: Literal["down", "up"] | None,
    ) -> str:
        """Why the nightly rule ran what it ran (:mod:`kb.sweep.nightly`)."""
        restart = self.restarts[row]
        size = len(suite.names)
        first = int(result.ran_minimum[row])
        cold = int(result.ran_cold[row])
        cut = f" (max_cases = {pool} of {size})" if pool < size else ""
        if self.sampling == "full":
            every = f"all {pool} cases" + (f" of its pool{cut}" if cut else "")
            why = (
                f"new epoch ({suite.reason_words(restart)}): {every}"
                if restart is not None
                else f"sampling = full: {every}"
            )
        elif restart is not None:
            total = first + cold
            why = f"new epoch ({suite.reason_words(restart)}): {total} of its {pool} cases{cut}"
            if total < pool:
                why += ", until its interval was clear of the bands"
        elif suite.prior is not None and suite.prior.n < pool:
            why = (
                f"the epoch has measured {suite.prior.n} of its {pool} cases{cut}: "
                f"{first + cold} more"
            )
            if cold and suite.prior.n + first + cold < pool:
                why += ", until its interval was clear of the bands"
        else:
            held = {"strength": "a held strength", "weakness": "a held weakness"}.get(
                suite.held, "no claim held"
            )
            why = f"settled ({held}): {first} of {pool} in rotation{cut}"
            if cold:
                why += f", then {cold} more until its interval was clear of the bands"
        escalated = int(result.ran_suspicious[row])
        if escalated:
            cause = (
                "the canary saw its model's answers shift"
                if self.forced[row]
                else "its detector was suspicious"
            )
            why += f", then {escalated} more while {cause}"
        if alarm is not None:
            change = "drop" if alarm == "down" else "rise"
            why += f"; the detector alarmed (a {change})"
            after = int(result.ran_after_alarm[row])
            if after:
                why += f", so the new epoch measured {after} more cases"
        return why


_REASONS: dict[EpochReason, str] = {
    "first": "first measurement",
    "suite": "the cases changed",
    "drift": "the canary drifted",
    "alarm": "the detector alarmed",
    "manual": "--new-epoch",
    "resync": "the store holds a night the epochs file does not",
}
EPOCH_REASONS = _REASONS
"""Each epoch start in words (reports, the dry run, kb show)."""


def _carry(state: NightlyArrays, row: int, prior: CellEpoch, ring: int) -> None:
    """The nightly rule's own state from the epoch the file holds (v3 files included).

    The paired detector a v3 file lacks reads 0; a night it recorded without
    its pass total leaves the level unknown (NaN) until ``ring`` newer nights
    have one — the rule then falls back to the mean of the case means.
    """
    state.paired[row] = prior.paired or 0.0
    if not ring:
        return
    recent = prior.nights[-ring:]
    pad = ring - len(recent)
    state.recent_runs[row, :] = 0.0
    state.recent_passes[row, :] = 0.0
    for column, night in enumerate(recent, start=pad):
        known = night.passes is not None
        state.recent_runs[row, column] = len(night.cases) if known else np.nan
        state.recent_passes[row, column] = night.passes if night.passes is not None else np.nan


def first_pass(
    suites: Sequence[CellSuite],
    sampling: Sampling,
    nightly: NightlyRule = DEFAULT_NIGHTLY,
) -> dict[CellKey, int]:
    """The cases each cell's first pass runs tonight, if no canary drifts (the dry run)."""
    sampler = NightSampler(
        suites, sampling, frozenset(), report_id="", observed_at="", nightly=nightly
    )
    return {key: len(names) for key, names in sampler.first().items()}
