"""Knowledge that follows the model: epochs, a change detector, adaptive sampling (the rule).

A cell (subject × task class) measured under the interval gate keeps an
**epoch**: the evidence of every night since the epoch began, pooled by case
— each distinct case contributes the mean of its scores over the nights that
measured it, so ``n`` is the number of distinct cases and repeating a case is
never a new case. The gate decides on the epoch's estimate, which sharpens
night after night instead of starting over.

An epoch ends when the suite changes (its fingerprint), when the subject's
canary drifts, when ``--new-epoch`` is asked for, or when the cell's
**change detector** alarms. The detector is a pair of one-sided Bernoulli
CUSUM statistics updated case by case, in rotation order, with tonight's
results against the epoch's level ``p0`` (its estimate before tonight):
``down`` looks for a drop to ``p0 - shift``, ``up`` for a rise to
``p0 + shift``. A held strength is watched for a drop, a held weakness for
a rise, a cell without a claim both ways. A statistic above ``alarm`` ends
the epoch: the watched claim is retired, a new epoch starts with tonight's
runs alone, and the retired claim cannot be re-earned the same night.

**Adaptive sampling.** Each cell runs its cases in a stable pseudo-random
rotation seeded by the suite's fingerprint. A new epoch measures the whole
pool (up to ``max_cases``); a settled cell measures a minimum each night —
``strength_sample`` for a held strength (so a drop shows soon),
``other_sample`` otherwise — and ``raised_sample`` while a detector is above
``raise_level``: a change is confirmed or cleared within a night, for a
fraction of measuring everything every night.

Everything here is vectorized over cells (numpy arrays with a leading cell
axis): one sweep updates all its cells at once, and ``bench/truth_sim.py``
runs the very same functions over thousands of simulated cells to choose the
rule's numbers (see ``bench/RESULTS.md`` for the frontier it printed).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kb.stats import wilson_arrays

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

HELD_NONE, HELD_STRENGTH, HELD_WEAKNESS = 0, 1, 2


@dataclass(frozen=True)
class EpochRule:
    """The detector's and the sampler's numbers (chosen by ``bench/truth_sim.py``)."""

    strength_sample: int = 20
    """Cases a settled cell holding a strength measures each night."""
    other_sample: int = 5
    """Cases any other settled cell measures each night."""
    raised_sample: int = 60
    """Cases a cell measures while one of its detectors is raised."""
    shift: float = 0.1
    """The change each detector looks for (a drop or a rise of about this much)."""
    alarm: float = 4.0
    """A detector above this ends the epoch."""
    raise_level: float = 1.5
    """A detector above this measures ``raised_sample`` cases the next night."""
    max_cases: int = 120
    """The most cases an epoch's first night measures (the pool, cut to this)."""
    prior: float = 2.0
    """How many nights' worth of the epoch's level each case's own record starts from."""


DEFAULT_RULE = EpochRule()
"""The numbers kb sweeps with."""


def rotation(fingerprint: str, size: int) -> IntArray:
    """The suite's stable case order: a permutation of ``range(size)`` seeded by its fingerprint."""
    seed = int(hashlib.sha256(fingerprint.encode()).hexdigest()[:16], 16)
    return np.random.default_rng(seed).permutation(size).astype(np.int64)


@dataclass
class EpochArrays:
    """The epochs of ``B`` cells, each with up to ``K`` cases (padding beyond ``size``)."""

    scores: FloatArray
    """[B, K] sum of the case's scores over the epoch's nights."""
    counts: FloatArray
    """[B, K] nights the epoch measured the case."""
    down: FloatArray
    """[B] the drop detector."""
    up: FloatArray
    """[B] the rise detector."""
    cursor: IntArray
    """[B] where tonight's rotation starts."""
    size: IntArray
    """[B] the cell's pool size (cases 0..size-1 are real)."""
    level: FloatArray
    """[B] the detectors' reference: the epoch's estimate the night it first covered the
    whole pool (NaN before), frozen — so a change the epoch goes on pooling never
    becomes the level it is measured against."""

    @classmethod
    def empty(cls, size: IntArray, width: int) -> EpochArrays:
        """Fresh epochs for cells of the given pool sizes."""
        cells = len(size)
        return cls(
            np.zeros((cells, width)),
            np.zeros((cells, width)),
            np.zeros(cells),
            np.zeros(cells),
            np.zeros(cells, dtype=np.int64),
            size.astype(np.int64),
            np.full(cells, np.nan),
        )

    def estimate(self) -> tuple[FloatArray, IntArray]:
        """Per cell: the sum of case means, and ``n`` (distinct cases measured)."""
        seen = self.counts > 0
        means = np.divide(self.scores, self.counts, out=np.zeros_like(self.scores), where=seen)
        return means.sum(axis=1), seen.sum(axis=1).astype(np.int64)

    def interval(self) -> tuple[FloatArray, FloatArray]:
        """Per cell: the 95 % Wilson interval of the epoch's estimate (cases as the unit)."""
        successes, n = self.estimate()
        return wilson_arrays(successes, n.astype(np.float64))


def tonight(
    state: EpochArrays,
    orders: IntArray,
    new_epoch: BoolArray,
    held: IntArray,
    rule: EpochRule,
) -> BoolArray:
    """[B, K]: the cases each cell measures tonight (in ``orders``' rotation, from the cursor).

    ``orders`` is [B, K]: each cell's rotation (``rotation`` of its suite, padded).
    """
    cells, width = state.scores.shape
    pool = np.minimum(state.size, rule.max_cases)
    _, seen = state.estimate()
    full = new_epoch | (seen < pool)  # a new epoch, or one an alarm began with a few runs
    raised = np.maximum(state.down, state.up) > rule.raise_level
    settled = np.where(held == HELD_STRENGTH, rule.strength_sample, rule.other_sample)
    wanted = np.where(full, pool, np.where(raised, rule.raised_sample, settled))
    wanted = np.minimum(wanted, pool)
    steps = np.arange(width)[None, :]
    positions = (state.cursor[:, None] + steps) % np.maximum(pool, 1)[:, None]
    positions = np.where(full[:, None], steps, positions)
    chosen = np.take_along_axis(orders, positions, axis=1)
    take = steps < wanted[:, None]
    selected = np.zeros((cells, width), dtype=bool)
    rows = np.repeat(np.arange(cells), width).reshape(cells, width)
    selected[rows[take], chosen[take]] = True
    return selected


@dataclass
class NightResult:
    """What one night did to each cell's epoch."""

    state: EpochArrays
    alarm_down: BoolArray
    """[B] the drop detector ended the epoch (a held strength or no claim watched it)."""
    alarm_up: BoolArray
    """[B] the rise detector ended the epoch."""


def night(
    state: EpochArrays,
    orders: IntArray,
    selected: BoolArray,
    scores: FloatArray,
    new_epoch: BoolArray,
    held: IntArray,
    rule: EpochRule,
) -> NightResult:
    """Add tonight's ``scores`` ([B, K], read where ``selected``) to each cell's epoch.

    A new epoch starts from tonight alone. Otherwise the detectors see
    tonight's cases one by one in rotation order against the epoch's level
    before tonight; an alarm starts a new epoch from tonight's runs.
    """
    cells, width = state.scores.shape
    successes, n = state.estimate()
    current = np.divide(successes, n, out=np.full(cells, 0.5), where=n > 0)
    level = np.clip(np.where(np.isnan(state.level), current, state.level), 0.02, 0.98)
    # Each case against its own record, shrunk towards the epoch's level: a case that
    # always passed and now fails is strong evidence; one that fails as it always did is none.
    p0 = np.clip(
        (state.scores + rule.prior * level[:, None]) / (state.counts + rule.prior), 0.02, 0.98
    )
    # The alternatives: every case's pass chance scaled down (or its fail chance scaled
    # down) so that the epoch's level moves by ``shift``.
    p_down = np.clip(p0 * (1 - rule.shift / level)[:, None], 0.01, 0.99)
    p_up = np.clip(1 - (1 - p0) * (1 - rule.shift / (1 - level))[:, None], 0.01, 0.99)
    pass_down, fail_down = np.log(p_down / p0), np.log((1 - p_down) / (1 - p0))
    pass_up, fail_up = np.log(p_up / p0), np.log((1 - p_up) / (1 - p0))
    watch_down = held != HELD_WEAKNESS
    watch_up = held != HELD_STRENGTH
    down = np.where(new_epoch, 0.0, state.down)
    up = np.where(new_epoch, 0.0, state.up)
    alarm_down = np.zeros(cells, dtype=bool)
    alarm_up = np.zeros(cells, dtype=bool)
    order_selected = np.take_along_axis(selected, orders, axis=1)
    order_scores = np.take_along_axis(scores, orders, axis=1)
    orders_pd, orders_fd = (
        np.take_along_axis(pass_down, orders, 1),
        np.take_along_axis(fail_down, orders, 1),
    )
    orders_pu, orders_fu = (
        np.take_along_axis(pass_up, orders, 1),
        np.take_along_axis(fail_up, orders, 1),
    )
    # Rotation order from the cursor: the detectors read cases as the night ran them.
    pool = np.maximum(np.minimum(state.size, rule.max_cases), 1)
    start = state.cursor % pool
    rows = np.arange(cells)
    for step in range(int(pool.max(initial=1))):
        column = (start + step) % pool
        live = order_selected[rows, column] & ~new_epoch & (step < pool)
        x = order_scores[rows, column]
        step_down = x * orders_pd[rows, column] + (1 - x) * orders_fd[rows, column]
        step_up = x * orders_pu[rows, column] + (1 - x) * orders_fu[rows, column]
        down = np.where(live, np.maximum(0.0, down + step_down), down)
        up = np.where(live, np.maximum(0.0, up + step_up), up)
        alarm_down |= watch_down & (down > rule.alarm)
        alarm_up |= watch_up & (up > rule.alarm)
    restart = new_epoch | alarm_down | alarm_up
    kept = ~restart[:, None]
    tonight_scores = np.where(selected, scores, 0.0)
    tonight_counts = selected.astype(np.float64)
    updated = EpochArrays(
        np.where(kept, state.scores, 0.0) + tonight_scores,
        np.where(kept, state.counts, 0.0) + tonight_counts,
        np.where(restart, 0.0, down),
        np.where(restart, 0.0, up),
        (np.where(new_epoch, 0, state.cursor) + selected.sum(axis=1)) % pool,
        state.size,
        np.where(restart, np.nan, state.level),
    )
    after, seen = updated.estimate()
    first_full = np.isnan(updated.level) & (seen >= pool)
    updated.level = np.where(first_full, after / np.maximum(seen, 1), updated.level)
    return NightResult(updated, alarm_down & ~new_epoch, alarm_up & ~new_epoch)


def confirm(
    state: EpochArrays,
    orders: IntArray,
    ran: BoolArray,
    first: NightResult,
    new_epoch: BoolArray,
    held: IntArray,
    rule: EpochRule,
) -> BoolArray:
    """[B, K]: tonight's second pass — more cases for each cell whose detector is raised.

    Only a settled epoch confirms (not one that began tonight or just alarmed):
    ``raised_sample`` more cases in rotation, none it already ran tonight.
    """
    after = first.state
    raised = (np.maximum(after.down, after.up) > rule.raise_level) & ~new_epoch
    raised &= ~(first.alarm_down | first.alarm_up)
    _, seen = state.estimate()
    raised &= seen >= np.minimum(state.size, rule.max_cases)
    more = tonight(after, orders, np.zeros(len(held), dtype=bool), held, rule)
    return more & raised[:, None] & ~ran


def combine(
    first: NightResult,
    second: NightResult,
    confirmed: BoolArray,
    first_selected: BoolArray,
    first_scores: FloatArray,
) -> NightResult:
    """The night's result: the first pass, or (for ``confirmed`` cells) both passes.

    A cell whose second pass alarmed starts its new epoch with both passes' runs.
    """
    alarmed = confirmed & (second.alarm_down | second.alarm_up)
    take = confirmed[:, None]
    earlier_scores = np.where(first_selected & alarmed[:, None], first_scores, 0.0)
    earlier_counts = (first_selected & alarmed[:, None]).astype(np.float64)
    s1, s2 = first.state, second.state
    state = EpochArrays(
        np.where(take, s2.scores, s1.scores) + earlier_scores,
        np.where(take, s2.counts, s1.counts) + earlier_counts,
        np.where(confirmed, s2.down, s1.down),
        np.where(confirmed, s2.up, s1.up),
        np.where(confirmed, s2.cursor, s1.cursor),
        s1.size,
        np.where(confirmed, s2.level, s1.level),
    )
    return NightResult(
        state,
        first.alarm_down | (confirmed & second.alarm_down),
        first.alarm_up | (confirmed & second.alarm_up),
    )
