"""The nightly rule behind ``sampling = "adaptive"`` (SPEC 13.7; :mod:`kb.sweep.nightly`).

Core tests drive :func:`kb.sweep.nightly.run_nightly` pass by pass on
crafted epochs: each claim state's detectors, escalation up to the pool, the
cold start's group-sequential stop, the alarm night's half pool and the
level 8 sweeps back. Property tests hold its invariants on any outcomes.
CLI tests: ``adaptive-v3`` is refused with the way on (it left kb in v5), a
v3 epochs file (committed in ``tests/data/epochs_v3``) is read and continued,
and the bench's vectorized model equals the real ``kb sweep`` night by night,
call count by call count.
"""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from kb.paired import bonferroni_z
from kb.stats import band_clear, wilson_interval
from kb.store.epochs import parse_epochs, read_epochs
from kb.sweep.epochs import HELD_NONE, HELD_STRENGTH, HELD_WEAKNESS, rotation
from kb.sweep.nightly import (
    DEFAULT_NIGHTLY,
    Detector,
    NightlyArrays,
    NightlyResult,
    NightlyRule,
    case_predictions,
    level,
    run_nightly,
)
from tests.cli_helpers import kb
from tests.sweep_helpers import write_spec

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"


# -- driving the core -------------------------------------------------------------------------


def settled(
    rates: list[float], pool: int = 120, nights: int = 10, runs_per_night: int = 20
) -> NightlyArrays:
    """Epochs that covered their pool, each case's mean at its cell's rate, detectors at 0.

    Each night ran ``runs_per_night`` cases at the cell's rate (the level's record).
    """
    cells = len(rates)
    state = NightlyArrays.blank(np.full(cells, pool, dtype=np.int64), pool, DEFAULT_NIGHTLY.ring)
    for row, p in enumerate(rates):
        state.counts[row] = 2.0
        state.scores[row] = 2.0 * p
        state.recent_runs[row] = runs_per_night
        state.recent_passes[row] = runs_per_night * p
    return state


def drive(
    state: NightlyArrays,
    held: list[int],
    outcomes: np.ndarray,
    *,
    new: bool = False,
    rule: NightlyRule = DEFAULT_NIGHTLY,
    forced: list[bool] | None = None,
) -> tuple[NightlyResult, np.ndarray, list[np.ndarray]]:
    """One night: (result, cases run per cell, each pass's mask)."""
    cells, width = state.scores.shape
    orders = np.tile(np.arange(width, dtype=np.int64), (cells, 1))
    night = run_nightly(
        state,
        orders,
        np.full(cells, new),
        np.array(held, dtype=np.int64),
        rule,
        forced=np.array(forced, dtype=bool) if forced is not None else None,
    )
    masks: list[np.ndarray] = []
    try:
        _, mask = next(night)
        while True:
            assert not any((m & mask).any() for m in masks), "a case ran twice tonight"
            masks.append(mask)
            _, mask = night.send(outcomes.astype(float))
    except StopIteration as done:
        result = done.value
    ran = sum((m.sum(axis=1) for m in masks), np.zeros(cells, dtype=np.int64))
    return result, ran, masks


def outcomes_at(rates: list[float], width: int = 120, seed: int = 0) -> np.ndarray:
    """Tonight's 0/1 outcomes, exactly round(rate × width) passes in a seeded order."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in rates:
        row = np.zeros(width)
        row[: round(p * width)] = 1
        rows.append(rng.permutation(row))
    return np.array(rows)


# -- the canary's sensitive tier marks cells suspicious ----------------------------------------


def test_a_shifted_model_s_cells_escalate_to_the_pool_and_no_alarm_is_invented() -> None:
    steady = np.ones((2, 120))  # both cells pass everything tonight: nothing to alarm on
    state = settled([0.97, 0.97])
    result, ran, _ = drive(state, [HELD_STRENGTH, HELD_STRENGTH], steady, forced=[True, False])
    assert ran[0] == 120  # the shifted model's cell: measured to its pool
    assert ran[1] == DEFAULT_NIGHTLY.strength_sample  # the other: its rotating sample
    assert not result.alarm_down.any() and not result.alarm_up.any()


# -- detectors by claim state ----------------------------------------------------------------


def test_a_held_strength_watches_a_drop_unpaired_and_paired_at_5_5() -> None:
    state = settled([0.95])
    rule = DEFAULT_NIGHTLY
    # the unpaired step of a fail for a drop of 0.10 from 0.95: log(0.15 / 0.05)
    step = math.log((1 - 0.85) / (1 - 0.95))
    result, ran, _ = drive(state, [HELD_STRENGTH], np.zeros((1, 120)))
    assert result.alarm_down[0] and not result.alarm_up[0]
    # every fail is at least the unpaired step: the bar is crossed by the 5th fail at most
    assert math.ceil(rule.strength.alarm / step) == 6
    assert result.state.down[0] == result.state.paired[0] == result.state.up[0] == 0
    assert result.ran_minimum[0] == 20 and ran[0] == 20  # tonight's 20 are clear (all fail)


def test_a_held_strength_alarms_on_the_paired_detector_when_cases_that_always_passed_fail() -> None:
    # Cases with a long record of passing (K = 8, all passes) within a 0.90 epoch whose
    # other cases flip: a fail of a case that always passed is more evidence than unpaired.
    pool = 120
    state = settled([0.9], pool=pool)
    state.counts[0] = 8.0
    state.scores[0] = np.where(np.arange(pool) % 10 == 0, 0.0, 8.0)  # 0.9, case-stable
    state.recent_runs[0] = 20
    state.recent_passes[0] = 18
    p0 = level(state, DEFAULT_NIGHTLY)
    q = case_predictions(state, p0, DEFAULT_NIGHTLY)
    assert q[0, 1] > p0[0] > q[0, 0]  # each case is read against its own record
    tonight = np.ones((1, pool))
    tonight[0, 1:6] = 0  # five cases that always passed fail
    result, _, _ = drive(state, [HELD_STRENGTH], tonight)
    assert result.alarm_down[0]
    # the unpaired detector alone would not have: five fails cost log(0.2/0.1) each
    assert 5 * math.log(0.2 / 0.1) < DEFAULT_NIGHTLY.strength.alarm


def test_a_held_weakness_watches_only_a_rise_of_0_30_at_6() -> None:
    state = settled([0.3])
    all_fail, _, _ = drive(state, [HELD_WEAKNESS], np.zeros((1, 120)))
    assert not all_fail.alarmed[0] and all_fail.state.down[0] == all_fail.state.paired[0] == 0
    risen, ran, _ = drive(settled([0.3]), [HELD_WEAKNESS], np.ones((1, 120)))
    assert risen.alarm_up[0] and not risen.alarm_down[0]
    assert risen.ran_minimum[0] == 5  # a weakness runs 5 ...
    assert ran[0] > 5 and risen.ran_suspicious[0] > 0  # ... and escalates while suspicious
    # below the bar of 6 nothing alarms: one pass of 5 cannot cross it
    one = math.log(1 - 0.0) - math.log(0.3)  # a pass's step is at most log(1 / q)
    assert 5 * one < DEFAULT_NIGHTLY.weakness.alarm + 1


def test_no_claim_watches_both_ways_at_8_and_is_never_suspicious() -> None:
    rule = DEFAULT_NIGHTLY
    assert math.isinf(rule.none.suspicious) and rule.none.alarm == 8 and rule.none.shift == 0.25
    # a shift the detectors see, but not enough for 8 in the 5 cases a night: no escalation
    state = settled([0.7])
    result, ran, masks = drive(state, [HELD_NONE], np.zeros((1, 120)))
    assert ran[0] == 5 and len(masks) == 1 and not result.alarmed[0]
    assert result.state.down[0] > 0 and result.state.up[0] == 0
    # night after night the drop builds up to the alarm (down, with no claim to retire)
    for _ in range(4):
        result, ran, _ = drive(result.state, [HELD_NONE], np.zeros((1, 120)))
        if result.alarmed[0]:
            break
    assert result.alarm_down[0]
    risen, _, _ = drive(settled([0.5]), [HELD_NONE], np.ones((1, 120)))
    later = risen
    for _ in range(4):
        later, _, _ = drive(later.state, [HELD_NONE], np.ones((1, 120)))
        if later.alarmed[0]:
            break
    assert later.alarm_up[0]


def test_an_unwatched_detector_rests_at_zero() -> None:
    state = settled([0.95])
    state.up[0] = 3.0
    result, _, _ = drive(state, [HELD_STRENGTH], np.ones((1, 120)))
    assert result.state.up[0] == 0.0


# -- escalation, the cold start, the alarm night ----------------------------------------------


def test_a_suspicious_strength_escalates_5_at_a_time_up_to_the_pool() -> None:
    rule = replace(DEFAULT_NIGHTLY, strength=replace(DEFAULT_NIGHTLY.strength, alarm=1e9))
    state = settled([0.95])
    result, ran, masks = drive(state, [HELD_STRENGTH], np.zeros((1, 120)), rule=rule)
    assert [int(m.sum()) for m in masks] == [20] + [5] * 20
    assert ran[0] == 120 and result.ran_suspicious[0] == 100  # the whole pool, never more
    calm, ran, masks = drive(settled([0.95]), [HELD_STRENGTH], np.ones((1, 120)), rule=rule)
    assert ran[0] == 20 and len(masks) == 1


def test_the_cold_start_stops_once_its_interval_is_clear_at_the_bonferroni_z() -> None:
    pool = 120
    z = bonferroni_z(pool // 5)
    assert round(z, 2) == 3.08
    blank = NightlyArrays.blank(np.array([pool] * 3, dtype=np.int64), pool, 7)
    tonight = np.vstack([np.ones(pool), outcomes_at([0.85], pool)[0], np.zeros(pool)])
    result, ran, _ = drive(blank, [HELD_NONE] * 3, tonight, new=True)
    # all pass: clear once n / (n + z²) ≥ 0.8, at the first look from 38 cases: 40
    assert ran[0] == 40 and wilson_interval(40, 40, z)[0] >= 0.8 > wilson_interval(35, 35, z)[0]
    assert ran[1] == pool  # a 0.85 model is never clear of the bands: the whole pool
    assert ran[2] == 30  # all fail is clear at once, but never on fewer than 30 cases
    assert result.state.cursor.tolist() == [40, 0, 30]
    # the next night an epoch that has not covered its pool goes on until it is clear
    unclear = NightlyArrays.blank(np.array([pool], dtype=np.int64), pool, 7)
    first, ran, _ = drive(unclear, [HELD_NONE], outcomes_at([0.8], pool, 1)[:, :], new=True)
    assert ran[0] == pool


def test_the_cold_start_z_follows_the_pool() -> None:
    assert DEFAULT_NIGHTLY.z(np.array([120, 30, 33])).tolist() == [
        bonferroni_z(24),
        bonferroni_z(6),
        bonferroni_z(7),
    ]
    clear = band_clear(np.array([40.0, 0.0, 21.0]), np.array([40, 0, 30]), 3.08, 0.8, 0.6)
    assert clear.tolist() == [True, False, False]


def test_an_alarm_night_measures_up_to_half_the_pool_for_the_new_epoch() -> None:
    state = settled([0.97])
    tonight = outcomes_at([0.7], 120, 3)  # a drop: alarm, and tonight alone is not clear
    result, ran, _ = drive(state, [HELD_STRENGTH], tonight)
    assert result.alarm_down[0]
    assert ran[0] == 60 and result.ran_after_alarm[0] == ran[0] - 20
    # the new epoch holds every run of the night, its detectors at 0
    assert result.state.counts[0].sum() == 60 and result.state.down[0] == 0
    assert result.state.recent_runs[0, -1] == 60 and result.state.recent_runs[0, :-1].sum() == 0


def test_a_small_pool_s_alarm_night_runs_the_cases_a_strength_needs() -> None:
    """Half of a pool of 30 is 15, and 15 of 15 cannot hold a strength: the night runs 16."""
    assert DEFAULT_NIGHTLY.alarm_night_cases == 16
    assert wilson_interval(16, 16)[0] >= 0.8 > wilson_interval(15, 15)[0]
    for pool, expected in [(30, 16), (20, 16), (10, 10), (40, 20)]:
        # (the alarm is the setup, at v4's bar of 6: 10 passes of a pool of 10 reach 6.9)
        rule = replace(DEFAULT_NIGHTLY, max_cases=pool, weakness=Detector(0.30, 6.0, 2.0))
        state = settled([0.3], pool=pool)
        result, ran, _ = drive(state, [HELD_WEAKNESS], np.ones((1, pool)), rule=rule)
        assert result.alarm_up[0], pool
        assert ran[0] == expected, (pool, ran[0])  # never more than the pool
        # the new epoch holds every run of the night: a strength the gate can hold
        assert result.state.counts[0].sum() == expected


# -- the level, 8 sweeps back -----------------------------------------------------------------


def test_the_level_is_the_pass_rate_of_runs_8_sweeps_back() -> None:
    state = settled([0.9], nights=10)
    # 240 runs: 100 at least 8 sweeps old at 0.90, then the last 7 nights' 140 at 0.50
    state.counts[0] = 2.0
    state.scores[0] = (90 + 70) / 120
    state.recent_runs[0] = 20
    state.recent_passes[0] = 10
    assert level(state, DEFAULT_NIGHTLY)[0] == pytest.approx(0.9)
    mean = (90 + 70) / 240
    # too few old runs: the mean of the case means
    state.recent_runs[0] = 34
    state.recent_passes[0] = 17
    assert 240 - 7 * 34 < 20
    assert level(state, DEFAULT_NIGHTLY)[0] == pytest.approx(mean)
    # a night without its pass total (a v3 file): the case means too
    state.recent_runs[0] = 20
    state.recent_passes[0, 3] = np.nan
    assert level(state, DEFAULT_NIGHTLY)[0] == pytest.approx(mean)
    # clipped to [0.03, 0.96]
    assert level(settled([1.0]), DEFAULT_NIGHTLY)[0] == 0.96


def test_a_young_epochs_level_is_its_first_runs_not_the_runs_after_a_change() -> None:
    """SPEC 14.7 item 1: an epoch 3 nights old has no runs 8 sweeps back; its level is its
    first night's, which the drop on its later nights does not move."""
    state = settled([0.9], nights=3)
    state.recent_runs[0] = [0, 0, 0, 0, 30, 20, 20]  # the first night, then two after a drop
    state.recent_passes[0] = [0, 0, 0, 0, 28.5, 14, 14]
    state.counts[0] = 0.0
    state.counts[0, :70] = 1.0
    state.scores[0] = 0.0
    state.scores[0, :56] = 1.0
    state.scores[0, 56] = 0.5
    case_means = level(state, replace(DEFAULT_NIGHTLY, young_level="case-means"))[0]
    first = level(state, replace(DEFAULT_NIGHTLY, young_level="first-runs"))[0]
    assert case_means == pytest.approx(56.5 / 70)  # follows the drop
    assert first == pytest.approx(0.95)  # the first night's 28.5 of 30
    # an epoch with runs 8 sweeps back reads them, whichever young level
    state.recent_runs[0] = 5
    state.recent_passes[0] = 5
    assert level(state, replace(DEFAULT_NIGHTLY, young_level="first-runs"))[0] == pytest.approx(
        (56.5 - 35) / (70 - 35)
    )


def test_tonights_totals_enter_the_ring_and_age_out_after_8_sweeps() -> None:
    state = settled([0.95])
    state.recent_runs[0] = np.arange(7)
    result, ran, _ = drive(state, [HELD_STRENGTH], np.ones((1, 120)))
    assert result.state.recent_runs[0].tolist() == [1, 2, 3, 4, 5, 6, ran[0]]
    assert result.state.recent_passes[0, -1] == ran[0]


# -- properties -------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    pool=st.integers(min_value=1, max_value=60),
    held=st.lists(st.sampled_from([HELD_NONE, HELD_STRENGTH, HELD_WEAKNESS]), min_size=3,
                  max_size=3),
    rates=st.lists(st.floats(min_value=0, max_value=1), min_size=3, max_size=3),
    nights=st.integers(min_value=1, max_value=4),
    seed=st.integers(min_value=0, max_value=2**16),
)  # fmt: skip
def test_any_night_keeps_the_rules_invariants(
    pool: int, held: list[int], rates: list[float], nights: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    state = NightlyArrays.blank(np.full(3, pool, dtype=np.int64), pool, 7)
    new = True
    for _ in range(nights):
        tonight = (rng.random((3, pool)) < np.array(rates)[:, None]).astype(float)
        result, ran, masks = drive(state, held, tonight, new=new)
        state = result.state
        # detectors are nonnegative and finite
        for detector in (state.down, state.paired, state.up):
            assert np.all(detector >= 0) and np.all(np.isfinite(detector))
        # never more than the pool (the plan's worst case), no case twice (checked in drive)
        assert np.all(ran <= pool)
        # the cold start never stops before 30 cases (or the pool)
        if new:
            assert np.all(ran >= min(30, pool))
        assert np.all((state.cursor >= 0) & (state.cursor < max(pool, 1)))
        assert np.all(state.counts <= nights)
        new = False


@settings(max_examples=40, deadline=None)
@given(
    successes=st.integers(min_value=0, max_value=120),
    extra=st.integers(min_value=0, max_value=120),
)
def test_a_clear_interval_is_clear_of_each_bands_edge(successes: int, extra: int) -> None:
    n = successes + extra
    clear = bool(band_clear(np.array([float(successes)]), np.array([n]), 3.08, 0.8, 0.6)[0])
    if n == 0:
        assert not clear
        return
    low, high = wilson_interval(successes, n, 3.08)
    assert clear == (low >= 0.8 or high <= 0.6 or (low > 0.6 and high < 0.8))


# -- through the CLI --------------------------------------------------------------------------

POOL = [(f"case-{i:02d}", f"Question {i}?", f"answer-{i}") for i in range(60)]
CELL = "scripted:m|extraction"


def model(wrong: set[int] | frozenset[int] = frozenset()) -> dict[str, Any]:
    answers = {
        prompt: (f"wrong-{i}" if i in wrong else answer)
        for i, (_, prompt, answer) in enumerate(POOL)
    }
    return {"model": "scripted:m", "params": {"responses": answers, "default": "steady"}}


def spec(path: Path, sampling: str | None = None, wrong: frozenset[int] = frozenset()) -> Path:
    extra = f'sampling = "{sampling}"' if sampling else ""
    budgets = {"target_usd": 0.01, "max_total_usd": 5.0}
    return write_spec(
        path, [model(wrong)], cases=POOL, gate="interval", extra_sweep=extra, budgets=budgets
    )


def night(runner: CliRunner, path: Path, day: int) -> dict[str, Any]:
    at = f"2026-11-{day:02d}T02:00:00Z"
    result = kb(runner, "sweep", str(path), "--json", "--quiet", "--observed-at", at)
    assert result.exit_code == 0, result.stderr
    found: dict[str, Any] = json.loads(result.stdout)
    return found


@pytest.mark.usefixtures("initialized_store")
def test_adaptive_is_the_nightly_rule(runner: CliRunner, isolated: Path) -> None:
    # all pass over a pool of 60: the nightly cold start is clear at 35 (z over 12 looks)
    (cell,) = night(runner, spec(isolated / "a.toml"), 1)["cells"]
    assert cell["epoch"]["ran"] == 35 and cell["outcome"] == "strength"
    assert cell["epoch"]["why"] == (
        "new epoch (first measurement): 35 of its 60 cases, until its interval was clear "
        "of the bands"
    )
    epoch = read_epochs(isolated / "rulvar.models.epochs.json").cells[CELL]
    assert epoch.nights[0].passes == 35 and epoch.paired == 0.0
    # the next night goes on from the cursor: a held strength's 20
    (cell,) = night(runner, spec(isolated / "a.toml"), 2)["cells"]
    assert cell["epoch"]["ran"] == 20 and cell["epoch"]["n"] == 55
    assert cell["epoch"]["why"] == "the epoch has measured 35 of its 60 cases: 20 more"
    dry = kb(runner, "sweep", str(isolated / "a.toml"), "--dry-run", "--observed-at",
             "2026-11-03T02:00:00Z")  # fmt: skip
    text = dry.stdout + dry.stderr
    assert "planned (the worst case): 60 target runs" in text  # escalation up to the pool
    assert "first pass: 20 target runs (then 5 more at a time where a detector is" in text


@pytest.mark.usefixtures("initialized_store")
def test_adaptive_v3_is_refused_with_the_way_on_and_touches_nothing(
    runner: CliRunner, isolated: Path
) -> None:
    store = isolated / "rulvar.models.json"
    before = store.read_bytes()
    result = kb(runner, "sweep", str(spec(isolated / "v3.toml", "adaptive-v3")), "--quiet")
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert 'sampling = "adaptive-v3" was removed in kb v5' in line and 'use "adaptive"' in line
    assert store.read_bytes() == before
    assert not (isolated / "rulvar.models.epochs.json").exists()


@pytest.mark.usefixtures("initialized_store")
def test_a_v3_epochs_file_is_read_and_continued(runner: CliRunner, isolated: Path) -> None:
    fixture = DATA / "epochs_v3" / "rulvar.models.epochs.json"
    v3 = parse_epochs(fixture.read_bytes(), str(fixture))
    before = v3.cells[CELL]
    assert before.paired is None and all(n.passes is None for n in before.nights)
    assert len(before.nights) == 3 and before.level is not None
    shutil.copy(fixture, isolated / "rulvar.models.epochs.json")
    steady = frozenset({3, 17, 41})  # the model the fixture measured (0.95)
    report = night(runner, spec(isolated / "s.toml", wrong=steady), 4)
    (cell,) = report["cells"]
    assert cell["epoch"]["reason"] == "first" and cell["epoch"]["nights"] == 4
    assert cell["epoch"]["startedIn"] == before.start.report_id
    after = read_epochs(isolated / "rulvar.models.epochs.json").cells[CELL]
    assert after.start == before.start and after.nights[:3] == before.nights
    assert after.nights[3].passes is not None and after.paired is not None
    assert sum(after.counts) == sum(before.counts) + cell["epoch"]["ran"]


def _truth_sim() -> Any:
    path = ROOT / "bench" / "truth_sim.py"
    loaded = importlib.util.spec_from_file_location("truth_sim", path)
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    sys.modules["truth_sim"] = module
    loaded.loader.exec_module(module)
    return module


def test_the_benchs_vectorized_model_is_the_real_cli_call_for_call(isolated: Path) -> None:
    """Every model-night's state and call count, one seed per world (the bench runs ≥ 10)."""
    truth_sim = _truth_sim()
    checks = truth_sim.cross_check(1, 1, [30], nights=6, seed0=7)
    assert [c.world for c in checks] == ["fresh", "fixed-nested", "fixed-redraw"]
    for check in checks:
        # the restarted scenarios leave it: the real CLI restarts no epoch at their night
        assert check.model_nights == 6 * (truth_sim.MODELS - len(truth_sim.RESTARTED))
        assert check.same_state == check.same_calls == check.model_nights, check


def test_the_rotation_the_bench_reads_is_the_suites() -> None:
    assert rotation("x", 30).tolist() == rotation("x", 30).tolist()
    assert sorted(rotation("x", 30).tolist()) == list(range(30))


def test_a_flip_of_a_case_that_passed_twice_is_not_three_fails_worth() -> None:
    """SPEC 14.7 item 2: early in an epoch no case has flipped yet, so the within-case spread
    reads 0 and a case that passed twice was predicted at 0.99: four flips tonight alarmed a
    true 0.95 strength. With a flip rate of at least 0.05 they are four ordinary fails."""
    state = settled([0.95], nights=2)
    state.recent_runs[0] = 0  # all 60 runs older than the ring: the level reads them
    state.recent_passes[0] = 0
    state.counts[0] = 0.0
    state.scores[0] = 0.0
    state.counts[0, :40] = [2.0] * 20 + [1.0] * 20  # 20 cases run twice, 20 once
    state.scores[0, :40] = [2.0] * 20 + [1.0] * 18 + [0.0] * 2
    outcomes = np.ones((1, 120))
    outcomes[0, :4] = 0.0  # four of tonight's first cases flip
    floored, _, _ = drive(state, [HELD_STRENGTH], outcomes)
    assert DEFAULT_NIGHTLY.flip_floor == 0.05 and not floored.alarm_down[0]
    bare, _, _ = drive(
        state, [HELD_STRENGTH], outcomes, rule=replace(DEFAULT_NIGHTLY, flip_floor=0)
    )
    assert bare.alarm_down[0]  # v4: the true strength retired
