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
  honouring ``retry-after``) for a transport that retries; within those
  limits each rate-limit bucket is paced from the provider's own headers
  and 429s (:mod:`kb.engine.pacing`), which changes when a call is sent,
  never what is sent;
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
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from kb.engine.budget import Reservation, SpendEnvelope, debit_micros, usd
from kb.engine.config import EngineConfig
from kb.engine.pacing import (
    PROBE_EVERY_S,
    BucketPace,
    PaceNote,
    RateLimits,
    estimated_tokens,
    read_rate_headers,
)
from kb.engine.providers import local
from kb.engine.refusals import ModelRefusals
from kb.engine.requests import (
    ModelSpec,
    credentials_of,
    cut_secrets,
    endpoint,
    parse_ref,
    secrets_to_cut,
)
from kb.engine.runs import PlannedRun, RunResult
from kb.engine.shared_buckets import SharedBuckets, open_share
from kb.engine.transports import compose, save_recordings
from kb.engine.transports.base import BatchTransport, Reply, Transport, ledger_of
from kb.engine.transports.live import LiveTransport
from kb.errors import (
    ConfigError,
    DeadlinePassed,
    JobInterrupted,
    JournalUnwritable,
    KbError,
    ProviderFailure,
)

if TYPE_CHECKING:
    from kb.engine.batch import BatchState
    from kb.engine.cassette import Cassette
    from kb.engine.journal import JournalState, RunJournal
    from kb.engine.transports.journaled import JournaledTransport
    from kb.engine.workers import WorkerPool

__all__ = ["Engine", "EngineConfig", "PlannedRun"]


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
    on_pace: Callable[[PaceNote], None] | None = None
    """Called after each answer once a provider has spoken of its rate limits (progress)."""
    on_note: Callable[[str], None] | None = None
    """Called once per thing a person should know while the job waits (a spent quota)."""
    notes: list[str] = field(default_factory=list, init=False)
    """Everything :attr:`on_note` was told, in order."""
    on_warning: Callable[[str], None] | None = None
    """Called once per thing that went wrong and did not stop the job (a lost Redis)."""
    warnings: list[str] = field(default_factory=list, init=False)
    """Everything :attr:`on_warning` was told, in order."""
    sharing: SharedBuckets | None = field(default=None, init=False)
    """How this job's buckets are shared with other processes (``None``: not at all)."""
    rate_limits: RateLimits = field(init=False)
    """Each rate-limit bucket's pacing, and the 429s met so far (:mod:`kb.engine.pacing`)."""
    refusals: ModelRefusals = field(default_factory=ModelRefusals, init=False)
    """Models whose first calls were all refused alike: not called again (:mod:`.refusals`)."""
    open_batches: set[str] = field(default_factory=set, init=False)
    """Batches created and not yet finished (an interruption says they are still billed)."""
    interrupted_by: str | None = field(default=None, init=False)
    """The signal (``SIGINT``/``SIGTERM``) that stopped a phase, if one did."""
    cut_short: int | None = field(default=None, init=False)
    """Calls in flight when a phase was stopped (a signal, the journal): sent, not settled."""
    _numbering: Numbering = field(default_factory=lambda: Numbering(), init=False)
    _cancelled: bool = field(default=False, init=False)
    _envelope: SpendEnvelope | None = field(default=None, init=False)
    _batched: dict[int, asyncio.Future[RunResult]] = field(default_factory=dict, init=False)
    _in_flight: int = field(default=0, init=False)
    _journal_failure: JournalUnwritable | None = field(default=None, init=False)
    _unjournaled_batches: list[str] = field(default_factory=list, init=False)
    _phase_tasks: list[asyncio.Task[Any]] = field(default_factory=list, init=False)
    _paced: asyncio.Event | None = field(default=None, init=False)
    """Set (and replaced) whenever a call comes back: a paced call may go now."""
    _gates: dict[BucketPace, asyncio.Lock] = field(default_factory=dict, init=False)
    """Each bucket's queue of calls waiting on its pace (made anew each phase: each
    phase runs in its own event loop)."""
    _secrets: tuple[str, ...] = field(default=(), init=False)
    """The job's credentials (:meth:`keep_secrets`), cut from every error it settles."""
    _known: tuple[str, ...] = field(default=(), init=False)

    def __post_init__(self) -> None:
        self.rate_limits = RateLimits(min(self.config.concurrency, self.config.per_provider))
        share = open_share(self.config.rate_limits)
        if share is not None:
            self.sharing = SharedBuckets.of(share, time.time(), time.monotonic())
            self.sharing.on_lost = self._warn
            self.rate_limits.make = self.sharing

    @classmethod
    def build(
        cls,
        config: EngineConfig | None = None,
        *,
        cassette: Cassette | None = None,
        workers: WorkerPool | None = None,
    ) -> Engine:
        """The engine of a job, its transports composed in one place (:func:`compose`)."""
        config = config or EngineConfig()
        return cls(config, *compose(config, cassette, workers))

    def keep_secrets(self, models: Iterable[ModelSpec]) -> None:
        """Cut these models' credentials from every text the engine settles, whichever run.

        A job names every model it may meet (targets, judges, canary members) once
        at its start: a provider's error body may quote *another* model's key, and
        only a job knows them all. Each phase adds its own runs' models as well.
        """
        found = list(self._secrets)
        for model in {model.key: model for model in models}.values():
            found += credentials_of(model.params)
        if tuple(dict.fromkeys(found)) != self._secrets or not self._known:
            self._secrets = tuple(dict.fromkeys(found))
            self._known = secrets_to_cut(self._secrets)  # with the environment's

    @property
    def secrets(self) -> tuple[str, ...]:
        """What :meth:`cut` cuts: the job's credentials and the environment's, longest first."""
        return self._known

    def cut(self, text: str) -> str:
        """``text`` without any secret of the job (:meth:`keep_secrets`)."""
        return cut_secrets(text, self._known)

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
        save_recordings(self.transport)

    def close(self) -> None:
        """Let go of the rate-limit share (its lock files, its Redis connection)."""
        if self.sharing is not None:
            self.sharing.close()

    async def _run_phase(
        self, runs: Sequence[PlannedRun], envelope: SpendEnvelope
    ) -> list[RunResult]:
        self._envelope = envelope
        self._paced = asyncio.Event()
        self._gates = {}
        self.keep_secrets(run.spec for run in runs)
        prepaid = [self.transport.prepaid(run) for run in runs]
        _local_preflight(run for run, earlier in zip(runs, prepaid, strict=True) if earlier is None)
        reservations = _authorize(runs, prepaid, envelope)
        numbering = [self._numbering.next(run.request.key) for run in runs]
        limit = asyncio.Semaphore(self.config.concurrency)
        per_provider: dict[str, asyncio.Semaphore] = {}
        batches = _batch_groups(self, runs, prepaid, reservations, [seq for _, seq in numbering])
        self._phase_tasks = []
        watched = _stop_on_signals(self._interrupt)
        timer = self._deadline_timer()
        tasks: list[asyncio.Task[RunResult]] = []
        try:
            async with asyncio.TaskGroup() as group:
                self._phase_tasks += [
                    group.create_task(_run_batch(self, [runs[i] for i in members], futures))
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
            if timer is not None:
                timer.cancel()
            self._batched.clear()
            self._phase_tasks = []
            await self.transport.aclose()
        stopped = _stopped(self)
        if stopped is not None:
            raise stopped
        return [task.result() for task in tasks]

    def _deadline_timer(self) -> asyncio.TimerHandle | None:
        """Stop the phase when the deadline passes (at once if it has passed already)."""
        deadline = self.config.deadline
        if deadline is None:
            return None
        left = deadline - time.time()
        if left <= 0:  # before the first call starts, not after
            self._interrupt(DEADLINE)
            return None
        return asyncio.get_running_loop().call_later(left, self._interrupt, DEADLINE)

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
        if result.error:  # an error body may quote any model's key, not only this run's
            result = replace(result, error=self.cut(result.error))
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
        """The call, once the model's first calls allow it (:mod:`kb.engine.refusals`)."""
        refusals = self.refusals
        while not (refusals.may_send(run) or self._cancelled or refusals.stopped_for(run)):
            changed = self._paced  # set whenever any call comes back
            assert changed is not None
            await changed.wait()
        refusals.sending(run)
        settled = False
        try:
            result = await self._attempts(run, occurrence, slots)
            settled = result.status == "ok" or (result.status == "error" and result.attempts > 0)
            return result
        finally:
            if not settled:
                refusals.unsent(run)  # cancelled, or never sent: it tells nothing

    async def _attempts(
        self, run: PlannedRun, occurrence: int, slots: tuple[asyncio.Semaphore, asyncio.Semaphore]
    ) -> RunResult:
        """The call with kb's retries (a transport that does not retry answers once)."""
        limit, provider_limit = slots
        base = RunResult(
            label=run.label, kind=run.kind, model=run.spec.key, status="ok", request=run.request
        )
        started = None
        attempts = 0
        limited = 0  # calls answered 429: sent (counted in attempts), never a spent try
        bucket = self.rate_limits.bucket(_bucket_key(run))
        tokens = estimated_tokens(run.request.messages, run.request.call_params.get("max_tokens"))
        refusals = self.refusals
        while True:
            if self._cancelled:
                return _ended(base, started, status="cancelled", attempts=attempts)
            if refusals.stopped_for(run) is not None:  # what cannot succeed is not paid for
                return _ended(base, started, status="error", error=refusals.skip(run))
            # The bucket's pace first (waiting on it holds no slot another bucket could
            # use), then the provider's slot: a task queued on one busy provider must not
            # sit on a global slot that another provider's run could use.
            sent = await self._pace(bucket, tokens)
            heard: tuple[Mapping[str, str] | None, bool] | None = None  # None: never sent
            try:
                async with provider_limit, limit:
                    if started is None:
                        await self.transport.ready(run)  # not the provider's time: not latency
                        started = time.monotonic()
                    if self._cancelled or refusals.stopped_for(run) is not None:
                        continue  # stopped while this run waited: it sends nothing
                    attempts += 1
                    timeout_s = float(run.spec.params.get("timeout_s", self.config.timeout_s))
                    try:
                        reply = await self._attempt(run, occurrence, timeout_s)
                    except ProviderFailure as failure:
                        error = failure
                        heard = (failure.headers, failure.status_code == 429)
                    else:
                        heard = (reply.headers, False)
                        refusals.settled(run, None)
                        return _answered(base, reply, attempts, started)
            finally:
                if heard is None:
                    bucket.unsent(sent)
                else:
                    self._answered_pace(run, bucket, sent, *heard)
            if rate_limited(error) and self.transport.retries:
                limited += 1
                await self._wait_out(error, limited)
                continue
            if (
                not self.transport.retries
                or not error.retryable
                or attempts - limited > self.config.max_retries
            ):
                refusals.settled(run, error.status_code or 0, self.cut(error.message))
                return _ended(base, started, status="error", error=error.message, attempts=attempts)
            await asyncio.sleep(backoff_s(self.config, attempts - limited, error.retry_after))

    async def _wait_out(self, error: ProviderFailure, limited: int) -> None:
        """A rate-limited call waits, then is sent again, whatever its retries (SPEC 14.4).

        The bucket's hold does the waiting; a 429 with no real hold backs off (up to
        ``backoff_max_s``) so a spent quota is not hammered. Only ``--deadline`` (or a
        signal) stops the night.
        """
        if (error.retry_after or 0.0) < 1.0:
            await asyncio.sleep(backoff_s(self.config, limited, None))

    async def _pace(self, bucket: BucketPace, tokens: float) -> int:
        """Until ``bucket`` may send a call of ``tokens``; the call's send number.

        The bucket's calls queue on its gate in order, and only the first waits on
        the pace: when a call comes back one waiter per bucket wakes, not every
        queued run of a large phase (which would make each answer cost O(runs)).
        """
        gate = self._gates.get(bucket)
        if gate is None:
            gate = self._gates[bucket] = asyncio.Lock()
        async with gate:
            while True:
                sent, wait = bucket.try_send(tokens, time.monotonic())
                if sent is not None:
                    return sent
                changed = self._paced
                assert changed is not None
                try:
                    # woken early when a call of any bucket comes back (a slot or a reading)
                    await asyncio.wait_for(changed.wait(), timeout=wait)
                except TimeoutError:
                    pass

    def _answered_pace(
        self,
        run: PlannedRun,
        bucket: BucketPace,
        sent: int,
        headers: Mapping[str, str] | None,
        limited: bool,
    ) -> None:
        """A call of ``bucket`` came back (or was never sent): what it said, for the pace."""
        limits = self.rate_limits
        reading = read_rate_headers(headers, time.time()) if headers else None
        spent = bucket.answered(sent, reading, limited, time.monotonic())
        if spent is not None:  # once per bucket: the night waits, and says until when
            self._note(quota_note(run, spent))
        if limited:
            limits.limited += 1
        else:
            limits.sent(time.monotonic())  # the rate shown: calls the provider answered
        if reading is not None or limited:
            limits.heard = True
        if limits.heard and self.on_pace is not None:
            now = time.monotonic()
            self.on_pace(PaceNote(limits.per_minute(now), limits.limited))
        if self._paced is not None:
            self._paced.set()
            self._paced = asyncio.Event()

    def _note(self, line: str) -> None:
        self.notes.append(line)
        if self.on_note is not None:
            self.on_note(line)

    def _warn(self, line: str) -> None:
        self.warnings.append(line)
        if self.on_warning is not None:
            self.on_warning(line)

    async def _attempt(self, run: PlannedRun, occurrence: int, timeout_s: float) -> Reply:
        """One attempt at the call, counted in flight from when it is sent until it ends."""
        self._in_flight += 1
        try:
            return await self.transport.complete(run, occurrence, timeout_s)
        finally:
            self._in_flight -= 1


@contextmanager
def journaled(
    engine: Engine, journal: RunJournal, state: JournalState | None
) -> Iterator[JournaledTransport]:
    """While the block runs, ``engine``'s settled runs are journaled and ``state``'s reused.

    Yields the journaling transport (:meth:`JournaledTransport.forget` takes
    journaled runs back from reuse mid-job).
    """
    from kb.engine.transports.journaled import JournaledTransport

    inner = engine.transport
    wrapper = JournaledTransport(inner, journal, state)
    engine.transport = wrapper
    try:
        yield wrapper
    finally:
        engine.transport = inner


DEADLINE = "the deadline"
"""What :attr:`Engine.interrupted_by` holds when ``--deadline`` stopped the phase."""


def quota_note(run: PlannedRun, wait_s: float) -> str:
    """The one line a spent quota gets: whose, until when, and what kb does meanwhile."""
    until = datetime.fromtimestamp(time.time() + wait_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    where = endpoint(run.request)
    at = f" at {where}" if where else ""
    return (
        f"{run.spec.key}{at}: the provider says its quota is spent until {until}; kb sends "
        f"one call every {PROBE_EVERY_S:.0f} s to see whether it is back (--deadline stops "
        "the night, its runs journaled)"
    )


BILLING_429 = ("insufficient_quota",)
"""The error code of a 429 whose account cannot pay (OpenAI's ``insufficient_quota``): a
refusal that waiting does not end, so it is retried and settled like any error. Only the
code: Gemini's per-minute 429 also says "check your plan and billing details"."""


def rate_limited(error: ProviderFailure) -> bool:
    """Whether ``error`` is a rate limit (a 429 that waiting ends), which spends no attempt."""
    if error.status_code != 429:
        return False
    said = error.message.lower()
    return not any(word in said for word in BILLING_429)


def _bucket_key(run: PlannedRun) -> tuple[str, str, str, str]:
    """The provider's rate-limit unit: endpoint, key (its variable's name) and model."""
    key = run.spec.params.get("api_key_env")
    return (run.spec.provider, endpoint(run.request) or "", str(key or ""), run.request.model)


def _stopped(engine: Engine) -> KbError | None:
    """What a stopped phase ends in: one error saying what it cut short (the journal's first)."""
    batches = sorted(engine.open_batches)
    if engine._journal_failure is not None:
        return engine._journal_failure.stopped(
            engine.cut_short or 0, batches, engine._unjournaled_batches
        )
    if engine.interrupted_by == DEADLINE:
        assert engine.config.deadline is not None
        return DeadlinePassed(
            datetime.fromtimestamp(engine.config.deadline, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            engine.spent_usd,
            batches,
            in_flight=engine.cut_short or 0,
            resumable=engine.resumable,
        )
    if engine.interrupted_by is not None:
        return JobInterrupted(
            engine.interrupted_by,
            engine.spent_usd,
            batches,
            in_flight=engine.cut_short or 0,
            resumable=engine.resumable,
        )
    return None


class Numbering:
    """Each request's occurrence (identical requests before it) and its place in the job.

    Taken in plan order for a whole phase before its first call, so a
    cassette's n-th identical request is the same at any concurrency.
    """

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}
        self._seq = 0

    def next(self, key: str) -> tuple[int, int]:
        """The next run's (occurrence, seq)."""
        found = (self._seen.get(key, 0), self._seq)
        self._seen[key] = found[0] + 1
        self._seq += 1
        return found


def _batch_groups(
    engine: Engine,
    runs: Sequence[PlannedRun],
    prepaid: Sequence[RunResult | None],
    reservations: Sequence[Reservation | None],
    seqs: Sequence[int],
) -> list[tuple[list[int], list[asyncio.Future[RunResult]]]]:
    """The runs the engine's batch transport takes, grouped (indexes in plan order).

    Only runs that will really call a provider: not prepaid, authorized. Each
    run's future is where its live task waits for the batch's answer.
    """
    if engine.batches is None:
        return []
    groups: dict[Hashable, list[int]] = {}
    for index, (run, earlier, reservation) in enumerate(
        zip(runs, prepaid, reservations, strict=True)
    ):
        if earlier is None and reservation is not None and engine.batches.accepts(run):
            groups.setdefault(engine.batches.group(run), []).append(index)
    loop = asyncio.get_running_loop()
    found = []
    for members in groups.values():
        futures: list[asyncio.Future[RunResult]] = [loop.create_future() for _ in members]
        for index, future in zip(members, futures, strict=True):
            engine._batched[seqs[index]] = future
        found.append((members, futures))
    return found


async def _run_batch(
    engine: Engine, runs: Sequence[PlannedRun], futures: Sequence[asyncio.Future[RunResult]]
) -> None:
    """Let the batch transport settle ``runs``; each run's future gets its result."""
    assert engine.batches is not None
    try:
        results = await engine.batches.settle(runs, _BatchPhase(engine), engine.on_batch)
    except asyncio.CancelledError:
        for run, future in zip(runs, futures, strict=True):
            if not future.done():
                cut = RunResult(run.label, run.kind, run.spec.key, "cancelled", request=run.request)
                future.set_result(cut)
        raise
    for future, result in zip(futures, results, strict=True):
        if not future.done():
            future.set_result(result)


def backoff_s(config: EngineConfig, attempt: int, retry_after: float | None) -> float:
    """Jittered exponential back-off; never shorter than the provider's ``retry-after``."""
    # (the exponent capped: a night of 429s counts its back-offs past any float's range)
    exponential = min(config.backoff_max_s, config.backoff_base_s * 2.0 ** min(attempt - 1, 60))
    delay: float = exponential * random.uniform(0.5, 1.0)
    if retry_after is not None:
        # Honour the provider, up to a bound: a retry-after of hours is a refusal.
        delay = max(delay, min(retry_after, max(config.backoff_max_s * 4, 120.0)))
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


def _local_preflight(runs: Iterable[PlannedRun]) -> None:
    """A bundled model that cannot run is refused before the first call (exit 2), once."""
    checked: set[str] = set()
    for run in runs:
        which = f"{run.spec.ref} {run.spec.params.get('model_path')}"
        if run.spec.provider == "local" and which not in checked:
            checked.add(which)
            local.preflight(parse_ref(run.spec.ref).name, run.spec.params)


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
        logprobs=reply.logprobs,
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
