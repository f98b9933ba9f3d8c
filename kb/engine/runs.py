"""What one provider call became: a settled run.

A run is one target call (a case against a model), one judge call, or one
canary probe. It settles exactly once, in one of five statuses:

* ``ok`` — the provider answered within the run's ceiling;
* ``exhausted`` — it answered but cost more than its ceiling (``budgetUsd``);
  the output is kept for the record and never graded;
* ``error`` — the provider failed after kb's retries (the message is kept);
* ``cancelled`` — the job stopped before the run finished;
* ``refused`` — the spend envelope refused it before it started.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from kb.logprobs import TopLogprobs

if TYPE_CHECKING:
    from kb.engine.requests import ModelSpec, ProviderRequest

RunStatus = Literal["ok", "exhausted", "error", "cancelled", "refused"]
RunKind = Literal["target", "judge", "canary"]
PriceSource = Literal["litellm", "declared", "unpriced"]

"""Where a run's cost came from: litellm's price table, a price the spec (or kb's own
provider) declares, or nowhere (the run's cost is unknown, reported as unpriced)."""


@dataclass(frozen=True)
class Usage:
    """Token counts as the provider reported them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True)
class RunResult:
    """A settled run. Timing fields are the only ones that differ between equal runs."""

    label: str
    """``target:<model>/<case>``, ``judge:<model>/<case>`` or ``canary:<model>/<n>``."""
    kind: RunKind
    model: str
    status: RunStatus
    output: str | None = None
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    error: str | None = None
    attempts: int = 0
    """Provider calls made (retries included); 0 for a refused run; a replay repeats the
    recorded count."""
    replayed: bool = False
    reused: bool = False
    """Served from the run journal of an earlier, stopped invocation (paid then, not now)."""
    started_at: float | None = None
    """Monotonic seconds when the run started (``None`` when it never started)."""
    ended_at: float | None = None
    request: ProviderRequest | None = None
    """What was asked (``None`` for a run refused before it was built into a call)."""
    price_source: PriceSource | None = None
    """Where ``cost_usd`` came from (``None``: the run made no call, or an old cassette)."""
    batch_id: str | None = None
    """The provider's batch the run went in (batch mode); ``None`` for a live call."""
    logprobs: TopLogprobs | None = None
    """The top log-probabilities of each output token, when asked for (``logprobs``) and
    given; the canary's logprob readings (:mod:`kb.sweep.sensitive`) read the first."""

    @property
    def latency_ms(self) -> float | None:
        """Wall time from the run's own start to its end."""
        if self.started_at is None or self.ended_at is None:
            return None
        return (self.ended_at - self.started_at) * 1000.0

    def without_timings(self) -> RunResult:
        """The same run with timing fields cleared (to compare equal runs)."""
        return replace(self, started_at=None, ended_at=None)


@dataclass(frozen=True)
class PlannedRun:
    """One call the job intends to make."""

    label: str
    kind: RunKind
    spec: ModelSpec
    request: ProviderRequest
    ceiling_usd: float | None = None
    """The run's own budget (``budgetUsd``); ``None`` means no per-run ceiling."""
