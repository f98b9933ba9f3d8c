"""The interval gate, hysteresis and repeats: what a cell may claim and what it retires."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kb.stats import Z_95, min_cases_for_strength, min_cases_for_weakness, wilson_interval
from kb.sweep.gate import CellEstimate, GatePolicy

INTERVAL = GatePolicy("interval", 0.9, 0.5, 0.1)
POINT = GatePolicy("point", 0.9, 0.5, 0.1)


def estimate(k: float, n: int) -> CellEstimate:
    return CellEstimate(k, n)


@pytest.mark.parametrize(
    ("k", "n", "band"),
    [
        (30, 30, "strength"),  # lower bound 0.886 >= 0.8
        (29, 30, "strength"),  # 0.833
        (28, 30, "none"),  # 0.787 < 0.8
        (16, 16, "strength"),  # 16 / (16 + z^2) = 0.806: the fewest cases that can
        (15, 15, "none"),  # 0.796
        (12, 30, "weakness"),  # upper bound 0.577 <= 0.6
        (13, 30, "none"),  # 0.611
        (0, 3, "weakness"),  # 3.84 / 6.84 = 0.56
        (0, 2, "none"),  # 0.66
        (9, 10, "none"),  # 0.9 is at the band but the evidence does not support it
    ],
)
def test_interval_gate_at_its_boundaries(k: int, n: int, band: str) -> None:
    assert INTERVAL.band(estimate(k, n)) == band


@pytest.mark.parametrize(
    ("k", "n", "band"),
    [
        (9, 10, "strength"),
        (8, 10, "none"),
        (5, 10, "weakness"),
        (6, 10, "none"),
        (1, 1, "strength"),
    ],
)
def test_point_gate_is_rulvars_rule(k: int, n: int, band: str) -> None:
    assert POINT.band(estimate(k, n)) == band


@given(st.integers(1, 400), st.data())
def test_interval_band_is_the_interval_against_the_bars(n: int, data: st.DataObject) -> None:
    k = data.draw(st.integers(0, n))
    low, high = wilson_interval(k, n)
    band = INTERVAL.band(estimate(k, n))
    assert (band == "strength") == (low >= 0.8)
    assert (band == "weakness") == (high <= 0.6 and low < 0.8)
    assert not (low >= 0.8 and high <= 0.6)  # never both: the interval is not empty


@given(st.integers(1, 300), st.data())
def test_more_passes_never_lower_the_claim(n: int, data: st.DataObject) -> None:
    k = data.draw(st.integers(0, n - 1))
    order = {"weakness": 0, "none": 1, "strength": 2}
    assert order[INTERVAL.band(estimate(k, n))] <= order[INTERVAL.band(estimate(k + 1, n))]


@given(st.floats(0.01, 0.99), st.floats(0.0, 0.49))
def test_the_power_numbers_are_the_fewest_cases(bar: float, _: float) -> None:
    strength_n = min_cases_for_strength(bar)
    assert strength_n is not None
    assert wilson_interval(strength_n, strength_n)[0] >= bar - 1e-9
    if strength_n > 1:
        assert wilson_interval(strength_n - 1, strength_n - 1)[0] < bar
    weakness_n = min_cases_for_weakness(bar)
    assert weakness_n is not None
    assert wilson_interval(0, weakness_n)[1] <= bar + 1e-9
    if weakness_n > 1:
        assert wilson_interval(0, weakness_n - 1)[1] > bar


def test_power_warning_names_the_class_and_the_cases_it_needs() -> None:
    lines = INTERVAL.power_warnings({"extraction": 6, "planning": 40})
    assert lines == [
        "task class 'extraction' has 6 cases: the interval gate can never claim strength "
        "(a strength needs at least 16)"
    ]
    assert POINT.power_warnings({"extraction": 1}) == []
    assert INTERVAL.power_warnings({"tiny": 2}) == [
        "task class 'tiny' has 2 cases: the interval gate can never claim strength or weakness "
        "(a strength needs at least 16, a weakness needs at least 3)"
    ]


# -- repeats: the case is the unit of sampling ---------------------------------------------


@given(st.lists(st.integers(0, 5), min_size=1, max_size=60), st.integers(1, 5))
def test_repeats_never_narrow_the_interval_below_n_cases(passes: list[int], k: int) -> None:
    """K repeats of n cases give an interval over n cases, never over n*K runs."""
    passes = [min(p, k) for p in passes]
    n = len(passes)
    successes = sum(passes) / k
    clustered = wilson_interval(successes, n)
    naive = wilson_interval(sum(passes), n * k)  # the mistake: every run a new case
    assert CellEstimate(successes, n).interval == clustered
    if k > 1 and 0 < sum(passes) < n * k:
        width = clustered[1] - clustered[0]
        assert width > naive[1] - naive[0]


@given(st.lists(st.booleans(), min_size=1, max_size=50), st.integers(2, 6))
def test_a_stable_case_repeated_is_one_case(outcomes: list[bool], k: int) -> None:
    """Repeating deterministic cases K times changes nothing about the claim."""
    once = CellEstimate(sum(outcomes), len(outcomes))
    repeated = CellEstimate(sum(outcomes) * k / k, len(outcomes))
    assert repeated.interval == once.interval
    assert INTERVAL.band(repeated) == INTERVAL.band(once)


def test_wilson_is_the_textbook_interval() -> None:
    low, high = wilson_interval(14, 15)
    p, n, z = 14 / 15, 15, Z_95
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert (low, high) == pytest.approx((centre - half, centre + half))


# -- hysteresis ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prior", "k", "n", "retired"),
    [
        ("strength", 27, 30, False),  # 0.90, interval [0.74, 0.97]: uncertain, keep
        ("strength", 25, 30, False),  # upper bound 0.93 >= 0.9: keep
        ("strength", 24, 30, False),  # upper bound 0.905: keep
        ("strength", 23, 30, True),  # upper bound 0.88 < 0.9: contradicted
        ("strength", 5, 30, True),  # a weakness outright
        ("weakness", 16, 30, False),  # 0.53, lower bound 0.36 <= 0.5: keep
        ("weakness", 20, 30, False),  # 0.67, lower bound 0.49 <= 0.5: keep
        ("weakness", 21, 30, True),  # lower bound 0.52 > 0.5: contradicted
        ("weakness", 30, 30, True),  # a strength outright
    ],
)
def test_hysteresis_retires_only_what_the_evidence_contradicts(
    prior: str, k: int, n: int, retired: bool
) -> None:
    low, high = wilson_interval(k, n)
    expected = (high < 0.9 if prior == "strength" else low > 0.5) or INTERVAL.band(
        estimate(k, n)
    ) not in ("none", prior)
    assert expected == retired
    assert INTERVAL.retires(prior, estimate(k, n)) is retired  # type: ignore[arg-type]
    assert POINT.retires(prior, estimate(k, n)) is True  # point: v1 falsification
