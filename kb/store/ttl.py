"""Claim lifetimes: instants as JavaScript sees them, expiry and the remeasurement queue.

Instants are integer milliseconds since the Unix epoch, like a JavaScript
``Date``; that keeps ``observedAt + days`` exact and makes the rendering
byte-identical to ``Date.prototype.toISOString()``. No function here reads a
clock: the caller passes the instant (``as_of``, ``observed_at``).

Accepted instant syntax (a strict subset of what ``Date.parse`` takes, so a
value kb accepts means the same instant in kb and in rulvar):

* ``YYYY-MM-DD`` — UTC midnight, as in JavaScript;
* ``YYYY-MM-DDTHH:MM[:SS[.fraction]]`` followed by ``Z`` or ``±HH:MM``.

A date-time without an offset is refused: JavaScript reads it as *local*
time, so its meaning would depend on the machine. Impossible calendar dates
(``2026-02-30``) are refused, where V8 silently rolls them over. A
fraction of a second is read as V8 reads it (:func:`v8_millis`), oddities
of long fractions included.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kb.store.models import ModelClaim

MS_PER_DAY = 86_400_000
#: 0001-01-01T00:00:00.000Z and 9999-12-31T23:59:59.999Z: what four-digit years can render.
MIN_INSTANT = -62_135_596_800_000
MAX_INSTANT = 253_402_300_799_999


#: Days a claim lives, by (class, polarity).
CLAIM_TTL_DAYS: dict[tuple[str, str], int] = {
    ("eval-measured", "strength"): 90,
    ("eval-measured", "weakness"): 30,
    ("human-editorial", "strength"): 120,
    ("human-editorial", "weakness"): 45,
}

_INSTANT = re.compile(
    r"(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})"
    r"(?:T(?P<h>\d{2}):(?P<mi>\d{2})(?::(?P<s>\d{2})(?:\.(?P<f>\d+))?)?"
    r"(?P<tz>Z|[+-]\d{2}:\d{2}))?"
)


class InstantError(ValueError):
    """A string that is not an instant kb and JavaScript agree on."""


@lru_cache(maxsize=8192)
def parse_instant(text: str) -> int:
    """Milliseconds since the epoch for an ISO instant (see the module docstring).

    Cached: a store repeats the same few instants (every claim of a sweep
    shares its ``observedAt`` and ``expiresAt``), and validation parses two
    per claim.
    """
    match = _INSTANT.fullmatch(text)
    if match is None:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}T[\d:.]+", text):
            raise InstantError(
                f"{text!r} has no UTC offset (JavaScript would read it as local time); "
                "add 'Z' or '+HH:MM'"
            )
        raise InstantError(f"{text!r} is not an ISO date (YYYY-MM-DD) or date-time with offset")
    year, month, day = int(match["y"]), int(match["mo"]), int(match["d"])
    if year < 1:
        raise InstantError(f"{text!r}: years before 0001 are not supported")
    if not 1 <= month <= 12 or not 1 <= day <= calendar.monthrange(year, month)[1]:
        raise InstantError(f"{text!r} is not a calendar date")
    hour = int(match["h"] or 0)
    minute = int(match["mi"] or 0)
    second = int(match["s"] or 0)
    millis = v8_millis(match["f"] or "")
    if hour == 24 and minute == 0 and second == 0 and millis == 0:
        hour, extra_day = 0, 1  # ISO 8601 end-of-day, which V8 accepts
    elif hour > 23 or minute > 59 or second > 59:
        raise InstantError(f"{text!r} is not a valid time of day")
    else:
        extra_day = 0
    offset_ms = 0
    tz = match["tz"]
    if tz and tz != "Z":
        off_h, off_m = int(tz[1:3]), int(tz[4:6])
        if off_h > 23 or off_m > 59:
            raise InstantError(f"{text!r} has an invalid UTC offset")
        offset_ms = (off_h * 60 + off_m) * 60_000 * (1 if tz[0] == "+" else -1)
    days = _days_from_civil(year, month, day) + extra_day
    return days * MS_PER_DAY + ((hour * 60 + minute) * 60 + second) * 1000 + millis - offset_ms


def v8_millis(fraction: str) -> int:
    """Milliseconds of a fraction-of-second digit string, read exactly as V8's ``Date.parse``.

    V8 keeps at most nine *significant* digits (leading zeros are skipped),
    counts the digits' length up to nine, and scales the value to three
    digits by integer division: ``.0159999999`` is 159 ms in V8 (not 15), and
    a store rulvar wrote with it must mean the same instant in kb.
    """
    if not fraction:
        return 0
    length = min(len(fraction), 9)
    value = int(fraction.lstrip("0")[:9] or "0")
    if length == 1:
        return value * 100
    if length == 2:
        return value * 10
    return value // int(10 ** (length - 3))


def _days_from_civil(year: int, month: int, day: int) -> int:
    return (datetime(year, month, day, tzinfo=UTC).date().toordinal()) - 719_163


def format_instant(ms: int) -> str:
    """Render milliseconds since the epoch exactly like JavaScript ``toISOString()``."""
    if not MIN_INSTANT <= ms <= MAX_INSTANT:
        raise InstantError(f"instant {ms} ms is outside the years 0001-9999")
    days, rest = divmod(ms, MS_PER_DAY)
    date = datetime.fromordinal(days + 719_163)
    seconds, millis = divmod(rest, 1000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return (
        f"{date.year:04d}-{date.month:02d}-{date.day:02d}"
        f"T{hour:02d}:{minute:02d}:{second:02d}.{millis:03d}Z"
    )


def instant_from_datetime(moment: datetime) -> int:
    """Milliseconds since the epoch for an aware ``datetime`` (truncating microseconds)."""
    if moment.tzinfo is None:
        raise InstantError("a naive datetime has no defined instant")
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def ttl_days(claim_class: str, polarity: str) -> int:
    """Lifetime in days of a claim of this class and polarity."""
    try:
        return CLAIM_TTL_DAYS[(claim_class, polarity)]
    except KeyError:
        raise InstantError(
            f"no lifetime for class {claim_class!r}, polarity {polarity!r}"
        ) from None


def claim_expiry(claim_class: str, polarity: str, observed_at: str) -> str:
    """``expiresAt`` for a claim observed at ``observed_at``, rendered like ``toISOString()``."""
    return format_instant(parse_instant(observed_at) + ttl_days(claim_class, polarity) * MS_PER_DAY)


def claim_expired(claim: ModelClaim, at: int) -> bool:
    """True when the claim has expired at instant ``at`` (ms): ``at >= expiresAt``."""
    return at >= parse_instant(claim.expires_at)


def remeasurement_queue(claims: Iterable[ModelClaim], at: int) -> list[ModelClaim]:
    """Active eval-measured claims that have expired at ``at``: what a sweep must re-measure."""
    return [
        claim
        for claim in claims
        if claim.status == "active"
        and claim.claim_class == "eval-measured"
        and claim_expired(claim, at)
    ]


#: The longest lifetime; a claim observed later than MAX_INSTANT minus this cannot expire.
MAX_TTL_MS = max(CLAIM_TTL_DAYS.values()) * MS_PER_DAY


def check_claim_instant(at: int, what: str) -> int:
    """``at`` as an instant a claim may be observed at (its expiry must be renderable)."""
    if not MIN_INSTANT <= at <= MAX_INSTANT - MAX_TTL_MS:
        raise InstantError(
            f"{what} {format_instant(min(max(at, MIN_INSTANT), MAX_INSTANT))} "
            "is too far in the past or future for a claim's lifetime"
        )
    return at
