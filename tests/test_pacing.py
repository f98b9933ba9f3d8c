"""Pacing under rate limits (SPEC 13.5): the headers, the rule, and the real engine.

The rule is judged in virtual time against a provider whose buckets are known
(the loopback server's own :class:`~tests.fake_ratelimit.Limits` arithmetic):
no clock, no sleeps, the same answer on any machine. The engine is then run
through real litellm against the real loopback server.
"""

from __future__ import annotations

import heapq
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kb.engine.budget import SpendEnvelope
from kb.engine.pacing import (
    PROBE_EVERY_S,
    BucketPace,
    PaceNote,
    RateLimits,
    duration_s,
    estimated_tokens,
    read_rate_headers,
    retry_after_s,
)
from kb.engine.progress import RunTally
from kb.engine.requests import ModelSpec
from kb.engine.runs import PlannedRun, RunResult
from kb.engine.scheduler import Engine, EngineConfig
from tests.engine_helpers import plan
from tests.fake_ratelimit import Bucket, anthropic_headers, openai_headers, rate_limited_server

WALL = 1_764_633_600.0  # 2025-12-02T00:00:00Z, the wall clock the readings are taken at


# -- what the headers say ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1s", 1.0), ("6m0s", 360.0), ("20ms", 0.02), ("1h2m3.5s", 3723.5), ("0.5", 0.5)],
)
def test_openai_reset_durations_are_read(text: str, seconds: float) -> None:
    assert duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "soon", "1x", "s1", "1s garbage"])
def test_a_duration_that_is_not_one_is_no_reading(text: str) -> None:
    assert duration_s(text) is None


@given(st.integers(0, 5), st.integers(0, 59), st.integers(0, 59_999))
def test_durations_in_any_mix_of_units_add_up(hours: int, minutes: int, millis: int) -> None:
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    text += f"{millis / 1000:g}s" if millis >= 1000 or not text else f"{millis}ms"
    expected = hours * 3600 + minutes * 60 + millis / 1000
    assert duration_s(text) == pytest.approx(expected)


def test_openai_headers_as_litellm_hands_them_over() -> None:
    reading = read_rate_headers(
        {
            "llm_provider-x-ratelimit-limit-requests": "600",
            "x-ratelimit-remaining-requests": "599",
            "x-ratelimit-reset-requests": "100ms",
            "X-RateLimit-Limit-Tokens": "200000",
            "x-ratelimit-remaining-tokens": "199000",
            "x-ratelimit-reset-tokens": "300ms",
        },
        WALL,
    )
    assert reading is not None and reading.requests is not None and reading.tokens is not None
    assert (reading.requests.limit, reading.requests.remaining) == (600, 599)
    assert reading.requests.rate_per_s == pytest.approx(10.0)  # 1 request back in 100 ms
    assert reading.tokens.rate_per_s == pytest.approx(1000 / 0.3)
    assert reading.retry_after_s is None


def test_a_reset_slows_the_refill_never_speeds_it() -> None:
    def rate(remaining: str, reset: str) -> float:
        headers = {
            "x-ratelimit-limit-requests": "600",
            "x-ratelimit-remaining-requests": remaining,
            "x-ratelimit-reset-requests": reset,
        }
        reading = read_rate_headers(headers, WALL)
        assert reading is not None and reading.requests is not None
        return reading.requests.rate_per_s

    assert rate("0", "59.9s") == pytest.approx(10.0)  # remaining rounded down: not faster
    assert rate("0", "24h0m0s") == pytest.approx(600 / 86_400)  # a daily limit: slower


def test_anthropic_headers_reset_at_an_instant() -> None:
    reading = read_rate_headers(
        {
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": "2025-12-02T00:01:00Z",
            "anthropic-ratelimit-input-tokens-limit": "40000",
            "anthropic-ratelimit-input-tokens-remaining": "39000",
            "anthropic-ratelimit-input-tokens-reset": "2025-12-02T00:00:01.5Z",
            "retry-after": "3",
        },
        WALL,
    )
    assert reading is not None and reading.requests is not None and reading.tokens is not None
    assert reading.requests.reset_s == pytest.approx(60.0)
    assert reading.tokens.reset_s == pytest.approx(1.5)
    assert reading.retry_after_s == 3.0


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "2"}, 2.0),
        ({"retry-after-ms": "250", "retry-after": "1"}, 0.25),
        ({"Retry-After": "Tue, 02 Dec 2025 00:00:30 GMT"}, 30.0),
        ({"retry-after": "-5"}, 0.0),
        ({"retry-after": "later"}, None),
        ({"retry-after": "nan"}, None),
    ],
)
def test_retry_after_in_each_form(headers: dict[str, str], seconds: float | None) -> None:
    assert retry_after_s(headers, WALL) == seconds


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"x-ratelimit-limit-requests": "0", "x-ratelimit-remaining-requests": "0"},
        {"x-ratelimit-limit-requests": "many", "x-ratelimit-remaining-requests": "1"},
        {"x-ratelimit-limit-requests": "10"},  # no remaining: no bucket to mirror
        {"x-ratelimit-limit-requests": "inf", "x-ratelimit-remaining-requests": "1"},
        {"content-type": "application/json"},
    ],
)
def test_headers_that_say_nothing_usable_are_no_reading(headers: dict[str, str]) -> None:
    assert read_rate_headers(headers, WALL) is None


def test_a_prompts_tokens_are_estimated_as_openai_counts_them() -> None:
    messages = ({"role": "system", "content": "abcd"}, {"role": "user", "content": "abcdefg"})
    assert estimated_tokens(messages, 100) == 3 + 100
    assert estimated_tokens(messages, None) == 3
    assert estimated_tokens(messages, True) == 3  # a boolean is not a count


# -- the rule, in virtual time against a known provider ---------------------------------------


@dataclass
class Outcome:
    """What a simulated night did."""

    calls: int
    limited: int
    wall_s: float
    ideal_s: float


def simulate(
    calls: int,
    rpm: float,
    tpm: float,
    *,
    latency_s: float,
    ceiling: int,
    full: bool = True,
    cost: int = 100,
    declared: int | None = None,
    anthropic: bool = False,
) -> Outcome:
    """``calls`` calls through one paced bucket to a provider with known buckets.

    Each call costs the provider ``cost`` tokens; kb estimates ``declared``
    (``cost`` when ``None``). A refused call goes back to the queue (the scheduler
    retries it); the provider's replies carry its headers as the loopback server's.
    """
    pace = BucketPace(ceiling)
    share = 1.0 if full else 0.0
    requests, tokens = Bucket(rpm, rpm * share, 0.0), Bucket(tpm, tpm * share, 0.0)
    estimate = float(cost if declared is None else declared)
    waiting, now, limited, done = calls, 0.0, 0, 0
    replies: list[tuple[float, int, bool, dict[str, str]]] = []
    while done < calls:
        while waiting:
            wait = pace.wait_s(estimate, now)
            if wait is None or wait > 0:
                break
            seq = pace.send(estimate, now)
            waiting -= 1
            need = max(requests.wait_s(1, now), tokens.wait_s(cost, now))
            admitted = need <= 0
            if admitted:
                requests.level -= 1
                tokens.level -= cost
            state = {
                "requests": (rpm, requests.now(now), requests.reset_s(now)),
                "tokens": (tpm, tokens.now(now), tokens.reset_s(now)),
            }
            headers = anthropic_headers(state, WALL + now) if anthropic else openai_headers(state)
            if not admitted:
                headers["retry-after-ms"] = str(max(1, math.ceil(need * 1000)))
            heapq.heappush(replies, (now + latency_s, seq, not admitted, headers))
        wait = pace.wait_s(estimate, now) if waiting else None
        next_reply = replies[0][0] if replies else math.inf
        if wait is not None and 0 < wait and now + wait < next_reply:
            now += wait
            continue
        now, seq, refused, headers = heapq.heappop(replies)
        pace.answered(seq, read_rate_headers(headers, WALL + now), refused, now)
        if refused:
            limited += 1
            waiting += 1  # retried
        else:
            done += 1
    ideal = max(calls / rpm, calls * cost / tpm) * 60.0
    return Outcome(calls + limited, limited, now, ideal)


def oracle_wall_s(calls: int, rpm: float, *, latency_s: float, ceiling: int, full: bool) -> float:
    """The best any client can do: it sees the provider's bucket exactly, never meets a
    429, and sends whenever a slot and a request are free."""
    requests = Bucket(rpm, rpm if full else 0.0, 0.0)
    ends: list[float] = []
    now, sent = 0.0, 0
    while sent < calls:
        if len(ends) >= ceiling:
            now = max(now, heapq.heappop(ends))
            continue
        now += requests.wait_s(1, now)
        requests.level -= 1
        heapq.heappush(ends, now + latency_s)
        sent += 1
    return max(ends)


def test_the_specs_sweep_runs_at_the_limit_without_a_429() -> None:
    # SPEC 13.5's bench: 2,000 calls under 600 RPM / 200k TPM; the bucket starts full
    found = simulate(2000, 600, 200_000, latency_s=0.5, ceiling=16)
    assert found.limited == 0
    assert found.wall_s <= 1.1 * found.ideal_s  # the ideal is calls / R: 200 s
    # the first minute's burst is spent at once, then one call per 0.1 s
    assert found.wall_s == pytest.approx((2000 - 600) / 10 + 0.5, abs=1.0)


def test_when_tokens_bind_the_pace_follows_the_tokens() -> None:
    found = simulate(400, 600, 20_000, latency_s=0.2, ceiling=16, full=False, cost=500)
    assert found.limited <= 16 + 2  # the first blind wave, then none to speak of
    assert found.wall_s <= 1.1 * found.ideal_s


def test_a_provider_counting_far_more_tokens_than_kb_estimates_is_learned() -> None:
    # litellm sends a default max_tokens kb never asked for: the provider counts 50x more
    found = simulate(
        200, 6000, 100_000, latency_s=0.05, ceiling=8, full=False, cost=2000, declared=40
    )
    assert found.limited <= 8 + 4
    assert found.wall_s <= 1.1 * found.ideal_s


def test_anthropic_readings_pace_as_openai_ones() -> None:
    found = simulate(300, 600, 10**9, latency_s=0.3, ceiling=16, full=False, anthropic=True)
    assert found.limited <= 16 + 2
    assert found.wall_s <= 1.1 * found.ideal_s


@settings(max_examples=60, deadline=None)
@given(
    calls=st.integers(50, 400),
    rpm=st.sampled_from([60, 300, 600, 3000]),
    latency_s=st.floats(0.01, 2.0),
    ceiling=st.integers(1, 32),
    full=st.booleans(),
)
def test_any_limit_latency_and_ceiling_stay_near_the_ideal_with_few_429s(
    calls: int, rpm: int, latency_s: float, ceiling: int, full: bool
) -> None:
    found = simulate(calls, rpm, 10**9, latency_s=latency_s, ceiling=ceiling, full=full)
    # the blind first wave (before any reading) may be refused; nothing after it
    assert found.limited <= (0 if full else ceiling)
    best = oracle_wall_s(calls, rpm, latency_s=latency_s, ceiling=ceiling, full=full)
    if full:
        # kb reads the provider's bucket a reply late and dates each reading a quarter of
        # its round trip after the send (erring toward waiting): within two latencies and
        # one call's refill of the oracle
        assert found.wall_s <= best * 1.02 + 2 * latency_s + 60.0 / rpm + 0.01
    else:
        # the blind wave's 429s halve the window (AIMD) and it grows back one call a window
        assert found.wall_s <= best * 1.02 + latency_s * (2 + ceiling / 2) + 60.0 / rpm * 2


def test_a_429_holds_the_whole_bucket_for_its_retry_after() -> None:
    pace = BucketPace(8)
    first, second = pace.send(1, 0.0), pace.send(1, 0.0)
    limited = read_rate_headers({"retry-after": "2"}, WALL)
    pace.answered(first, limited, True, 0.1)
    assert pace.wait_s(1, 0.1) == pytest.approx(2.0)  # no other call goes either
    assert pace.wait_s(1, 2.1) == 0
    assert second in pace.in_flight


def test_the_window_halves_once_per_burst_and_grows_back_one_call_a_window() -> None:
    pace = BucketPace(16)
    burst = [pace.send(1, 0.0) for _ in range(8)]
    for seq in burst:  # eight 429s of one burst: one signal
        pace.answered(seq, None, True, 0.1)
    assert pace.window == 8.0
    later = pace.send(1, 1.2)
    pace.answered(later, None, True, 1.3)  # a call sent after the halving: a new signal
    assert pace.window == 4.0
    for _ in range(4):
        pace.answered(pace.send(1, 2.0), None, False, 2.1)
    assert 4.9 < pace.window < 5.0  # +1/window per success: one call per window of them
    assert pace.hold_until == pytest.approx(2.3)  # no retry-after: a second's hold


def test_a_provider_that_says_nothing_is_never_held() -> None:
    pace = BucketPace(4)
    for _ in range(100):
        seqs = [pace.send(1, 0.0) for _ in range(4)]
        assert pace.wait_s(1, 0.0) is None  # the ceiling, as without pacing
        for seq in seqs:
            pace.answered(seq, None, False, 0.0)
        assert pace.wait_s(1, 0.0) == 0


def test_the_progress_line_shows_the_rate_and_the_429s_once_heard() -> None:
    tally = RunTally({"target": 10})
    tally.add(RunResult("t", "target", "m", "ok"))
    assert "calls/min" not in tally.describe()
    tally.add_pace(PaceNote(588.4, 3))
    assert tally.describe().endswith("588 calls/min · 3 × 429")
    limits = RateLimits(8)
    for at in (0.0, 10.0, 20.0, 30.0):
        limits.sent(at)
    assert limits.per_minute(30.0) == pytest.approx(8.0)  # 4 calls in 30 s
    limits.sent(95.0)
    assert limits.per_minute(95.0) == pytest.approx(6.0)  # the last minute's one, over 10 s
    burst = RateLimits(8)
    for _ in range(16):
        burst.sent(100.0)
    assert burst.per_minute(100.5) == pytest.approx(96.0)  # a first burst is not 1,920/min


# -- the engine, through real litellm, against the loopback rate-limited server ---------------


@contextmanager
def keyed() -> Iterator[None]:
    before = os.environ.get("KB_TEST_KEY")
    os.environ["KB_TEST_KEY"] = "sk-test-ratelimit-key"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("KB_TEST_KEY", None)
        else:
            os.environ["KB_TEST_KEY"] = before


def _model(provider: str, base: str) -> ModelSpec:
    params = {
        "api_base": base if provider == "anthropic" else f"{base}/v1",
        "api_key_env": "KB_TEST_KEY",
        "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
    }
    name = "anthropic:claude-test" if provider == "anthropic" else "openai:gpt-4o-mini"
    return ModelSpec(name, params=params)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_the_engine_paces_itself_from_the_providers_headers(provider: str) -> None:
    config = EngineConfig(concurrency=8, per_provider=8, timeout_s=30.0)
    prompts = [f"p{i}" for i in range(40)]
    with keyed(), rate_limited_server(1200, 10**9, full=False) as (base, limits):
        engine = Engine.build(config)
        results = engine.run(plan(_model(provider, base), prompts), SpendEnvelope(cap=None))
        served = limits.stats()
    assert [r.output for r in results] == [f"echo: {p}" for p in prompts]  # in plan order
    assert {r.status for r in results} == {"ok"}
    (bucket,) = engine.rate_limits.buckets.values()
    assert bucket.requests.limit == 1200  # litellm handed the headers over, and kb read them
    # the buckets start empty: the first blind wave (8) meets 429s, then the pace holds
    assert engine.rate_limits.limited == served["limited"] <= 8 + 2


def test_pacing_changes_when_calls_go_never_what_comes_back() -> None:
    config = EngineConfig(concurrency=8, per_provider=8, timeout_s=30.0)
    prompts = [f"p{i % 7}" for i in range(30)]  # repeats: occurrences must match too
    found = []
    limited = []
    with keyed(), rate_limited_server(10**6, 10**9, full=False) as (base, limits):
        for rpm in (10**6, 1200):  # no limit to speak of, then one that binds
            limits.rpm, limits.full = rpm, rpm > 1200
            limits.reset()
            engine = Engine.build(config)
            results = engine.run(plan(_model("openai", base), prompts), SpendEnvelope(cap=None))
            found.append(
                [(r.label, r.status, r.output, r.cost_usd, r.request.key) for r in results]
            )
            limited.append(engine.rate_limits.limited)
    assert limited[0] == 0 and limited[1] > 0  # the second night was paced
    assert found[0] == found[1]


def test_a_429_spends_no_attempt_so_a_storm_never_fails_the_calls() -> None:
    # 30 calls a minute, empty at the start, no retries at all: every call meets a 429
    # first, waits out the bucket's hold and is answered (SPEC 14.4)
    config = EngineConfig(
        concurrency=8, per_provider=8, timeout_s=30.0, max_retries=0, backoff_base_s=0.01
    )
    with keyed(), rate_limited_server(30, 10**9, full=False) as (base, limits):
        engine = Engine.build(config)
        results = engine.run(plan(_model("openai", base), ["a", "b"]), SpendEnvelope(cap=None))
    assert [r.status for r in results] == ["ok", "ok"]
    assert engine.rate_limits.limited >= 2 and limits.limited == engine.rate_limits.limited
    # every call the provider saw is counted in the runs' attempts, the 429s included
    assert sum(r.attempts for r in results) == 2 + engine.rate_limits.limited


def test_other_errors_still_spend_their_retries() -> None:
    from kb.engine.transports.mock import MockTransport
    from kb.errors import ProviderFailure

    def provider(run: PlannedRun, occurrence: int) -> object:
        raise ProviderFailure("503 busy", retryable=True, status_code=503)

    engine = Engine(EngineConfig(concurrency=1, max_retries=2, backoff_base_s=0.0))
    engine.transport = MockTransport(provider)
    (result,) = engine.run(plan(ModelSpec("openai:m"), ["a"]), SpendEnvelope.from_usd(None))
    assert (result.status, result.attempts) == ("error", 3)


def test_a_call_that_was_never_sent_gives_its_share_back() -> None:
    pace = BucketPace(4)
    first = pace.send(10, 0.0)
    reading = read_rate_headers(
        {
            "x-ratelimit-limit-requests": "60",
            "x-ratelimit-remaining-requests": "5",
            "x-ratelimit-limit-tokens": "1000",
            "x-ratelimit-remaining-tokens": "500",
        },
        WALL,
    )
    pace.answered(first, reading, False, 0.0)
    window = pace.window
    second = pace.send(10, 0.0)
    assert (pace.requests.level, pace.tokens.level) == (4, 490)
    pace.unsent(second)  # the phase stopped before it went out
    assert (pace.requests.level, pace.tokens.level) == (5, 500)
    assert pace.in_flight == {} and pace.window == window  # no success counted either


# -- a hostile provider's headers (found by an attack on pacing) ------------------------------


def test_a_retry_after_that_is_not_finite_is_no_retry_after() -> None:
    assert retry_after_s({"retry-after-ms": "inf"}, WALL) is None
    assert retry_after_s({"retry-after-ms": "1e999", "retry-after": "2"}, WALL) == 2.0


def test_a_days_quota_refusal_does_not_teach_a_calls_cost() -> None:
    pace = BucketPace(8)
    healthy = {
        "x-ratelimit-limit-requests": "600",
        "x-ratelimit-remaining-requests": "590",
        "x-ratelimit-limit-tokens": "200000",
        "x-ratelimit-remaining-tokens": "199000",
    }
    refused = read_rate_headers({**healthy, "retry-after": "7200"}, WALL)
    pace.answered(pace.send(17, 0.0), refused, True, 0.3)
    assert pace.tokens_per_call is None  # not 199,000 + 3,333 x 7,200 tokens a call
    # held, at most until a probe 120 s after the last call sent
    assert pace.wait_s(17, 0.3) == pytest.approx(119.7)
    assert pace.wait_s(17, 120.4) == 0


def test_headers_that_claim_an_empty_bucket_for_hours_slow_a_call_never_stop_it() -> None:
    pace = BucketPace(4)
    forever = read_rate_headers(
        {
            "x-ratelimit-limit-requests": "1",
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-requests": "277777h",
        },
        WALL,
    )
    pace.answered(pace.send(1, 0.0), forever, False, 0.1)
    # one call (a probe) 120 s after the last one sent, however long the headers say
    assert pace.wait_s(1, 0.1) == pytest.approx(119.9)
    assert pace.wait_s(1, 120.0) == 0


# -- a reading that would halt a bucket slows a night, never stops it (SPEC 14.1 item 4) ------

Answer = tuple[bool, dict[str, str]]
"""(answered — else 429 —, the reply's headers)."""

HOSTILE = {
    "x-ratelimit-limit-requests": "600",
    "x-ratelimit-remaining-requests": "0",
    "x-ratelimit-reset-requests": "24h",
}
""""0 remaining, resets in a day", on a reply that was answered."""
ROOMY = {
    "x-ratelimit-limit-requests": "600",
    "x-ratelimit-remaining-requests": "500",
    "x-ratelimit-reset-requests": "10s",
}


@dataclass
class Paced:
    """When each call was sent, how many were answered, and the quota notes."""

    sends: list[float]
    answered: int
    quota: list[float]

    @property
    def longest_gap_s(self) -> float:
        return max((b - a for a, b in zip(self.sends, self.sends[1:], strict=False)), default=0)


def paced_night(
    calls: int,
    provider: Callable[[float, int], Answer],
    *,
    latency_s: float = 0.3,
    ceiling: int = 8,
) -> Paced:
    """``calls`` calls through one bucket (a refused call is retried), in virtual time."""
    pace = BucketPace(ceiling)
    waiting, now, answered = calls, 0.0, 0
    sends: list[float] = []
    quota: list[float] = []
    replies: list[tuple[float, int, bool, dict[str, str]]] = []
    while answered < calls:
        while waiting:
            wait = pace.wait_s(1.0, now)
            if wait is None or wait > 0:
                break
            seq = pace.send(1.0, now)
            sends.append(now)
            waiting -= 1
            ok, headers = provider(now, seq)
            heapq.heappush(replies, (now + latency_s, seq, not ok, headers))
        wait = pace.wait_s(1.0, now) if waiting else None
        next_reply = replies[0][0] if replies else math.inf
        if wait is not None and 0 < wait and now + wait < next_reply:
            now += wait
            continue
        assert replies, "the bucket stopped for good"
        now, seq, refused, headers = heapq.heappop(replies)
        told = pace.answered(seq, read_rate_headers(headers, WALL + now), refused, now)
        if told is not None:
            quota.append(told)
        if refused:
            waiting += 1
        else:
            answered += 1
    return Paced(sends, answered, quota)


def test_every_reply_saying_0_remaining_for_a_day_costs_one_probe_wait_at_most() -> None:
    found = paced_night(300, lambda now, seq: (True, HOSTILE))
    # v4 sent nothing for 86,400 s; now one probe after 120 s proves the headers wrong
    assert found.longest_gap_s <= PROBE_EVERY_S + 1e-9
    assert found.sends[-1] <= PROBE_EVERY_S + 300 * 0.3
    assert found.quota == []  # a success contradicted them: no quota to tell of


def test_one_hostile_reply_in_four_is_lifted_by_the_readings_with_room() -> None:
    found = paced_night(400, lambda now, seq: (True, HOSTILE if seq % 4 == 0 else ROOMY))
    assert found.longest_gap_s <= PROBE_EVERY_S + 1e-9
    assert found.sends[-1] <= PROBE_EVERY_S + 400 * 0.3


def test_a_spent_daily_quota_is_told_once_and_probed_every_120_s_until_it_returns() -> None:
    back_at = 3000.0

    def provider(now: float, seq: int) -> Answer:
        if now < back_at:  # every call refused: a day's quota, back in 9 h as far as it says
            return False, {**HOSTILE, "retry-after": str(9 * 3600)}
        return True, ROOMY

    found = paced_night(50, provider)
    assert len(found.quota) == 1 and found.quota[0] >= 9 * 3600 - 1
    # a probe every <= 120 s while it is spent, then the night goes on
    assert found.longest_gap_s <= PROBE_EVERY_S + 1e-9
    probes = [t for t in found.sends if t < back_at]
    assert len(probes) <= 8 + back_at / PROBE_EVERY_S + 1  # the first wave, then one a probe
    assert found.sends[-1] <= back_at + PROBE_EVERY_S + 50 * 0.3


@settings(max_examples=40, deadline=None)
@given(hostile=st.lists(st.booleans(), min_size=1, max_size=20), ceiling=st.integers(1, 16))
def test_no_pattern_of_hostile_readings_holds_a_bucket_longer_than_a_probe(
    hostile: list[bool], ceiling: int
) -> None:
    found = paced_night(
        120,
        lambda now, seq: (True, HOSTILE if hostile[seq % len(hostile)] else ROOMY),
        ceiling=ceiling,
    )
    assert found.longest_gap_s <= PROBE_EVERY_S + 1e-9


# -- the same, through the engine (the probe interval shortened: a test may not wait 2 min) --


def test_a_spent_quota_is_said_once_and_the_night_goes_on_when_it_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kb.engine import pacing
    from kb.engine.transports.base import Reply
    from kb.engine.transports.mock import MockTransport
    from kb.errors import ProviderFailure

    monkeypatch.setattr(pacing, "PROBE_EVERY_S", 0.05)
    refusals = [0]

    def provider(run: PlannedRun, occurrence: int) -> Reply:
        if refusals[0] < 3:  # the day's quota is spent: three refusals, then it is back
            refusals[0] += 1
            headers = {**HOSTILE, "retry-after": str(9 * 3600)}
            raise ProviderFailure("429 quota", retryable=True, status_code=429, headers=headers)
        return Reply("ok", headers=ROOMY)

    engine = Engine(EngineConfig(concurrency=1, max_retries=10, backoff_base_s=0.0))
    engine.transport = MockTransport(provider)
    said: list[str] = []
    engine.on_note = said.append
    spec = ModelSpec("openai:m", params={"api_base": "http://q.example/v1"})
    results = engine.run(plan(spec, ["a", "b", "c"]), SpendEnvelope.from_usd(None))
    assert [r.status for r in results] == ["ok", "ok", "ok"]
    (line,) = said  # once, however many refusals
    assert line.startswith("openai:m at http://q.example/v1: the provider says its quota is ")
    assert "spent until 20" in line and "--deadline stops the night" in line
    assert engine.notes == said


def test_a_deadline_stops_the_phase_and_says_what_it_cut_short() -> None:
    import time

    from kb.engine.transports.base import Reply
    from kb.engine.transports.mock import MockTransport
    from kb.errors import DeadlinePassed

    answered: list[str] = []

    def provider(run: PlannedRun, occurrence: int) -> Reply:
        answered.append(run.label)
        return Reply("ok")

    engine = Engine(EngineConfig(concurrency=1, deadline=time.time() - 1))  # passed already
    engine.transport = MockTransport(provider)
    spec = ModelSpec("openai:m")
    with pytest.raises(DeadlinePassed) as stopped:
        engine.run(plan(spec, ["a", "b"]), SpendEnvelope.from_usd(None))
    assert answered == []  # no call starts after the deadline
    assert "passed: the job stopped, nothing committed" in str(stopped.value)
