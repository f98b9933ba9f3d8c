"""Builders for engine tests."""

from __future__ import annotations

from typing import Any

from kb.engine.cassette import Cassette
from kb.engine.journal import JournalState, RunJournal
from kb.engine.requests import ModelSpec, build_request
from kb.engine.runs import PlannedRun
from kb.engine.scheduler import Engine, EngineConfig
from kb.engine.transports.journaled import JournaledTransport
from kb.engine.workers import WorkerPool

FAST = EngineConfig(concurrency=8, backoff_base_s=0.001, backoff_max_s=0.01, timeout_s=5.0)


def scripted(name: str = "demo", **params: Any) -> ModelSpec:
    return ModelSpec(f"scripted:{name}", params=params)


def plan(spec: ModelSpec, prompts: list[str], ceiling: float | None = None) -> list[PlannedRun]:
    return [
        PlannedRun(f"target:{spec.key}/{i}", "target", spec, build_request(spec, p), ceiling)
        for i, p in enumerate(prompts)
    ]


def engine_for(
    config: EngineConfig | None = None,
    *,
    cassette: Cassette | None = None,
    workers: WorkerPool | None = None,
    journal: RunJournal | None = None,
    settled: JournalState | None = None,
) -> Engine:
    """An engine built as a job builds it, with a journal around it when given one."""
    built = Engine.build(config, cassette=cassette, workers=workers)
    if journal is not None or settled is not None:
        built.transport = JournaledTransport(built.transport, journal, settled)
    return built
