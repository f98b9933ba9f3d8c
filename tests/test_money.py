"""Amounts as kb prints them: a cost that is not zero never reads as free."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kb.money import usd, usd_per_case


def test_amounts_print_with_four_decimals() -> None:
    assert usd(0) == "$0.0000"
    assert usd(0.0123) == "$0.0123"
    assert usd(12.5) == "$12.5000"
    assert usd(0.00005) == "$0.0001"


def test_a_cost_below_four_decimals_is_not_shown_as_zero() -> None:
    assert usd(9.75e-07) == "<$0.0001"  # one batched gpt-4o-mini answer


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False))
def test_only_zero_prints_as_zero(value: float) -> None:
    shown = usd(value)
    assert (shown == "$0.0000") == (value == 0)
    assert shown == "<$0.0001" or float(shown.removeprefix("$")) == round(value, 4)


@given(st.floats(min_value=1e-9, max_value=99.4, allow_nan=False))
def test_a_cost_per_case_reads_with_two_significant_digits(value: float) -> None:
    shown = usd_per_case(value)
    digits = shown.removeprefix("$").replace(".", "").lstrip("0")
    assert len(digits) == 2, shown  # $0.000021, $0.012, $1.2, $12
    assert abs(float(shown[1:]) - value) <= 0.05 * value


def test_costs_per_case_as_a_person_reads_them() -> None:
    assert [usd_per_case(v) for v in (0.0000214, 0.0123, 0.0999, 1.234, 0.0)] == [
        "$0.000021", "$0.012", "$0.10", "$1.2", "$0",
    ]  # fmt: skip
