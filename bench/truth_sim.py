"""Truth simulation (not a test): do kb's claims follow what is true, night after night?

Scripted models of known pass rate are swept nightly and every night's claims
are compared with the truth (SPEC 12.2):

* ten stable models (p = 0.98 … 0.25);
* eight that change at night 8: 0.97 and 0.95 dropping to 0.85, 0.80 and
  0.75, and 0.25 and 0.35 rising to 0.97;
* two regimes — *fresh*: each case passes with probability p, redrawn every
  night; *fixed*: each case's outcome is drawn once (a drop flips passing
  cases to failing, failing cases stay failing), then flipped with
  probability 0.05 each night;
* pools of 120 and of 30 cases per class; 24 nights.

Two ways of running the same rule:

* **vectorized** — ``kb.sweep.epochs.run_night`` (the very generator kb's
  sweep drives, pass by pass) over every simulated cell at once, with the
  interval gate as kb applies it; ``--seeds`` (≥ 500) seeds. Beside kb's
  rule: v2's interval gate and the point gate (30 cases every night; from a
  pool of 120, its first 30), and the other rules tried (the frontier).
* **real** — ``--real-seeds`` seeds through ``kb.sweep.run.run_sweep`` (spec
  file, scripted provider through litellm's custom-provider path, plan,
  epochs file, cells, gate, falsification, CAS commit): the state of every
  model on every night is compared with the vectorized model's on the same
  draws.

Per model-night the *state* is the polarity of the model's live claim (or
none). Figures (mean over seeds):

* wrong — a strength while p < 0.8, or a weakness while p > 0.6, % of the
  stable models' nights;
* flaps — state changes between nights, summed over the stable models;
* coverage — from night 3, p ≥ 0.95 holding a strength or p ≤ 0.3 a weakness;
* d→x — mean nights after the change until a strength held the night
  before is gone (worst of the two starting models); not gone — % of those
  still holding it 16 nights later; rise — mean nights until the risen
  model holds a strength;
* calls — target calls per cell per night, % of measuring 30 cases.

Usage: python bench/truth_sim.py [--seeds 500] [--real-seeds 10] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kb.stats import wilson_arrays  # noqa: E402
from kb.sweep.epochs import (  # noqa: E402
    DEFAULT_RULE,
    HELD_NONE,
    HELD_STRENGTH,
    HELD_WEAKNESS,
    EpochArrays,
    EpochRule,
    rotation,
    run_night,
)

STABLE = (0.98, 0.95, 0.9, 0.85, 0.78, 0.7, 0.62, 0.55, 0.4, 0.25)
DROPS = ((0.97, 0.85), (0.97, 0.80), (0.97, 0.75), (0.95, 0.85), (0.95, 0.80), (0.95, 0.75))
RISES = ((0.25, 0.97), (0.35, 0.97))
CHANGES = DROPS + RISES
MODELS = len(STABLE) + len(CHANGES)
NIGHTS, CHANGE, FLIP, V2_CASES = 24, 8, 0.05, 30
STRENGTH, WEAKNESS, TOLERANCE = 0.9, 0.5, 0.1
DAY_MS = 86_400_000
START_MS = 1_798_761_600_000  # 2027-01-01T00:00:00Z
GOALS = {"wrong": 0.5, "flaps": 4.0, "coverage": 94.0, "d85": 2.0, "d80": 1.3}
GOALS |= {"not_gone": 4.0, "rise": 1.6, "calls": 60.0}

RULES: dict[str, EpochRule] = {
    "kb (default)": DEFAULT_RULE,
    "no confirm passes": replace(DEFAULT_RULE, confirm_passes=0),
    "1 confirm pass": replace(DEFAULT_RULE, confirm_passes=1),
    "raise at 1.5": replace(DEFAULT_RULE, raise_level=1.5),
    "raise at 2.0": replace(DEFAULT_RULE, raise_level=2.0),
    "alarm 4": replace(DEFAULT_RULE, alarm=4.0),
    "alarm 6": replace(DEFAULT_RULE, alarm=6.0),
    "strength sample 16": replace(DEFAULT_RULE, strength_sample=16),
    "strength sample 24": replace(DEFAULT_RULE, strength_sample=24),
    "confirm 30": replace(DEFAULT_RULE, confirm_sample=30),
    "raised next night 40": replace(DEFAULT_RULE, raised_sample=40),
    "level frozen at the first full night": replace(DEFAULT_RULE, level_runs=0),
    "pooled level": replace(DEFAULT_RULE, pooled_level=True),
    "pooled level, margin 1": replace(DEFAULT_RULE, pooled_level=True, level_margin=1.0),
    "pooled level, margin 2": replace(DEFAULT_RULE, pooled_level=True, level_margin=2.0),
    "frozen level, margin 1": replace(DEFAULT_RULE, level_margin=1.0),
    "frozen level, margin 2": replace(DEFAULT_RULE, level_margin=2.0),
}


def truth(regime: str, seeds: int, pool: int, seed0: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(p [NIGHTS, B], outcomes [NIGHTS, B, pool]): B = seeds × models, seed-major."""
    p = np.tile(np.array([*STABLE, *(a for a, _ in CHANGES)], dtype=float), (NIGHTS, 1))
    for j, (_, b) in enumerate(CHANGES):
        p[CHANGE:, len(STABLE) + j] = b
    outcomes = np.zeros((NIGHTS, seeds * MODELS, pool))
    for s in range(seeds):
        rng = np.random.default_rng([seed0 + s, pool, regime == "fixed"])
        rows = slice(s * MODELS, (s + 1) * MODELS)
        if regime == "fresh":
            outcomes[:, rows] = rng.random((NIGHTS, MODELS, pool)) < p[:, :, None]
        else:
            case = rng.random((MODELS, pool))
            flips = rng.random((NIGHTS, MODELS, pool)) < FLIP
            outcomes[:, rows] = np.logical_xor(case[None] < p[:, :, None], flips)
    return np.tile(p, (1, seeds)), outcomes


def gate(held: np.ndarray, low: np.ndarray, high: np.ndarray, blocked: np.ndarray) -> np.ndarray:
    """The interval gate with hysteresis (SPEC 11.1): tonight's band, else a kept belief."""
    band = np.where(
        low >= STRENGTH - TOLERANCE,
        HELD_STRENGTH,
        np.where(high <= WEAKNESS + TOLERANCE, HELD_WEAKNESS, HELD_NONE),
    )
    claim = (band != HELD_NONE) & (band != blocked)
    keep = np.where(
        held == HELD_STRENGTH,
        high >= STRENGTH,
        np.where(held == HELD_WEAKNESS, low <= WEAKNESS, False),
    )
    return np.where(claim, band, np.where(keep, held, HELD_NONE))


def run_rule(
    rule: EpochRule, outcomes: np.ndarray, orders: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """kb's rule on every cell: states [NIGHTS, B] and calls per cell per night [B]."""
    _, cells, pool = outcomes.shape
    state = EpochArrays.empty(np.full(cells, pool, dtype=np.int64), pool)
    held = np.zeros(cells, dtype=np.int64)
    new = np.ones(cells, dtype=bool)
    states = np.zeros((NIGHTS, cells), dtype=np.int64)
    calls = np.zeros(cells)
    for t in range(NIGHTS):
        passes = run_night(state, orders, new, held, rule)
        try:
            _, mask = next(passes)
            while True:
                calls += mask.sum(axis=1)
                _, mask = passes.send(outcomes[t])
        except StopIteration as done:
            result = done.value
        state = result.state
        low, high = state.interval()
        # an alarm retires the watched claim, which cannot be re-earned the same night
        blocked = np.where(
            result.alarm_down, HELD_STRENGTH, np.where(result.alarm_up, HELD_WEAKNESS, -1)
        )
        retired = (result.alarm_down & (held == HELD_STRENGTH)) | (
            result.alarm_up & (held == HELD_WEAKNESS)
        )
        held = gate(np.where(retired, HELD_NONE, held), low, high, blocked)
        states[t] = held
        new[:] = False
    return states, calls / NIGHTS


def run_v2(outcomes: np.ndarray, point: bool) -> tuple[np.ndarray, np.ndarray]:
    """v2: 30 cases every night, decided alone (interval gate with hysteresis, or point)."""
    cases = outcomes[:, :, :V2_CASES]
    cells = cases.shape[1]
    held = np.zeros(cells, dtype=np.int64)
    states = np.zeros((NIGHTS, cells), dtype=np.int64)
    for t in range(NIGHTS):
        passed = cases[t].sum(axis=1)
        if point:
            rate = passed / V2_CASES
            held = np.where(
                rate >= STRENGTH,
                HELD_STRENGTH,
                np.where(rate <= WEAKNESS, HELD_WEAKNESS, HELD_NONE),
            )
        else:
            low, high = wilson_arrays(passed, np.full(cells, float(V2_CASES)))
            held = gate(held, low, high, np.full(cells, -1))
        states[t] = held
    return states, np.full(cells, float(V2_CASES))


def figures(p: np.ndarray, states: np.ndarray, calls: np.ndarray) -> dict[str, float]:
    seeds = states.shape[1] // MODELS
    st = states.reshape(NIGHTS, seeds, MODELS)
    pt = p.reshape(NIGHTS, seeds, MODELS)
    stable, stable_p = st[:, :, : len(STABLE)], pt[:, :, : len(STABLE)]
    wrong = ((stable == HELD_STRENGTH) & (stable_p < 0.8)) | (
        (stable == HELD_WEAKNESS) & (stable_p > 0.6)
    )
    coverable = (np.arange(NIGHTS)[:, None, None] >= 3) & ((stable_p >= 0.95) | (stable_p <= 0.3))
    want = np.where(stable_p >= 0.95, HELD_STRENGTH, HELD_WEAKNESS)
    found = {
        "wrong": 100 * float(wrong.mean()),
        "flaps": float((stable[1:] != stable[:-1]).sum(axis=(0, 2)).mean()),
        "coverage": 100 * float(((stable == want) & coverable).sum() / coverable.sum()),
        "calls": 100 * float(calls.mean()) / V2_CASES,
    }
    delays: dict[tuple[float, float], tuple[float, float]] = {}
    for j, change in enumerate(CHANGES):
        col = st[:, :, len(STABLE) + j]
        after = col[CHANGE : CHANGE + 16]
        if change in DROPS:
            gone = after != HELD_STRENGTH
            first = np.where(gone.any(axis=0), gone.argmax(axis=0) + 1, 99)[
                col[CHANGE - 1] == HELD_STRENGTH
            ]
        else:
            got = after == HELD_STRENGTH
            first = np.where(got.any(axis=0), got.argmax(axis=0) + 1, 99)
        seen = first[first < 99]
        delays[change] = (
            float(seen.mean()) if seen.size else float("nan"),
            100 * float((first == 99).mean()),
        )
    for target, name in ((0.85, "d85"), (0.80, "d80"), (0.75, "d75")):
        found[name] = max(delays[(a, b)][0] for a, b in DROPS if b == target)
    found["not_gone"] = max(delays[d][1] for d in DROPS)
    found["rise"] = max(delays[r][0] for r in RISES)
    found["rise_missed"] = max(delays[r][1] for r in RISES)
    return found


def misses(found: dict[str, float]) -> list[str]:
    return [
        name
        for name, goal in GOALS.items()
        if (found[name] < goal if name == "coverage" else not found[name] <= goal)
    ]


def row(name: str, found: dict[str, float]) -> str:
    return (
        f"| {name} | {found['wrong']:.2f} % | {found['flaps']:.1f} | {found['coverage']:.1f} % | "
        f"{found['d85']:.2f} | {found['d80']:.2f} | {found['d75']:.2f} | "
        f"{found['not_gone']:.1f} % | "
        f"{found['rise']:.2f} | {found['calls']:.0f} % |"
    )


HEADER = [
    "| rule | wrong | flaps | coverage | d→0.85 | d→0.80 | d→0.75 | not gone | rise | calls |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
]


# ---- the real sweep -------------------------------------------------------------


def spec_text(night_outcomes: np.ndarray, pool: int) -> str:
    lines = ["[sweep]", 'committer = "truth-sim"', "concurrency = 64", "allow_unbounded = true", ""]
    for m, passes in enumerate(night_outcomes):
        # distinct replies per case: one reply to every prompt is what an outage looks like
        replies = {
            f"Case {i}?": (f"right {i}" if ok else f"wrong {i}") for i, ok in enumerate(passes)
        }
        table = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in replies.items())
        lines += [
            "[[models]]",
            f'model = "scripted:m{m:02d}"',
            f"params = {{ responses = {{ {table} }} }}",
        ]
    for i in range(pool):
        lines += [
            "[[cases]]",
            f'name = "case-{i:03d}"',
            'task_class = "t"',
            f'prompt = "Case {i}?"',
            f'graders = [{{ kind = "golden", expected = "right {i}" }}]',
        ]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class RealRun:
    states: np.ndarray
    """[NIGHTS, MODELS] each model's state (HELD_*; -1 for both at once)."""
    calls: np.ndarray
    """[MODELS] target calls per night."""
    fingerprint: str


def real_sweep(regime: str, pool: int, seed: int) -> RealRun:
    from kb.engine.scheduler import Engine, EngineConfig
    from kb.store.filestore import KnowledgeStore
    from kb.store.ttl import claim_expired
    from kb.sweep.run import run_sweep
    from kb.sweep.spec import load_spec

    _, outcomes = truth(regime, 1, pool, seed)
    states = np.zeros((NIGHTS, MODELS), dtype=np.int64)
    calls = np.zeros(MODELS)
    fingerprint = ""
    code = {"strength": HELD_STRENGTH, "weakness": HELD_WEAKNESS}
    with tempfile.TemporaryDirectory() as folder:
        store = KnowledgeStore(Path(folder) / "rulvar.models.json")
        for t in range(NIGHTS):
            spec_path = Path(folder) / "night.toml"
            spec_path.write_text(spec_text(outcomes[t], pool))
            at = START_MS + t * DAY_MS
            engine = Engine(EngineConfig(concurrency=64, per_provider=64, max_retries=0))
            report = run_sweep(load_spec(spec_path), store, engine, observed_at=at)
            assert report is not None
            for cell, _ in report.cells:
                calls[int(cell.member.ref.removeprefix("scripted:m"))] += len(cell.verdicts)
                if cell.epoch is not None:
                    fingerprint = cell.epoch.suite.suite
            held: dict[int, set[int]] = {m: set() for m in range(MODELS)}
            for claim in store.read().claims:
                if claim.status == "active" and not claim_expired(claim, at):
                    held[int(claim.model.removeprefix("scripted:m"))].add(code[claim.polarity])
            states[t] = [
                (-1 if len(h) > 1 else next(iter(h)) if h else HELD_NONE) for h in held.values()
            ]
    return RealRun(states, calls / NIGHTS, fingerprint)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=500)
    parser.add_argument("--real-seeds", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pools", default="120,30")
    parser.add_argument("--real-pools", default="120", help="the pools the real check sweeps")
    args = parser.parse_args()
    pools = [int(p) for p in args.pools.split(",")]
    started = time.perf_counter()
    out = [
        "# Truth simulation: claims that follow the model (SPEC 12.2)",
        "",
        f"{len(STABLE)} stable models and {len(CHANGES)} that change at night {CHANGE} "
        f"({', '.join(f'{a}→{b}' for a, b in CHANGES)}), {NIGHTS} nights. "
        f"Vectorized: kb's own `run_night` over {args.seeds} seeds per regime and pool. "
        "v2 and the point gate measure 30 cases every night (from a pool of 120, its first 30). "
        "Calls: target calls per cell per night, % of 30.",
    ]
    verdict = []
    for pool in pools:
        for regime in ("fresh", "fixed"):
            p, outcomes = truth(regime, args.seeds, pool)
            orders = np.tile(rotation("truth-sim", pool), (outcomes.shape[1], 1))
            out += ["", f"## {regime} cases, a pool of {pool}", "", *HEADER]
            base = {}
            for name, point in (("v2 interval gate", False), ("point gate", True)):
                base[name] = figures(p, *run_v2(outcomes, point))
                out.append(row(name, base[name]))
            for name, rule in RULES.items():
                found = figures(p, *run_rule(rule, outcomes, orders))
                out.append(row(name, found))
                if name != "kb (default)":
                    continue
                if pool == 120:
                    missed = misses(found)
                    verdict.append(
                        f"{regime}, pool 120: "
                        + ("all goals met" if not missed else "missed " + ", ".join(missed))
                    )
                else:
                    v2 = base["v2 interval gate"]
                    worse = [
                        k
                        for k in GOALS
                        if (found[k] < v2[k] - 1e-9 if k == "coverage" else found[k] > v2[k] + 1e-9)
                    ]
                    verdict.append(
                        f"{regime}, pool 30: "
                        + (
                            "no figure worse than v2's interval gate"
                            if not worse
                            else "worse than v2 in " + ", ".join(worse)
                        )
                    )
    out += [
        "",
        "Goals with a pool of 120 (kb's rule, each regime): wrong ≤ 0.5 %, flaps ≤ 4, "
        "coverage ≥ 94 %, d→0.85 ≤ 2.0, d→0.80 ≤ 1.3, not gone ≤ 4 %, rise ≤ 1.6, "
        "calls ≤ 60 %; with 30: no figure worse than v2.",
        "",
    ]
    out += [f"* {line}" for line in verdict]
    if args.real_seeds:
        out += real_check(
            args.real_seeds, args.workers, [int(p) for p in args.real_pools.split(",")]
        )
    out += [
        "",
        f"({time.perf_counter() - started:.0f} s; command: `python bench/truth_sim.py "
        f"--seeds {args.seeds} --real-seeds {args.real_seeds} --real-pools {args.real_pools}`)",
    ]
    print("\n".join(out))


def real_check(seeds: int, workers: int, pools: Sequence[int]) -> list[str]:
    out = ["", "## The vectorized model against the real `kb sweep`", ""]
    out += [
        f"{seeds} seeds per regime and pool through `run_sweep` (kb's default rule), "
        "the same draws:",
        "",
    ]
    out += [
        "| regime | pool | model-nights | same state | calls (real) | calls (vectorized) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    jobs = [
        (regime, pool, seed)
        for pool in pools
        for regime in ("fresh", "fixed")
        for seed in range(seeds)
    ]
    with ProcessPoolExecutor(max_workers=workers) as executor:
        runs = list(executor.map(real_sweep, *zip(*jobs, strict=True)))
    for pool in pools:
        for regime in ("fresh", "fixed"):
            picked = [
                run for (r, q, _), run in zip(jobs, runs, strict=True) if r == regime and q == pool
            ]
            real_states = np.concatenate([run.states for run in picked], axis=1)
            real_calls = np.concatenate([run.calls for run in picked])
            _, outcomes = truth(regime, seeds, pool)
            orders = np.tile(rotation(picked[0].fingerprint, pool), (outcomes.shape[1], 1))
            states, calls = run_rule(DEFAULT_RULE, outcomes, orders)
            same = float((states == real_states).mean())
            out.append(
                f"| {regime} | {pool} | {states.size:,} | {100 * same:.2f} % | "
                f"{100 * real_calls.mean() / V2_CASES:.0f} % | "
                f"{100 * calls.mean() / V2_CASES:.0f} % |"
            )
    return out


if __name__ == "__main__":
    main()
