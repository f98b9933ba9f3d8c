"""Did a model's answer distribution move? The test behind the canary's sensitive tier.

A border probe (SPEC 13.4) is asked K times at temperature 1; its short
answers are counted (``{"red": 9, "blue": 7}``) and compared with the
counts the model gave when the probe was calibrated. The comparison is a
permutation test of the 2 × m contingency table (baseline vs tonight over
the m distinct answers): the statistic is Pearson's chi-square, and its null
distribution is made by shuffling the pooled answers between the two samples
``resamples`` times. Under "the model did not change" both samples are draws
from one distribution, every shuffle is as likely as the observed split, and
the test is exact up to Monte Carlo error — no large-sample approximation,
which matters at K = 16 with answers that are rare.

The p-value is ``(1 + #{shuffles at least as extreme}) / (1 + resamples)``
(never 0, always valid). The shuffles are drawn from a seed made of the
counts themselves, so the same evidence gives the same p-value on every run
and every machine. Bonferroni over the probes of one model-night keeps the
false-alarm rate per model-night at most α.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np

RESAMPLES = 20_000
"""Shuffles per test: a p-value resolves to 1/20,001 (α 0.01 over 8 probes is 1/800)."""


def counts_seed(*tables: Mapping[str, int]) -> int:
    """A seed from the counts (sorted, length-prefixed): same evidence, same p-value."""
    digest = hashlib.sha256()
    for table in tables:
        for answer in sorted(table):
            data = answer.encode("utf-8", "surrogatepass")
            digest.update(len(data).to_bytes(8, "big") + data)
            digest.update(int(table[answer]).to_bytes(8, "big"))
        digest.update(b"\0" * 8)
    return int.from_bytes(digest.digest()[:8], "big")


def _chi_square(tonight: np.ndarray, totals: np.ndarray, n_tonight: int, n_all: int) -> np.ndarray:
    """Pearson's chi-square of each 2 x m table given tonight's row (last axis: answers)."""
    expected_t = totals * (n_tonight / n_all)
    expected_b = totals - expected_t
    baseline = totals - tonight
    with np.errstate(divide="ignore", invalid="ignore"):
        t_part = np.where(expected_t > 0, (tonight - expected_t) ** 2 / expected_t, 0.0)
        b_part = np.where(expected_b > 0, (baseline - expected_b) ** 2 / expected_b, 0.0)
    result: np.ndarray = (t_part + b_part).sum(axis=-1)
    return result


def shift_p_value(
    baseline: Mapping[str, int],
    tonight: Mapping[str, int],
    *,
    resamples: int = RESAMPLES,
    seed: int | None = None,
) -> float:
    """The permutation p-value that ``tonight``'s answers come from ``baseline``'s distribution.

    1.0 when either sample is empty or only one answer was ever given (nothing
    can have moved that the counts could show).
    """
    answers = sorted(set(baseline) | set(tonight))
    base = np.array([int(baseline.get(a, 0)) for a in answers], dtype=np.int64)
    now = np.array([int(tonight.get(a, 0)) for a in answers], dtype=np.int64)
    if (base < 0).any() or (now < 0).any():
        raise ValueError("answer counts cannot be negative")
    n_base, n_now = int(base.sum()), int(now.sum())
    if n_base == 0 or n_now == 0 or int(((base + now) > 0).sum()) < 2:
        return 1.0
    totals = (base + now).astype(np.float64)
    n_all = n_base + n_now
    observed = float(_chi_square(now.astype(np.float64), totals, n_now, n_all))
    rng = np.random.default_rng(counts_seed(baseline, tonight) if seed is None else seed)
    labels = np.repeat(np.arange(len(answers)), base + now)
    extreme = 0
    done = 0
    while done < resamples:  # in blocks: memory stays ~ block x pooled size
        block = min(4_000, resamples - done)
        keys = rng.random((block, n_all))
        chosen = np.argpartition(keys, n_now - 1, axis=1)[:, :n_now] if n_now < n_all else None
        picked = labels[chosen] if chosen is not None else np.broadcast_to(labels, (block, n_all))
        offsets = picked + (np.arange(block) * len(answers))[:, None]
        rows = np.bincount(offsets.ravel(), minlength=block * len(answers)).reshape(
            block, len(answers)
        )
        stats = _chi_square(rows.astype(np.float64), totals, n_now, n_all)
        extreme += int((stats >= observed - 1e-9).sum())
        done += block
    return (1 + extreme) / (1 + resamples)


def bonferroni_alarm(p_values: Sequence[float], alpha: float) -> int | None:
    """The index of the probe whose p-value alarms (the smallest, if below α / m), or ``None``."""
    if not p_values:
        return None
    index = int(np.argmin(p_values))
    return index if p_values[index] < alpha / len(p_values) else None
