"""Paired decisions with known truth (not a test): SPEC 13.3's intervals and rules, measured.

Three studies, each printing a table (numpy, vectorized, seeded):

* ``coverage`` — how often the paired interval holds the true difference, over
  a grid of baseline rates p, case counts n, discordances ψ and differences δ:
  Newcombe's interval for 0/1 scores, and for fractional scores (3 repeats per
  case) the percentile and BCa bootstraps.
* ``checkpoint`` — the checkpoint's verdict rates (baseline 0.90, cost ratio
  0.5, 5 % of cases flipping, 40 cases): equal arms, and a treatment 5 points
  worse, with the old point rule beside.
* ``sequential`` — the sequential checkpoint (betting confidence sequence,
  rounds of cases) against the fixed-n rule (120 cases): error rates and
  calls on the comparisons that decide.

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

from kb.checkpoint.rules import START_RUNG  # noqa: E402
from kb.paired import (  # noqa: E402
    BettingState,
    PairedDifference,
    betting_update,
    checkpoint_criterion,
    newcombe_arrays,
    normal_cdf,
    normal_quantile,
)
from kb.stats import Z_95  # noqa: E402

import os
MIN_CASES = int(os.environ.get("MIN_CASES", "0"))
PRIOR = float(os.environ.get("PRIOR", "0.25"))
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
    """Verdict rates of criterion 1 at cost ratio 0.5 (treatment = arm A, baseline = arm B)."""
    base, ratio = 0.90, 0.5
    print(
        f"\n## b. Checkpoint criterion 1: baseline {base}, cost ratio {ratio}, {n} cases, "
        f"{seeds} seeds\n"
    )
    print(
        "| truth (treatment - baseline) | passed | failed | inconclusive "
        "| old point rule passed | median more cases |\n|---|---:|---:|---:|---:|---:|"
    )
    for label, delta, psi in (("equal (5 % flip)", 0.0, 0.05), ("5 points worse", -0.05, 0.10)):
        # p is the treatment's rate: baseline 0.90 plus delta.
        probs = cells(base + delta, delta, psi)
        assert probs is not None
        tables = draw_tables(rng, probs, n, seeds)
        low, high = newcombe_arrays(tables[:, 0], tables[:, 1], tables[:, 2], tables[:, 3])
        counts = {"passed": 0, "failed": 0, "inconclusive": 0}
        more: list[int] = []
        old = 0
        for s in range(seeds):
            diff = diff_from_table(tables[s], float(low[s]), float(high[s]))
            result = checkpoint_criterion(diff, ratio)
            counts[result.verdict] += 1
            if result.cases_to_decide is not None:
                more.append(result.cases_to_decide)
            treat_rate = (tables[s, 0] + tables[s, 1]) / n
            base_rate = (tables[s, 0] + tables[s, 2]) / n
            old += START_RUNG.passes(treat_rate, ratio, base_rate, 1.0)
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
    round_size: int,
    max_cases: int,
    margin: float,
    cap: float,
    horizon: int | None,
    grid_points: int,
    bets: str,
    alpha: float,
) -> None:
    """Fixed-n Newcombe at n_fixed against the betting confidence sequence in rounds."""
    base, ratio = 0.90, 0.5
    print(
        f"\n## c. Sequential vs fixed n: baseline {base}, cost ratio {ratio}, margin {margin}, "
        f"fixed n {n_fixed}, rounds of {round_size} up to {max_cases}, cap {cap}, "
        f"horizon {horizon}, grid {grid_points}, bets {bets}, alpha {alpha}, {seeds} seeds\n"
    )
    print(
        "| truth | fixed: decided | fixed: errors | fixed: calls when decided "
        "| seq: decided | seq: errors | seq: calls when decided | fewer calls |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    total_err = {"fixed": 0, "seq": 0}
    decided_calls = {"fixed": [0, 0], "seq": [0, 0]}
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
            v = checkpoint_criterion(fixed, ratio, margin=margin)
            ok = correct(v.verdict, delta, margin)
            if ok is not None:
                f_dec += 1
                f_err += not ok
        # Sequential: the confidence sequence, looked at after every round.
        state = BettingState.start((seeds,), grid_points)
        stopped = np.zeros(seeds, dtype=bool)
        s_calls = np.zeros(seeds)
        s_dec = s_err = 0
        for start in range(0, max_cases, round_size):
            stop = min(max_cases, start + round_size)
            betting_update(state, d[:, start:stop], alpha, cap, horizon, bets, PRIOR)  # type: ignore[arg-type]
            sums = d[:, :stop].sum(axis=1)
            squares = (d[:, :stop] ** 2).sum(axis=1)
            for s in np.flatnonzero(~stopped):
                diff = PairedDifference(
                    n=stop,
                    difference=float(sums[s]) / stop,
                    low=float(state.low[s]),
                    high=float(state.high[s]),
                    discordant_a=0,
                    discordant_b=0,
                    method="confidence sequence",
                    discordance=float(squares[s]) / stop,
                )
                v = checkpoint_criterion(diff, ratio, margin=margin)
                ok = correct(v.verdict, delta, margin)
                if ok is not None and stop >= MIN_CASES:
                    stopped[s] = True
                    s_calls[s] = 2 * stop
                    s_dec += 1
                    s_err += not ok
        f_calls = 2 * n_fixed
        seq_mean = s_calls[stopped].mean() if stopped.any() else float("nan")
        saving = 1 - seq_mean / f_calls if stopped.any() and f_dec else float("nan")
        total_err["fixed"] += f_err
        total_err["seq"] += s_err
        decided_calls["fixed"][0] += f_dec * f_calls
        decided_calls["fixed"][1] += f_dec
        decided_calls["seq"][0] += float(s_calls[stopped].sum())
        decided_calls["seq"][1] += s_dec
        print(
            f"| {label} | {f_dec / seeds:.3f} | {f_err / seeds:.3f} | {f_calls} "
            f"| {s_dec / seeds:.3f} | {s_err / seeds:.3f} | {seq_mean:.1f} | {saving:.0%} |"
        )
    runs = seeds * len(SCENARIOS)
    fixed_mean = decided_calls["fixed"][0] / max(1, decided_calls["fixed"][1])
    seq_mean_all = decided_calls["seq"][0] / max(1, decided_calls["seq"][1])
    print(
        f"\nall scenarios: errors fixed {total_err['fixed'] / runs:.4f}, "
        f"sequential {total_err['seq'] / runs:.4f}; calls when decided fixed {fixed_mean:.1f}, "
        f"sequential {seq_mean_all:.1f} ({1 - seq_mean_all / fixed_mean:.0%} fewer)"
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
    parser.add_argument("--round", type=int, default=10, dest="round_size")
    parser.add_argument("--fixed-n", type=int, default=120)
    parser.add_argument("--max-cases", type=int, default=120)
    parser.add_argument("--cap", type=float, default=0.75)
    parser.add_argument("--horizon", type=int, default=None)
    parser.add_argument("--grid", type=int, default=2001)
    parser.add_argument("--bets", choices=["hedged", "agrapa"], default="agrapa")
    parser.add_argument("--alpha", type=float, default=0.05, help="the sequence's alpha")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    began = time.process_time()
    if args.study in ("coverage", "all"):
        newcombe_coverage(args.seeds or 2000, rng)
        bootstrap_coverage(min(args.seeds or 300, 1000), rng, args.resamples)
    if args.study in ("checkpoint", "all"):
        checkpoint_rates(args.seeds or 2000, rng)
    if args.study in ("sequential", "all"):
        sequential_study(
            args.seeds or 500,
            rng,
            args.fixed_n,
            args.round_size,
            args.max_cases,
            args.margin,
            args.cap,
            args.horizon,
            args.grid,
            args.bets,
            args.alpha,
        )
    print(f"\n(CPU {time.process_time() - began:.1f} s)")


if __name__ == "__main__":
    main()
