"""Lifetimes: JavaScript-identical expiry rendering, the expiry boundary, the queue."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kb.store.ttl import (
    CLAIM_TTL_DAYS,
    MS_PER_DAY,
    InstantError,
    claim_expired,
    claim_expiry,
    format_instant,
    parse_instant,
    remeasurement_queue,
)
from tests.factories import eval_claim, human_claim

VECTORS = json.loads((Path(__file__).parent / "data" / "js_vectors.json").read_text())
YEAR_0001 = -62_135_596_800_000
YEAR_9999_END = 253_402_300_799_999


def test_spec_example() -> None:
    assert claim_expiry("eval-measured", "strength", "2026-07-01") == "2026-09-29T00:00:00.000Z"


def test_ttl_table() -> None:
    assert CLAIM_TTL_DAYS == {
        ("eval-measured", "strength"): 90,
        ("eval-measured", "weakness"): 30,
        ("human-editorial", "strength"): 120,
        ("human-editorial", "weakness"): 45,
    }


@pytest.mark.parametrize(
    "vector", VECTORS["expiries"], ids=lambda v: f"{v['observedAt']}-{v['class']}-{v['polarity']}"
)
def test_expiry_matches_javascript_to_iso_string(vector: dict[str, str]) -> None:
    got = claim_expiry(vector["class"], vector["polarity"], vector["observedAt"])
    assert got == vector["expiresAt"]


@given(st.integers(YEAR_0001, YEAR_9999_END))
def test_format_then_parse_is_identity(ms: int) -> None:
    text = format_instant(ms)
    assert len(text) == 24 and text.endswith("Z")
    assert parse_instant(text) == ms


@given(
    st.integers(0, YEAR_9999_END - 200 * MS_PER_DAY),
    st.sampled_from(sorted(CLAIM_TTL_DAYS)),
)
def test_expiry_is_observed_plus_exact_days(ms: int, kind: tuple[str, str]) -> None:
    expiry = parse_instant(claim_expiry(kind[0], kind[1], format_instant(ms)))
    assert expiry - ms == CLAIM_TTL_DAYS[kind] * MS_PER_DAY


def test_expired_exactly_at_expires_at() -> None:
    claim = eval_claim(observedAt="2026-07-01", polarity="weakness")
    expiry = parse_instant(claim.expires_at)
    assert claim.expires_at == "2026-07-31T00:00:00.000Z"
    assert not claim_expired(claim, expiry - 1)
    assert claim_expired(claim, expiry)


@pytest.mark.parametrize(
    "text",
    [
        "2026-02-30",
        "2026-13-01",
        "2026-07-01T00:00:00",
        "2026-7-1",
        "yesterday",
        "2026-07-01T25:00Z",
        "2026-07-01T00:00:00+25:00",
        "",
    ],
)
def test_bad_instants_are_refused(text: str) -> None:
    with pytest.raises(InstantError):
        parse_instant(text)


def test_local_time_is_refused_with_a_reason() -> None:
    with pytest.raises(InstantError, match="local time"):
        parse_instant("2026-07-01T12:00:00")


def test_remeasurement_queue_is_active_expired_eval_claims() -> None:
    at = parse_instant("2026-12-01")
    due = eval_claim("due", observedAt="2026-07-01")
    fresh = eval_claim("fresh", observedAt="2026-11-30")
    stale = eval_claim("stale", observedAt="2026-07-01", status="stale")
    note = human_claim("note", observedAt="2026-01-01")
    assert remeasurement_queue([due, fresh, stale, note], at) == [due]


V8_INSTANTS = json.loads((Path(__file__).parent / "data" / "v8_instant_vectors.json").read_text())[
    "instants"
]


@pytest.mark.parametrize(
    "vector",
    [v for v in V8_INSTANTS if re.fullmatch(r"\d{4}-\d{2}-\d{2}T[\d:]+\.\d+Z", v["text"])],
    ids=lambda v: v["text"],
)
def test_fractions_of_any_length_read_as_v8_reads_them(vector: dict[str, Any]) -> None:
    """``…00.0159999999Z`` is 159 ms in V8; kb used to read 15 ms."""
    assert parse_instant(vector["text"]) == vector["ms"]
