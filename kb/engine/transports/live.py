"""Answers from providers: litellm in this process, or in worker processes.

The adapter (:mod:`kb.engine.adapter`, the one module that imports litellm)
is made on first use, so a phase that asks no provider (a replay, a night
served from its journal) never pays litellm's import. With a worker pool
(:mod:`kb.engine.workers`), the calls of models it can make go to a worker
and the others are made here.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from kb.engine.runs import PlannedRun, RunResult
from kb.engine.transports.base import Reply
from kb.errors import ProviderFailure

if TYPE_CHECKING:
    from kb.engine.adapter import LiteLLMAdapter, ProviderReply
    from kb.engine.workers import WorkerPool


class LiveTransport:
    """Calls providers (see the module docstring)."""

    retries = True
    resumable = False

    def __init__(self, workers: WorkerPool | None = None) -> None:
        self.workers = workers
        self._adapter: LiteLLMAdapter | None = None

    def adapter(self) -> LiteLLMAdapter:
        """The litellm adapter of this process (imported on first use)."""
        if self._adapter is None:
            from kb.engine.adapter import LiteLLMAdapter

            self._adapter = LiteLLMAdapter()
        return self._adapter

    def _worker_for(self, run: PlannedRun) -> WorkerPool | None:
        workers = self.workers
        return workers if workers is not None and workers.usable(run.spec) else None

    def prepaid(self, run: PlannedRun) -> RunResult | None:
        """Nothing is paid for in advance here."""
        return None

    async def ready(self, run: PlannedRun) -> None:
        """Until litellm is imported here, or a worker is ready for the call."""
        workers = self._worker_for(run)
        if workers is not None:
            await workers.when_ready()
        else:
            self.adapter()

    async def complete(self, run: PlannedRun, occurrence: int, timeout_s: float) -> Reply:
        """One call: in a worker process when there is one for the model, else here."""
        workers = self._worker_for(run)
        if workers is None:
            found = await self.adapter().complete(
                run.spec, run.request, occurrence=occurrence, timeout_s=timeout_s
            )
            return _reply(found)
        try:
            # the worker times the call out itself; this bound only catches a stuck worker
            async with asyncio.timeout(timeout_s + 30):
                found = await workers.complete(
                    run.spec, run.request, occurrence=occurrence, timeout_s=timeout_s
                )
        except TimeoutError:
            raise ProviderFailure("the worker process did not answer", retryable=True) from None
        return _reply(found)

    def settled(self, run: PlannedRun, occurrence: int, seq: int, result: RunResult) -> None:
        """Nothing to keep."""

    async def aclose(self) -> None:
        """Close litellm's connections (a new adapter is made next phase)."""
        if self._adapter is not None:
            await self._adapter.aclose()
            self._adapter = None


def _reply(found: ProviderReply) -> Reply:
    return Reply(
        found.text,
        found.usage,
        found.cost_usd,
        found.price_source,
        headers=found.headers,
        logprobs=found.logprobs,
    )
