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
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar

from kb.errors import InstantError

if TYPE_CHECKING:
    from typing import Protocol

    class _Expiring(Protocol):
        @property
        def status(self) -> str: ...
        @property
        def claim_class(self) -> str: ...
        @property
        def expires_at(self) -> str: ...


E = TypeVar("E", bound=Any)

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


_FLAG_FORM = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})(?:[Tt ](?P<time>[\d:.]+)(?P<tz>[Zz]|[+-]\d{2}:?\d{2})?)?"
)


def parse_flag_instant(text: str) -> int:
    """An instant a person typed (``--as-of``, ``--observed-at``), as the store reader reads it.

    ISO forms as V8 reads them: ``t``/``z`` in either case, a space for
    ``T``, ``+0200`` for ``+02:00``. A time still needs its offset
    (JavaScript would read it as local time) and the date must be a calendar
    date (no roll-over of ``2026-02-30``).
    """
    match = _FLAG_FORM.fullmatch(text.strip())
    if match is None or match["time"] is None:
        return parse_instant(text.strip())
    tz = match["tz"]
    if tz is None:
        return parse_instant(f"{match['date']}T{match['time']}")  # refused: no offset
    if tz in ("z", "Z"):
        tz = "Z"
    elif ":" not in tz:
        tz = f"{tz[:3]}:{tz[3:]}"
    return parse_instant(f"{match['date']}T{match['time']}{tz}")


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


#: What V8's ISO reader also takes: a 4-digit or signed 6-digit year, an optional
#: month and day, ``T``/``t``/space, any fraction, ``Z``/``z``/``±HH:MM``/``±HHMM``.
_V8_ISO = re.compile(
    r"(?P<y>[+-]\d{6}|\d{4})(?:-(?P<mo>\d{2})(?:-(?P<d>\d{2}))?)?"
    r"(?:[Tt ](?P<h>\d{2}):(?P<mi>\d{2})(?::(?P<s>\d{2})(?:\.(?P<f>\d+))?)?"
    r"(?P<tz>[Zz]|[+-]\d{2}:?\d{2})?)?"
)
_MONTHS = {
    name: index
    for index, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
        start=1,
    )
}
_MONTH_DAY_YEAR = re.compile(r"(?P<mon>[A-Za-z]{3,9})\.? (?P<d>\d{1,2}), (?P<y>\d{4})")


@dataclass(frozen=True)
class StoredInstant:
    """An instant as a stored claim wrote it, read the way V8's ``Date.parse`` reads it."""

    ms: int
    warning: str | None = None
    """Why kb would never write it this way (``None``: kb's own form)."""


@lru_cache(maxsize=8192)
def read_stored_instant(text: str) -> StoredInstant:
    """Read an instant from a store file as rulvar's reader (V8) would.

    kb's own form first; then V8's ISO variants (``+0200``, lowercase
    ``t``/``z``, a space, year-month, roll-over dates like ``2026-02-30``);
    then the legacy forms rulvar accepts (``Wed, 01 Jul 2026 00:00:00 GMT``,
    ``July 1, 2026``). A time without an offset is local time in JavaScript,
    which depends on the machine: kb reads it as UTC and says so.
    """
    try:
        return StoredInstant(parse_instant(text))
    except InstantError:
        pass
    found = _v8_iso(text)
    if found is None:
        found = _v8_legacy(text)
    if found is None:
        raise InstantError(f"{text!r} is not an instant (JavaScript's Date.parse refuses it too)")
    ms, local = found
    if not MIN_INSTANT <= ms <= MAX_INSTANT:
        raise InstantError(f"{text!r} is outside the years 0001-9999")
    note = "has no UTC offset: JavaScript reads it in the machine's time zone, kb as UTC"
    return StoredInstant(ms, f"{text!r} {note}" if local else f"{text!r} is not in kb's form")


def stored_instant(text: str) -> int:
    """Milliseconds of a stored claim's instant (see :func:`read_stored_instant`)."""
    return read_stored_instant(text).ms


def _v8_iso(text: str) -> tuple[int, bool] | None:
    match = _V8_ISO.fullmatch(text)
    if match is None:
        return None
    year, month, day = int(match["y"]), int(match["mo"] or 1), int(match["d"] or 1)
    hour, minute = int(match["h"] or 0), int(match["mi"] or 0)
    second = int(match["s"] or 0)
    if not 1 <= month <= 12 or not 1 <= day <= 31 or minute > 59 or second > 59:
        return None
    if hour > 24 or (hour == 24 and (minute or second or int(match["f"] or 0))):
        return None
    tz = match["tz"]
    offset = 0
    if tz and tz not in ("Z", "z"):
        digits = tz[1:].replace(":", "")
        offset = (int(digits[:2]) * 60 + int(digits[2:])) * 60_000 * (1 if tz[0] == "+" else -1)
    # V8 rolls an impossible day into the next month (2026-02-30 is 2 March).
    days = _days_from_civil(year, month, 1) + day - 1
    clock = ((hour * 60 + minute) * 60 + second) * 1000 + v8_millis(match["f"] or "")
    local = match["h"] is not None and not tz
    return days * MS_PER_DAY + clock - offset, local


def _v8_legacy(text: str) -> tuple[int, bool] | None:
    from email.utils import parsedate_tz

    parsed = parsedate_tz(text)
    if parsed is not None and "," in text:
        year, month, day, hour, minute, second, *_ = parsed
        offset = parsed[9]
        days = _days_from_civil(year, month, 1) + day - 1
        ms = days * MS_PER_DAY + ((hour * 60 + minute) * 60 + second) * 1000
        return ms - (offset or 0) * 1000, offset is None
    match = _MONTH_DAY_YEAR.fullmatch(text)
    if match is not None and match["mon"][:3].lower() in _MONTHS:
        days = _days_from_civil(int(match["y"]), _MONTHS[match["mon"][:3].lower()], 1)
        return (days + int(match["d"]) - 1) * MS_PER_DAY, True
    if text.isdigit() and 1 <= int(text) <= 12:  # V8: a lone month number, in 2001
        return _days_from_civil(2001, int(text), 1) * MS_PER_DAY, True
    return None


def _days_from_civil(year: int, month: int, day: int) -> int:
    if not 1 <= year <= 9999:
        raise InstantError(f"year {year} is outside 0001-9999")
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


def claim_expired(claim: _Expiring, at: int) -> bool:
    """True when the claim has expired at instant ``at`` (ms): ``at >= expiresAt``."""
    return at >= stored_instant(claim.expires_at)


def remeasurement_queue(claims: Iterable[E], at: int) -> list[E]:
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
