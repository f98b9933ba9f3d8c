"""Instants a person types (SPEC 12.4): read as the store reader reads ISO forms."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kb.errors import InstantError
from kb.store.ttl import format_instant, parse_flag_instant, parse_instant

BASE = parse_instant("2026-11-30T03:00:00.000Z")


@pytest.mark.parametrize(
    "text",
    [
        "2026-11-30T03:00:00Z",
        "2026-11-30t03:00:00z",
        "2026-11-30 03:00:00Z",
        "2026-11-30T05:00:00+0200",
        "2026-11-30T05:00:00+02:00",
        "2026-11-29T22:00:00-0500",
        " 2026-11-30T03:00:00.000Z ",
    ],
)
def test_the_forms_the_store_reader_reads(text: str) -> None:
    assert parse_flag_instant(text) == BASE


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2026-11-30T03:00:00", "has no UTC offset"),
        ("2026-11-30 03:00", "has no UTC offset"),
        ("2026-02-30", "is not a calendar date"),
        ("2026-02-30T00:00:00Z", "is not a calendar date"),
        ("yesterday", "is not an ISO date"),
        ("2026-11-30T03:00:00+2400", "invalid UTC offset"),
    ],
)
def test_ambiguous_or_impossible_instants_are_refused(text: str, message: str) -> None:
    with pytest.raises(InstantError, match=message):
        parse_flag_instant(text)


@given(st.integers(min_value=0, max_value=253_402_300_799_000))
def test_kb_s_own_form_reads_back_exactly(ms: int) -> None:
    assert parse_flag_instant(format_instant(ms)) == ms
    assert parse_flag_instant(format_instant(ms).lower()) == ms
