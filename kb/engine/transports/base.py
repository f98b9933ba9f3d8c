"""The seam between the scheduler and where an answer comes from.

The scheduler (:mod:`kb.engine.scheduler`) owns order, the spend envelope,
concurrency, retries and signals; a **transport** owns where an answer comes
from. Its contract, which the scheduler keeps:

* runs arrive in **plan order**: envelope authorizations are taken for the
  whole phase before the first call, and the ``occurrence`` of a request
  (how many identical requests came before it in plan order) and its
  ``seq`` (its place in the job) are fixed then — so concurrency never
  changes what a transport is asked, only when;
* :meth:`Transport.prepaid` is asked first, before the envelope authorizes:
  a run it answers (a journaled run of a stopped night) costs nothing;
* :meth:`Transport.complete` makes one attempt and returns a :class:`Reply`
  or raises :class:`kb.errors.ProviderFailure` (``retryable`` decides
  whether the scheduler tries again); a transport whose :attr:`retries` is
  false (a cassette's replay) answers the run's final outcome at once;
* :meth:`Transport.settled` hears every settled run in the step that settles
  it, before the run's concurrency slot lets another call start: a wrapper
  that cannot keep it (a journal on a full disk) raises
  :class:`kb.errors.JournalUnwritable` and the scheduler stops the phase.

Wrappers (:mod:`.record`, :mod:`.journaled`) compose around any transport,
as httpx's transports do; a :class:`BatchTransport` takes the runs it
:meth:`~BatchTransport.accepts` as whole groups. ``complete`` never imports
litellm by itself: only the live transport does, on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from kb.engine.runs import PlannedRun, PriceSource, RunResult, Usage
from kb.logprobs import TopLogprobs

if TYPE_CHECKING:
    from kb.engine.batch import BatchState


@dataclass(frozen=True)
class Reply:
    """What one attempt at a call brought back."""

    output: str | None
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    price_source: PriceSource | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    """The provider's response headers, where it gave them (rate-limit pacing)."""
    logprobs: TopLogprobs | None = None
    """Top log-probabilities per output token, when asked for and given."""
    error: str | None = None
    """A recorded failure (a replayed cassette): the run settles ``error`` with it."""
    attempts: int | None = None
    """Provider calls the recorded run took (replay); ``None``: this one attempt."""
    replayed: bool = False


class Transport(Protocol):
    """Where answers come from (see the module docstring for the contract)."""

    @property
    def retries(self) -> bool:
        """Whether the scheduler retries this transport's retryable failures."""
        ...

    @property
    def resumable(self) -> bool:
        """Whether settled runs are journaled (a stopped job can be resumed)."""
        ...

    def prepaid(self, run: PlannedRun) -> RunResult | None:
        """The run's result when it was paid for already (``None``: ask :meth:`complete`)."""
        ...

    async def ready(self, run: PlannedRun) -> None:
        """Until a call for ``run`` can be sent (not counted in its latency)."""
        ...

    async def complete(self, run: PlannedRun, occurrence: int, timeout_s: float) -> Reply:
        """One attempt at the call; a :class:`kb.errors.ProviderFailure` when it failed."""
        ...

    def settled(self, run: PlannedRun, occurrence: int, seq: int, result: RunResult) -> None:
        """The run settled (journal it, record it): before another call starts."""
        ...

    async def aclose(self) -> None:
        """Release connections at the end of a phase."""
        ...


class TransportWrapper:
    """A transport that adds to another and passes everything else through."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner

    @property
    def retries(self) -> bool:
        """As the wrapped transport."""
        return self.inner.retries

    @property
    def resumable(self) -> bool:
        """As the wrapped transport."""
        return self.inner.resumable

    def prepaid(self, run: PlannedRun) -> RunResult | None:
        """As the wrapped transport."""
        return self.inner.prepaid(run)

    async def ready(self, run: PlannedRun) -> None:
        """As the wrapped transport."""
        await self.inner.ready(run)

    async def complete(self, run: PlannedRun, occurrence: int, timeout_s: float) -> Reply:
        """As the wrapped transport."""
        return await self.inner.complete(run, occurrence, timeout_s)

    def settled(self, run: PlannedRun, occurrence: int, seq: int, result: RunResult) -> None:
        """As the wrapped transport."""
        self.inner.settled(run, occurrence, seq, result)

    async def aclose(self) -> None:
        """As the wrapped transport."""
        await self.inner.aclose()


class BatchPhase(Protocol):
    """What a batch transport may ask of the phase it runs in."""

    @property
    def stopped(self) -> bool:
        """The phase was stopped (a signal, a journal that cannot write)."""
        ...

    def batch_for(self, members: str) -> str | None:
        """The batch an earlier invocation created for these runs and did not end."""
        ...

    def note_batch(self, members: str, batch_id: str) -> bool:
        """Journal a created batch; ``False``: the journal refused (the phase stops)."""
        ...

    def note_batch_end(self, batch_id: str, status: str) -> None:
        """The batch ended without completing (a resume never waits on it again)."""
        ...

    def opened(self, batch_id: str) -> None:
        """A batch is running at the provider (billed while it runs)."""
        ...

    def closed(self, batch_id: str) -> None:
        """The batch ended."""
        ...


class BatchLedger(Protocol):
    """Where batches are noted across invocations (the journal)."""

    def batch_for(self, members: str) -> str | None:
        """The batch an earlier invocation created for these runs and did not end."""
        ...

    def record_batch(self, members: str, batch_id: str) -> None:
        """A batch was created (raises :class:`kb.errors.JournalUnwritable` when it cannot)."""
        ...

    def record_batch_end(self, batch_id: str, status: str) -> None:
        """The batch ended without completing."""
        ...


def ledger_of(transport: object) -> BatchLedger | None:
    """The first transport in a wrapper chain that notes batches (the journal), if any."""
    while transport is not None:
        if hasattr(transport, "record_batch"):
            return transport  # type: ignore[return-value]
        transport = getattr(transport, "inner", None)
    return None


def replays(transport: object) -> bool:
    """Whether a wrapper chain answers from a cassette (no provider is called or paid)."""
    while transport is not None:
        if getattr(transport, "replaying", False):
            return True
        transport = getattr(transport, "inner", None)
    return False


class BatchTransport(Protocol):
    """Takes groups of runs to a provider's batch API."""

    def accepts(self, run: PlannedRun) -> bool:
        """Whether ``run`` goes in a batch (live otherwise)."""
        ...

    def group(self, run: PlannedRun) -> Hashable:
        """Runs with the same group go in one batch."""
        ...

    async def settle(
        self,
        runs: Sequence[PlannedRun],
        phase: BatchPhase,
        on_batch: Callable[[BatchState], None] | None,
    ) -> list[RunResult]:
        """Send ``runs`` as one batch, wait for it, and return each run's result in order."""
        ...
