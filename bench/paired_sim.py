"""Paired decisions with known truth (not a test): SPEC 13.3's intervals and rules, measured.

Three studies, each printing a table (numpy, vectorized, seeded):

* ``coverage`` — how often the paired interval holds the true difference, over
  a grid of baseline rates p, case counts n, discordances ψ and differences δ:
  Newcombe's interval for 0/1 scores, and for fractional scores (3 repeats per
  case) the percentile and BCa bootstraps.
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

**Fractional scores.** Each case's latent pass/fail per arm is drawn as above;
each of its 3 repeats then passes with probability 0.85 if the latent outcome
is a pass and 0.15 if not, and the case's score is the mean. The true
difference is 0.7 δ.

Usage: python bench/paired_sim.py [coverage|checkpoint|sequential|all] [--seeds N]
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
    newcombe_arrays,
    normal_cdf,
    normal_quantile,
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


def bootstrap_intervals(
    d: np.ndarray, rng: np.random.Generator, resamples: int, z: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Percentile and BCa bounds for each row of d (seeds, n): (p_low, p_high, b_low, b_high)."""
    seeds, n = d.shape
    means = np.empty((seeds, resamples))
    for s in range(seeds):
        index = rng.integers(0, n, size=(resamples, n))
        means[s] = d[s][index].mean(axis=1)
    tail = normal_cdf(-z)
    p_low = np.quantile(means, tail, axis=1)
    p_high = np.quantile(means, 1 - tail, axis=1)
    theta = d.mean(axis=1)
    b_low = np.empty(seeds)
    b_high = np.empty(seeds)
    for s in range(seeds):
        below = float(np.mean(means[s] < theta[s]))
        if below <= 0 or below >= 1:
            b_low[s], b_high[s] = p_low[s], p_high[s]
            continue
        z0 = normal_quantile(below)
        jack = (d[s].sum() - d[s]) / (n - 1)
        dev = jack.mean() - jack
        denom = 6 * (np.sum(dev**2)) ** 1.5
        accel = float(np.sum(dev**3) / denom) if denom > 0 else 0.0
        levels = []
        for zq in (-z, z):
            adj = z0 + (z0 + zq) / (1 - accel * (z0 + zq))
            levels.append(min(1.0, max(0.0, normal_cdf(adj))))
        b_low[s], b_high[s] = np.quantile(means[s], levels)
    return p_low, p_high, b_low, b_high


def bootstrap_coverage(seeds: int, rng: np.random.Generator, resamples: int) -> None:
    """Coverage of the percentile and BCa bootstraps for 3-repeat fractional scores."""
    repeats, hit, miss = 3, 0.85, 0.15
    print(
        f"\n## a'. Bootstrap coverage, fractional scores ({repeats} repeats per case), "
        f"{seeds} seeds, {resamples} resamples\n"
    )
    print("| p | n | psi | true diff | percentile | BCa |\n|---:|---:|---:|---:|---:|---:|")
    allp, allb = [], []
    for p in (0.5, 0.9):
        for n in (10, 20, 40, 120):
            for psi in (0.05, 0.2):
                for delta in (0.0, -psi / 2):
                    probs = cells(p, delta, psi)
                    if probs is None:
                        continue
                    kinds = draw_cases(rng, probs, n, seeds)
                    latent_a = (kinds == 0) | (kinds == 1)
                    latent_b = (kinds == 0) | (kinds == 2)
                    score_a = rng.binomial(repeats, np.where(latent_a, hit, miss)) / repeats
                    score_b = rng.binomial(repeats, np.where(latent_b, hit, miss)) / repeats
                    truth = (hit - miss) * delta
                    pl, ph, bl, bh = bootstrap_intervals(score_a - score_b, rng, resamples, Z_95)
                    cp = float(np.mean((pl <= truth + 1e-12) & (truth - 1e-12 <= ph)))
                    cb = float(np.mean((bl <= truth + 1e-12) & (truth - 1e-12 <= bh)))
                    allp.append(cp)
                    allb.append(cb)
                    print(f"| {p} | {n} | {psi} | {truth:+.3f} | {cp:.3f} | {cb:.3f} |")
    print(
        f"\npercentile: mean {np.mean(allp):.4f} min {np.min(allp):.4f}; "
        f"BCa: mean {np.mean(allb):.4f} min {np.min(allb):.4f}"
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
        f"\nall five truths: errors fixed {totals['f_err'] / runs:.4f}, sequential "
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
        bootstrap_coverage(min(args.seeds or 300, 1000), rng, args.resamples)
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
