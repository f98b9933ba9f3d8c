"""OpenAI's batch API as a transport: runs go as files + batches, at the batch price.

:mod:`kb.engine.batch` holds the wire format (the input file, the results,
the states); this module sends a group of runs as one batch through the
live transport's adapter, polls it with back-off, and settles each run from
its answer. The batch id is journaled when it is created (the phase's
ledger), so a resume polls the same batch instead of paying for another;
a batch that ends without completing is journaled as ended — the life every
batch API shares (:func:`kb.engine.transports.lifecycle.settle_batch`); here
only what OpenAI's API does differently. Canary probes stay live (the drift
they look for decides the night's plan).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING

from kb.engine.batch import (
    BatchAnswer,
    BatchMembers,
    BatchState,
    batch_state,
    group_key,
    input_file,
    missing_reason,
    read_results,
)
from kb.engine.runs import PlannedRun, PriceSource, RunResult, Usage
from kb.engine.transports.base import BatchPhase
from kb.engine.transports.lifecycle import settle_batch

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
        return await settle_batch(
            _OpenAIBatches(self.live, runs[0]),
            runs,
            phase,
            on_batch,
            poll_s=self.poll_s,
            poll_max_s=self.poll_max_s,
            price=self._price,
        )

    def _price(self, run: PlannedRun) -> Callable[[Usage], tuple[float, PriceSource]]:
        def price(usage: Usage) -> tuple[float, PriceSource]:
            return self.live.adapter().batch_cost(run.spec, run.request, usage)

        return price


class _OpenAIBatches:
    """OpenAI's files and batches API for one endpoint and key, through litellm."""

    def __init__(self, live: LiveTransport, first: PlannedRun) -> None:
        self.adapter = live.adapter()
        self.spec, self.request = first.spec, first.request

    async def create(self, runs: Sequence[PlannedRun], members: BatchMembers) -> str:
        """Upload the input file and create the batch."""
        lines = input_file(members, [run.request for run in runs])
        found = await self.adapter.submit_batch(self.spec, self.request, lines, members.key[:16])
        return str(found)

    async def poll(self, batch_id: str) -> BatchState:
        """The batch object litellm retrieves."""
        return batch_state(await self.adapter.batch_status(self.spec, self.request, batch_id))

    def ended(self, state: BatchState) -> bool:
        """Completed, failed, expired or cancelled."""
        return state.done

    async def answers(self, state: BatchState) -> dict[str, BatchAnswer]:
        """The output and error files, read."""

        async def read(file_id: str | None) -> bytes | None:
            if not file_id:
                return None
            return await self.adapter.batch_file(self.spec, self.request, file_id)

        return dict(read_results(await read(state.output_file_id), await read(state.error_file_id)))

    async def cancel(self, batch_id: str) -> None:
        """Not asked of OpenAI here: the batch stays billed, and the journal's failure says so."""

    def missing(self, state: BatchState) -> str:
        """Why a request has no line in either file."""
        return missing_reason(state)
