"""Amounts of money as kb prints them."""

from __future__ import annotations

import math

SMALLEST_SHOWN = 0.00005
"""The least amount that rounds to ``$0.0001``: below it, four decimals would say ``$0.0000``."""


def usd(value: float) -> str:
    """``$0.0123``; a cost too small for four decimals but not zero is ``<$0.0001``.

    A night of a small model through a batch API can cost a few millionths of a
    dollar; ``$0.0000`` would read as free.
    """
    if 0 < value < SMALLEST_SHOWN:
        return "<$0.0001"
    return f"${value:.4f}"


def usd_per_case(value: float) -> str:
    """A cost per case with two significant digits: ``$0.00021``, ``$0.012``, ``$1.2``.

    A small model costs a few hundred-thousandths of a dollar a case; four
    fixed decimals would print most of a team's cells as ``<$0.0001`` and
    hide a tenfold difference between two of them.
    """
    if value <= 0 or not math.isfinite(value):
        return "$0" if value == 0 else f"${value}"
    decimals = max(0, 1 - math.floor(math.log10(value)))
    shown = round(value, decimals)
    if shown >= 10 ** (2 - decimals):  # 0.0999 rounds up a digit: 0.10, not 0.100
        decimals = max(0, decimals - 1)
    return f"${value:.{decimals}f}"


def usd_or_unbounded(value: float | None) -> str:
    """:func:`usd`, or ``unbounded`` for a cap or ceiling that is not set (``None``)."""
    return "unbounded" if value is None else usd(value)
