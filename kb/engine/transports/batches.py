"""The batch APIs kb can use, and one batch transport that routes runs among them.

A new batch API is one file (a class with ``accepts``, ``group`` and
``settle``, see :class:`kb.engine.transports.base.BatchTransport`) and one
line in :data:`BATCH_APIS`. A run goes to the first API that accepts it;
runs no API accepts stay live.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING

from kb.engine.runs import PlannedRun, RunResult
from kb.engine.transports.base import BatchPhase, BatchTransport
from kb.engine.transports.live import LiveTransport

if TYPE_CHECKING:
    from kb.engine.batch import BatchState


def _openai(live: LiveTransport, poll_s: float, poll_max_s: float) -> BatchTransport:
    from kb.engine.transports.openai_batch import OpenAIBatchTransport

    return OpenAIBatchTransport(live, poll_s, poll_max_s)


def _anthropic(live: LiveTransport, poll_s: float, poll_max_s: float) -> BatchTransport:
    from kb.engine.transports.anthropic_batch import AnthropicBatchTransport

    return AnthropicBatchTransport(live, poll_s, poll_max_s)


BATCH_APIS: list[Callable[[LiveTransport, float, float], BatchTransport]] = [_openai, _anthropic]
"""Each batch API kb knows, made from the live transport and the polling intervals."""


class BatchRouter:
    """One batch transport over every API in :data:`BATCH_APIS`."""

    def __init__(self, apis: Sequence[BatchTransport]) -> None:
        self.apis = tuple(apis)

    @classmethod
    def of(cls, live: LiveTransport, poll_s: float, poll_max_s: float) -> BatchRouter:
        """Every registered API, over ``live``'s adapter."""
        return cls([make(live, poll_s, poll_max_s) for make in BATCH_APIS])

    def _api(self, run: PlannedRun) -> int | None:
        return next((i for i, api in enumerate(self.apis) if api.accepts(run)), None)

    def accepts(self, run: PlannedRun) -> bool:
        """Some API takes ``run``."""
        return self._api(run) is not None

    def group(self, run: PlannedRun) -> Hashable:
        """The API's own group, within that API."""
        index = self._api(run)
        assert index is not None
        return (index, self.apis[index].group(run))

    async def settle(
        self,
        runs: Sequence[PlannedRun],
        phase: BatchPhase,
        on_batch: Callable[[BatchState], None] | None,
    ) -> list[RunResult]:
        """The group's API settles it (a group never spans two APIs)."""
        index = self._api(runs[0])
        assert index is not None
        return await self.apis[index].settle(runs, phase, on_batch)
