"""The transport seam (SPEC 13.2): a phase runs on any transport, a batch API is one class.

The engine keeps order, the envelope, concurrency, retries and signals; a
transport only answers. So an in-memory transport runs a whole phase where
litellm cannot even be imported, and a new batch API is one class plus one
registration line.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path

import pytest

from kb.engine.budget import SpendEnvelope
from kb.engine.runs import PlannedRun, RunResult
from kb.engine.scheduler import Engine, EngineConfig
from kb.engine.transports import batches
from kb.engine.transports.base import BatchPhase, Reply
from kb.engine.transports.mock import MockTransport
from kb.errors import ProviderFailure
from tests.engine_helpers import FAST, plan, scripted

PROJECT = Path(__file__).resolve().parent.parent


def test_a_phase_runs_on_an_in_memory_transport_with_litellm_not_importable() -> None:
    script = """
import sys
sys.modules["litellm"] = None  # any import of litellm now fails
from kb.engine.budget import SpendEnvelope
from kb.engine.scheduler import Engine, EngineConfig
from kb.engine.transports.base import Reply
from kb.engine.transports.mock import MockTransport
from tests.engine_helpers import plan, scripted
answer = MockTransport(lambda run, n: Reply(run.request.key[:6], cost_usd=0.001))
engine = Engine(EngineConfig(concurrency=4), answer)
results = engine.run(plan(scripted(), ["a", "b", "a"], ceiling=0.01), SpendEnvelope.from_usd(1.0))
assert engine.spent_usd == 0.003 and "litellm" not in [m for m in sys.modules if sys.modules[m]]
print([r.status for r in results], len({r.output for r in results}))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=PROJECT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['ok', 'ok', 'ok'] 2"


def test_the_engine_retries_a_transports_failures_and_keeps_plan_order() -> None:
    tries: dict[str, int] = {}

    def flaky(run: PlannedRun, occurrence: int) -> Reply:
        tries[run.label] = tries.get(run.label, 0) + 1
        if tries[run.label] == 1:
            raise ProviderFailure("overloaded", retryable=True)
        return Reply(f"{run.label}#{occurrence}")

    engine = Engine(FAST, MockTransport(flaky))
    results = engine.run(plan(scripted(), ["x", "y", "x"]), SpendEnvelope(cap=None))
    assert [r.output for r in results] == [
        "target:scripted:demo/0#0",
        "target:scripted:demo/1#0",
        "target:scripted:demo/2#1",  # the second identical request: occurrence 1
    ]
    assert [r.attempts for r in results] == [2, 2, 2]


class StubBatchAPI:
    """A batch API that takes every target run and answers them all at once."""

    sent: list[list[str]] = []

    def accepts(self, run: PlannedRun) -> bool:
        return run.kind == "target"

    def group(self, run: PlannedRun) -> Hashable:
        return run.spec.key

    async def settle(
        self,
        runs: Sequence[PlannedRun],
        phase: BatchPhase,
        on_batch: Callable[..., None] | None,
    ) -> list[RunResult]:
        self.sent.append([run.label for run in runs])
        return [
            RunResult(run.label, run.kind, run.spec.key, "ok", "batched", request=run.request)
            for run in runs
        ]


def test_a_new_batch_api_is_one_class_and_one_registration_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(batches, "BATCH_APIS", [lambda live, poll_s, most_s: StubBatchAPI()])
    StubBatchAPI.sent = []
    engine = Engine.build(EngineConfig(batch=True))
    results = engine.run(plan(scripted(), ["a", "b"]), SpendEnvelope(cap=None))
    assert [r.output for r in results] == ["batched", "batched"]
    assert StubBatchAPI.sent == [["target:scripted:demo/0", "target:scripted:demo/1"]]
