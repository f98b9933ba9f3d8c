"""Amounts of money as kb prints them."""

from __future__ import annotations

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


def usd_or_unbounded(value: float | None) -> str:
    """:func:`usd`, or ``unbounded`` for a cap or ceiling that is not set (``None``)."""
    return "unbounded" if value is None else usd(value)
