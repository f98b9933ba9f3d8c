"""Pacing calls to what a provider's rate limits allow (SPEC 13.5).

A nightly sweep is bound by rate limits, not by latency: sent as fast as the
concurrency allows, it storms the provider with requests answered 429, each
one a wasted round trip and a retry later; held to a fixed low concurrency,
it leaves quota unused. kb paces each **rate-limit bucket** — the provider's
own unit: one endpoint, one key (named by its ``api_key_env``, never by its
value) and one model — from what the provider says:

* **Its headers.** OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``
  and Anthropic's ``anthropic-ratelimit-{requests,tokens,input-tokens,
  output-tokens}-{limit,remaining,reset}`` describe a token bucket the
  provider refills continuously. kb mirrors each one: the reading of the
  latest-sent answered request sets the level, the requests sent after it
  and not yet answered are taken off (the provider had not counted them
  yet), the level refills at the provider's rate (``limit`` per minute, or
  what ``remaining`` and ``reset`` imply), and a call waits until the
  mirror holds a request (and its estimated tokens: the prompt's characters
  ÷ 4 plus ``max_tokens``, as OpenAI counts them).
* **A 429.** Its ``retry-after`` (seconds, ``retry-after-ms`` or an HTTP
  date) holds the whole bucket, not just the call that met it; and the
  bucket's concurrency window halves (multiplicative decrease, once per
  window of calls: the 429s of one burst are one signal), growing again by
  one call per window of successes (additive increase) up to the ceiling.

The ceiling is the engine's: ``concurrency`` across all providers and
``per_provider`` per provider stay as they are; pacing only lowers what a
bucket sends below them, never raises it. Pacing changes when a call is
sent, never what is sent: the plan, the envelope and every result are those
of an unpaced run (SPEC 13.5). A provider that sends no rate headers and no
429 is never held. This module reads no clock: the engine passes ``now``
(monotonic seconds, and the wall clock for Anthropic's RFC 3339 resets).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
RETRY_AFTER_MAX_S = 120.0
"""A longer ``retry-after`` holds the bucket this long at most (a refusal, not pacing)."""
PROBE_EVERY_S = RETRY_AFTER_MAX_S
"""A bucket its readings say is empty for longer still sends one call this often (a probe)."""
LIMITED_KEPT = 1000
"""The most 429s a bucket remembers between two token readings (the newest)."""
SEND_NOW_S = 1e-3
"""A wait shorter than this is a shared clock's rounding (times pass through the wall
clock between processes), not a wait: the call goes now."""
QUOTA_S = 3600.0
"""A bucket empty for longer than this is a spent quota (a day's): said once."""


@dataclass(frozen=True)
class BucketReading:
    """One of a provider's token buckets as one reply described it."""

    limit: float
    remaining: float
    reset_s: float | None
    """Seconds until the bucket is full again (``None``: not said)."""

    @property
    def rate_per_s(self) -> float:
        """How fast the bucket refills: ``limit`` per minute, or slower when ``reset`` says so.

        A reset never speeds the refill up: providers round ``remaining`` down, so the
        rate it implies runs a little fast; a limit per hour or day refills slower.
        """
        per_minute = self.limit / 60.0
        if self.reset_s is not None and self.reset_s > 0 and self.remaining < self.limit:
            implied = (self.limit - self.remaining) / self.reset_s
            return max(min(per_minute, implied), self.limit / 86_400.0)
        return per_minute

    def wait_for(self, amount: float) -> float:
        """Seconds until this bucket, as read, holds ``amount`` (0: it does)."""
        wanted = min(amount, self.limit)
        if self.remaining >= wanted - 1e-6:
            return 0.0
        return (wanted - self.remaining) / self.rate_per_s


@dataclass(frozen=True)
class RateReading:
    """What one reply's headers said about the provider's limits."""

    requests: BucketReading | None = None
    tokens: BucketReading | None = None
    retry_after_s: float | None = None


def duration_s(text: str) -> float | None:
    """OpenAI's reset durations (``1s``, ``6m0s``, ``20ms``, ``1h2m3.5s``) in seconds."""
    text = text.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(number) * _UNITS[unit] for number, unit in parts)


def _seconds_until(text: str, wall_now: float) -> float | None:
    """An RFC 3339 instant (Anthropic's resets) as seconds from ``wall_now``."""
    try:
        at = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if at.tzinfo is None:
        return None
    return max(0.0, at.timestamp() - wall_now)


def retry_after_s(headers: Mapping[str, str], wall_now: float) -> float | None:
    """``retry-after-ms``, else ``retry-after`` (seconds or an HTTP date), in seconds."""
    found = normalized(headers)
    millis = found.get("retry-after-ms")
    if millis is not None:
        try:
            seconds = float(millis) / 1000.0
        except ValueError:
            seconds = math.nan
        if math.isfinite(seconds):
            return max(0.0, seconds)
    value = found.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - wall_now)
        except (TypeError, ValueError, IndexError):
            return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


def normalized(headers: Mapping[str, str]) -> dict[str, str]:
    """Header names in lower case, litellm's ``llm_provider-`` prefix taken off."""
    found: dict[str, str] = {}
    for name, value in headers.items():
        key = str(name).lower()
        key = key.removeprefix("llm_provider-")
        found.setdefault(key, str(value))
    return found


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def read_rate_headers(headers: Mapping[str, str], wall_now: float) -> RateReading | None:
    """What ``headers`` say about the provider's limits (``None``: nothing)."""
    found = normalized(headers)

    def bucket(limit: str, remaining: str, reset: str, reset_at: bool) -> BucketReading | None:
        most, left = _number(found.get(limit)), _number(found.get(remaining))
        if most is None or left is None or most <= 0:
            return None
        said = found.get(reset)
        seconds = None
        if said is not None:
            seconds = _seconds_until(said, wall_now) if reset_at else duration_s(said)
        return BucketReading(most, min(left, most), seconds)

    requests = bucket(
        "x-ratelimit-limit-requests",
        "x-ratelimit-remaining-requests",
        "x-ratelimit-reset-requests",
        False,
    ) or bucket(
        "anthropic-ratelimit-requests-limit",
        "anthropic-ratelimit-requests-remaining",
        "anthropic-ratelimit-requests-reset",
        True,
    )
    tokens = (
        bucket(
            "x-ratelimit-limit-tokens",
            "x-ratelimit-remaining-tokens",
            "x-ratelimit-reset-tokens",
            False,
        )
        or bucket(
            "anthropic-ratelimit-tokens-limit",
            "anthropic-ratelimit-tokens-remaining",
            "anthropic-ratelimit-tokens-reset",
            True,
        )
        or bucket(
            "anthropic-ratelimit-input-tokens-limit",
            "anthropic-ratelimit-input-tokens-remaining",
            "anthropic-ratelimit-input-tokens-reset",
            True,
        )
    )
    retry = retry_after_s(headers, wall_now)
    if requests is None and tokens is None and retry is None:
        return None
    return RateReading(requests, tokens, retry)


@dataclass
class BucketMirror:
    """kb's estimate of one of the provider's token buckets."""

    limit: float | None = None
    rate_per_s: float = 0.0
    level: float = 0.0
    at: float = 0.0
    seq: int = -1
    """The send number of the request whose reply set the level."""

    def observe(
        self, reading: BucketReading, seq: int, sent_after: float, at: float, *, force: bool = False
    ) -> None:
        """A reply's reading, when it is newer than the one held (by send order).

        ``at`` is when its request was sent: providers count a request when it
        arrives, so that is the instant the reading describes (taking it as of
        the reply would lose a latency's refill on every reading). ``force``:
        taken whatever its order (a reading with room lifts a long hold).
        """
        if seq < self.seq and not force:
            return
        self.limit = reading.limit
        self.rate_per_s = reading.rate_per_s
        self.level = reading.remaining - sent_after
        self.at = at
        self.seq = seq

    def level_at(self, now: float) -> float:
        """What the bucket holds at ``now`` (refilled since the last reading or take)."""
        if self.limit is None:
            return math.inf
        return min(self.limit, self.level + self.rate_per_s * max(0.0, now - self.at))

    def wait_s(self, amount: float, now: float) -> float:
        """Seconds until the bucket holds ``amount`` (0: it does now)."""
        held = self.level_at(now)
        if self.limit is None or held >= min(amount, self.limit) - 1e-6:
            return 0.0  # (a millionth short is floating-point rounding, not a wait)
        if self.rate_per_s <= 0:
            return 1.0
        # never wait for more than the bucket can ever hold (a request larger than the limit)
        return (min(amount, self.limit) - held) / self.rate_per_s

    def take(self, amount: float, now: float) -> None:
        """A request was sent: it holds ``amount`` of the bucket."""
        if self.limit is not None:
            self.level = self.level_at(now) - amount
            self.at = now


@dataclass(eq=False)
class BucketPace:
    """One rate-limit bucket: its mirrors, its concurrency window and its hold."""

    ceiling: int
    window: float = 0.0
    in_flight: dict[int, tuple[float, float]] = field(default_factory=dict)
    """Send number → (tokens it costs, when it was sent), of the calls not yet answered."""
    sent: int = 0
    hold_until: float = 0.0
    shrunk_at: int = -1
    """The send number after which the last halving happened (one halving per burst)."""
    requests: BucketMirror = field(default_factory=BucketMirror)
    tokens: BucketMirror = field(default_factory=BucketMirror)
    tokens_per_call: float | None = None
    """What a call costs the provider's token bucket, learned from its readings (a
    provider may count a default ``max_tokens`` kb never sent); ``None``: not yet."""
    limited_seqs: set[int] = field(default_factory=set)
    """Send numbers answered 429 since the last tokens reading (they cost nothing)."""
    reading_level: float = 0.0
    """The tokens the last reading said remained (before kb's own takes)."""
    reading_at: float = 0.0
    last_sent_at: float | None = None
    """When the bucket last sent a call (a held bucket probes :data:`PROBE_EVERY_S` after)."""
    doubted: bool = False
    """A call was answered while the readings said the bucket was empty for longer than
    :data:`RETRY_AFTER_MAX_S`: readings that claim such a wait are not believed again."""
    quota_told: bool = False
    """The bucket's spent quota was said (:meth:`answered` returns it once)."""

    def __post_init__(self) -> None:
        if self.window <= 0:
            self.window = float(self.ceiling)

    def cost(self, tokens: float) -> float:
        """What a call of ``tokens`` (kb's estimate) will cost the provider's bucket."""
        return self.tokens_per_call if self.tokens_per_call is not None else tokens

    def held_s(self, tokens: float, now: float) -> float:
        """How long the bucket's hold and mirrors say a call of ``tokens`` must wait."""
        wait = max(
            self.hold_until - now,
            self.requests.wait_s(1.0, now),
            self.tokens.wait_s(self.cost(tokens), now),
        )
        return wait if math.isfinite(wait) else math.inf

    def wait_s(self, tokens: float, now: float) -> float | None:
        """Seconds until a call may be sent (0: now; ``None``: when a call in flight ends).

        Headers that claim a bucket empty for hours slow a night, they never stop
        it: a bucket held longer than :data:`RETRY_AFTER_MAX_S` with nothing in
        flight sends one call (a probe) :data:`PROBE_EVERY_S` after its last; the
        probe's answer tells whether the bucket really is empty.
        """
        if self.own_in_flight() >= max(1, math.floor(self.window)):
            return None
        wait = min(self.held_s(tokens, now), RETRY_AFTER_MAX_S)
        if self.in_flight or self.last_sent_at is None or wait <= 0:
            return wait  # calls in flight: their answers may say there is room after all
        return min(wait, max(0.0, self.last_sent_at + PROBE_EVERY_S - now))

    def own_in_flight(self) -> int:
        """The calls in flight this process's window counts (all of them, unshared)."""
        return len(self.in_flight)

    def try_send(self, tokens: float, now: float) -> tuple[int | None, float | None]:
        """Send a call of ``tokens`` if the pace allows it now: ``(send number, None)``.

        Else ``(None, wait)``, ``wait`` as :meth:`wait_s` says. One step, so that
        a shared bucket decides and takes under one lock.
        """
        wait = self.wait_s(tokens, now)
        if wait is not None and wait <= SEND_NOW_S:
            return self.send(tokens, now), None
        return None, wait

    def send(self, tokens: float, now: float) -> int:
        """A call goes out now: its send number."""
        cost = self.cost(tokens)
        self.sent += 1
        self.last_sent_at = now
        self.in_flight[self.sent] = (cost, now)
        self.requests.take(1.0, now)
        self.tokens.take(cost, now)
        return self.sent

    def unsent(self, seq: int) -> None:
        """The call ``seq`` was never sent after all (the phase stopped): give its share back."""
        found = self.in_flight.pop(seq, None)
        if found is not None:
            if self.requests.limit is not None:
                self.requests.level += 1.0
            if self.tokens.limit is not None:
                self.tokens.level += found[0]

    def _learn_from_refusal(self, reading: RateReading) -> None:
        """A 429 for want of tokens says what the call needs: what remains plus the wait.

        Only when the requests bucket was not what refused it (its wait would be the
        retry-after instead); never lowers what was learned.
        """
        tokens, wait = reading.tokens, reading.retry_after_s
        if tokens is None or wait is None or not 0 < wait <= 60.0:
            return  # a longer wait is a quota's refusal (a day's), not a minute's tokens
        requests = reading.requests
        if requests is not None and requests.remaining < 1:
            if wait <= (1 - requests.remaining) / requests.rate_per_s + 0.05:
                return  # the requests bucket's wait: nothing said about tokens
        needed = min(tokens.remaining + tokens.rate_per_s * wait, tokens.limit)
        self.tokens_per_call = max(self.tokens_per_call or 0.0, needed)

    def _learn_cost(self, reading: BucketReading, seq: int, now: float) -> None:
        """Each call's cost, from how far the provider's tokens fell between two readings."""
        mirror = self.tokens
        earlier, at = mirror.seq, self.reading_at
        if mirror.limit is None or earlier < 0 or seq <= earlier:
            return
        refilled = self.reading_level + mirror.rate_per_s * max(0.0, now - at)
        if refilled >= 0.98 * reading.limit:
            return  # the bucket may have been full meanwhile: the fall says nothing
        if any(earlier < s < seq for s in self.in_flight):
            return  # calls between the two readings not yet answered: which counted is unknown
        counted = (seq - earlier) - sum(1 for s in self.limited_seqs if earlier < s <= seq)
        if counted <= 0:
            return
        per_call = min(max(0.0, (refilled - reading.remaining) / counted), reading.limit)
        self.tokens_per_call = (
            per_call
            if self.tokens_per_call is None
            else 0.5 * self.tokens_per_call + 0.5 * per_call
        )

    def answered(
        self, seq: int, reading: RateReading | None, limited: bool, now: float
    ) -> float | None:
        """The call ``seq`` came back: what it said, and whether it was a 429.

        A call answered while the bucket was held for longer than
        :data:`RETRY_AFTER_MAX_S` restores it: a success proves the readings
        wrong (they are doubted from then on), a reading with room is taken
        whatever its order. Returns, once per bucket, how long a spent quota
        lasts (held over :data:`QUOTA_S`; ``None`` otherwise).
        """
        found = self.in_flight.pop(seq, None)
        if found is None:
            return None  # not a call of this bucket's, or answered already
        held = self.held_s(found[0], now) > RETRY_AFTER_MAX_S
        if held and not limited:
            # the provider answered what its headers said it would not: those readings
            # are forgotten, and any that claim so long a wait are doubted from now on
            self.doubted = True
            if self.requests.wait_s(1.0, now) > RETRY_AFTER_MAX_S:
                self.requests = BucketMirror()
            if self.tokens.wait_s(found[0], now) > RETRY_AFTER_MAX_S:
                self.tokens = BucketMirror()
        # Providers count a request when it arrives, near when it was sent; a quarter of
        # the round trip later is where the reading is taken to describe, erring toward
        # waiting (a network delay in front of the count) by a fraction of a latency.
        sent_at = min(found[1] + (now - found[1]) / 4, now)
        if limited and (self.tokens.limit is not None or (reading and reading.tokens)):
            self.limited_seqs.add(seq)  # (only a tokens bucket's cost learning reads them)
            if len(self.limited_seqs) > LIMITED_KEPT:  # a night of 429s and no reading
                self.limited_seqs = set(sorted(self.limited_seqs)[-LIMITED_KEPT:])
        if reading is not None and self.doubted:
            reading = _believed(reading, found[0])
        if reading is not None:
            self._observe(reading, seq, found[0], sent_at, held)
        if limited:
            self._refused(reading, seq, now)
        else:
            self.window = min(float(self.ceiling), self.window + 1.0 / self.window)
        return self._quota(reading, limited, found[0], now)

    def _observe(
        self, reading: RateReading, seq: int, cost: float, sent_at: float, held: bool
    ) -> None:
        """Take a reply's reading into the mirrors (one with room whatever its order, if held)."""
        later = [each for s, (each, _) in self.in_flight.items() if s > seq]
        if reading.requests is not None:
            room = held and reading.requests.wait_for(1.0) <= RETRY_AFTER_MAX_S
            self.requests.observe(reading.requests, seq, float(len(later)), sent_at, force=room)
        if reading.tokens is not None and (
            seq >= self.tokens.seq or (held and reading.tokens.wait_for(cost) <= RETRY_AFTER_MAX_S)
        ):
            self._learn_cost(reading.tokens, seq, sent_at)
            self.reading_level = reading.tokens.remaining
            self.reading_at = sent_at
            self.tokens.observe(reading.tokens, seq, float(sum(later)), sent_at)
            self.limited_seqs = {s for s in self.limited_seqs if s > seq}

    def _refused(self, reading: RateReading | None, seq: int, now: float) -> None:
        """A 429: learn from it, halve the window once a burst, hold the whole bucket."""
        if reading is not None:
            self._learn_from_refusal(reading)
        if seq > self.shrunk_at:
            self.window = max(1.0, self.window / 2.0)
            self.shrunk_at = self.sent
        wait = reading.retry_after_s if reading is not None else None
        hold = min(wait, RETRY_AFTER_MAX_S) if wait is not None else 1.0
        self.hold_until = max(self.hold_until, now + hold)
        # the provider's bucket is empty, whatever the mirror thought
        if self.requests.limit is not None and seq >= self.requests.seq:
            self.requests.level = min(self.requests.level, 0.0)
            self.requests.at = now

    def _quota(
        self, reading: RateReading | None, limited: bool, cost: float, now: float
    ) -> float | None:
        """How long a spent quota lasts, the first time the bucket is held that long."""
        if self.quota_told or self.doubted:
            return None
        waits = [self.held_s(cost, now)]
        if limited and reading is not None and reading.retry_after_s is not None:
            waits.append(reading.retry_after_s)  # a day's refusal, beyond the 120 s hold
        longest = max(waits)
        if not QUOTA_S < longest < math.inf:
            return None
        self.quota_told = True
        return longest


def _believed(reading: RateReading, cost: float) -> RateReading | None:
    """``reading`` without the buckets that claim a wait already proven wrong."""

    def kept(bucket: BucketReading | None, amount: float) -> BucketReading | None:
        if bucket is None or bucket.wait_for(amount) > RETRY_AFTER_MAX_S:
            return None
        return bucket

    requests, tokens = kept(reading.requests, 1.0), kept(reading.tokens, cost)
    if requests is None and tokens is None and reading.retry_after_s is None:
        return None
    return RateReading(requests, tokens, reading.retry_after_s)


@dataclass(frozen=True)
class PaceNote:
    """What the progress line shows of pacing: the call rate and the 429s so far."""

    per_minute: float
    limited: int

    @property
    def text(self) -> str:
        """``590 calls/min · 3 × 429``."""
        return f"{self.per_minute:.0f} calls/min · {self.limited} × 429"


@dataclass
class RateLimits:
    """Every bucket of a job, and what pacing did (the progress line's figures)."""

    ceiling: int
    buckets: dict[Hashable, BucketPace] = field(default_factory=dict)
    limited: int = 0
    """Replies answered 429 so far."""
    sends: list[float] = field(default_factory=list)
    """When each call was answered (monotonic, a 429 not counted), the last minute's."""
    heard: bool = False
    """Some provider said something about its limits (headers or a 429)."""
    make: Callable[[Hashable, int], BucketPace | None] | None = None
    """Makes a bucket's pace (shared between processes: :mod:`kb.engine.shared_buckets`);
    ``None`` (or a ``None`` from it): one of this process's own."""

    def bucket(self, key: Hashable) -> BucketPace:
        """The bucket ``key`` (made on first use, at the ceiling)."""
        found = self.buckets.get(key)
        if found is None:
            made = self.make(key, self.ceiling) if self.make is not None else None
            found = self.buckets[key] = made or BucketPace(self.ceiling)
        return found

    def sent(self, now: float) -> None:
        """Count a call answered at ``now`` (the rate shown; a 429 is not counted)."""
        self.sends.append(now)
        cut = 0
        while cut < len(self.sends) and self.sends[cut] < now - 60.0:
            cut += 1
        del self.sends[:cut]

    def per_minute(self, now: float) -> float:
        """Calls answered over the last minute.

        Under a minute in, over the time so far but at least 10 s: a first burst is
        not shown as a rate.
        """
        recent = [t for t in self.sends if t >= now - 60.0]
        if not recent:
            return 0.0
        span = min(60.0, max(now - recent[0], 10.0))
        return len(recent) * 60.0 / span


def estimated_tokens(messages: object, max_tokens: object) -> float:
    """A request's tokens as OpenAI's limiter counts them: prompt characters ÷ 4 + max_tokens."""
    chars = 0
    if isinstance(messages, list | tuple):
        for message in messages:
            content = message.get("content") if isinstance(message, Mapping) else None
            chars += len(content) if isinstance(content, str) else 0
    extra = max_tokens if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) else 0
    return math.ceil(chars / 4) + max(0, extra)
