"""The statistics behind a claim: the 95 % interval of a cell's pass rate.

**The case is the unit of sampling.** A sweep draws its cases from the
population of tasks a user cares about; what a claim asserts is the model's
pass rate over that population. A cell's ``n`` is therefore the number of
distinct cases, and running a case K times (``repeats``) never makes it K
cases: the case's score is its pass fraction and the cell's pass rate is the
mean score over cases.

The interval is the Wilson score interval of that mean over ``n`` cases
(successes = the sum of case scores, possibly fractional). With one run per
case it is the textbook Wilson interval. With K repeats it is the clustered
bound: a score in [0, 1] with mean p has variance at most p(1 − p) (equality
only when every case is all-pass or all-fail), so the between-case variance
the repeats reveal can only be smaller than the binomial one the interval
assumes. Treating the K·n runs as independent — the mistake clustered
standard errors exist to prevent — would narrow the interval by √K; this
never does.

Chosen over the normal approximation because cells are small and often at
0 % or 100 %, where the normal interval collapses to a point.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy costs ~70 ms to import: only the array form below needs it
    import numpy as np
    import numpy.typing as npt

Z_95 = 1.959963984540054


def wilson_interval(successes: float, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval for ``successes`` (may be fractional) out of ``n``.

    ``(0, 1)`` when ``n`` is 0: nothing measured, nothing known.
    """
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes}/{n}")
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    z2 = z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z * math.sqrt(max(0.0, p * (1 - p) / n + z2 / (4 * n * n))) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


def wilson_arrays(
    successes: npt.NDArray[np.float64],
    n: npt.NDArray[np.float64] | float,
    z: float | npt.NDArray[np.float64] = Z_95,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """:func:`wilson_interval` over arrays (the simulation bench's many cells at once).

    ``z`` may be an array too (one z per cell: the nightly rule's cold start, whose
    Bonferroni z depends on each cell's pool).
    """
    import numpy as np

    n_arr = np.broadcast_to(np.asarray(n, dtype=np.float64), np.shape(successes))
    safe = np.where(n_arr > 0, n_arr, 1.0)
    p = successes / safe
    z2 = z * z
    denominator = 1 + z2 / safe
    centre = (p + z2 / (2 * safe)) / denominator
    half = z * np.sqrt(np.maximum(0.0, p * (1 - p) / safe + z2 / (4 * safe * safe))) / denominator
    low = np.where(n_arr > 0, np.maximum(0.0, centre - half), 0.0)
    high = np.where(n_arr > 0, np.minimum(1.0, centre + half), 1.0)
    return low, high


def band_clear(
    successes: npt.NDArray[np.float64],
    n: npt.NDArray[np.int64] | npt.NDArray[np.float64],
    z: float | npt.NDArray[np.float64],
    floor: float,
    ceiling: float,
) -> npt.NDArray[np.bool_]:
    """Whether each Wilson interval at ``z`` is clear of the claim bands' edges.

    Clear: its lower bound ≥ ``floor`` (a strength's), its upper bound ≤
    ``ceiling`` (a weakness's), or the whole interval strictly between the two
    (clearly neither). Nothing measured is never clear.

    The nightly rule's group-sequential cold start stops on it (:mod:`kb.sweep.nightly`).
    """
    import numpy as np

    counts = np.asarray(n, dtype=np.float64)
    low, high = wilson_arrays(np.asarray(successes, dtype=np.float64), counts, z)
    clear = (low >= floor) | (high <= ceiling) | ((low > ceiling) & (high < floor))
    return np.asarray(clear & (counts > 0), dtype=np.bool_)


def successes_from_rate(pass_rate: float, n: int) -> int:
    """The whole pass count closest to a stored ``passRate`` over ``n`` cases (for display)."""
    return min(n, max(0, round(pass_rate * n)))


def min_cases_for_strength(bar: float, z: float = Z_95) -> int | None:
    """Fewest cases at a perfect score whose interval's lower bound reaches ``bar``.

    ``None`` when no number of cases can (``bar`` ≥ 1).
    """
    if bar <= 0:
        return 1
    if bar >= 1:
        return None
    # The lower Wilson bound at p = 1 is n / (n + z²).
    return max(1, math.ceil(bar * z * z / (1 - bar) - 1e-12))


def min_cases_for_weakness(bar: float, z: float = Z_95) -> int | None:
    """Fewest cases at a zero score whose interval's upper bound is at most ``bar``."""
    if bar >= 1:
        return 1
    if bar <= 0:
        return None
    # The upper Wilson bound at p = 0 is z² / (n + z²).
    return max(1, math.ceil(z * z * (1 - bar) / bar - 1e-12))
