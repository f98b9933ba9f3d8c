"""OpenAI's batch API as a transport: runs go as files + batches, at the batch price.

:mod:`kb.engine.batch` holds the wire format (the input file, the results,
the states); this module sends a group of runs as one batch through the
live transport's adapter, polls it with back-off, and settles each run from
its answer. The batch id is journaled when it is created (the phase's
ledger), so a resume polls the same batch instead of paying for another;
a batch that ends without completing is journaled as ended. Canary probes
stay live (the drift they look for decides the night's plan).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from kb.engine.batch import (
    BatchAnswer,
    BatchMembers,
    BatchState,
    answered_run,
    batch_state,
    failed_run,
    group_key,
    input_file,
    missing_reason,
    poll_delays,
    read_results,
)
from kb.engine.runs import PlannedRun, PriceSource, RunResult, Usage
from kb.engine.transports.base import BatchPhase
from kb.errors import ProviderFailure

if TYPE_CHECKING:
    from kb.engine.transports.live import LiveTransport


class OpenAIBatchTransport:
    """Sends groups of runs through the batch API (see the module docstring)."""

    def __init__(self, live: LiveTransport, poll_s: float, poll_max_s: float) -> None:
        self.live = live
        self.poll_s = poll_s
        self.poll_max_s = poll_max_s

    def accepts(self, run: PlannedRun) -> bool:
        """A target or judge run of an OpenAI (or OpenAI-compatible) model."""
        return run.kind != "canary" and run.spec.provider == "openai"

    def group(self, run: PlannedRun) -> Hashable:
        """One batch per provider endpoint, key and model."""
        return group_key(run.spec, run.request)

    async def settle(
        self,
        runs: Sequence[PlannedRun],
        phase: BatchPhase,
        on_batch: Callable[[BatchState], None] | None,
    ) -> list[RunResult]:
        """Send ``runs`` as one batch (or poll the one a resume finds), then settle each."""
        names = BatchMembers(tuple((run.label, run.request.key) for run in runs))
        started = time.monotonic()
        batch_id = phase.batch_for(names.key)
        try:
            if batch_id is None:
                if phase.stopped:
                    return [failed_run(run, "cancelled", started, cancelled=True) for run in runs]
                batch_id = await self._submit(runs, names)
                if not phase.note_batch(names.key, batch_id):
                    return [failed_run(run, "cancelled", started, cancelled=True) for run in runs]
            state = await self._wait(runs[0], batch_id, phase, on_batch)
            if state is None:  # stopped while waiting: the batch stays journaled for --resume
                cut = [failed_run(run, "cancelled", started, cancelled=True) for run in runs]
                return [replace(result, batch_id=batch_id) for result in cut]
            answers = await self._answers(runs[0], state)
        except ProviderFailure as failure:
            return [
                replace(failed_run(run, failure.message, started), batch_id=batch_id)
                for run in runs
            ]
        if state.status != "completed":
            phase.note_batch_end(batch_id, state.status)
        ended = time.monotonic()
        return [
            replace(
                self._answered(run, index, names, answers, state, started, ended), batch_id=batch_id
            )
            for index, run in enumerate(runs)
        ]

    async def _submit(self, runs: Sequence[PlannedRun], names: BatchMembers) -> str:
        spec, request = runs[0].spec, runs[0].request
        lines = input_file(names, [run.request for run in runs])
        return str(await self.live.adapter().submit_batch(spec, request, lines, names.key[:16]))

    async def _wait(
        self,
        run: PlannedRun,
        batch_id: str,
        phase: BatchPhase,
        on_batch: Callable[[BatchState], None] | None,
    ) -> BatchState | None:
        """Poll until the batch is done (``None``: the phase stopped first)."""
        adapter = self.live.adapter()
        phase.opened(batch_id)
        delays = poll_delays(self.poll_s, self.poll_max_s)
        while True:
            state = batch_state(await adapter.batch_status(run.spec, run.request, batch_id))
            if on_batch is not None:
                on_batch(state)
            if state.done:
                phase.closed(batch_id)
                return state
            if phase.stopped:
                return None
            await asyncio.sleep(next(delays))

    async def _answers(self, run: PlannedRun, state: BatchState) -> dict[str, BatchAnswer]:
        adapter = self.live.adapter()
        output = (
            await adapter.batch_file(run.spec, run.request, state.output_file_id)
            if state.output_file_id
            else None
        )
        errors = (
            await adapter.batch_file(run.spec, run.request, state.error_file_id)
            if state.error_file_id
            else None
        )
        return dict(read_results(output, errors))

    def _answered(
        self,
        run: PlannedRun,
        index: int,
        names: BatchMembers,
        answers: dict[str, BatchAnswer],
        state: BatchState,
        started: float,
        ended: float,
    ) -> RunResult:
        def price(usage: Usage) -> tuple[float, PriceSource]:
            return self.live.adapter().batch_cost(run.spec, run.request, usage)

        found = answers.get(names.custom_id(index))
        return answered_run(run, found, missing_reason(state), state, price, started, ended)
