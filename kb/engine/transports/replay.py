"""Answers from a cassette: every call's recorded outcome, no provider asked.

A replay never retries: the recorded run's final outcome (after the retries
it took when recorded, which its ``attempts`` repeat) is the answer, or a
:class:`kb.errors.VcrMissError` for a request the cassette does not hold.
"""

from __future__ import annotations

from kb.engine.cassette import Cassette
from kb.engine.runs import PlannedRun, RunResult
from kb.engine.transports.base import Reply


class ReplayTransport:
    """Serves recorded exchanges by request key and occurrence (plan order)."""

    retries = False
    resumable = False
    replaying = True
    """Answers from a cassette: no provider is called, nothing is paid."""

    def __init__(self, cassette: Cassette) -> None:
        self.cassette = cassette

    def prepaid(self, run: PlannedRun) -> RunResult | None:
        """Nothing is paid for in advance here."""
        return None

    async def ready(self, run: PlannedRun) -> None:
        """A cassette is always ready."""

    async def complete(self, run: PlannedRun, occurrence: int, timeout_s: float) -> Reply:
        """The recorded outcome of the ``occurrence``-th identical request."""
        exchange = self.cassette.lookup(run.request, occurrence, run.label)
        return Reply(
            exchange.output,
            exchange.usage,
            exchange.cost_usd,
            exchange.price_source,
            error=exchange.error if exchange.status != "ok" else None,
            attempts=exchange.attempts,
            logprobs=exchange.logprobs,
            replayed=True,
        )

    def settled(self, run: PlannedRun, occurrence: int, seq: int, result: RunResult) -> None:
        """Nothing to keep."""

    async def aclose(self) -> None:
        """Nothing to close."""
