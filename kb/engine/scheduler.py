"""Running a plan of provider calls: concurrency, retries, budgets, cassettes.

:class:`Engine` takes a *phase* — a list of :class:`PlannedRun` in plan
order — and returns one :class:`RunResult` per run, in plan order. Beyond
rulvar, which calls models one after another, runs execute concurrently
under a global limit and a per-provider limit, with kb's own retries:
429, 5xx, timeouts and connection failures are retried with jittered
exponential back-off, honouring the provider's ``retry-after``.

Concurrency never changes a result. Everything a result depends on is
fixed before the first call: envelope authorizations are taken in plan
order up front (see :mod:`kb.engine.budget`), cassette occurrence numbers
are assigned in plan order, and results are returned in plan order. Only
the timing fields (``started_at``, ``ended_at``) differ between a run at
concurrency 1 and at 64.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from kb.engine.budget import Reservation, SpendEnvelope, debit_micros, usd
from kb.engine.cassette import Cassette, Exchange
from kb.engine.requests import ModelSpec, ProviderRequest, credentials_of
from kb.engine.runs import RunKind, RunResult, RunStatus
from kb.errors import ConfigError, JobInterrupted, JournalUnwritable, KbError

if TYPE_CHECKING:
    from kb.engine.adapter import LiteLLMAdapter
    from kb.engine.batch import BatchState
    from kb.engine.journal import JournalState, RunJournal
    from kb.engine.workers import WorkerPool


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


@dataclass(frozen=True)
class PlannedRun:
    """One call the job intends to make."""

    label: str
    kind: RunKind
    spec: ModelSpec
    request: ProviderRequest
    ceiling_usd: float | None = None
    """The run's own budget (``budgetUsd``); ``None`` means no per-run ceiling."""


@dataclass
class Engine:
    """Executes phases of runs; one engine serves one job (a sweep, a canary …)."""

    config: EngineConfig = field(default_factory=EngineConfig)
    cassette: Cassette | None = None
    on_settled: Callable[[RunResult], None] | None = None
    """Called once per settled run (progress bars); never changes a result."""
    journal: RunJournal | None = None
    """Where every settled run is written as it settles (``kb sweep --resume`` reads it)."""
    settled: JournalState | None = None
    """Runs an earlier, stopped invocation settled ok: served from here, never paid twice."""
    on_batch: Callable[[BatchState], None] | None = None
    """Called after each poll of a batch (progress); never changes a result."""
    workers: WorkerPool | None = None
    """Worker processes that make the calls (:mod:`kb.engine.workers`); ``None``: in-process."""
    _seen: dict[str, int] = field(default_factory=dict, init=False)
    _seq: int = field(default=0, init=False)
    _cancelled: bool = field(default=False, init=False)
    _adapter: LiteLLMAdapter | None = field(default=None, init=False)
    _envelope: SpendEnvelope | None = field(default=None, init=False)
    _batched: dict[int, asyncio.Future[RunResult]] = field(default_factory=dict, init=False)
    open_batches: set[str] = field(default_factory=set, init=False)
    """Batches created and not yet finished (an interruption says they are still billed)."""
    interrupted_by: str | None = field(default=None, init=False)
    """The signal (``SIGINT``/``SIGTERM``) that stopped a phase, if one did."""
    cut_short: int | None = field(default=None, init=False)
    """Calls in flight when a phase was stopped (a signal, the journal): sent, not settled."""
    _in_flight: int = field(default=0, init=False)
    _journal_failure: JournalUnwritable | None = field(default=None, init=False)
    _unjournaled_batches: list[str] = field(default_factory=list, init=False)
    _phase_tasks: list[asyncio.Task[Any]] = field(default_factory=list, init=False)

    @property
    def spent_usd(self) -> float:
        """What the runs settled so far have debited."""
        return usd(self._envelope.debited) if self._envelope is not None else 0.0

    @property
    def in_flight(self) -> int:
        """Calls sent to a provider (or a worker) and not yet answered, right now."""
        return self._in_flight

    @property
    def replaying(self) -> bool:
        """True when answers come from a cassette and no provider is called."""
        return self.cassette is not None and self.cassette.mode == "replay"

    def cancel(self) -> None:
        """Stop: runs not yet finished settle ``cancelled``."""
        self._cancelled = True

    def run(self, runs: Sequence[PlannedRun], envelope: SpendEnvelope) -> list[RunResult]:
        """Execute one phase (blocking); results in plan order."""
        return asyncio.run(self._run_phase(runs, envelope))

    def finish(self) -> None:
        """Write the cassette when recording."""
        if self.cassette is not None and self.cassette.mode == "record":
            self.cassette.save()

    async def _run_phase(
        self, runs: Sequence[PlannedRun], envelope: SpendEnvelope
    ) -> list[RunResult]:
        self._envelope = envelope
        if envelope.cap is not None:
            unbounded = [run.label for run in runs if run.ceiling_usd is None]
            if unbounded:
                raise ConfigError(
                    "budgets",
                    f"a capped envelope needs a per-run ceiling on every run "
                    f"({len(unbounded)} without one, e.g. {unbounded[0]})",
                )
        reused = [self._reusable(run) for run in runs]
        reservations = [
            Reservation(run.label, 0)
            if earlier is not None
            else envelope.authorize(
                run.label, run.ceiling_usd if run.ceiling_usd is not None else 0
            )
            if envelope.cap is not None or run.ceiling_usd is not None
            else Reservation(run.label, 0)
            for run, earlier in zip(runs, reused, strict=True)
        ]
        numbering = []
        for run in runs:
            key = run.request.key
            numbering.append((self._seen.get(key, 0), self._seq))
            self._seen[key] = self._seen.get(key, 0) + 1
            self._seq += 1
        limit = asyncio.Semaphore(self.config.concurrency)
        per_provider: dict[str, asyncio.Semaphore] = {}
        tasks: list[asyncio.Task[RunResult]] = []
        batches = self._batch_groups(runs, reused, reservations, [seq for _, seq in numbering])
        self._phase_tasks = []
        watched = _stop_on_signals(self._interrupt)
        try:
            async with asyncio.TaskGroup() as group:
                self._phase_tasks += [
                    group.create_task(self._run_batch([runs[i] for i in members], futures))
                    for members, futures in batches
                ]
                tasks += [
                    group.create_task(
                        self._settle(
                            run,
                            earlier,
                            reservation,
                            occurrence,
                            seq,
                            envelope,
                            limit,
                            per_provider.setdefault(
                                run.spec.provider, asyncio.Semaphore(self.config.per_provider)
                            ),
                        )
                    )
                    for run, earlier, reservation, (occurrence, seq) in zip(
                        runs, reused, reservations, numbering, strict=True
                    )
                ]
                self._phase_tasks += tasks
                for task in tasks:
                    task.add_done_callback(self._report_settled)
        except* KbError as group_error:
            raise group_error.exceptions[0] from None
        finally:
            _unwatch(watched)
            self._batched.clear()
            self._phase_tasks = []
            if self._adapter is not None:
                await self._adapter.aclose()
                self._adapter = None
        self._raise_if_stopped()
        return [task.result() for task in tasks]

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
                resumable=self.journal is not None,
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

    def _journaled(self, write: Callable[[RunJournal], None]) -> bool:
        """Write to the journal (when there is one); a refused write stops the phase.

        Called in the task that holds what it writes, before that task gives
        the loop back: so no call can start after a write that failed.
        """
        if self.journal is None:
            return True
        try:
            write(self.journal)
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

    def _reusable(self, run: PlannedRun) -> RunResult | None:
        """The journaled ok run of an earlier invocation that asked exactly this."""
        if self.settled is None:
            return None
        return self.settled.reusable(run.label, run.request.key)

    async def _settle(
        self,
        run: PlannedRun,
        earlier: RunResult | None,
        reservation: Reservation | None,
        occurrence: int,
        seq: int,
        envelope: SpendEnvelope,
        limit: asyncio.Semaphore,
        provider_limit: asyncio.Semaphore,
    ) -> RunResult:
        """The run's result, journaled in the step that settles it.

        The call's slots were released in this same step: the journal line is
        on disk (or the phase stopped) before any run waiting on a slot sends.
        """
        result = await self._outcome(
            run, earlier, reservation, occurrence, seq, envelope, limit, provider_limit
        )
        if result.status != "cancelled":
            self._journaled(lambda journal: journal.record(result))
        return result

    async def _outcome(
        self,
        run: PlannedRun,
        earlier: RunResult | None,
        reservation: Reservation | None,
        occurrence: int,
        seq: int,
        envelope: SpendEnvelope,
        limit: asyncio.Semaphore,
        provider_limit: asyncio.Semaphore,
    ) -> RunResult:
        base = RunResult(
            label=run.label,
            kind=run.kind,
            model=run.spec.key,
            status="refused",
            request=run.request,
        )
        if earlier is not None:  # paid for by the invocation that journaled it
            return _replace(earlier, request=run.request, label=run.label, kind=run.kind)
        if reservation is None:
            return _replace(base, error="the spend envelope refused this run before it started")
        if self._cancelled:
            envelope.settle(reservation, 0)
            return _replace(base, status="cancelled")
        try:
            waiting = self._batched.get(seq)
            if waiting is not None:
                result = await waiting
            else:
                result = await self._call(run, occurrence, limit, provider_limit)
        except asyncio.CancelledError:
            envelope.settle(reservation, 0)
            raise
        envelope.settle(reservation, result.cost_usd)
        if (
            result.status == "ok"
            and run.ceiling_usd is not None
            and result.cost_usd > 0
            and debit_micros(result.cost_usd) > debit_micros(run.ceiling_usd)
        ):
            result = _replace(
                result,
                status="exhausted",
                error=f"cost ${result.cost_usd:.6f} exceeded the run's ceiling "
                f"${run.ceiling_usd:.6f}",
            )
        if self.cassette is not None and self.cassette.mode == "record" and not result.replayed:
            self.cassette.record(
                Exchange(
                    key=run.request.key,
                    occurrence=occurrence,
                    seq=seq,
                    request=run.request.canonical(),
                    status="ok" if result.status in ("ok", "exhausted") else "error",
                    output=result.output,
                    usage=result.usage,
                    cost_usd=result.cost_usd,
                    error=None if result.status in ("ok", "exhausted") else result.error,
                    attempts=result.attempts,
                    price_source=result.price_source,
                ),
                credentials_of(run.spec.params),
            )
        return result

    async def _call(
        self,
        run: PlannedRun,
        occurrence: int,
        limit: asyncio.Semaphore,
        provider_limit: asyncio.Semaphore,
    ) -> RunResult:
        base = RunResult(
            label=run.label, kind=run.kind, model=run.spec.key, status="ok", request=run.request
        )
        if self.replaying:
            assert self.cassette is not None
            exchange = self.cassette.lookup(run.request, occurrence, run.label)
            now = time.monotonic()
            status: RunStatus = "ok" if exchange.status == "ok" else "error"
            return _replace(
                base,
                status=status,
                output=exchange.output,
                usage=exchange.usage,
                cost_usd=exchange.cost_usd,
                error=exchange.error,
                attempts=exchange.attempts,
                price_source=exchange.price_source,
                replayed=True,
                started_at=now,
                ended_at=now,
            )
        from kb.errors import ProviderFailure

        started = None
        attempts = 0
        while True:
            if self._cancelled:
                return _replace(
                    base,
                    status="cancelled",
                    attempts=attempts,
                    started_at=started,
                    ended_at=time.monotonic(),
                )
            # The provider's slot first: a task queued on one busy provider must not
            # sit on a global slot that another provider's run could use.
            async with provider_limit, limit:
                if started is None:
                    await self._ready_to_call(run)  # not the provider's time: kept out of latency
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
                    return _replace(
                        base,
                        output=reply.text,
                        usage=reply.usage,
                        cost_usd=reply.cost_usd,
                        price_source=reply.price_source,
                        attempts=attempts,
                        started_at=started,
                        ended_at=time.monotonic(),
                    )
            if not error.retryable or attempts > self.config.max_retries:
                return _replace(
                    base,
                    status="error",
                    error=error.message,
                    attempts=attempts,
                    started_at=started,
                    ended_at=time.monotonic(),
                )
            await asyncio.sleep(self._backoff(attempts, error.retry_after))

    def _batch_groups(
        self,
        runs: Sequence[PlannedRun],
        reused: Sequence[RunResult | None],
        reservations: Sequence[Reservation | None],
        seqs: Sequence[int],
    ) -> list[tuple[list[int], list[asyncio.Future[RunResult]]]]:
        """The runs to send as batches, grouped (indexes in plan order); futures set up.

        Only runs that will really call a provider with a batch API: not served from
        the journal, authorized by the envelope, not replayed from a cassette.
        """
        if not self.config.batch or self.replaying:
            return []
        from kb.engine.batch import batchable, group_key

        groups: dict[tuple[str, str, str], list[int]] = {}
        for index, (run, earlier, reservation) in enumerate(
            zip(runs, reused, reservations, strict=True)
        ):
            # canary probes stay live: the drift they look for decides the night's plan
            if (
                earlier is None
                and reservation is not None
                and run.kind != "canary"
                and batchable(run.spec)
            ):
                groups.setdefault(group_key(run.spec, run.request), []).append(index)
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
        """Send ``runs`` as one batch, wait for it, and settle each run's future."""
        from kb.engine.batch import (
            BatchMembers,
            batch_state,
            input_file,
            missing_reason,
            poll_delays,
            read_results,
        )
        from kb.errors import ProviderFailure

        names = BatchMembers(tuple((run.label, run.request.key) for run in runs))
        spec, request = runs[0].spec, runs[0].request
        started = time.monotonic()
        sent: str | None = None  # the batch id, once the provider has it

        def settle_all(answer: Callable[[int, PlannedRun], RunResult]) -> None:
            for index, (run, future) in enumerate(zip(runs, futures, strict=True)):
                if not future.done():
                    future.set_result(replace(answer(index, run), batch_id=sent))

        def failed(run: PlannedRun, message: str) -> RunResult:
            return RunResult(
                label=run.label,
                kind=run.kind,
                model=run.spec.key,
                status="error",
                request=run.request,
                error=message,
                attempts=1,
                started_at=started,
                ended_at=time.monotonic(),
            )

        def cancelled(_: int, run: PlannedRun) -> RunResult:
            return replace(failed(run, "cancelled"), status="cancelled")

        adapter = self._live_adapter()
        try:
            batch_id = self.settled.batches.get(names.key) if self.settled else None
            if batch_id is None:
                if self._cancelled:
                    settle_all(cancelled)
                    return
                batch_id = await adapter.submit_batch(
                    spec, request, input_file(names, [r.request for r in runs]), names.key[:16]
                )
                created = batch_id
                if not self._journaled(lambda journal: journal.record_batch(names.key, created)):
                    self._unjournaled_batches.append(created)  # billed; no resume will know it
                    settle_all(cancelled)
                    return
            sent = batch_id
            self.open_batches.add(batch_id)
            delays = poll_delays(self.config.batch_poll_s, self.config.batch_poll_max_s)
            while True:
                state = batch_state(await adapter.batch_status(spec, request, batch_id))
                if self.on_batch is not None:
                    self.on_batch(state)
                if state.done:
                    self.open_batches.discard(batch_id)
                    break
                if self._cancelled:  # kb stops waiting; the batch stays journaled for --resume
                    settle_all(cancelled)
                    return
                await asyncio.sleep(next(delays))
            output = (
                await adapter.batch_file(spec, request, state.output_file_id)
                if state.output_file_id
                else None
            )
            errors = (
                await adapter.batch_file(spec, request, state.error_file_id)
                if state.error_file_id
                else None
            )
        except ProviderFailure as failure:
            said = failure.message
            settle_all(lambda _, run: failed(run, said))
            return
        except asyncio.CancelledError:
            settle_all(cancelled)
            raise
        if state.status != "completed":
            over, status = batch_id, state.status
            self._journaled(lambda journal: journal.record_batch_end(over, status))
        answers = read_results(output, errors)
        ended = time.monotonic()

        def answered(index: int, run: PlannedRun) -> RunResult:
            found = answers.get(names.custom_id(index))
            if found is None:
                return failed(run, missing_reason(state))
            if found.text is None:
                return failed(run, f"batch {state.batch_id}: {found.error}")
            cost, source = adapter.batch_cost(run.spec, run.request, found.usage)
            return replace(
                failed(run, ""),
                status="ok",
                error=None,
                output=found.text,
                usage=found.usage,
                cost_usd=cost,
                price_source=source,
                ended_at=ended,
            )

        settle_all(answered)

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

    async def _attempt(self, run: PlannedRun, occurrence: int, timeout_s: float) -> Any:
        """One attempt at the call, counted in flight from when it is sent until it ends."""
        self._in_flight += 1
        try:
            return await self._attempt_once(run, occurrence, timeout_s)
        finally:
            self._in_flight -= 1

    async def _attempt_once(self, run: PlannedRun, occurrence: int, timeout_s: float) -> Any:
        """One attempt at the call: in a worker process when there is one, else here."""
        from kb.errors import ProviderFailure

        workers = self._workers_for(run)
        if workers is None:
            return await self._live_adapter().complete(
                run.spec, run.request, occurrence=occurrence, timeout_s=timeout_s
            )
        try:
            # the worker times the call out itself; this bound only catches a stuck worker
            async with asyncio.timeout(timeout_s + 30):
                return await workers.complete(
                    run.spec, run.request, occurrence=occurrence, timeout_s=timeout_s
                )
        except TimeoutError:
            raise ProviderFailure("the worker process did not answer", retryable=True) from None

    def _workers_for(self, run: PlannedRun) -> WorkerPool | None:
        """The pool that makes this run's calls; ``None``: this process makes them."""
        workers = self.workers
        return workers if workers is not None and workers.usable(run.spec) else None

    async def _ready_to_call(self, run: PlannedRun) -> None:
        """Until a call can be sent: litellm imported here, or a worker ready for it."""
        workers = self._workers_for(run)
        if workers is not None:
            await workers.when_ready()
        else:
            self._live_adapter()

    def _live_adapter(self) -> LiteLLMAdapter:
        if self._adapter is None:
            from kb.engine.adapter import LiteLLMAdapter

            self._adapter = LiteLLMAdapter()
        return self._adapter


def _replace(result: RunResult, **changes: Any) -> RunResult:
    return replace(result, **changes)


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
