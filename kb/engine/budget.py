"""Money: exact micro-USD accounting, per-run ceilings and the sweep's ``SpendEnvelope``.

Dollars arrive as floats (from TOML, from price tables); adding them as
floats drifts (``0.1 + 0.2 > 0.3``). Every amount is converted once, from
its shortest decimal form, to integer micro-USD: a **cap rounds down**
(never authorize more than the user allowed), a **debit or ceiling rounds
up** and is at least 1 micro-USD (never under-count a paid call). A cap
below 1 micro-USD is refused as a ``ConfigError``.

Authorization is by reservation: a run reserves its ceiling before it
starts and is refused when the reservation would pass the cap. The engine
authorizes a phase's runs in plan order before any of them starts, so which
runs are refused never depends on timing, and a concurrent sweep refuses
exactly the runs a sequential one would. Settling a run replaces its
reservation with its actual cost.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

from kb.errors import ConfigError

MICROS_PER_USD = 1_000_000


def _decimal(usd: float | int | str, what: str) -> Decimal:
    if isinstance(usd, bool):
        raise ConfigError(what, f"must be a number of USD, got {usd!r}")
    if isinstance(usd, float) and not math.isfinite(usd):
        raise ConfigError(what, f"must be finite, got {usd!r}")
    try:
        value = Decimal(repr(usd)) if isinstance(usd, float) else Decimal(usd)
    except ArithmeticError:
        raise ConfigError(what, f"is not a number: {usd!r}") from None
    if value < 0:
        raise ConfigError(what, f"must not be negative, got {usd!r}")
    return value


def cap_micros(usd: float | int | str, what: str = "cap") -> int:
    """A cap in micro-USD, rounded down; below 1 micro-USD is refused."""
    micros = int((_decimal(usd, what) * MICROS_PER_USD).to_integral_value(ROUND_FLOOR))
    if micros < 1:
        raise ConfigError(what, f"{usd!r} USD is below 1 micro-USD")
    return micros


def debit_micros(usd: float | int | str, what: str = "cost") -> int:
    """A debit (or ceiling) in micro-USD, rounded up, at least 1."""
    micros = int((_decimal(usd, what) * MICROS_PER_USD).to_integral_value(ROUND_CEILING))
    return max(1, micros)


def usd(micros: int) -> float:
    """Micro-USD back to dollars, for reports."""
    return micros / MICROS_PER_USD


@dataclass(frozen=True)
class Reservation:
    """A run's authorized ceiling, held until the run settles."""

    label: str
    micros: int


@dataclass
class SpendEnvelope:
    """The sweep's total budget (``max_total_usd``); ``None`` cap means unbounded."""

    cap: int | None
    """Cap in micro-USD, or ``None`` when the spec allows unbounded spend."""
    reserved: int = 0
    debited: int = 0
    refusals: list[str] = field(default_factory=list)

    @classmethod
    def from_usd(cls, max_total_usd: float | None) -> SpendEnvelope:
        """An envelope for ``max_total_usd`` dollars (``None``: unbounded)."""
        return cls(
            cap=None if max_total_usd is None else cap_micros(max_total_usd, "max_total_usd")
        )

    @property
    def committed(self) -> int:
        """Micro-USD spent plus still reserved."""
        return self.reserved + self.debited

    def authorize(self, label: str, ceiling_usd: float) -> Reservation | None:
        """Reserve ``ceiling_usd`` for the run ``label``; ``None`` when it would pass the cap."""
        micros = debit_micros(ceiling_usd, f"{label} ceiling")
        if self.cap is not None and self.committed + micros > self.cap:
            self.refusals.append(label)
            return None
        self.reserved += micros
        return Reservation(label, micros)

    def settle(self, reservation: Reservation, actual_usd: float) -> int:
        """Replace a reservation by the run's actual cost; returns the micro-USD debited.

        A run that cost nothing debits nothing (a refused or replayed-free
        run); any positive cost debits at least 1 micro-USD.
        """
        self.reserved -= reservation.micros
        micros = debit_micros(actual_usd) if actual_usd > 0 else 0
        self.debited += micros
        return micros


@dataclass(frozen=True)
class SpendForecast:
    """What a job's envelope would do if every run cost its full ceiling."""

    worst_usd: float
    """The sum of every run's ceiling: the worst-case authorized spend, uncapped."""
    cap_usd: float | None
    runs: int
    refused: int
    """Runs the envelope would refuse, authorized in plan order."""

    @property
    def exceeds(self) -> bool:
        """The worst case does not fit the cap."""
        return self.refused > 0

    def refusal(self) -> str:
        """The one line a job refused before any call prints."""
        return (
            f"worst-case authorized spend ${self.worst_usd:.4f} exceeds the cap "
            f"${self.cap_usd or 0:.4f}: {self.refused} of {self.runs} runs would be refused; "
            "raise budgets.max_total_usd, or pass --allow-partial to run anyway and refuse "
            "the overflow"
        )


def forecast_spend(max_total_usd: float | None, ceilings: Sequence[float | None]) -> SpendForecast:
    """Authorize ``ceilings`` in plan order against a fresh envelope, spending each in full."""
    envelope = SpendEnvelope.from_usd(max_total_usd)
    refused = 0
    for index, ceiling in enumerate(ceilings):
        if ceiling is None:
            continue
        if envelope.authorize(f"run {index}", ceiling) is None:
            refused += 1
    worst = usd(sum(debit_micros(c) for c in ceilings if c is not None))
    return SpendForecast(worst, max_total_usd, len(ceilings), refused)
