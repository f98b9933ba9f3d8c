"""Recording a cassette around any transport: each settled call's outcome, secrets cut.

The exchange is the run's final outcome after kb's retries (its status,
attempts, cost), keyed by the request and its occurrence in plan order and
written in plan order (``seq``) when the cassette is saved — so a cassette
recorded at any concurrency replays identically at any other.
"""

from __future__ import annotations

from kb.engine.cassette import Cassette, Exchange
from kb.engine.requests import credentials_of
from kb.engine.runs import PlannedRun, RunResult
from kb.engine.transports.base import Transport, TransportWrapper


class RecordingTransport(TransportWrapper):
    """Passes every call through and records its settled outcome."""

    def __init__(self, inner: Transport, cassette: Cassette) -> None:
        super().__init__(inner)
        self.cassette = cassette

    def settled(self, run: PlannedRun, occurrence: int, seq: int, result: RunResult) -> None:
        """Record a run that reached the provider (not one served from a journal)."""
        self.inner.settled(run, occurrence, seq, result)
        if result.replayed or result.reused or result.status in ("refused", "cancelled"):
            return
        answered = result.status in ("ok", "exhausted")
        self.cassette.record(
            Exchange(
                key=run.request.key,
                occurrence=occurrence,
                seq=seq,
                request=run.request.canonical(),
                status="ok" if answered else "error",
                output=result.output,
                usage=result.usage,
                cost_usd=result.cost_usd,
                error=None if answered else result.error,
                attempts=result.attempts,
                price_source=result.price_source,
                logprobs=result.logprobs,
            ),
            credentials_of(run.spec.params),
        )
