"""Truth simulation (not a test): do kb's claims say what is true, night after night?

Ten scripted models with known true pass rates are swept nightly for 20 nights
through the real sweep (``kb.sweep.run.run_sweep``: spec file, pool, engine
through litellm's custom-provider path, cells, gate, falsification, CAS commit
into a store file), 30 cases per cell, in two regimes:

* fresh — each case passes with probability p, drawn anew every night;
* fixed — each case's outcome is drawn once, then flipped with probability
  0.05 each night (a fixed case set with a little provider noise).

Both gates see the same draws. Per model-night the *state* is the polarity of
the model's active, unexpired eval claim (or none). Figures, mean over seeds:

* wrong — strength while p < 0.8, or weakness while p > 0.6, % of model-nights;
* flaps — state changes between consecutive nights, summed over the models;
* coverage — after night 3, p >= 0.95 holding a strength or p <= 0.3 holding a
  weakness, % of those model-nights;
* contradictions — model-nights with an active strength and weakness at once.

Goals (SPEC 11.1, each regime, interval gate): wrong <= 2 %, flaps <= 8,
coverage >= 80 %, contradictions 0. The point gate (rulvar's rule) is printed
beside it.

Usage: python bench/truth_sim.py [--seeds 20] [--nights 20] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TRUE_P = (0.98, 0.95, 0.9, 0.85, 0.78, 0.7, 0.62, 0.55, 0.4, 0.25)
CASES = 30
FLIP = 0.05
DAY_MS = 86_400_000
START_MS = 1_798_761_600_000  # 2027-01-01T00:00:00Z
GOALS = {"wrong": 2.0, "flaps": 8.0, "coverage": 80.0, "contradictions": 0.0}


def outcomes(regime: str, seed: int, nights: int) -> np.ndarray:
    """Pass (True) or fail per (night, model, case): the known truth both gates see."""
    rng = np.random.default_rng(seed)
    p = np.array(TRUE_P)[None, :, None]
    if regime == "fresh":
        return rng.random((nights, len(TRUE_P), CASES)) < p
    base = rng.random((1, len(TRUE_P), CASES)) < p
    flips = rng.random((nights, len(TRUE_P), CASES)) < FLIP
    return np.logical_xor(base, flips)


def spec_text(gate: str, night_outcomes: np.ndarray) -> str:
    lines = [
        "[sweep]",
        'committer = "truth-sim"',
        f'gate = "{gate}"',
        "concurrency = 64",
        "allow_unbounded = true",
        "",
    ]
    for m, passes in enumerate(night_outcomes):
        replies = {f"Case {i}?": ("right" if ok else "wrong") for i, ok in enumerate(passes)}
        table = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in replies.items())
        lines += [
            "[[models]]",
            f'model = "scripted:p{m}"',
            f"params = {{ responses = {{ {table} }} }}",
        ]
    for i in range(CASES):
        lines += [
            "[[cases]]",
            f'name = "case-{i:02d}"',
            'task_class = "t"',
            f'prompt = "Case {i}?"',
            'graders = [{ kind = "golden", expected = "right" }]',
        ]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Run:
    """One (regime, gate, seed): the state of every model on every night."""

    regime: str
    gate: str
    seed: int
    states: list[list[str]]
    """states[night][model]: 'strength', 'weakness', 'none' or 'both'."""


def simulate(regime: str, gate: str, seed: int, nights: int) -> Run:
    from kb.engine.scheduler import Engine, EngineConfig
    from kb.store.filestore import KnowledgeStore
    from kb.store.ttl import claim_expired
    from kb.sweep.run import run_sweep
    from kb.sweep.spec import load_spec

    truth = outcomes(regime, seed, nights)
    states = []
    with tempfile.TemporaryDirectory() as folder:
        store = KnowledgeStore(Path(folder) / "rulvar.models.json")
        for night in range(nights):
            spec_path = Path(folder) / f"night-{night}.toml"
            spec_path.write_text(spec_text(gate, truth[night]))
            at = START_MS + night * DAY_MS
            engine = Engine(EngineConfig(concurrency=64, per_provider=64, max_retries=0))
            run_sweep(load_spec(spec_path), store, engine, observed_at=at)
            held: dict[str, set[str]] = {f"scripted:p{m}": set() for m in range(len(TRUE_P))}
            for claim in store.read().claims:
                if claim.status == "active" and not claim_expired(claim, at):
                    held[claim.model].add(claim.polarity)
            states.append(
                [
                    "both" if len(h) == 2 else next(iter(h)) if h else "none"
                    for h in (held[f"scripted:p{m}"] for m in range(len(TRUE_P)))
                ]
            )
    return Run(regime, gate, seed, states)


def figures(runs: list[Run]) -> dict[str, float]:
    wrong, flaps, covered, coverable, contradictions, model_nights = [], [], 0, 0, 0, 0
    for run in runs:
        run_wrong = 0
        run_flaps = 0
        for night, states in enumerate(run.states):
            for m, state in enumerate(states):
                p = TRUE_P[m]
                model_nights += 1
                if state in ("strength", "both") and p < 0.8:
                    run_wrong += 1
                if state in ("weakness", "both") and p > 0.6:
                    run_wrong += 1
                contradictions += state == "both"
                if night >= 3 and (p >= 0.95 or p <= 0.3):
                    coverable += 1
                    want = "strength" if p >= 0.95 else "weakness"
                    covered += state == want
                if night and state != run.states[night - 1][m]:
                    run_flaps += 1
        wrong.append(100.0 * run_wrong / (len(run.states) * len(TRUE_P)))
        flaps.append(run_flaps)
    return {
        "wrong": float(np.mean(wrong)),
        "flaps": float(np.mean(flaps)),
        "coverage": 100.0 * covered / coverable if coverable else 0.0,
        "contradictions": float(contradictions) / len(runs),
    }


def met(name: str, value: float) -> bool:
    goal = GOALS[name]
    return value >= goal if name == "coverage" else value <= goal


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--nights", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    jobs = [
        (regime, gate, seed, args.nights)
        for regime in ("fresh", "fixed")
        for gate in ("interval", "point")
        for seed in range(args.seeds)
    ]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        runs = list(pool.map(simulate, *zip(*jobs, strict=True)))
    elapsed = time.perf_counter() - started
    sweeps = len(jobs) * args.nights
    lines = [
        "# Truth simulation: claims against known pass rates",
        "",
        f"{len(TRUE_P)} scripted models (p = {', '.join(str(p) for p in TRUE_P)}), "
        f"{CASES} cases per cell, {args.nights} nightly sweeps through `run_sweep`, "
        f"{args.seeds} seeds per regime, both gates on the same draws "
        f"({sweeps} sweeps, {sweeps * len(TRUE_P) * CASES:,} scripted runs, {elapsed:.0f} s). "
        "Mean over seeds; goals are for the interval gate.",
        "",
        "| regime | gate | wrong model-nights | flaps | coverage | contradictions |",
        "|---|---|---:|---:|---:|---:|",
    ]
    verdicts = []
    for regime in ("fresh", "fixed"):
        for gate in ("interval", "point"):
            found = figures([r for r in runs if r.regime == regime and r.gate == gate])
            lines.append(
                f"| {regime} | {gate} | {found['wrong']:.2f} % | {found['flaps']:.1f} | "
                f"{found['coverage']:.1f} % | {found['contradictions']:.0f} |"
            )
            if gate == "interval":
                verdicts += [met(name, value) for name, value in found.items()]
    lines += [
        "",
        "Goals: wrong <= 2 %, flaps <= 8, coverage >= 80 %, contradictions 0 — "
        + ("all met by the interval gate in both regimes." if all(verdicts) else "NOT all met."),
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
