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
from kb.store.snapshot import ClaimView, Snapshot
from kb.store.ttl import claim_expired, remeasurement_queue


@dataclass(frozen=True)
class PoolMember:
    """A model in the sweep's pool, why it is there, and whether it can be measured."""

    spec: ModelSpec
    origin: str
    """``configured``, ``active weakness claim <id>`` or ``remeasurement queue <id>``."""
    skipped: str | None = None
    """Why a pulled-in subject is not measured (``None``: it is measured)."""

    @property
    def measured(self) -> bool:
        """The sweep runs this member's cases and its canary."""
        return self.skipped is None


def build_pool(configured: Sequence[ModelSpec], snapshot: Snapshot, at: int) -> list[PoolMember]:
    """Configured models ∪ subjects of active unexpired weaknesses ∪ the remeasurement queue.

    A subject pulled in from a claim is measured only with the params of a
    configured ``[[models]]`` entry of the same model ref (its endpoint, key,
    ``max_tokens``, local weights …): measured any other way, it would be a
    different model under the same name. Without one it is listed as skipped
    and its claims are left untouched.
    """
    pool: dict[str, PoolMember] = {}
    params_by_ref: dict[str, Any] = {}
    for spec in configured:
        pool.setdefault(spec.key, PoolMember(spec, "configured"))
        params_by_ref.setdefault(spec.ref, spec.params)

    def add(claim: ClaimView, origin: str) -> None:
        if claim.subject_key in pool:
            return
        params = params_by_ref.get(claim.model)
        skipped = (
            None
            if params is not None
            else f"no [[models]] entry for {claim.model} gives the params it was measured with"
        )
        spec = ModelSpec(claim.model, claim.effort, params or {})
        pool[spec.key] = PoolMember(spec, f"{origin} {claim.id}", skipped)

    for claim in snapshot.entries:
        if (
            claim.status == "active"
            and claim.polarity == "weakness"
            and not claim_expired(claim, at)
        ):
            add(claim, "active weakness claim")
    for claim in remeasurement_queue(snapshot.entries, at):
        add(claim, "remeasurement queue")
    return list(pool.values())
