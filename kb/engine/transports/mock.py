"""Answers from a function: the in-memory transport for tests and drills.

As httpx's ``MockTransport(handler)``: ``MockTransport(lambda run, n: Reply("yes"))``
answers every call with what the handler returns (or raises: a
:class:`kb.errors.ProviderFailure` is a provider failure, retried as any).
It imports nothing of litellm, so a phase on it runs where litellm is not
installed.
"""

from __future__ import annotations

from collections.abc import Callable

from kb.engine.runs import PlannedRun, RunResult
from kb.engine.transports.base import Reply


class MockTransport:
    """Calls ``handler(run, occurrence)`` for each attempt."""

    retries = True
    resumable = False

    def __init__(self, handler: Callable[[PlannedRun, int], Reply]) -> None:
        self.handler = handler

    def prepaid(self, run: PlannedRun) -> RunResult | None:
        """Nothing is paid for in advance here."""
        return None

    async def ready(self, run: PlannedRun) -> None:
        """Always ready."""

    async def complete(self, run: PlannedRun, occurrence: int, timeout_s: float) -> Reply:
        """The handler's answer."""
        return self.handler(run, occurrence)

    def settled(self, run: PlannedRun, occurrence: int, seq: int, result: RunResult) -> None:
        """Nothing to keep."""

    async def aclose(self) -> None:
        """Nothing to close."""
