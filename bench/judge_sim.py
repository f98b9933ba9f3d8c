"""Judges with known error rates (not a test): do κ's and α's intervals cover the truth?

SPEC 14.5: ``kb judges`` reports Cohen's κ of a judge against people's
labels and Krippendorff's α between the judges of a panel, each with a 95 %
interval. This bench draws worlds where the truth is known and counts how
often the interval holds it, calling the functions ``kb judges`` calls
(:func:`kb.judging.cohen_kappa`, :func:`kb.judging.krippendorff_alpha`).

**A world.** ``n`` answers (cases), each truly a pass with probability
``p``; a person's label is the truth. A judge flips each true verdict with
its error rate: ``e`` for both ways, or ``e_fail`` (a true pass called a
fail) and ``e_pass`` (a true fail called a pass) for a lenient or harsh judge.

**True κ** of a judge against the labels is the population value::

    p_o = 1 - P(flip),  q = P(judge says pass),  p_e = p q + (1 - p)(1 - q)
    κ = (p_o - p_e) / (1 - p_e)

**True α** of a panel of judges with error rates e_i is the population value
of Krippendorff's nominal α: D_o is the mean over pairs of judges of the
chance they disagree on an answer (e_i(1 - e_j) + e_j(1 - e_i), whatever the
truth), D_e = 2π(1 - π) with π the mean of the judges' pass shares, and
α = 1 - D_o / D_e.

The last column is the large-sample Wald interval (Fleiss, Cohen and
Everitt 1969) on the same worlds: what kb tried first, and why it
bootstraps instead. Run ``python bench/judge_sim.py`` (about two minutes); ``--seeds`` changes the
number of worlds per row (default 2,000; the goal is read at ≥ 1,000).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kb.judging import cohen_kappa, krippendorff_alpha  # noqa: E402

GOAL = 0.93


def true_kappa(p: float, e_fail: float, e_pass: float) -> float:
    """κ of a judge with these error rates against the truth, in the population."""
    agree = p * (1 - e_fail) + (1 - p) * (1 - e_pass)
    says_pass = p * (1 - e_fail) + (1 - p) * e_pass
    chance = p * says_pass + (1 - p) * (1 - says_pass)
    return (agree - chance) / (1 - chance)


def true_alpha(p: float, errors: list[float]) -> float:
    """Krippendorff's nominal α of judges with these (symmetric) error rates, in the population."""
    pairs = [(a, b) for i, a in enumerate(errors) for b in errors[i + 1 :]]
    observed = float(np.mean([a * (1 - b) + b * (1 - a) for a, b in pairs]))
    share = float(np.mean([p * (1 - e) + (1 - p) * e for e in errors]))
    return 1 - observed / (2 * share * (1 - share))


def wald_interval(table: list[int]) -> tuple[float, float] | None:
    """The large-sample Wald interval of κ (Fleiss, Cohen and Everitt 1969): what kb tried
    first, kept here to show why kb bootstraps instead. ``table``: [pp, pf, fp, ff]."""
    n = sum(table)
    p = [[table[0] / n, table[1] / n], [table[2] / n, table[3] / n]]
    rows = [p[0][0] + p[0][1], p[1][0] + p[1][1]]
    cols = [p[0][0] + p[1][0], p[0][1] + p[1][1]]
    chance = rows[0] * cols[0] + rows[1] * cols[1]
    if chance >= 1 - 1e-12:
        return None
    kappa = (p[0][0] + p[1][1] - chance) / (1 - chance)
    spread = 1 - kappa
    a = sum(p[i][i] * (1 - (rows[i] + cols[i]) * spread) ** 2 for i in (0, 1))
    b = spread**2 * (p[0][1] * (cols[0] + rows[1]) ** 2 + p[1][0] * (cols[1] + rows[0]) ** 2)
    c = (kappa - chance * spread) ** 2
    half = 1.959963984540054 * np.sqrt(max(a + b - c, 0.0) / (n * (1 - chance) ** 2))
    return kappa - half, kappa + half


def kappa_row(
    n: int, p: float, e_fail: float, e_pass: float, seeds: int, rng: np.random.Generator
) -> tuple[float, float, float, int, float]:
    """Coverage of κ's interval, the mean width, the true κ, worlds with no κ, and the
    coverage of the Wald interval on the same worlds."""
    truth = true_kappa(p, e_fail, e_pass)
    covered = widths = undefined = wald = 0
    for _ in range(seeds):
        labels = rng.random(n) < p
        flip = rng.random(n) < np.where(labels, e_fail, e_pass)
        judge = labels ^ flip
        found = cohen_kappa(zip(judge.tolist(), labels.tolist(), strict=True))
        if found.low is None or found.high is None:
            undefined += 1
            continue
        covered += found.low <= truth <= found.high
        widths += found.high - found.low
        table = [found.both_pass, found.first_pass_only, found.second_pass_only, found.both_fail]
        other = wald_interval(table)
        wald += other is not None and other[0] <= truth <= other[1]
    defined = max(seeds - undefined, 1)
    return covered / defined, widths / defined, truth, undefined, wald / defined


def alpha_row(
    n: int, p: float, errors: list[float], seeds: int, rng: np.random.Generator, missing: float
) -> tuple[float, float, float]:
    """Coverage of α's interval, its mean width and the true α."""
    truth = true_alpha(p, errors)
    covered = widths = 0.0
    done = 0
    for _ in range(seeds):
        labels = rng.random(n) < p
        said = [labels ^ (rng.random(n) < e) for e in errors]
        present = [rng.random(n) >= missing for _ in errors]
        units = [
            [bool(s[i]) for s, keep in zip(said, present, strict=True) if keep[i]] for i in range(n)
        ]
        found = krippendorff_alpha(units)
        if found.low is None or found.high is None:
            continue
        done += 1
        covered += found.low <= truth <= found.high
        widths += found.high - found.low
    return covered / max(done, 1), widths / max(done, 1), truth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=2000)
    args = parser.parse_args()
    rng = np.random.default_rng(14_5)
    print(f"Cohen's kappa against labels: coverage of the 95 % interval (goal >= {GOAL:.0%})")
    head = f"{'n':>4} {'p':>5} {'e(pass->fail)':>14} {'e(fail->pass)':>14} {'true k':>7} "
    print(head + f"{'coverage':>9} {'width':>6} {'no k':>5} {'goal':>5} {'(Wald)':>7}")
    rows = [
        (200, 0.6, 0.10, 0.10),
        (200, 0.5, 0.10, 0.10),
        (200, 0.8, 0.10, 0.10),
        (200, 0.6, 0.05, 0.05),
        (200, 0.6, 0.20, 0.20),
        (200, 0.6, 0.30, 0.30),
        (200, 0.6, 0.02, 0.25),
        (200, 0.6, 0.25, 0.02),
        (100, 0.6, 0.10, 0.10),
        (50, 0.6, 0.10, 0.10),
        (30, 0.6, 0.10, 0.10),
        (30, 0.6, 0.30, 0.30),
    ]
    for n, p, e_fail, e_pass in rows:
        coverage, width, truth, undefined, wald = kappa_row(n, p, e_fail, e_pass, args.seeds, rng)
        met = "met" if coverage >= GOAL else "NOT"
        print(f"{n:>4} {p:>5.2f} {e_fail:>14.2f} {e_pass:>14.2f} {truth:>7.3f} "
              f"{coverage:>9.1%} {width:>6.3f} {undefined:>5} {met:>5} {wald:>7.1%}")  # fmt: skip
    print()
    print("Krippendorff's alpha between three judges: coverage of the 95 % bootstrap interval")
    print(f"{'n':>4} {'p':>5} {'errors':>16} {'missing':>8} {'true a':>7} {'coverage':>9} "
          f"{'width':>6} {'goal':>5}")  # fmt: skip
    alpha_rows = [
        (200, 0.6, [0.10, 0.10, 0.10], 0.0),
        (200, 0.6, [0.05, 0.10, 0.20], 0.0),
        (200, 0.5, [0.10, 0.15, 0.20], 0.0),
        (200, 0.6, [0.10, 0.10, 0.10], 0.1),
        (100, 0.6, [0.10, 0.10, 0.10], 0.0),
        (50, 0.6, [0.10, 0.10, 0.10], 0.0),
    ]
    for n, p, errors, missing in alpha_rows:
        coverage, width, truth = alpha_row(n, p, errors, args.seeds, rng, missing)
        met = "met" if coverage >= GOAL else "NOT"
        shown = "/".join(f"{e:.2f}" for e in errors)
        print(f"{n:>4} {p:>5.2f} {shown:>16} {missing:>8.0%} {truth:>7.3f} {coverage:>9.1%} "
              f"{width:>6.3f} {met:>5}")  # fmt: skip


if __name__ == "__main__":
    main()
