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
import itertools
import math
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


LOGPROB_FLOOR = 0.02
"""The smallest move of a logprob reading that is ever reported: 2 points of probability.

A shift is the total-variation distance between the mean top-k distributions of
the baseline's readings and tonight's. A provider that batches requests differently
from night to night moves logprobs by small amounts with no model change; 0.02 is a
chosen floor (kb has not measured hosted providers' jitter), documented in the README.
"""
MAX_SPLITS = 20_000
"""Splits enumerated exactly up to this many, else sampled (seeded by the readings)."""


def readings_matrix(readings: Sequence[Mapping[str, float]], tokens: Sequence[str]) -> np.ndarray:
    """[readings, tokens] probabilities (``exp`` of each logprob; a token not listed: 0).

    A reading whose top-k claims more than probability 1 (no real one does) is
    scaled down to 1, so a distance stays within [0, 1].
    """
    matrix = np.array(
        [[float(np.exp(r[t])) if t in r else 0.0 for t in tokens] for r in readings],
        dtype=np.float64,
    )
    totals = matrix.sum(axis=1, keepdims=True)
    scaled: np.ndarray = np.where(totals > 1.0, matrix / np.maximum(totals, 1.0), matrix)
    return scaled


def _readings_seed(matrix: np.ndarray) -> int:
    return int.from_bytes(
        hashlib.sha256(np.ascontiguousarray(matrix).tobytes()).digest()[:8], "big"
    )


def logprob_shift(
    baseline: Sequence[Mapping[str, float]],
    tonight: Sequence[Mapping[str, float]],
    *,
    floor: float = LOGPROB_FLOOR,
    max_splits: int = MAX_SPLITS,
) -> tuple[float, float]:
    """(p-value, distance) that ``tonight``'s readings come from ``baseline``'s model.

    Each reading is one temperature-0 answer's first-token top-k (token → logprob).
    The distance is the total variation between the two groups' mean distributions
    over the tokens either group lists; the p-value is a permutation test of the
    group labels — every split of the pooled readings into a "baseline" and a
    "tonight" of the same sizes, enumerated exactly (``p = #{as far} / #splits``,
    never 0) or, past ``max_splits`` splits, sampled with the observed split counted
    (``(1 + #) / (1 + R)``). A distance at or under ``floor`` is never a shift
    (p = 1). With a deterministic server every baseline reading is the same, and a
    change gives the one split that separates them: p = 1 / C(n, r) (1 / 4,845 for
    16 baseline and 4 nightly readings).
    """
    if not baseline or not tonight:
        return 1.0, 0.0
    tokens = sorted({t for r in (*baseline, *tonight) for t in r})
    # each group's rows in a canonical order: the same readings, the same sampled splits
    base_rows, night_rows = (
        np.array(sorted(readings_matrix(group, tokens).tolist()), dtype=np.float64)
        for group in (baseline, tonight)
    )
    pooled = np.vstack([base_rows, night_rows])
    n, r = len(pooled), len(tonight)
    total = pooled.sum(axis=0)

    def distance(tonight_sums: np.ndarray) -> np.ndarray:
        gap = tonight_sums / r - (total - tonight_sums) / (n - r)
        result: np.ndarray = 0.5 * np.abs(gap).sum(axis=-1)
        return result

    observed = float(distance(pooled[n - r :].sum(axis=0)))
    if observed <= floor:
        return 1.0, observed
    if math.comb(n, r) <= max_splits:
        splits = np.array(list(itertools.combinations(range(n), r)), dtype=np.int64)
        stats = distance(pooled[splits].sum(axis=1))
        return float((stats >= observed - 1e-12).sum()) / len(splits), observed
    rng = np.random.default_rng(_readings_seed(pooled))
    chosen = np.argsort(rng.random((max_splits, n)), axis=1)[:, :r]
    stats = distance(pooled[chosen].sum(axis=1))
    return (1 + float((stats >= observed - 1e-12).sum())) / (1 + max_splits), observed
