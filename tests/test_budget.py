"""Micro-USD accounting: caps floor, debits ceil, and the envelope never overspends."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kb.engine.budget import SpendEnvelope, cap_micros, debit_micros
from kb.errors import ConfigError

amounts = st.decimals(min_value=0, max_value=1000, places=9).map(float)


def test_the_classic_float_sum_fits() -> None:
    assert 0.1 + 0.2 > 0.3  # the float problem this module exists for
    envelope = SpendEnvelope.from_usd(0.3)
    assert envelope.authorize("a", 0.1) is not None
    assert envelope.authorize("b", 0.2) is not None
    assert envelope.committed == envelope.cap == 300_000
    assert envelope.authorize("c", 0.000001) is None


def test_rounding_directions_and_the_minimum_debit() -> None:
    assert cap_micros(0.0000019) == 1  # cap rounds down
    assert debit_micros(0.0000011) == 2  # debit rounds up
    assert debit_micros(0.0) == 1  # at least one micro-USD
    assert debit_micros(1e-12) == 1


@pytest.mark.parametrize("bad", [0.0, 0.0000009, -1.0, float("nan"), float("inf"), True, "x"])
def test_a_cap_below_one_micro_usd_or_not_a_number_is_refused(bad: object) -> None:
    with pytest.raises(ConfigError):
        cap_micros(bad)  # type: ignore[arg-type]


@given(amounts.filter(lambda x: x >= 1e-6))
def test_cap_is_the_floor_of_the_exact_decimal(value: float) -> None:
    micros = cap_micros(value)
    assert micros <= Decimal(repr(value)) * 1_000_000 < micros + 1


@given(amounts)
def test_debit_is_the_ceiling_and_at_least_one(value: float) -> None:
    micros = debit_micros(value)
    assert micros >= 1
    exact = Decimal(repr(value)) * 1_000_000
    assert micros >= exact and (micros - 1 < exact or micros == 1)


@given(st.floats(min_value=1e-6, max_value=100), st.lists(amounts, max_size=30))
def test_the_envelope_never_commits_past_its_cap(cap: float, ceilings: list[float]) -> None:
    envelope = SpendEnvelope.from_usd(cap)
    granted = [r for r in (envelope.authorize(f"r{i}", c) for i, c in enumerate(ceilings)) if r]
    assert envelope.cap is not None and envelope.committed <= envelope.cap
    assert len(granted) + len(envelope.refusals) == len(ceilings)
    # Settling each run at or below its ceiling keeps every micro-USD accounted for.
    for reservation in granted:
        envelope.settle(reservation, 0.0)
    assert envelope.reserved == 0 and envelope.debited == 0


@given(st.lists(st.tuples(amounts, amounts), max_size=20))
def test_settling_debits_exactly_the_rounded_up_costs(runs: list[tuple[float, float]]) -> None:
    envelope = SpendEnvelope(cap=None)
    expected = 0
    for i, (ceiling, actual) in enumerate(runs):
        reservation = envelope.authorize(f"r{i}", ceiling)
        assert reservation is not None
        envelope.settle(reservation, actual)
        expected += debit_micros(actual) if actual > 0 else 0
    assert envelope.reserved == 0
    assert envelope.debited == expected


def test_refusals_are_in_plan_order() -> None:
    envelope = SpendEnvelope.from_usd(0.25)
    results = [envelope.authorize(f"r{i}", 0.1) for i in range(4)]
    assert [r is not None for r in results] == [True, True, False, False]
    assert envelope.refusals == ["r2", "r3"]
