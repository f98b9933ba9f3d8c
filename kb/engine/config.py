"""How hard an engine drives providers: concurrency, timeouts, retries, batches, a deadline.

Its own module so that what composes an engine's transports
(:func:`kb.engine.transports.compose`) can read it without importing the
scheduler that runs them (the scheduler imports the transports).
"""

from __future__ import annotations

from dataclasses import dataclass

from kb.engine.shared_buckets import RateLimitSetting
from kb.errors import ConfigError


@dataclass(frozen=True)
class EngineConfig:
    """How hard to drive providers."""

    concurrency: int = 8
    """Calls in flight at once, across all providers."""
    per_provider: int = 8
    """Calls in flight at once per provider (the part of the ref before ``:``)."""
    timeout_s: float = 120.0
    """Per-call timeout; a call that takes longer is retried, then settles ``error``."""
    max_retries: int = 3
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    batch: bool = False
    """Send the runs of providers with a batch API as batches (:mod:`kb.engine.batch`)."""
    batch_poll_s: float = 2.0
    """The first wait before polling a batch; it doubles up to ``batch_poll_max_s``."""
    batch_poll_max_s: float = 60.0
    deadline: float | None = None
    """When the job must stop (wall-clock seconds since the epoch, ``--deadline``): no call
    starts after it, the calls in flight are cut short, what settled stays journaled."""
    rate_limits: RateLimitSetting | None = None
    """Where rate-limit buckets are shared with other processes (SPEC 14.4,
    :mod:`kb.engine.shared_buckets`); ``None``: paced in this process alone. The CLI
    gives :func:`~kb.engine.shared_buckets.rate_limit_setting`'s answer."""

    def __post_init__(self) -> None:
        for name in ("concurrency", "per_provider"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(name, f"must be a positive integer, got {value!r}")
        if self.max_retries < 0 or self.timeout_s <= 0:
            raise ConfigError("engine", "max_retries must be >= 0 and timeout_s > 0")
