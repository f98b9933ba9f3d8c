"""One batch's life, the same for every provider's batch API (as inspect_ai's ``Batcher``).

:func:`settle_batch` creates a batch for a group of runs (or picks up the one
a stopped invocation journaled), journals its id before anything else can
happen to it, polls it with back-off until it ends, reads its answers and
settles each run — answered, or ``error`` with the batch's reason. What
differs between providers is a :class:`BatchApi`: how a batch is created,
polled, read, told ended and cancelled. The rules every API gets:

* a batch the journal could not note is cancelled at once (no resume could
  collect it; an API that cannot cancel leaves it billed, and the journal's
  failure names it);
* a poll that fails on a retryable error is tried again, up to
  :data:`POLL_TRIES` times in a row, before the runs settle ``error`` (the
  batch stays journaled: ``kb sweep --resume`` polls it again);
* a poll that describes another batch is a failure, never a result;
* a phase stopped while a batch runs leaves its runs ``cancelled`` and the
  batch journaled, still open, for ``--resume``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from kb.engine.batch import (
    BatchAnswer,
    BatchMembers,
    BatchState,
    answered_run,
    failed_run,
    poll_delays,
)
from kb.engine.runs import PlannedRun, PriceSource, RunResult, Usage
from kb.engine.transports.base import BatchPhase
from kb.errors import ProviderFailure

POLL_TRIES = 4
"""Consecutive polls that may fail on a retryable error before the batch's runs settle
``error`` (the batch stays journaled: ``kb sweep --resume`` polls it again)."""

Pricer = Callable[[PlannedRun], Callable[[Usage], tuple[float, PriceSource]]]
"""A run's batch price: its usage → (cost, where the price came from)."""


class BatchApi(Protocol):
    """What one provider's batch API does for :func:`settle_batch` (one endpoint and key)."""

    async def create(self, runs: Sequence[PlannedRun], members: BatchMembers) -> str:
        """Send the batch; its id."""
        ...

    async def poll(self, batch_id: str) -> BatchState:
        """The batch as the provider describes it now."""
        ...

    def ended(self, state: BatchState) -> bool:
        """Whether the batch is over (an undocumented status is not: it is polled again)."""
        ...

    async def answers(self, state: BatchState) -> dict[str, BatchAnswer]:
        """Each answered request's line, by custom id."""
        ...

    async def cancel(self, batch_id: str) -> None:
        """Ask the provider to cancel (quietly: nothing kb reports depends on it)."""
        ...

    def missing(self, state: BatchState) -> str:
        """Why a request has no answer, from how the batch ended."""
        ...


async def settle_batch(
    api: BatchApi,
    runs: Sequence[PlannedRun],
    phase: BatchPhase,
    on_batch: Callable[[BatchState], None] | None,
    *,
    poll_s: float,
    poll_max_s: float,
    price: Pricer,
) -> list[RunResult]:
    """Send ``runs`` as one batch (or poll the one a resume finds), then settle each."""
    members = BatchMembers(tuple((run.label, run.request.key) for run in runs))
    started = time.monotonic()
    batch_id = phase.batch_for(members.key)

    def cut() -> list[RunResult]:
        stopped = [failed_run(run, "cancelled", started, cancelled=True) for run in runs]
        return [replace(result, batch_id=batch_id) for result in stopped]

    try:
        if batch_id is None:
            if phase.stopped:
                return cut()
            batch_id = await api.create(runs, members)
            if not phase.note_batch(members.key, batch_id):
                await api.cancel(batch_id)  # no resume could collect it
                batch_id = None
                return cut()
        state = await _wait(api, batch_id, phase, on_batch, poll_s, poll_max_s)
        if state is None:  # stopped while waiting: journaled, --resume polls it again
            return cut()
        answers = await api.answers(state)
    except ProviderFailure as failure:
        failed = [failed_run(run, failure.message, started) for run in runs]
        return [replace(result, batch_id=batch_id) for result in failed]
    if state.status != "completed":
        phase.note_batch_end(batch_id, state.status)
    ended = time.monotonic()
    missing = api.missing(state)
    return [
        replace(
            answered_run(
                run,
                answers.get(members.custom_id(index)),
                missing,
                state,
                price(run),
                started,
                ended,
            ),
            batch_id=batch_id,
        )
        for index, run in enumerate(runs)
    ]


async def _wait(
    api: BatchApi,
    batch_id: str,
    phase: BatchPhase,
    on_batch: Callable[[BatchState], None] | None,
    poll_s: float,
    poll_max_s: float,
) -> BatchState | None:
    """Poll until the batch ended (``None``: the phase stopped first)."""
    phase.opened(batch_id)
    delays = poll_delays(poll_s, poll_max_s)
    failures = 0
    while True:
        try:
            state = await api.poll(batch_id)
        except ProviderFailure as failure:
            failures += 1
            if not failure.retryable or failures >= POLL_TRIES:
                raise
        else:
            failures = 0
            if state.batch_id != batch_id:
                raise ProviderFailure(
                    f"polling the batch {batch_id}: the reply describes another batch",
                    retryable=False,
                )
            if on_batch is not None:
                on_batch(state)
            if api.ended(state):
                phase.closed(batch_id)
                return state
        if phase.stopped:
            return None
        await asyncio.sleep(next(delays))
