"""Running a plan of provider calls: order, the envelope, concurrency, retries, signals.

:class:`Engine` takes a *phase* — a list of :class:`PlannedRun` in plan
order — and returns one :class:`RunResult` per run, in plan order. Where an
answer comes from is its **transport** (:mod:`kb.engine.transports`: live
litellm calls in this process or in workers, a cassette's replay, with a
recording or a journal around it; a batch transport for providers with a
batch API); the engine keeps what holds whatever the transport:

* everything a result depends on is fixed before the first call: the
  transport's prepaid runs are found, envelope authorizations are taken in
  plan order (see :mod:`kb.engine.budget`), and each request's occurrence
  number and place in the job are assigned in plan order; results come back
  in plan order — so concurrency never changes a result, only the timing
  fields (``started_at``, ``ended_at``);
* calls run under a global and a per-provider limit, with kb's own retries
  (429, 5xx, timeouts, connection failures; jittered exponential back-off,
  honouring ``retry-after``) for a transport that retries;
* every settled run is handed to the transport in the step that settles it,
  before its slot lets another call start (a journal that cannot write stops
  the phase before another call is sent);
* SIGINT/SIGTERM stop the phase: no call starts after, the calls in flight
  are cut short and counted.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
import warnings
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from kb.engine.budget import Reservation, SpendEnvelope, debit_micros, usd
from kb.engine.runs import PlannedRun, RunResult
from kb.engine.transports.base import BatchTransport, Reply, Transport, ledger_of
from kb.engine.transports.live import LiveTransport
from kb.errors import ConfigError, JobInterrupted, JournalUnwritable, KbError, ProviderFailure

if TYPE_CHECKING:
    from kb.engine.batch import BatchState
    from kb.engine.cassette import Cassette
    from kb.engine.journal import JournalState, RunJournal
    from kb.engine.workers import WorkerPool

__all__ = ["Engine", "EngineConfig", "PlannedRun"]


@dataclass(frozen=True)
class EngineConfig:
    """How hard to drive providers."""

    concurrency: int = 8
    """Calls in flight at once, across all providers."""
    per_provider: int = 8
    """Calls in flight at once per provider (the part of the ref before ``:``)."""
    timeout_s: float = 120.0
    """Per-call timeout; a call that takes longer is retried, then settles ``error``."""
    max_retries: int = 3
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    batch: bool = False
    """Send the runs of providers with a batch API as batches (:mod:`kb.engine.batch`)."""
    batch_poll_s: float = 2.0
    """The first wait before polling a batch; it doubles up to ``batch_poll_max_s``."""
    batch_poll_max_s: float = 60.0

    def __post_init__(self) -> None:
        for name in ("concurrency", "per_provider"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(name, f"must be a positive integer, got {value!r}")
        if self.max_retries < 0 or self.timeout_s <= 0:
            raise ConfigError("engine", "max_retries must be >= 0 and timeout_s > 0")


@dataclass
class Engine:
    """Executes phases of runs; one engine serves one job (a sweep, a canary …)."""

    config: EngineConfig = field(default_factory=EngineConfig)
    transport: Transport = field(default_factory=LiveTransport)
    batches: BatchTransport | None = None
    """Takes the runs it accepts as batches (batch mode); ``None``: every run is live."""
    on_settled: Callable[[RunResult], None] | None = None
    """Called once per settled run (progress bars); never changes a result."""
    on_batch: Callable[[BatchState], None] | None = None
    """Called after each poll of a batch (progress); never changes a result."""
    open_batches: set[str] = field(default_factory=set, init=False)
    """Batches created and not yet finished (an interruption says they are still billed)."""
    interrupted_by: str | None = field(default=None, init=False)
    """The signal (``SIGINT``/``SIGTERM``) that stopped a phase, if one did."""
    cut_short: int | None = field(default=None, init=False)
    """Calls in flight when a phase was stopped (a signal, the journal): sent, not settled."""
    _seen: dict[str, int] = field(default_factory=dict, init=False)
    _seq: int = field(default=0, init=False)
    _cancelled: bool = field(default=False, init=False)
    _envelope: SpendEnvelope | None = field(default=None, init=False)
    _batched: dict[int, asyncio.Future[RunResult]] = field(default_factory=dict, init=False)
    _in_flight: int = field(default=0, init=False)
    _journal_failure: JournalUnwritable | None = field(default=None, init=False)
    _unjournaled_batches: list[str] = field(default_factory=list, init=False)
    _phase_tasks: list[asyncio.Task[Any]] = field(default_factory=list, init=False)

    @classmethod
    def build(
        cls,
        config: EngineConfig | None = None,
        *,
        cassette: Cassette | None = None,
        workers: WorkerPool | None = None,
    ) -> Engine:
        """The engine of a job, its transports composed in this one place.

        Live calls (in ``workers`` where they can make them), or a cassette's
        replay; a recording around the live calls when the cassette records;
        every registered batch API for batch mode (never for a replay).
        """
        from kb.engine.transports.batches import BatchRouter
        from kb.engine.transports.record import RecordingTransport
        from kb.engine.transports.replay import ReplayTransport

        config = config or EngineConfig()
        if cassette is not None and cassette.mode == "replay":
            return cls(config, ReplayTransport(cassette))
        live = LiveTransport(workers)
        transport: Transport = live if cassette is None else RecordingTransport(live, cassette)
        batches = (
            BatchRouter.of(live, config.batch_poll_s, config.batch_poll_max_s)
            if config.batch
            else None
        )
        return cls(config, transport, batches)

    @contextmanager
    def journaled(self, journal: RunJournal, state: JournalState | None) -> Iterator[None]:
        """While the block runs, every settled run is journaled and ``state``'s are reused."""
        from kb.engine.transports.journaled import JournaledTransport

        inner = self.transport
        self.transport = JournaledTransport(inner, journal, state)
        try:
            yield
        finally:
            self.transport = inner

    @property
    def spent_usd(self) -> float:
        """What the runs settled so far have debited."""
        return usd(self._envelope.debited) if self._envelope is not None else 0.0

    @property
    def in_flight(self) -> int:
        """Calls sent to a provider (or a worker) and not yet answered, right now."""
        return self._in_flight

    @property
    def resumable(self) -> bool:
        """Settled runs are journaled (an interrupted job can be resumed)."""
        return self.transport.resumable

    def cancel(self) -> None:
        """Stop: runs not yet finished settle ``cancelled``."""
        self._cancelled = True

    def run(self, runs: Sequence[PlannedRun], envelope: SpendEnvelope) -> list[RunResult]:
        """Execute one phase (blocking); results in plan order."""
        return asyncio.run(self._run_phase(runs, envelope))

    def finish(self) -> None:
        """Write the cassette when recording."""
        from kb.engine.transports.record import RecordingTransport

        found: object = self.transport
        while found is not None:
            if isinstance(found, RecordingTransport):
                found.cassette.save()
            found = getattr(found, "inner", None)

    async def _run_phase(
        self, runs: Sequence[PlannedRun], envelope: SpendEnvelope
    ) -> list[RunResult]:
        self._envelope = envelope
        prepaid = [self.transport.prepaid(run) for run in runs]
        reservations = _authorize(runs, prepaid, envelope)
        numbering = self._number(runs)
        limit = asyncio.Semaphore(self.config.concurrency)
        per_provider: dict[str, asyncio.Semaphore] = {}
        batches = self._batch_groups(runs, prepaid, reservations, [seq for _, seq in numbering])
        self._phase_tasks = []
        watched = _stop_on_signals(self._interrupt)
        tasks: list[asyncio.Task[RunResult]] = []
        try:
            async with asyncio.TaskGroup() as group:
                self._phase_tasks += [
                    group.create_task(self._run_batch([runs[i] for i in members], futures))
                    for members, futures in batches
                ]
                for run, earlier, reservation, (occurrence, seq) in zip(
                    runs, prepaid, reservations, numbering, strict=True
                ):
                    slots = (
                        limit,
                        per_provider.setdefault(
                            run.spec.provider, asyncio.Semaphore(self.config.per_provider)
                        ),
                    )
                    task = group.create_task(
                        self._settle(run, earlier, reservation, occurrence, seq, slots)
                    )
                    task.add_done_callback(self._report_settled)
                    tasks.append(task)
                self._phase_tasks += tasks
        except* KbError as group_error:
            raise group_error.exceptions[0] from None
        finally:
            _unwatch(watched)
            self._batched.clear()
            self._phase_tasks = []
            await self.transport.aclose()
        self._raise_if_stopped()
        return [task.result() for task in tasks]

    def _number(self, runs: Sequence[PlannedRun]) -> list[tuple[int, int]]:
        """Each run's occurrence of its request and its place in the job, in plan order."""
        numbering = []
        for run in runs:
            key = run.request.key
            numbering.append((self._seen.get(key, 0), self._seq))
            self._seen[key] = self._seen.get(key, 0) + 1
            self._seq += 1
        return numbering

    def _raise_if_stopped(self) -> None:
        """A stopped phase ends in one error saying what it cut short (the journal's first)."""
        batches = sorted(self.open_batches)
        if self._journal_failure is not None:
            raise self._journal_failure.stopped(
                self.cut_short or 0, batches, self._unjournaled_batches
            )
        if self.interrupted_by is not None:
            raise JobInterrupted(
                self.interrupted_by,
                self.spent_usd,
                batches,
                in_flight=self.cut_short or 0,
                resumable=self.resumable,
            )

    def _interrupt(self, signal_name: str) -> None:
        """A signal arrived: stop every run now (their reservations are released)."""
        self.interrupted_by = self.interrupted_by or signal_name
        self._stop()

    def _stop(self) -> None:
        """Stop the phase: no call starts from here on; the calls in flight are cut short.

        Calls cut short inside litellm leave coroutines it created but never
        awaited; their "never awaited" warnings say nothing the user needs (the
        runs were cancelled on purpose), so they are silenced from here on.
        """
        warnings.filterwarnings(
            "ignore", message=r"coroutine .* was never awaited", category=RuntimeWarning
        )
        if self.cut_short is None:
            self.cut_short = self._in_flight
        self._cancelled = True
        current = asyncio.current_task()
        for task in self._phase_tasks:
            if task is not current:
                task.cancel()

    def _kept(self, write: Callable[[], None]) -> bool:
        """Keep something settled (journal, record); a journal that refuses stops the phase.

        Called in the task that holds what it keeps, before that task gives the
        loop back: so no call can start after a write that failed.
        """
        try:
            write()
        except JournalUnwritable as failure:
            if self._journal_failure is None:
                self._journal_failure = failure
                self._stop()
            return False
        return True

    def _report_settled(self, task: asyncio.Task[RunResult]) -> None:
        if task.cancelled() or task.exception() is not None:
            return
        if self.on_settled is not None:
            self.on_settled(task.result())

    async def _settle(
        self,
        run: PlannedRun,
        earlier: RunResult | None,
        reservation: Reservation | None,
        occurrence: int,
        seq: int,
        slots: tuple[asyncio.Semaphore, asyncio.Semaphore],
    ) -> RunResult:
        """The run's result, handed to the transport in the step that settles it."""
        result = await self._outcome(run, earlier, reservation, occurrence, seq, slots)
        self._kept(lambda: self.transport.settled(run, occurrence, seq, result))
        return result

    async def _outcome(
        self,
        run: PlannedRun,
        earlier: RunResult | None,
        reservation: Reservation | None,
        occurrence: int,
        seq: int,
        slots: tuple[asyncio.Semaphore, asyncio.Semaphore],
    ) -> RunResult:
        if earlier is not None:  # paid for by the invocation that journaled it
            return earlier
        base = RunResult(
            label=run.label,
            kind=run.kind,
            model=run.spec.key,
            status="refused",
            request=run.request,
        )
        if reservation is None:
            return replace(base, error="the spend envelope refused this run before it started")
        envelope = self._envelope
        assert envelope is not None
        if self._cancelled:
            envelope.settle(reservation, 0)
            return replace(base, status="cancelled")
        try:
            waiting = self._batched.get(seq)
            result = (
                await waiting if waiting is not None else await self._call(run, occurrence, slots)
            )
        except asyncio.CancelledError:
            envelope.settle(reservation, 0)
            raise
        envelope.settle(reservation, result.cost_usd)
        return _within_ceiling(run, result)

    async def _call(
        self, run: PlannedRun, occurrence: int, slots: tuple[asyncio.Semaphore, asyncio.Semaphore]
    ) -> RunResult:
        """The call with kb's retries (a transport that does not retry answers once)."""
        limit, provider_limit = slots
        base = RunResult(
            label=run.label, kind=run.kind, model=run.spec.key, status="ok", request=run.request
        )
        started = None
        attempts = 0
        while True:
            if self._cancelled:
                return _ended(base, started, status="cancelled", attempts=attempts)
            # The provider's slot first: a task queued on one busy provider must not
            # sit on a global slot that another provider's run could use.
            async with provider_limit, limit:
                if started is None:
                    await self.transport.ready(run)  # not the provider's time: not latency
                    started = time.monotonic()
                if self._cancelled:  # stopped while this run waited: it sends nothing
                    continue
                attempts += 1
                timeout_s = float(run.spec.params.get("timeout_s", self.config.timeout_s))
                try:
                    reply = await self._attempt(run, occurrence, timeout_s)
                except ProviderFailure as failure:
                    error = failure
                else:
                    return _answered(base, reply, attempts, started)
            if (
                not self.transport.retries
                or not error.retryable
                or attempts > self.config.max_retries
            ):
                return _ended(base, started, status="error", error=error.message, attempts=attempts)
            await asyncio.sleep(self._backoff(attempts, error.retry_after))

    async def _attempt(self, run: PlannedRun, occurrence: int, timeout_s: float) -> Reply:
        """One attempt at the call, counted in flight from when it is sent until it ends."""
        self._in_flight += 1
        try:
            return await self.transport.complete(run, occurrence, timeout_s)
        finally:
            self._in_flight -= 1

    def _batch_groups(
        self,
        runs: Sequence[PlannedRun],
        prepaid: Sequence[RunResult | None],
        reservations: Sequence[Reservation | None],
        seqs: Sequence[int],
    ) -> list[tuple[list[int], list[asyncio.Future[RunResult]]]]:
        """The runs the batch transport takes, grouped (indexes in plan order); futures set up.

        Only runs that will really call a provider: not prepaid, authorized.
        """
        if self.batches is None:
            return []
        groups: dict[Hashable, list[int]] = {}
        for index, (run, earlier, reservation) in enumerate(
            zip(runs, prepaid, reservations, strict=True)
        ):
            if earlier is None and reservation is not None and self.batches.accepts(run):
                groups.setdefault(self.batches.group(run), []).append(index)
        loop = asyncio.get_running_loop()
        found = []
        for members in groups.values():
            futures: list[asyncio.Future[RunResult]] = [loop.create_future() for _ in members]
            for index, future in zip(members, futures, strict=True):
                self._batched[seqs[index]] = future
            found.append((members, futures))
        return found

    async def _run_batch(
        self, runs: Sequence[PlannedRun], futures: Sequence[asyncio.Future[RunResult]]
    ) -> None:
        """Let the batch transport settle ``runs``; each run's future gets its result."""
        assert self.batches is not None
        try:
            results = await self.batches.settle(runs, _BatchPhase(self), self.on_batch)
        except asyncio.CancelledError:
            for run, future in zip(runs, futures, strict=True):
                if not future.done():
                    cut = RunResult(
                        run.label, run.kind, run.spec.key, "cancelled", request=run.request
                    )
                    future.set_result(cut)
            raise
        for future, result in zip(futures, results, strict=True):
            if not future.done():
                future.set_result(result)

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        """Jittered exponential back-off; never shorter than the provider's ``retry-after``."""
        exponential = min(
            self.config.backoff_max_s, self.config.backoff_base_s * 2.0 ** (attempt - 1)
        )
        delay: float = exponential * random.uniform(0.5, 1.0)
        if retry_after is not None:
            # Honour the provider, up to a bound: a retry-after of hours is a refusal.
            delay = max(delay, min(retry_after, max(self.config.backoff_max_s * 4, 120.0)))
        return delay


class _BatchPhase:
    """What the engine lets a batch transport ask of the running phase."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._ledger = ledger_of(engine.transport)

    @property
    def stopped(self) -> bool:
        return self._engine._cancelled

    def batch_for(self, members: str) -> str | None:
        return self._ledger.batch_for(members) if self._ledger is not None else None

    def note_batch(self, members: str, batch_id: str) -> bool:
        ledger = self._ledger
        if ledger is None:
            return True
        if self._engine._kept(lambda: ledger.record_batch(members, batch_id)):
            return True
        self._engine._unjournaled_batches.append(batch_id)  # billed; no resume will know it
        return False

    def note_batch_end(self, batch_id: str, status: str) -> None:
        ledger = self._ledger
        if ledger is not None:
            self._engine._kept(lambda: ledger.record_batch_end(batch_id, status))

    def opened(self, batch_id: str) -> None:
        self._engine.open_batches.add(batch_id)

    def closed(self, batch_id: str) -> None:
        self._engine.open_batches.discard(batch_id)


def _authorize(
    runs: Sequence[PlannedRun], prepaid: Sequence[RunResult | None], envelope: SpendEnvelope
) -> list[Reservation | None]:
    """Every run's authorization, in plan order, before the first call (prepaid: free)."""
    if envelope.cap is not None:
        unbounded = [run.label for run in runs if run.ceiling_usd is None]
        if unbounded:
            raise ConfigError(
                "budgets",
                f"a capped envelope needs a per-run ceiling on every run "
                f"({len(unbounded)} without one, e.g. {unbounded[0]})",
            )
    return [
        Reservation(run.label, 0)
        if earlier is not None
        else envelope.authorize(run.label, run.ceiling_usd if run.ceiling_usd is not None else 0)
        if envelope.cap is not None or run.ceiling_usd is not None
        else Reservation(run.label, 0)
        for run, earlier in zip(runs, prepaid, strict=True)
    ]


def _answered(base: RunResult, reply: Reply, attempts: int, started: float) -> RunResult:
    """The run as its reply settles it (a replayed failure settles ``error``)."""
    ended = time.monotonic()
    return replace(
        base,
        status="error" if reply.error is not None else "ok",
        error=reply.error,
        output=reply.output,
        usage=reply.usage,
        cost_usd=reply.cost_usd,
        price_source=reply.price_source,
        attempts=reply.attempts if reply.attempts is not None else attempts,
        replayed=reply.replayed,
        started_at=ended if reply.replayed else started,
        ended_at=ended,
    )


def _ended(base: RunResult, started: float | None, **changes: Any) -> RunResult:
    return replace(base, started_at=started, ended_at=time.monotonic(), **changes)


def _within_ceiling(run: PlannedRun, result: RunResult) -> RunResult:
    """A run that cost more than its own ceiling settles ``exhausted`` (never graded)."""
    if (
        result.status == "ok"
        and run.ceiling_usd is not None
        and result.cost_usd > 0
        and debit_micros(result.cost_usd) > debit_micros(run.ceiling_usd)
    ):
        return replace(
            result,
            status="exhausted",
            error=f"cost ${result.cost_usd:.6f} exceeded the run's ceiling ${run.ceiling_usd:.6f}",
        )
    return result


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _stop_on_signals(stop: Callable[[str], None]) -> list[tuple[signal.Signals, Any]]:
    """Route SIGINT/SIGTERM to ``stop`` while a phase runs (main thread only).

    Returns each watched signal with the handler it had, to put back after.
    """
    loop = asyncio.get_running_loop()
    watched = []
    for sig in _STOP_SIGNALS:
        previous = signal.getsignal(sig)
        try:
            loop.add_signal_handler(sig, stop, sig.name)
        except (NotImplementedError, RuntimeError, ValueError):
            continue  # not the main thread, or no signals here: Ctrl-C still raises
        watched.append((sig, previous))
    return watched


def _unwatch(watched: Sequence[tuple[signal.Signals, Any]]) -> None:
    loop = asyncio.get_running_loop()
    for sig, previous in watched:
        loop.remove_signal_handler(sig)
        signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
