"""Small statistics the reports need: the Wilson score interval."""

from __future__ import annotations

import math

Z_95 = 1.959963984540054


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval for ``successes`` out of ``n`` (``(0, 1)`` when ``n`` is 0).

    Chosen over the normal approximation because sweep cells are small and
    often at 0 % or 100 %, where the normal interval collapses to a point.
    """
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes}/{n}")
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    z2 = z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


def successes_from_rate(pass_rate: float, n: int) -> int:
    """The pass count behind a stored ``passRate`` over ``n`` cases."""
    return min(n, max(0, round(pass_rate * n)))
