"""v3's sampling rule, frozen here as the simulation's baseline (it left kb in v5).

SPEC 13.7 kept ``sampling = "adaptive-v3"`` for one version; SPEC 14.2 removed
it from kb. ``bench/truth_sim.py`` still runs it beside the nightly rule,
because the nightly rule's pool-30 goal is "no figure worse than v3's rule":
this module is v3's rule as kb ran it (the epoch arrays are kb's own,
:mod:`kb.sweep.epochs`), so the comparison stays a measurement rather than a
remembered number. kb itself never imports it.

The rule: a pair of one-sided Bernoulli CUSUMs per cell against a level
frozen the night the epoch first covered its pool; a new epoch measures its
whole pool, a settled cell ``strength_sample`` / ``other_sample`` cases in
rotation, a raised detector runs up to ``confirm_passes`` confirm passes the
same night, and an alarm's new epoch measures the rest of its pool.
"""

from __future__ import annotations

import sys
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kb.sweep.epochs import (  # noqa: E402
    HELD_NONE,
    HELD_STRENGTH,
    HELD_WEAKNESS,
    BoolArray,
    EpochArrays,
    FloatArray,
    IntArray,
    NightPass,
    NightResult,
)


@dataclass(frozen=True)
class EpochRule:
    """The detector's and the sampler's numbers (chosen by ``bench/truth_sim.py``).

    ``pooled_level`` and ``level_margin`` are the alternatives the frontier
    compares (kb sweeps with their defaults: a frozen level, no margin).
    """

    strength_sample: int = 20
    """Cases a settled cell holding a strength measures each night."""
    other_sample: int = 5
    """Cases any other settled cell measures each night."""
    raised_sample: int = 0
    """Cases a cell measures the night after a pass left a watched detector raised
    (0: its settled sample; the same night's confirm passes do the work)."""
    confirm_sample: int = 15
    """Cases each confirm pass adds, the same night, for a cell left raised."""
    confirm_passes: int = 3
    """How many confirm passes a night may run."""
    shift: float = 0.1
    """The change each detector looks for (a drop or a rise of about this much)."""
    alarm: float = 5.0
    """A watched detector of a held claim above this ends the epoch."""
    alarm_none: float = 7.0
    """A detector of a cell without a claim above this ends the epoch."""
    raise_level: float = 1.0
    """A watched detector above this runs a confirm pass."""
    max_cases: int = 120
    """The most cases an epoch's first night measures (the pool, cut to this)."""
    pooled_level: bool = False
    """The detectors' level is the epoch's pooled estimate before tonight (not the
    estimate frozen the night it first covered its pool)."""
    level_runs: int = 90
    """The level freezes only once the epoch holds this many case runs (and covers its
    pool): a level estimated from a small pool's first night errs by more than the
    change the detector looks for. Until then the level is the pooled estimate."""
    level_margin: float = 0.0
    """The level is moved this many standard errors of its own estimate towards the
    change each detector looks for: an estimated level errs, and a CUSUM against a
    level set too high alarms on its error."""


DEFAULT_RULE = EpochRule()
"""The numbers kb sweeps with."""


def pool_of(state: EpochArrays, rule: EpochRule) -> IntArray:
    """[B] the cases each epoch draws from (its pool, cut to ``max_cases``)."""
    return np.minimum(state.size, rule.max_cases)


def watched(state: EpochArrays, held: IntArray) -> tuple[FloatArray, FloatArray]:
    """[B] each cell's watched detectors (an unwatched one reads 0)."""
    return (
        np.where(held != HELD_WEAKNESS, state.down, 0.0),
        np.where(held != HELD_STRENGTH, state.up, 0.0),
    )


def raised_cells(state: EpochArrays, held: IntArray, rule: EpochRule) -> BoolArray:
    """[B]: cells whose watched detector is above ``raise_level``."""
    down, up = watched(state, held)
    return np.asarray(np.maximum(down, up) > rule.raise_level, dtype=bool)


def tonight(
    state: EpochArrays,
    orders: IntArray,
    new_epoch: BoolArray,
    held: IntArray,
    rule: EpochRule,
    wanted: IntArray | None = None,
) -> BoolArray:
    """[B, K]: the cases each cell measures tonight (in ``orders``' rotation, from the cursor).

    ``orders`` is [B, K]: each cell's rotation (``rotation`` of its suite, padded).
    A new epoch, and one that has not yet covered its pool (an alarm began it),
    measures the whole pool; a settled cell ``strength_sample`` /
    ``other_sample`` cases (``raised_sample`` while a watched detector is
    raised, when set). ``wanted`` overrides the count (a confirm pass).
    """
    cells, width = state.scores.shape
    pool = pool_of(state, rule)
    _, seen = state.estimate()
    full = new_epoch | (seen < pool)
    if wanted is None:
        settled = np.where(held == HELD_STRENGTH, rule.strength_sample, rule.other_sample)
        raised = raised_cells(state, held, rule) & (rule.raised_sample > 0)
        wanted = np.where(
            full, pool, np.where(raised, np.maximum(settled, rule.raised_sample), settled)
        )
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


def night(
    state: EpochArrays,
    orders: IntArray,
    selected: BoolArray,
    scores: FloatArray,
    new_epoch: BoolArray,
    held: IntArray,
    rule: EpochRule,
) -> NightResult:
    """Add ``scores`` ([B, K], read where ``selected``) to each cell's epoch.

    A new epoch starts from these runs alone. Otherwise the detectors see
    the cases one by one in rotation order against the epoch's level; an
    alarm starts a new epoch from these runs.
    """
    cells, width = state.scores.shape
    successes, n = state.estimate()
    current = np.divide(successes, n, out=np.full(cells, 0.5), where=n > 0)
    frozen = np.where(np.isnan(state.level), current, state.level)
    reference = np.clip(current if rule.pooled_level else frozen, 0.02, 0.98)
    margin = rule.level_margin * np.sqrt(reference * (1 - reference) / np.maximum(n, 1))
    level_down = np.clip(reference - margin, 0.02, 0.98)
    level_up = np.clip(reference + margin, 0.02, 0.98)
    # The alternatives: a drop or a rise of ``shift`` from the level.
    p_down = np.clip(level_down - rule.shift, 0.01, 0.99)
    p_up = np.clip(level_up + rule.shift, 0.01, 0.99)
    pass_down, fail_down = np.log(p_down / level_down), np.log((1 - p_down) / (1 - level_down))
    pass_up, fail_up = np.log(p_up / level_up), np.log((1 - p_up) / (1 - level_up))
    watch_down = held != HELD_WEAKNESS
    watch_up = held != HELD_STRENGTH
    bar = np.where(held == HELD_NONE, rule.alarm_none, rule.alarm)
    # An unwatched detector rests at 0: a claim lost by the gate does not inherit an
    # old, unwatched statistic.
    down = np.where(new_epoch | ~watch_down, 0.0, state.down)
    up = np.where(new_epoch | ~watch_up, 0.0, state.up)
    alarm_down = np.zeros(cells, dtype=bool)
    alarm_up = np.zeros(cells, dtype=bool)
    ordered = np.take_along_axis(selected, orders, axis=1) & ~new_epoch[:, None]
    ordered_scores = np.take_along_axis(scores, orders, axis=1)
    # Rotation order from the cursor: the detectors read cases as the night ran them.
    pool = np.maximum(pool_of(state, rule), 1)
    start = state.cursor % pool
    rows = np.arange(cells)
    offsets = (np.arange(width)[None, :] - start[:, None]) % pool[:, None]
    reach = int(np.where(ordered, offsets + 1, 0).max(initial=0))
    for step in range(reach):
        column = (start + step) % pool
        live = ordered[rows, column] & (step < pool)
        x = ordered_scores[rows, column]
        down = np.where(live, np.maximum(0.0, down + x * pass_down + (1 - x) * fail_down), down)
        up = np.where(live, np.maximum(0.0, up + x * pass_up + (1 - x) * fail_up), up)
        alarm_down |= watch_down & (down > bar)
        alarm_up |= watch_up & (up > bar)
    restart = new_epoch | alarm_down | alarm_up
    kept = ~restart[:, None]
    updated = EpochArrays(
        np.where(kept, state.scores, 0.0) + np.where(selected, scores, 0.0),
        np.where(kept, state.counts, 0.0) + selected,
        np.where(restart, 0.0, down),
        np.where(restart, 0.0, up),
        (np.where(new_epoch, 0, state.cursor) + selected.sum(axis=1)) % pool,
        state.size,
        np.where(restart, np.nan, state.level),
    )
    _set_level(updated, rule)
    return NightResult(updated, alarm_down & ~new_epoch, alarm_up & ~new_epoch)


def _set_level(updated: EpochArrays, rule: EpochRule) -> None:
    """Freeze ``level`` the night an epoch first covers its pool."""
    after, seen = updated.estimate()
    runs = updated.counts.sum(axis=1)
    first_full = (
        np.isnan(updated.level) & (seen >= pool_of(updated, rule)) & (runs >= rule.level_runs)
    )
    updated.level = np.where(first_full, after / np.maximum(seen, 1), updated.level)


def confirm(
    state: EpochArrays,
    orders: IntArray,
    ran: BoolArray,
    so_far: NightResult,
    new_epoch: BoolArray,
    held: IntArray,
    rule: EpochRule,
) -> BoolArray:
    """[B, K]: a confirm pass — more cases for each cell whose watched detector is raised.

    Only an epoch that had covered its pool before tonight confirms (not one
    that began tonight or alarmed): ``confirm_sample`` more cases in
    rotation, none already run tonight. ``state`` is the epoch before
    tonight, ``so_far`` the night so far and ``ran`` every case run tonight.
    """
    after = so_far.state
    raised = raised_cells(after, held, rule) & ~new_epoch & ~so_far.alarmed
    _, seen = state.estimate()
    raised &= seen >= pool_of(state, rule)
    cells = len(held)
    more = tonight(
        after,
        orders,
        np.zeros(cells, dtype=bool),
        held,
        rule,
        wanted=np.full(cells, rule.confirm_sample, dtype=np.int64),
    )
    return more & raised[:, None] & ~ran


def combine(
    so_far: NightResult,
    confirmed_night: NightResult,
    confirmed: BoolArray,
    ran: BoolArray,
    scores: FloatArray,
) -> NightResult:
    """The night after a confirm pass: ``so_far``, or for ``confirmed`` cells the pass's result.

    A cell whose confirm pass alarmed starts its new epoch with every run of
    the night (``ran``, read from ``scores``), not only the pass's.
    """
    alarmed = confirmed & confirmed_night.alarmed
    take = confirmed[:, None]
    earlier = ran & alarmed[:, None]
    s1, s2 = so_far.state, confirmed_night.state
    state = EpochArrays(
        np.where(take, s2.scores, s1.scores) + np.where(earlier, scores, 0.0),
        np.where(take, s2.counts, s1.counts) + earlier,
        np.where(confirmed, s2.down, s1.down),
        np.where(confirmed, s2.up, s1.up),
        np.where(confirmed, s2.cursor, s1.cursor),
        s1.size,
        np.where(confirmed, s2.level, s1.level),
    )
    return NightResult(
        state,
        so_far.alarm_down | (confirmed & confirmed_night.alarm_down),
        so_far.alarm_up | (confirmed & confirmed_night.alarm_up),
    )


def refill(so_far: NightResult, new_epoch: BoolArray, rule: EpochRule) -> BoolArray:
    """[B, K]: the cases an epoch an alarm began tonight has not run (its pool).

    Measured the same night, the new epoch covers its pool at once: a rise is
    claimed, and a drop's new level known, the night the change is seen.
    """
    state = so_far.state
    width = state.scores.shape[1]
    alarmed = so_far.alarmed & ~new_epoch
    real = np.arange(width)[None, :] < pool_of(state, rule)[:, None]
    return np.asarray(alarmed[:, None] & real & (state.counts == 0), dtype=bool)


def absorb(
    so_far: NightResult, selected: BoolArray, scores: FloatArray, rule: EpochRule
) -> NightResult:
    """Add a refill's runs to the new epochs (no detector reads them: they are its start)."""
    s = so_far.state
    updated = EpochArrays(
        s.scores + np.where(selected, scores, 0.0),
        s.counts + selected,
        s.down,
        s.up,
        s.cursor,
        s.size,
        s.level.copy(),
    )
    _set_level(updated, rule)
    return NightResult(updated, so_far.alarm_down, so_far.alarm_up)


def run_night(
    state: EpochArrays,
    orders: IntArray,
    new_epoch: BoolArray,
    held: IntArray,
    rule: EpochRule,
) -> Generator[tuple[NightPass, BoolArray], FloatArray, NightResult]:
    """One night of every cell, pass by pass: yields each pass and its cases, is sent their scores.

    The first pass (:func:`tonight`), then up to ``confirm_passes`` confirm
    passes for cells left raised, then a refill for epochs an alarm began.
    A pass yields only when some cell has cases to run; each yielded [B, K]
    mask is answered with a [B, K] score array (read where the mask is set).
    A caller that could not measure a cell completely runs nothing more for
    it and discards its result: what the night did to it is not evidence.
    Returns the night's result.
    """
    cells = len(held)
    zeros = np.zeros(cells, dtype=bool)
    first = tonight(state, orders, new_epoch, held, rule)
    scores = yield "first", first
    so_far = night(state, orders, first, scores, new_epoch, held, rule)
    ran = first.copy()
    tonight_scores = np.where(first, scores, 0.0)
    for _ in range(rule.confirm_passes):
        more = confirm(state, orders, ran, so_far, new_epoch, held, rule)
        confirmed = np.asarray(more.any(axis=1), dtype=bool)
        if not confirmed.any():
            break
        scores = yield "confirm", more
        tonight_scores = np.where(more, scores, tonight_scores)
        second = night(so_far.state, orders, more, scores, zeros, held, rule)
        so_far = combine(so_far, second, confirmed, ran, tonight_scores)
        ran |= more
    fill = refill(so_far, new_epoch, rule)
    if fill.any():
        scores = yield "refill", fill
        so_far = absorb(so_far, fill, scores, rule)
    return so_far
