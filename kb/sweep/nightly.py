"""The nightly rule behind ``sampling = "adaptive"`` (SPEC 13.7; "P6c-lag8").

``shared/research/nightly-rule.md`` measured where v3's calls went (confirm
passes on cells that hold no strength, escalation capped at 3 × 15, no
detector that pairs a case with its own record, a cold start that always
measured the whole pool) and specified this rule; SPEC 13.7 generalizes its
constants. Per cell (model × task class), over the epoch's pool (the cell's
cases cut to ``max_cases``), in the suite's stable rotation from a cursor:

* **State.** Per case of the epoch: the sum of its scores ``S_j`` and the
  nights that ran it ``K_j`` (as v3); three CUSUMs carried across nights —
  ``down`` (unpaired drop), ``paired`` (case-paired drop, "thinning") and
  ``up`` (case-paired rise, "thickening"); and each night's pass total (the
  epochs file's ``passes`` per night), from which the level is read.
* **Level** ``p0``: the pass rate of the epoch's runs at least ``level_lag``
  (8) sweeps old — the epoch's estimate 8 sweeps back — when there are
  ``level_runs`` (20) of them, else the mean of the epoch's case means;
  clipped to [0.03, 0.96]. A level that lags keeps a drop the detector has
  not yet caught from becoming the reference it is judged against.
* **Case prediction** ``q_j = p0 + w_j (S_j/K_j − p0)`` with ``w_j = K_j ρ /
  (1 + (K_j − 1) ρ)``, ``ρ = max(0, ρ̂ − 0.15)`` where ``ρ̂`` is the one-way
  ANOVA intraclass correlation of the epoch's runs grouped by case (0 while
  no case has two runs); ``q_j`` is kept within ``[min(p0, f), max(p0, 1 −
  f)]`` where the flip rate ``f`` (at least 0.05) solves ``f (1 − f) =`` the within-case mean
  square (then within [0.01, 0.99], so no run is infinite evidence). A run's
  within-case square is read as a 0/1 run's (``x² = x``): with repeats, a
  fractional score overstates it, which only lowers ``ρ̂``.
* **Detectors by claim state** (Page CUSUMs, reflected at 0, updated run by
  run in rotation order against the level fixed before tonight, read only
  once the epoch held ``activate`` (20) distinct cases before tonight):

  - held **strength**, a drop of 0.10: ``down`` — log Bern(p0 − δ)/Bern(p0)
    — and ``paired`` — log Bern(q_j (p0 − δ)/p0)/Bern(q_j); an alarm when
    either reaches 5.5; **suspicious** at ≥ 0.5;
  - held **weakness**, a rise of 0.30: ``up``, whose alternative fails a
    case with probability (1 − q_j)(1 − p0 − δ)/(1 − p0); alarm 8,
    suspicious at 2;
  - **no claim**, ±0.25: all three; alarm 8; never suspicious.

  An unwatched detector rests at 0 (a claim lost by the gate inherits no
  old statistic).
* **What runs each night**, with a look every ``look`` (5) runs: first the
  minimum — 30 on a new epoch's first night, 20 for a held strength, 5
  otherwise (each at most the pool); then, 5 at a time:

  - while no alarm fired tonight: while a detector is suspicious
    (**escalation**, up to the pool), or while the epoch has not covered its
    pool and its Wilson interval at the Bonferroni z (over pool ÷ 5 looks:
    3.08 for 120 cases) is neither inside a claim band (lower ≥ strength −
    tolerance, upper ≤ weakness + tolerance) nor clearly between them (the
    **group-sequential cold start**; the minimum of 30 means no claim rests
    on fewer);
  - once an alarm fired tonight: while fewer than half the pool (but at least
    the 16 cases a strength needs, :attr:`NightlyRule.alarm_night_cases`) ran
    tonight and tonight's cases alone are not clear at that z.

  Never more than the pool: a night runs each case at most once, so the
  plan's worst case (every case of the pool) is what the envelope
  authorizes. The cursor moves on by the number run.
* **Alarm.** The watched claim is retired; the epoch restarts from tonight's
  runs (all of them, those before the alarm included) with its detectors at
  0, and the retired polarity is not re-earned tonight.

Everything is vectorized over cells (numpy, a leading cell axis) and
deterministic: no clock, no randomness — the rotation is seeded by the
suite's fingerprint (:func:`kb.sweep.epochs.rotation`). ``kb sweep`` drives
:func:`run_nightly` pass by pass (:mod:`kb.sweep.sampling`), and
``bench/truth_sim.py`` drives the very same generator over thousands of
simulated cells; its figures are in ``bench/RESULTS.md``.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

import numpy as np

from kb.paired import bonferroni_z
from kb.stats import band_clear, min_cases_for_strength
from kb.sweep.epochs import (
    HELD_STRENGTH,
    HELD_WEAKNESS,
    BoolArray,
    EpochArrays,
    FloatArray,
    IntArray,
    NightPass,
    NightResult,
)

if TYPE_CHECKING:
    from kb.sweep.spec import SweepSpec

ALWAYS = math.inf


@dataclass(frozen=True)
class Detector:
    """The change a claim state watches for, and its bars."""

    shift: float
    """The drop (or rise) the detector is tuned to."""
    alarm: float
    """A watched detector reaching this ends the epoch."""
    suspicious: float
    """A watched detector at or above this keeps the night running (``inf``: never)."""


@dataclass(frozen=True)
class NightlyRule:
    """The nightly rule's numbers (SPEC 13.7; from ``shared/research/nightly-rule.md``)."""

    max_cases: int = 120
    """The pool: the most cases an epoch draws from (the spec's ``max_cases``)."""
    strength_floor: float = 0.8
    """The lowest interval bound a strength needs (the gate's strength − tolerance)."""
    weakness_ceiling: float = 0.6
    """The highest interval bound a weakness allows (weakness + tolerance)."""
    look: int = 5
    """Runs between two looks (the escalation step); the cold start's Bonferroni
    z is over pool ÷ look looks."""
    alpha: float = 0.05
    """The cold start's family-wise error over its looks."""
    first_night: int = 30
    """The least a new epoch's first night runs."""
    strength_sample: int = 20
    """The least a held strength runs each night."""
    other_sample: int = 5
    """The least any other settled cell runs each night."""
    activate: int = 20
    """Distinct cases an epoch holds (before tonight) before its detectors read runs."""
    level_lag: int = 8
    """The level is the pass rate of the runs at least this many sweeps old."""
    level_runs: int = 20
    """Old runs the level needs (else it is the mean of the epoch's case means)."""
    level_low: float = 0.03
    level_high: float = 0.96
    young_level: Literal["case-means", "first-runs"] = "case-means"
    """A young epoch's level (fewer than ``level_runs`` runs ``level_lag`` sweeps old):
    ``case-means`` — the mean of all its case means (v4; it follows the runs after a
    change); ``first-runs`` — the pass rate of its oldest ``level_runs`` runs (its first
    nights), which a change after them does not move (SPEC 14.7 item 1)."""
    rho_discount: float = 0.15
    """Subtracted from the estimated intraclass correlation (it errs high on few runs)."""
    flip_floor: float = 0.05
    """The least flip rate a case prediction allows (a case's record says no more than
    ``1 − flip_floor`` of passing): while few cases have two runs the within-case spread
    reads near 0 and one flip of a case that passed twice weighed as much as three ordinary
    fails — false alarms on true strengths (SPEC 14.7 item 2; v4 had none beyond 0.01)."""
    strength: Detector = field(default_factory=lambda: Detector(0.10, 5.5, 0.5))
    weakness: Detector = field(default_factory=lambda: Detector(0.30, 8.0, 2.0))
    """Alarm 8 (v4: 6): a held weakness's false alarms were most of the stable models'
    flaps in the fixed worlds, and the rise it watches for is detected as fast at 8
    (``bench/RESULTS.md``, #46)."""
    none: Detector = field(default_factory=lambda: Detector(0.25, 8.0, ALWAYS))

    @property
    def alarm_night_cases(self) -> int:
        """The fewest cases an alarm night may stop at before it is clear: a strength's.

        SPEC 13.7 says an alarm night measures "up to half the pool"; below a pool of 32
        half the pool cannot hold a strength (15 of 15 has a lower bound of 0.796 < 0.80),
        so a rise could never be claimed on its alarm night and the pool-30 goal ("no
        figure worse than v3's rule") failed (rise 4.11 nights against v3's 2.94). kb
        runs half the pool or the cases a strength needs (16 at the 0.80 floor),
        whichever is more, and never more than the pool; at a pool of 32 or more this
        is the spec's half.
        """
        return min_cases_for_strength(self.strength_floor) or 0

    @property
    def ring(self) -> int:
        """How many recent nights' totals the level must leave out (``level_lag − 1``)."""
        return max(self.level_lag - 1, 0)

    def z(self, pool: IntArray) -> FloatArray:
        """[B] the cold start's Bonferroni z for each pool (over ⌈pool ÷ look⌉ looks)."""
        looks = np.maximum(1, -(-pool // self.look))
        table = {int(k): bonferroni_z(int(k), self.alpha) for k in np.unique(looks)}
        return np.array([table[int(k)] for k in looks], dtype=np.float64)


DEFAULT_NIGHTLY = NightlyRule()
"""The numbers kb sweeps with under ``sampling = "adaptive"`` (pool: 120)."""


def nightly_rule(spec: SweepSpec, base: NightlyRule = DEFAULT_NIGHTLY) -> NightlyRule:
    """The rule for a sweep: its pool (``max_cases``) and the gate's claim bands."""
    gate = spec.gate
    return replace(
        base,
        max_cases=spec.sweep.max_cases,
        strength_floor=gate.strength_floor,
        weakness_ceiling=gate.weakness_ceiling,
    )


@dataclass
class NightlyArrays(EpochArrays):
    """:class:`EpochArrays` with the nightly rule's state.

    ``level`` holds the level tonight's detectors read against (NaN when they
    did not read: a new epoch, or fewer than ``activate`` distinct cases).
    """

    paired: FloatArray
    """[B] the case-paired drop detector."""
    recent_runs: FloatArray
    """[B, ring] runs of the epoch's last ``ring`` nights, oldest first (0: no such night;
    NaN: not known — a night a v3 epochs file recorded without its pass total)."""
    recent_passes: FloatArray
    """[B, ring] the pass totals of those nights."""

    @classmethod
    def blank(cls, size: IntArray, width: int, ring: int) -> NightlyArrays:
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
            np.zeros(cells),
            np.zeros((cells, ring)),
            np.zeros((cells, ring)),
        )

    def pool_of(self, rule: NightlyRule) -> IntArray:
        """[B] the cases each epoch draws from (its pool, cut to ``max_cases``)."""
        return np.minimum(self.size, rule.max_cases)


@dataclass
class NightlyResult(NightResult):
    """What the night did, and why each cell ran what it ran."""

    state: NightlyArrays
    ran_minimum: IntArray
    """[B] cases of the night's minimum."""
    ran_cold: IntArray
    """[B] cases run because the epoch's interval was not yet clear (the cold start)."""
    ran_suspicious: IntArray
    """[B] cases run because a detector was suspicious (escalation)."""
    ran_after_alarm: IntArray
    """[B] cases run for the new epoch after tonight's alarm."""


@dataclass(frozen=True)
class Watch:
    """Per cell, what tonight's detectors read (fixed before the night's first run)."""

    level: FloatArray
    """[B] p0."""
    down_pass: FloatArray
    """[B] the unpaired drop detector's step on a pass."""
    down_fail: FloatArray
    """[B] … on a fail."""
    paired_pass: FloatArray
    """[B] the paired drop detector's step on a pass."""
    paired_fail: FloatArray
    """[B, K] … on a fail (per case)."""
    up_pass: FloatArray
    """[B, K] the paired rise detector's step on a pass (per case)."""
    up_fail: FloatArray
    """[B] … on a fail."""
    watch_down: BoolArray
    watch_up: BoolArray
    alarm: FloatArray
    """[B] the bar."""
    suspicious: FloatArray
    """[B] the suspicion threshold (inf: never)."""
    active: BoolArray
    """[B] the detectors read tonight's runs."""


def level(state: NightlyArrays, rule: NightlyRule) -> FloatArray:
    """[B] p0: the pass rate of runs ≥ ``level_lag`` sweeps old, else the mean case mean."""
    successes, n = state.estimate()
    total_runs, total_passes = state.counts.sum(axis=1), state.scores.sum(axis=1)
    known = ~np.isnan(state.recent_runs).any(axis=1) & ~np.isnan(state.recent_passes).any(axis=1)
    old_runs = total_runs - np.nan_to_num(state.recent_runs).sum(axis=1)
    old_passes = total_passes - np.nan_to_num(state.recent_passes).sum(axis=1)
    use_old = known & (old_runs >= rule.level_runs)
    mean = np.divide(successes, n, out=np.full(len(n), 0.5), where=n > 0)
    lagged = np.divide(old_passes, old_runs, out=mean.copy(), where=use_old)
    if rule.young_level == "first-runs" and state.recent_runs.shape[1]:
        # the epoch's oldest runs: those outside the ring, then its nights oldest first,
        # until there are level_runs of them (a young epoch: its first nights)
        runs = old_runs[:, None] + np.cumsum(np.nan_to_num(state.recent_runs), axis=1)
        passes = old_passes[:, None] + np.cumsum(np.nan_to_num(state.recent_passes), axis=1)
        reached = runs >= rule.level_runs
        first = np.argmax(reached, axis=1)
        rows = np.arange(len(first))
        young = known & ~use_old & reached.any(axis=1)
        early = np.divide(passes[rows, first], runs[rows, first], out=mean.copy(), where=young)
        lagged = np.where(young, early, lagged)
        use_old = use_old | young
    p0 = np.clip(np.where(use_old, lagged, mean), rule.level_low, rule.level_high)
    return np.asarray(p0, dtype=np.float64)


def case_predictions(state: EpochArrays, p0: FloatArray, rule: NightlyRule) -> FloatArray:
    """[B, K] q_j: each case's pass probability from its own record, shrunk towards ``p0``."""
    s, k = state.scores, state.counts
    seen = k > 0
    groups = seen.sum(axis=1).astype(np.float64)
    runs = k.sum(axis=1)
    means = np.divide(s, k, out=np.zeros_like(s), where=seen)
    grand = np.divide(s.sum(axis=1), runs, out=np.zeros(len(runs)), where=runs > 0)
    between = (k * (means - grand[:, None]) ** 2).sum(axis=1)
    within = np.where(seen, s - np.divide(s * s, k, out=np.zeros_like(s), where=seen), 0.0)
    within_sum = np.maximum(within.sum(axis=1), 0.0)
    repeated = (runs > groups) & (groups >= 2)
    msb = np.divide(between, groups - 1, out=np.zeros(len(runs)), where=groups >= 2)
    msw = np.divide(within_sum, runs - groups, out=np.zeros(len(runs)), where=runs > groups)
    n0 = np.divide(
        runs - np.divide((k * k).sum(axis=1), runs, out=np.zeros(len(runs)), where=runs > 0),
        groups - 1,
        out=np.ones(len(runs)),
        where=groups >= 2,
    )
    denominator = msb + (n0 - 1) * msw
    icc = np.divide(msb - msw, denominator, out=np.zeros(len(runs)), where=denominator > 0)
    rho = np.clip(np.where(repeated, icc, 0.0) - rule.rho_discount, 0.0, 1.0)
    flip = (1 - np.sqrt(np.maximum(0.0, 1 - 4 * np.minimum(msw, 0.25)))) / 2
    flip = np.maximum(flip, rule.flip_floor)
    weight = k * rho[:, None] / (1 + (k - 1) * rho[:, None])
    q = p0[:, None] + weight * (means - p0[:, None])
    low = np.minimum(p0, flip)[:, None]
    high = np.maximum(p0, 1 - flip)[:, None]
    return np.clip(np.clip(q, low, high), 0.01, 0.99)


def watch(state: NightlyArrays, new_epoch: BoolArray, held: IntArray, rule: NightlyRule) -> Watch:
    """What tonight's detectors read, per cell, from the epoch before tonight."""
    p0 = level(state, rule)
    q = case_predictions(state, p0, rule)
    strength, weakness = held == HELD_STRENGTH, held == HELD_WEAKNESS

    def pick(attribute: str) -> FloatArray:
        values = [getattr(d, attribute) for d in (rule.none, rule.strength, rule.weakness)]
        found = np.where(strength, values[1], np.where(weakness, values[2], values[0]))
        return np.asarray(found, dtype=np.float64)

    shift = pick("shift")
    low = np.clip(p0 - shift, 0.01, 0.99)
    high = np.clip(p0 + shift, 0.01, 0.99)
    thin = low / p0  # the paired alternative keeps this share of each case's passes
    thick = (1 - high) / (1 - p0)  # … and this share of its fails
    _, n = state.estimate()
    pool = state.pool_of(rule)
    return Watch(
        level=p0,
        down_pass=np.log(low / p0),
        down_fail=np.log((1 - low) / (1 - p0)),
        paired_pass=np.log(thin),
        paired_fail=np.log((1 - q * thin[:, None]) / (1 - q)),
        up_pass=np.log((1 - (1 - q) * thick[:, None]) / q),
        up_fail=np.log(thick),
        watch_down=~weakness,
        watch_up=~strength,
        alarm=pick("alarm"),
        suspicious=pick("suspicious"),
        active=~new_epoch & (n >= np.minimum(rule.activate, pool)) & (pool > 0),
    )


def _restarted(state: NightlyArrays, new_epoch: BoolArray) -> NightlyArrays:
    """The state with every new epoch's row emptied (cursor at the rotation's start)."""
    keep = ~new_epoch
    return NightlyArrays(
        np.where(keep[:, None], state.scores, 0.0),
        np.where(keep[:, None], state.counts, 0.0),
        np.where(keep, state.down, 0.0),
        np.where(keep, state.up, 0.0),
        np.where(keep, state.cursor, 0),
        state.size,
        np.where(keep, state.level, np.nan),
        np.where(keep, state.paired, 0.0),
        np.where(keep[:, None], state.recent_runs, 0.0),
        np.where(keep[:, None], state.recent_passes, 0.0),
    )


MINIMUM, COLD, SUSPICIOUS, AFTER_ALARM = 0, 1, 2, 3
"""Why a cell runs its next cases (:class:`NightlyResult` counts each)."""


def run_nightly(
    state: NightlyArrays,
    orders: IntArray,
    new_epoch: BoolArray,
    held: IntArray,
    rule: NightlyRule = DEFAULT_NIGHTLY,
    *,
    forced: BoolArray | None = None,
) -> Generator[tuple[NightPass, BoolArray], FloatArray, NightlyResult]:
    """One night of every cell, look by look: yields each pass's cases, is sent their scores.

    ``forced`` [B]: cells suspicious all night whatever their detectors read (the
    canary's sensitive tier saw their model's answers shift): they escalate as a
    suspicious detector does, up to the pool; no detector's state changes.

    ``orders`` is [B, K]: each cell's rotation (padded). The first pass is
    each cell's minimum; every later pass runs up to ``look`` more cases for
    the cells that go on. Each yielded [B, K] mask is answered with a [B, K]
    score array (read where the mask is set; NaN where a case was asked but
    has no score — an unscored judge verdict: it counts as run for the
    rotation, never as a pass or a fail). Returns the night's result.
    """
    cells, width = state.scores.shape
    rows = np.arange(cells)
    before = _restarted(state, new_epoch)
    pool = before.pool_of(rule)
    safe_pool = np.maximum(pool, 1)
    half = np.minimum(np.maximum(pool // 2, rule.alarm_night_cases), pool)
    z = rule.z(pool)
    seen = watch(before, new_epoch, held, rule)
    down = np.where(seen.watch_down, before.down, 0.0)
    paired = np.where(seen.watch_down, before.paired, 0.0)
    up = np.where(seen.watch_up, before.up, 0.0)
    alarm_down = np.zeros(cells, dtype=bool)
    alarm_up = np.zeros(cells, dtype=bool)
    start = before.cursor % safe_pool
    ran = np.zeros(cells, dtype=np.int64)
    ran_by = np.zeros((4, cells), dtype=np.int64)
    tonight = np.zeros((cells, width), dtype=bool)
    tonight_scores = np.zeros((cells, width))
    minimum = np.where(
        new_epoch,
        rule.first_night,
        np.where(held == HELD_STRENGTH, rule.strength_sample, rule.other_sample),
    )
    want = np.minimum(minimum, pool).astype(np.int64)
    why = np.full(cells, MINIMUM)
    kind: NightPass = "first"
    while True:
        want = np.clip(np.minimum(want, pool - ran), 0, None)
        if not want.any():
            break
        steps = int(want.max())
        offsets = np.arange(steps)
        columns = np.take_along_axis(
            orders, (start[:, None] + ran[:, None] + offsets[None, :]) % safe_pool[:, None], axis=1
        )
        take = offsets[None, :] < want[:, None]
        mask = np.zeros((cells, width), dtype=bool)
        mask[np.broadcast_to(rows[:, None], take.shape)[take], columns[take]] = True
        scores = yield kind, mask
        for step in range(steps):
            column = columns[:, step]
            x = scores[rows, column]
            read = take[:, step] & seen.active & ~(alarm_down | alarm_up) & ~np.isnan(x)
            d = np.maximum(0.0, down + x * seen.down_pass + (1 - x) * seen.down_fail)
            p = np.maximum(
                0.0, paired + x * seen.paired_pass + (1 - x) * seen.paired_fail[rows, column]
            )
            u = np.maximum(0.0, up + x * seen.up_pass[rows, column] + (1 - x) * seen.up_fail)
            down = np.where(read & seen.watch_down, d, down)
            paired = np.where(read & seen.watch_down, p, paired)
            up = np.where(read & seen.watch_up, u, up)
            fell = read & seen.watch_down & (np.maximum(down, paired) >= seen.alarm)
            rose = read & seen.watch_up & (up >= seen.alarm)
            alarm_down |= fell
            alarm_up |= rose & ~fell
            fired = fell | rose
            down, paired, up = (np.where(fired, 0.0, v) for v in (down, paired, up))
        ran += want
        np.add.at(ran_by, (why, rows), want)
        scored = mask & ~np.isnan(scores)
        tonight |= scored
        tonight_scores = np.where(scored, scores, tonight_scores)
        alarmed = alarm_down | alarm_up
        # the epoch so far: tonight alone once an alarm restarted it
        keep = ~alarmed[:, None]
        counts = np.where(keep, before.counts, 0.0) + tonight
        sums = np.where(keep, before.scores, 0.0) + tonight_scores
        means = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
        distinct = (counts > 0).sum(axis=1)
        clear = band_clear(
            means.sum(axis=1), distinct, z, rule.strength_floor, rule.weakness_ceiling
        )
        suspicious = (seen.watch_down & (np.maximum(down, paired) >= seen.suspicious)) | (
            seen.watch_up & (up >= seen.suspicious)
        )
        suspicious &= seen.active
        if forced is not None:
            suspicious |= forced
        after_alarm = alarmed & (ran < half) & ~clear
        escalate = ~alarmed & suspicious
        cold = ~alarmed & ~suspicious & (distinct < pool) & ~clear
        why = np.where(after_alarm, AFTER_ALARM, np.where(escalate, SUSPICIOUS, COLD))
        want = np.where(
            after_alarm,
            np.minimum(rule.look, half - ran),
            np.where(escalate | cold, rule.look, 0),
        ).astype(np.int64)
        kind = "more"
    return _after(
        before,
        new_epoch,
        tonight,
        tonight_scores,
        ran,
        start,
        (down, paired, up),
        seen,
        (alarm_down, alarm_up),
        ran_by,
        rule,
    )


def _after(
    before: NightlyArrays,
    new_epoch: BoolArray,
    tonight: BoolArray,
    tonight_scores: FloatArray,
    ran: IntArray,
    start: IntArray,
    detectors: tuple[FloatArray, FloatArray, FloatArray],
    seen: Watch,
    alarms: tuple[BoolArray, BoolArray],
    ran_by: IntArray,
    rule: NightlyRule,
) -> NightlyResult:
    """The epochs after the night (an alarm's new epoch holds every run of the night)."""
    down, paired, up = detectors
    alarm_down, alarm_up = alarms
    restart = new_epoch | alarm_down | alarm_up
    keep = ~restart
    runs_tonight = tonight.sum(axis=1).astype(np.float64)
    passes_tonight = np.where(tonight, tonight_scores, 0.0).sum(axis=1)

    def ring(old: FloatArray, value: FloatArray) -> FloatArray:
        if old.shape[1] == 0:
            return old.copy()
        shifted = np.concatenate([old[:, 1:], value[:, None]], axis=1)
        fresh = np.zeros_like(old)
        fresh[:, -1] = value
        return np.where(keep[:, None], shifted, fresh)

    pool = np.maximum(before.pool_of(rule), 1)
    state = NightlyArrays(
        np.where(keep[:, None], before.scores, 0.0) + np.where(tonight, tonight_scores, 0.0),
        np.where(keep[:, None], before.counts, 0.0) + tonight,
        np.where(keep, down, 0.0),
        np.where(keep, up, 0.0),
        (start + ran) % pool,
        before.size,
        np.where(seen.active & keep, seen.level, np.nan),
        np.where(keep, paired, 0.0),
        ring(before.recent_runs, runs_tonight),
        ring(before.recent_passes, passes_tonight),
    )
    return NightlyResult(
        state,
        alarm_down & ~new_epoch,
        alarm_up & ~new_epoch,
        ran_by[MINIMUM],
        ran_by[COLD],
        ran_by[SUSPICIOUS],
        ran_by[AFTER_ALARM],
    )
