"""Builders for engine tests."""

from __future__ import annotations

from typing import Any

from kb.engine.requests import ModelSpec, build_request
from kb.engine.scheduler import EngineConfig, PlannedRun

FAST = EngineConfig(concurrency=8, backoff_base_s=0.001, backoff_max_s=0.01, timeout_s=5.0)


def scripted(name: str = "demo", **params: Any) -> ModelSpec:
    return ModelSpec(f"scripted:{name}", params=params)


def plan(spec: ModelSpec, prompts: list[str], ceiling: float | None = None) -> list[PlannedRun]:
    return [
        PlannedRun(f"target:{spec.key}/{i}", "target", spec, build_request(spec, p), ceiling)
        for i, p in enumerate(prompts)
    ]
