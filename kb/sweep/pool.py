"""The sweep's pool: who is measured tonight, and why.

Configured models ∪ subjects of active unexpired weakness claims ∪ the
remeasurement queue, each with its origin. ``kb canary`` probes the same
pool, so it lives below both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kb.engine.requests import ModelSpec
from kb.store.models import ModelClaim
from kb.store.snapshot import Snapshot
from kb.store.ttl import claim_expired, remeasurement_queue


@dataclass(frozen=True)
class PoolMember:
    """A model the sweep measures, and why it is in the pool."""

    spec: ModelSpec
    origin: str
    """``configured``, ``active weakness claim <id>`` or ``remeasurement queue <id>``."""


def build_pool(configured: Sequence[ModelSpec], snapshot: Snapshot, at: int) -> list[PoolMember]:
    """Configured models ∪ subjects of active unexpired weaknesses ∪ the remeasurement queue.

    A subject pulled in from a claim inherits the params of a configured
    model with the same ref (its endpoint and key), else has none.
    """
    pool: dict[str, PoolMember] = {}
    params_by_ref: dict[str, Any] = {}
    for spec in configured:
        pool.setdefault(spec.key, PoolMember(spec, "configured"))
        params_by_ref.setdefault(spec.ref, spec.params)

    def add(claim: ModelClaim, origin: str) -> None:
        spec = ModelSpec(claim.model, claim.effort, params_by_ref.get(claim.model, {}))
        pool.setdefault(spec.key, PoolMember(spec, f"{origin} {claim.id}"))

    for claim in snapshot.claims:
        if (
            claim.status == "active"
            and claim.polarity == "weakness"
            and not claim_expired(claim, at)
        ):
            add(claim, "active weakness claim")
    for claim in remeasurement_queue(snapshot.claims, at):
        add(claim, "remeasurement queue")
    return list(pool.values())
