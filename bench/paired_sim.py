"""Paired decisions with known truth (not a test): SPEC 13.3's intervals and rules, measured.

Three studies, each printing a table (numpy, vectorized, seeded):

* ``coverage`` — how often the paired interval holds the true difference, over
  a grid of baseline rates p, case counts n, discordances ψ and differences δ:
  Newcombe's interval for 0/1 scores, and for fractional scores (3 repeats per
  case) kb's bootstrap (expanded percentile with a floor) beside the plain
  percentile bootstrap it replaced (``--candidates``: the other corrections
  tried).
* ``checkpoint`` — the checkpoint's verdict rates (baseline 0.90, cost ratio
  0.5, 5 % of cases flipping, 40 cases): equal arms, and a treatment 5 points
  worse, with the old point rule beside. Each seed is decided by
  :func:`kb.checkpoint.rules.paired_decision`, the function ``kb checkpoint``
  decides with.
* ``sequential`` — the sequential checkpoint (betting confidence sequence,
  rounds of cases, :class:`kb.paired.SequentialDesign` — ``kb checkpoint
  --sequential``'s defaults unless flags say otherwise) against the fixed-n
  rule (120 cases): error rates and calls, read two ways — on the
  comparisons each rule decides, and over every comparison — each decided by
  :data:`kb.checkpoint.rules.START_RUNG_INTERVAL`, as the CLI decides.

**How paired 0/1 data with a given truth are drawn.** A case falls in one of
four cells: both pass (p11), only arm A (p10), only arm B (p01), neither
(p00). Given A's pass rate p, the difference δ = p_A − p_B and the
discordance ψ (the chance the arms disagree on a case)::

    p10 = (ψ + δ)/2,  p01 = (ψ − δ)/2,  p11 = p − p10,  p00 = 1 − p − p01

(a grid point is skipped when a cell would be negative). Each seed draws the
table of n cases from that multinomial. "5 % of cases flipping at equal
quality" is ψ = 0.05, δ = 0 (2.5 % each way); "5 points worse" adds 0.05 to
the cases only the baseline passes (ψ = 0.10, δ = −0.05).

**Fractional scores.** Each case's latent pass/fail per arm is drawn as above.
Each case then has its own pass probabilities, which differ between cases: u
~ Beta(0.85κ, 0.15κ) where the arm's latent outcome is a pass and l ~
Beta(0.15κ, 0.85κ) where it is a fail, one (u, l) per case shared by both arms
(a hard case is hard for both); κ = 4 by default (``--concentration``; ``inf``
gives every case 0.85/0.15, the model this bench used before). Each of the case's
3 repeats passes with the arm's probability and the score is their mean. The
true difference of the population means is E u − E l = 0.7 δ whatever κ. The
bench draws each bootstrap resample as multinomial counts over the 7 possible
per-case differences (k/3, k = −3…3) with the sample's frequencies — the same
distribution as resampling the cases, in a fraction of the time — and reads the
interval exactly as :func:`kb.paired.paired_bootstrap_interval` does (order
statistics at Φ(∓z'), :func:`kb.paired.expanded_z`, Newcombe's floor). A seed
whose scores all happen to be 0/1 is decided by Newcombe, as kb decides it.

Usage: python bench/paired_sim.py [coverage|checkpoint|sequential|all] [--seeds N]
       python bench/paired_sim.py coverage --full --seeds 2000 [--candidates]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kb.checkpoint.rules import START_RUNG, START_RUNG_INTERVAL, paired_decision  # noqa: E402
from kb.paired import (  # noqa: E402
    BettingState,
    PairedDifference,
    PairedScores,
    SequentialDesign,
    betting_update,
    expanded_z,
    newcombe_arrays,
    newcombe_paired_interval,
    normal_cdf,
)
from kb.stats import Z_95  # noqa: E402

Cells = tuple[float, float, float, float]


def cells(p: float, delta: float, psi: float) -> Cells | None:
    """(p11, p10, p01, p00) for A's rate p, δ = p_A − p_B and discordance ψ; None if impossible."""
    p10, p01 = (psi + delta) / 2, (psi - delta) / 2
    out = (p - p10, p10, p01, 1 - p - p01)
    if min(out) < -1e-12:
        return None
    clipped = tuple(max(0.0, c) for c in out)
    total = sum(clipped)
    return (clipped[0] / total, clipped[1] / total, clipped[2] / total, clipped[3] / total)


def draw_tables(rng: np.random.Generator, probs: Cells, n: int, seeds: int) -> np.ndarray:
    """(seeds, 4) tables of n cases."""
    return rng.multinomial(n, probs, size=seeds)


def draw_cases(rng: np.random.Generator, probs: Cells, n: int, seeds: int) -> np.ndarray:
    """(seeds, n) per-case cell index 0..3 (11, 10, 01, 00)."""
    return rng.choice(4, size=(seeds, n), p=probs)


# --- a. coverage ---------------------------------------------------------------------

P_GRID = (0.05, 0.2, 0.5, 0.8, 0.9, 0.95, 0.99)
N_GRID = (10, 20, 40, 80, 120, 250, 500)
PSI_GRID = (0.0, 0.02, 0.05, 0.1, 0.2, 0.3)


def newcombe_coverage(seeds: int, rng: np.random.Generator) -> None:
    """Coverage of Newcombe's interval over the grid (δ ∈ {0, ±ψ/2})."""
    rows: list[tuple[float, int, float, float, float]] = []
    for p in P_GRID:
        for n in N_GRID:
            for psi in PSI_GRID:
                for delta in sorted({0.0, psi / 2, -psi / 2}):
                    probs = cells(p, delta, psi)
                    if probs is None:
                        continue
                    t = draw_tables(rng, probs, n, seeds)
                    low, high = newcombe_arrays(t[:, 0], t[:, 1], t[:, 2], t[:, 3], Z_95)
                    covered = (low <= delta + 1e-12) & (delta - 1e-12 <= high)
                    rows.append((p, n, psi, delta, float(covered.mean())))
    cover = np.array([r[4] for r in rows])
    print(f"\n## a. Newcombe coverage, 95 % nominal ({len(rows)} grid points x {seeds} seeds)\n")
    print(f"mean {cover.mean():.4f}  min {cover.min():.4f}  points < 0.93: {(cover < 0.93).sum()}")
    print(f"points < 0.94: {(cover < 0.94).sum()}  points < 0.95: {(cover < 0.95).sum()}")
    print("\n| n | mean | min | worst (p, psi, delta) |\n|---:|---:|---:|---|")
    for n in N_GRID:
        sub = [r for r in rows if r[1] == n]
        worst = min(sub, key=lambda r: r[4])
        mean = np.mean([r[4] for r in sub])
        print(f"| {n} | {mean:.4f} | {worst[4]:.4f} | ({worst[0]}, {worst[2]}, {worst[3]:+.3f}) |")
    print("\n| psi | mean | min |\n|---:|---:|---:|")
    for psi in PSI_GRID:
        sub_cover = [r[4] for r in rows if r[2] == psi]
        print(f"| {psi} | {np.mean(sub_cover):.4f} | {np.min(sub_cover):.4f} |")


REPEATS = 3
HIT = 0.85
VALUES = np.arange(-REPEATS, REPEATS + 1) / REPEATS
QUICK_P = (0.05, 0.5, 0.9, 0.99)
QUICK_N = (10, 20, 40, 120, 500)
QUICK_PSI = (0.0, 0.05, 0.3)


def fractional_scores(
    rng: np.random.Generator, probs: Cells, n: int, seeds: int, concentration: float
) -> tuple[np.ndarray, np.ndarray]:
    """(seeds, n) scores of arms A and B: per-case pass probabilities, REPEATS repeats each."""
    kinds = draw_cases(rng, probs, n, seeds)
    latent_a = (kinds == 0) | (kinds == 1)
    latent_b = (kinds == 0) | (kinds == 2)
    if np.isinf(concentration):
        hit = np.full(kinds.shape, HIT)
        miss = np.full(kinds.shape, 1 - HIT)
    else:
        hit = rng.beta(HIT * concentration, (1 - HIT) * concentration, kinds.shape)
        miss = rng.beta((1 - HIT) * concentration, HIT * concentration, kinds.shape)
    score_a = rng.binomial(REPEATS, np.where(latent_a, hit, miss)) / REPEATS
    score_b = rng.binomial(REPEATS, np.where(latent_b, hit, miss)) / REPEATS
    return score_a, score_b


def order_statistics(means: np.ndarray, tail: float) -> tuple[np.ndarray, np.ndarray]:
    """The k-th bootstrap mean from each end, k = ⌊tail·(R − 1)⌋, as kb reads them (axis 0)."""
    resamples = means.shape[0]
    k = min(int(np.floor(tail * (resamples - 1))), (resamples - 1) // 2)
    ordered = np.sort(means, axis=0)
    return ordered[k], ordered[resamples - 1 - k]


def fractional_intervals(
    d: np.ndarray, rng: np.random.Generator, resamples: int, z: float, candidates: bool
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Interval bounds per row of d (seeds, n), by name: "percentile", "kb", and candidates."""
    seeds, n = d.shape
    index = np.rint(d * REPEATS).astype(np.int64) + REPEATS
    freq = np.stack([(index == k).sum(axis=1) for k in range(VALUES.size)], axis=1) / n
    counts = rng.multinomial(n, freq, size=(resamples, seeds))
    means = counts @ VALUES / n
    centre = d.mean(axis=1)
    z_expanded = expanded_z(n, z)
    tail = normal_cdf(-z_expanded) if n > 1 else 0.0
    floor = newcombe_paired_interval(n, 0, 0, 0, z=z)[1]
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    out["percentile"] = order_statistics(means, normal_cdf(-z))
    low, high = order_statistics(means, tail)
    out["kb"] = (np.minimum(low, centre - floor), np.maximum(high, centre + floor))
    if candidates:
        out["expanded"] = (low, high)
        one = z_expanded / n  # one discordant case's worth of variance, 1/n
        out["expanded, floor 1/n"] = (np.minimum(low, centre - one), np.maximum(high, centre + one))
        p_low, p_high = out["percentile"]
        out["percentile, Newcombe floor"] = (
            np.minimum(p_low, centre - floor),
            np.maximum(p_high, centre + floor),
        )
        # bootstrap-t, each resample's variance floored at 1/n
        squares = counts @ (VALUES**2) / n
        var_star = np.maximum(squares - means**2, 0.0) * n / max(1, n - 1)
        se_star = np.sqrt(np.maximum(var_star, 1 / n) / n)
        t_low, t_high = order_statistics((means - centre) / se_star, normal_cdf(-z))
        se = np.sqrt(np.maximum(d.var(axis=1, ddof=min(1, n - 1)), 1 / n) / n)
        out["bootstrap-t, floor 1/n"] = (centre - t_high * se, centre - t_low * se)
    return out


Point = tuple[float, int, float, float]


def coverage_point(
    rng: np.random.Generator,
    point: Point,
    seeds: int,
    resamples: int,
    concentration: float,
    candidates: bool,
) -> dict[str, tuple[float, float]] | None:
    """(coverage, mean width) per interval at (p, n, psi, delta); None if impossible."""
    p, n, psi, delta = point
    probs = cells(p, delta, psi)
    if probs is None:
        return None
    truth = (2 * HIT - 1) * delta
    chunk = max(1, 2_000_000 // (resamples * VALUES.size))
    hits: dict[str, float] = {}
    widths: dict[str, float] = {}
    for start in range(0, seeds, chunk):
        size = min(chunk, seeds - start)
        a, b = fractional_scores(rng, probs, n, size, concentration)
        binary = np.all((a == 0) | (a == 1), axis=1) & np.all((b == 0) | (b == 1), axis=1)
        table = np.stack(
            [
                np.sum((a == 1) & (b == 1), axis=1),
                np.sum((a == 1) & (b == 0), axis=1),
                np.sum((a == 0) & (b == 1), axis=1),
                np.sum((a == 0) & (b == 0), axis=1),
            ]
        )
        n_low, n_high = newcombe_arrays(*table, z=Z_95)
        found = fractional_intervals(a - b, rng, resamples, Z_95, candidates)
        for name, (low, high) in found.items():
            low = np.where(binary, n_low, np.maximum(-1.0, low))
            high = np.where(binary, n_high, np.minimum(1.0, high))
            covered = (low <= truth + 1e-12) & (truth - 1e-12 <= high)
            hits[name] = hits.get(name, 0.0) + float(covered.sum())
            widths[name] = widths.get(name, 0.0) + float((high - low).sum())
    return {name: (hits[name] / seeds, widths[name] / seeds) for name in hits}


def bootstrap_coverage(
    seeds: int,
    rng: np.random.Generator,
    resamples: int,
    full: bool,
    concentration: float,
    candidates: bool,
    recheck: int,
    recheck_seeds: int,
) -> None:
    """Coverage of kb's fractional-score bootstrap and the plain percentile one, by grid point.

    ``recheck`` > 0 re-measures the lowest kb points with ``recheck_seeds`` fresh
    seeds: at a few thousand seeds the lowest of hundreds of points sits about 3
    Monte Carlo sd below its truth, so a low point is confirmed, or not, afresh.
    """
    grid = (P_GRID, N_GRID, PSI_GRID) if full else (QUICK_P, QUICK_N, QUICK_PSI)
    rows: list[tuple[float, int, float, float, dict[str, tuple[float, float]]]] = []
    for p in grid[0]:
        for n in grid[1]:
            for psi in grid[2]:
                for delta in sorted({0.0, psi / 2, -psi / 2}):
                    point = (p, n, psi, delta)
                    result = coverage_point(rng, point, seeds, resamples, concentration, candidates)
                    if result is not None:
                        rows.append((p, n, psi, delta, result))
    names = list(rows[0][4])
    print(
        f"\n## a'. Bootstrap coverage, fractional scores ({REPEATS} repeats per case, "
        f"concentration {concentration}), {len(rows)} grid points x {seeds} seeds, "
        f"{resamples} resamples, 95 % nominal ({'full' if full else 'quick'} grid)\n"
    )
    print("| n | percentile mean | min | kb mean | min | worst kb (p, psi, delta) |")
    print("|---:|---:|---:|---:|---:|---|")
    for n in grid[1]:
        sub = [r for r in rows if r[1] == n]
        old = [r[4]["percentile"][0] for r in sub]
        new = [r[4]["kb"][0] for r in sub]
        worst = min(sub, key=lambda r: r[4]["kb"][0])
        print(
            f"| {n} | {np.mean(old):.4f} | {np.min(old):.4f} | {np.mean(new):.4f} "
            f"| {np.min(new):.4f} | ({worst[0]}, {worst[2]}, {worst[3]:+.3f}) |"
        )
    print("\n| interval | mean | min | where (p, n, psi, delta) | < 0.93 | < 0.94 | mean width |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for name in names:
        cover = np.array([r[4][name][0] for r in rows])
        width = np.mean([r[4][name][1] for r in rows])
        worst = rows[int(cover.argmin())]
        print(
            f"| {name} | {cover.mean():.4f} | {cover.min():.4f} "
            f"| ({worst[0]}, {worst[1]}, {worst[2]}, {worst[3]:+.3f}) "
            f"| {(cover < 0.93).sum()} | {(cover < 0.94).sum()} | {width:.4f} |"
        )
    if recheck <= 0:
        return
    lowest = sorted(rows, key=lambda r: r[4]["kb"][0])[:recheck]
    print(f"\nThe {recheck} lowest kb points again, {recheck_seeds} fresh seeds each:\n")
    print("| (p, n, psi, delta) | kb first | kb again | percentile again |")
    print("|---|---:|---:|---:|")
    for p, n, psi, delta, first in lowest:
        again = coverage_point(
            rng, (p, n, psi, delta), recheck_seeds, resamples, concentration, False
        )
        assert again is not None
        print(
            f"| ({p}, {n}, {psi}, {delta:+.3f}) | {first['kb'][0]:.4f} | {again['kb'][0]:.4f} "
            f"| {again['percentile'][0]:.4f} |"
        )


# --- b. checkpoint verdicts ----------------------------------------------------------


def diff_from_table(t: np.ndarray, low: float, high: float) -> PairedDifference:
    """A PairedDifference for treatment (arm A) − baseline (arm B) from one table."""
    n11, n10, n01, n00 = (int(x) for x in t)
    n = n11 + n10 + n01 + n00
    return PairedDifference(
        n=n,
        difference=(n10 - n01) / n,
        low=low,
        high=high,
        discordant_a=n10,
        discordant_b=n01,
        method="newcombe",
        z=Z_95,
        discordance=(n10 + n01) / n,
    )


def checkpoint_rates(seeds: int, rng: np.random.Generator, n: int = 40) -> None:
    """Verdict rates of criterion 1 at cost ratio 0.5 (treatment = arm A, baseline = arm B).

    Each seed's cases go through :func:`kb.checkpoint.rules.paired_decision`,
    exactly as ``kb checkpoint`` decides its pooled arms.
    """
    base, ratio = 0.90, 0.5
    print(
        f"\n## b. Checkpoint criterion 1: baseline {base}, cost ratio {ratio}, {n} cases, "
        f"{seeds} seeds (decided by kb.checkpoint.rules.paired_decision)\n"
    )
    print(
        "| truth (treatment - baseline) | passed | failed | inconclusive "
        "| old point rule passed | median more cases |\n|---|---:|---:|---:|---:|---:|"
    )
    for label, delta, psi in (("equal (5 % flip)", 0.0, 0.05), ("5 points worse", -0.05, 0.10)):
        # p is the treatment's rate: baseline 0.90 plus delta.
        probs = cells(base + delta, delta, psi)
        assert probs is not None
        kinds = draw_cases(rng, probs, n, seeds)
        treatment = ((kinds == 0) | (kinds == 1)).astype(np.float64)
        baseline = ((kinds == 0) | (kinds == 2)).astype(np.float64)
        counts = {"passed": 0, "failed": 0, "inconclusive": 0}
        more: list[int] = []
        old = 0
        for s in range(seeds):
            _, result = paired_decision(PairedScores(treatment[s], baseline[s]), ratio)
            counts[result.verdict] += 1
            if result.cases_to_decide is not None:
                more.append(result.cases_to_decide)
            old += START_RUNG.passes(
                float(treatment[s].mean()), ratio, float(baseline[s].mean()), 1.0
            )
        median_more = int(np.median(more)) if more else 0
        print(
            f"| {label} | {counts['passed'] / seeds:.3f} | {counts['failed'] / seeds:.3f} "
            f"| {counts['inconclusive'] / seeds:.3f} | {old / seeds:.3f} | {median_more} |"
        )


# --- c. sequential vs fixed-n --------------------------------------------------------

SCENARIOS = (
    ("equal", 0.0, 0.05),
    ("3 points worse", -0.03, 0.08),
    ("3.5 points worse (psi 0.05)", -0.035, 0.05),
    ("4 points worse (psi 0.05)", -0.04, 0.05),
    ("5 points worse", -0.05, 0.10),
    ("10 points worse", -0.10, 0.15),
    ("5 points better", 0.05, 0.10),
)


def correct(verdict: str, delta: float, margin: float) -> bool | None:
    """Whether a decided verdict is right about δ ≥ −margin (None: not decided)."""
    if verdict == "inconclusive":
        return None
    return (verdict == "passed") == (delta >= -margin - 1e-12)


def sequential_study(
    seeds: int,
    rng: np.random.Generator,
    n_fixed: int,
    max_cases: int,
    margin: float,
    design: SequentialDesign,
    horizon: int | None,
    grid_points: int,
) -> None:
    """Fixed-n Newcombe at n_fixed against the betting confidence sequence in rounds.

    Both decide through START_RUNG_INTERVAL.decide (the fixed rule once, at
    n_fixed; the sequential after every round, on the sequence's interval).
    Calls are 2 per case (two arms). Two readings of "fewer calls": (A) mean
    calls over the comparisons each rule decides, (B) mean calls over every
    comparison (an undecided sequential run spends its cap, 2 × max_cases).
    """
    base, ratio = 0.90, 0.5
    print(
        f"\n## c. Sequential vs fixed n: baseline {base}, cost ratio {ratio}, margin {margin}, "
        f"fixed n {n_fixed}, rounds of {design.round_size} up to {max_cases}, cap {design.cap}, "
        f"prior variance {design.prior_variance}, min cases {design.min_cases}, horizon "
        f"{horizon}, grid {grid_points}, bets {design.bets}, alpha {design.alpha}, {seeds} seeds\n"
    )
    print(
        "| truth | decided fixed / seq | errors fixed / seq (pp apart) "
        "| A: calls per decided fixed / seq (fewer) | B: calls per comparison fixed / seq (fewer) |"
    )
    print("|---|---:|---:|---:|---:|")
    totals = {"f_err": 0, "s_err": 0, "f_dec": 0, "s_dec": 0, "s_dec_calls": 0.0, "s_all": 0.0}
    worst_gap = 0.0
    for label, delta, psi in SCENARIOS:
        probs = cells(base + delta, delta, psi)
        assert probs is not None
        length = max(n_fixed, max_cases)
        kinds = draw_cases(rng, probs, length, seeds)
        d = np.select([kinds == 1, kinds == 2], [1.0, -1.0], 0.0)
        # Fixed n: the first n_fixed cases, Newcombe, read once.
        first = kinds[:, :n_fixed]
        table = np.stack([(first == k).sum(axis=1) for k in range(4)], axis=1)
        low, high = newcombe_arrays(table[:, 0], table[:, 1], table[:, 2], table[:, 3])
        f_dec = f_err = 0
        for s in range(seeds):
            fixed = diff_from_table(table[s], float(low[s]), float(high[s]))
            v = START_RUNG_INTERVAL.decide(fixed, ratio, margin)
            ok = correct(v.verdict, delta, margin)
            if ok is not None:
                f_dec += 1
                f_err += not ok
        # Sequential: the confidence sequence, looked at after every round.
        state = BettingState.start((seeds,), grid_points)
        stopped = np.zeros(seeds, dtype=bool)
        s_calls = np.full(seeds, 2.0 * max_cases)
        s_dec = s_err = 0
        for start in range(0, max_cases, design.round_size):
            stop = min(max_cases, start + design.round_size)
            betting_update(
                state,
                d[:, start:stop],
                design.alpha,
                design.cap,
                horizon,
                design.bets,
                design.prior_variance,
            )
            if stop < design.min_cases:
                continue
            sums = d[:, :stop].sum(axis=1)
            squares = (d[:, :stop] ** 2).sum(axis=1)
            for row in np.flatnonzero(~stopped):
                diff = PairedDifference(
                    n=stop,
                    difference=float(sums[row]) / stop,
                    low=float(state.low[row]),
                    high=float(state.high[row]),
                    discordant_a=0,
                    discordant_b=0,
                    method="confidence sequence",
                    discordance=float(squares[row]) / stop,
                )
                v = START_RUNG_INTERVAL.decide(diff, ratio, margin)
                ok = correct(v.verdict, delta, margin)
                if ok is not None:
                    stopped[row] = True
                    s_calls[row] = 2 * stop
                    s_dec += 1
                    s_err += not ok
        f_calls = 2 * n_fixed
        seq_decided = float(s_calls[stopped].mean()) if stopped.any() else float("nan")
        seq_all = float(s_calls.mean())
        gap = (s_err - f_err) / seeds * 100
        worst_gap = max(worst_gap, abs(gap))
        totals["f_err"] += f_err
        totals["s_err"] += s_err
        totals["f_dec"] += f_dec
        totals["s_dec"] += s_dec
        totals["s_dec_calls"] += float(s_calls[stopped].sum())
        totals["s_all"] += float(s_calls.sum())
        print(
            f"| {label} | {f_dec / seeds:.3f} / {s_dec / seeds:.3f} "
            f"| {f_err / seeds:.3f} / {s_err / seeds:.3f} ({gap:+.1f}) "
            f"| {f_calls} / {seq_decided:.1f} ({1 - seq_decided / f_calls:.0%}) "
            f"| {f_calls} / {seq_all:.1f} ({1 - seq_all / f_calls:.0%}) |"
        )
    runs = seeds * len(SCENARIOS)
    f_calls = 2 * n_fixed
    seq_decided = totals["s_dec_calls"] / max(1, totals["s_dec"])
    seq_all = totals["s_all"] / runs
    print(
        f"\nall {len(SCENARIOS)} truths: errors fixed {totals['f_err'] / runs:.4f}, sequential "
        f"{totals['s_err'] / runs:.4f} (largest gap in one truth {worst_gap:.1f} pp); "
        f"decided fixed {totals['f_dec'] / runs:.3f}, sequential {totals['s_dec'] / runs:.3f}; "
        f"A: calls per decided comparison {f_calls} / {seq_decided:.1f} "
        f"({1 - seq_decided / f_calls:.0%} fewer); B: calls per comparison {f_calls} / "
        f"{seq_all:.1f} ({1 - seq_all / f_calls:.0%} fewer)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "study", nargs="?", default="all", choices=["coverage", "checkpoint", "sequential", "all"]
    )
    parser.add_argument("--seeds", type=int, default=None, help="seeds per grid point/scenario")
    parser.add_argument("--seed", type=int, default=20261203)
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (bench)")
    parser.add_argument("--full", action="store_true", help="coverage: the full 574-point grid")
    parser.add_argument(
        "--concentration", type=float, default=4.0, help="coverage: Beta κ of per-case rates"
    )
    parser.add_argument(
        "--candidates", action="store_true", help="coverage: also the corrections not chosen"
    )
    parser.add_argument("--recheck", type=int, default=0, help="coverage: re-measure K lowest")
    parser.add_argument("--recheck-seeds", type=int, default=20000)
    parser.add_argument("--margin", type=float, default=0.03)
    default = SequentialDesign()
    parser.add_argument("--round", type=int, default=default.round_size, dest="round_size")
    parser.add_argument("--fixed-n", type=int, default=120)
    parser.add_argument("--max-cases", type=int, default=120)
    parser.add_argument("--cap", type=float, default=default.cap)
    parser.add_argument("--prior-variance", type=float, default=default.prior_variance)
    parser.add_argument("--min-cases", type=int, default=default.min_cases)
    parser.add_argument("--horizon", type=int, default=None)
    parser.add_argument("--grid", type=int, default=2001)
    parser.add_argument(
        "--bets", choices=["hedged", "agrapa", "agrapa-mixed"], default=default.bets
    )
    parser.add_argument("--alpha", type=float, default=default.alpha, help="the sequence's alpha")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    began = time.process_time()
    if args.study in ("coverage", "all"):
        newcombe_coverage(args.seeds or 2000, rng)
        bootstrap_coverage(
            args.seeds or 300,
            rng,
            args.resamples,
            args.full,
            args.concentration,
            args.candidates,
            args.recheck,
            args.recheck_seeds,
        )
    if args.study in ("checkpoint", "all"):
        checkpoint_rates(args.seeds or 2000, rng)
    if args.study in ("sequential", "all"):
        design = SequentialDesign(
            round_size=args.round_size,
            alpha=args.alpha,
            cap=args.cap,
            prior_variance=args.prior_variance,
            bets=args.bets,
            min_cases=args.min_cases,
        )
        sequential_study(
            args.seeds or 500,
            rng,
            args.fixed_n,
            args.max_cases,
            args.margin,
            design,
            args.horizon,
            args.grid,
        )
    print(f"\n(CPU {time.process_time() - began:.1f} s)")


if __name__ == "__main__":
    main()
