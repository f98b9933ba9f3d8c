"""Four clones pushing nights at once: does every night stay in the epochs file? (SPEC 14.1)

A bare remote and C clones of it (CI runners); each clone sweeps N nights
one after another with ``kb sweep --push`` — the clones all at once — on the
same spec (two scripted models, 30 cases, the default nightly rule), each
night under its own instant and report id. Afterwards the remote's history
is read:

* **nights kept**: of the C × N committed nights, how many each cell's epoch
  in the final epochs file holds (the goal: all, since nothing changed the
  models and no epoch had reason to start over);
* **commits that dropped nights**: commits whose epochs file lacks a night its
  parent's held (the goal: 0);
* **restarts without a reason**: commits where a cell's epoch began again
  at a later night as a "first" measurement, as if no epoch had been there
  (the goal: 0; two first nights pushed at once make one epoch, begun at the
  earlier night — a start that moves earlier is that merge, not a restart);
* ``kb verify`` of the final clone, and its exit code.

``python bench/push_drill.py`` (4 × 20, the issue's drill) prints the figures
beside their goals; the tests run a smaller one through :func:`drill`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EPOCHS = "rulvar.models.epochs.json"
CASES = 30


def spec_text() -> str:
    """Two scripted models (one right on every case, one wrong), 30 extraction cases."""
    lines = ["[sweep]", 'committer = "ci"', "", "[budgets]", "target_usd = 0.01"]
    lines += ["max_total_usd = 50.0"]
    for name, right in (("good", True), ("poor", False)):
        table = ", ".join(f'"Q{i}?" = "{f"a{i}" if right else f"no{i}"}"' for i in range(CASES))
        lines += ["", "[[models]]", f'model = "scripted:{name}"']
        lines += [f"params = {{ cost_usd = 0.0001, responses = {{ {table} }} }}"]
    for i in range(CASES):
        lines += ["", "[[cases]]", f'name = "c{i:02d}"', 'task_class = "extraction"']
        lines += [f'prompt = "Q{i}?"', f'graders = [{{ kind = "golden", expected = "a{i}" }}]']
    return "\n".join(lines) + "\n"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


def night_instant(clone: int, night: int) -> str:
    """Night ``night`` of clone ``clone`` (both from 1): a day apart, a minute per clone."""
    return f"2026-10-{night:02d}T02:{clone:02d}:00Z"


def report_id(clone: int, night: int) -> str:
    return f"kb-sweep-2026-10-{night:02d}T02:{clone:02d}:00.000Z"


@dataclass
class DrillResult:
    """What the remote's history says after the drill."""

    nights: list[str]
    """Every night a clone committed (report ids)."""
    kept: dict[str, list[str]]
    """Cell → the nights its epoch holds in the final epochs file."""
    dropping_commits: int
    """Commits whose epochs file lacks a night their parent's held."""
    epoch_commits: int
    """Commits that changed the epochs file."""
    restarts: int = 0
    """Commits where a cell's epoch began again, later, as a first measurement."""
    verify_code: int = 0
    verify_said: str = ""
    failures: list[str] = field(default_factory=list)
    """Sweeps that did not exit 0 (their stderr)."""

    @property
    def kept_share(self) -> float:
        counts = [len(set(self.nights) & set(held)) for held in self.kept.values()]
        return min(counts) / len(self.nights) if counts and self.nights else 0.0


def _environment(root: Path, code: Path = ROOT) -> dict[str, str]:
    config = root / "gitconfig"
    config.write_text("[user]\n\tname = Drill\n\temail = drill@example.com\n")
    env = dict(os.environ)
    env.update(GIT_CONFIG_GLOBAL=str(config), GIT_CONFIG_NOSYSTEM="1")
    env.pop("KB_STORE", None)
    env["PYTHONPATH"] = str(code) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def drill(
    root: Path,
    clones: int,
    nights: int,
    *,
    python: str = sys.executable,
    first_nights_at_once: bool = False,
    code: Path = ROOT,
) -> DrillResult:
    """Run the drill in ``root`` (a fresh folder); what the remote holds afterwards.

    ``first_nights_at_once``: every clone sweeps the same night numbers at once
    (their first nights race), else each runs its nights independently.
    ``code``: the checkout whose ``kb`` runs (another version's, to compare).
    """
    root.mkdir(parents=True, exist_ok=True)
    env = _environment(root, code)
    remote = root / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True, env=env)
    seed = root / "seed"
    # (git warns that the remote is empty: it is, until the seed pushes)
    subprocess.run(
        ["git", "clone", "-q", str(remote), str(seed)], check=True, env=env, capture_output=True
    )
    subprocess.run(["git", "checkout", "-q", "-b", "main"], cwd=seed, check=True, env=env)
    (seed / "sweep.toml").write_text(spec_text())
    subprocess.run(["git", "add", "sweep.toml"], cwd=seed, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "the nightly spec"], cwd=seed, check=True, env=env)
    subprocess.run([python, "-m", "kb", "init"], cwd=seed, check=True, env=env, capture_output=True)
    subprocess.run(["git", "push", "-q", "origin", "main"], cwd=seed, check=True, env=env)
    paths = []
    for c in range(1, clones + 1):
        clone = root / f"runner{c}"
        subprocess.run(["git", "clone", "-q", str(remote), str(clone)], check=True, env=env)
        paths.append(clone)

    def sweep(clone: int, night: int) -> str | None:
        done = subprocess.run(
            [python, "-m", "kb", "sweep", "sweep.toml", "--push", "--attempts", "40", "--quiet"]
            + ["--observed-at", night_instant(clone, night)],
            cwd=paths[clone - 1],
            env=env,
            capture_output=True,
            text=True,
        )
        return None if done.returncode == 0 else f"{clone}/{night}: {done.stderr.strip()}"

    def runner(clone: int) -> list[str]:
        return [f for n in range(1, nights + 1) if (f := sweep(clone, n)) is not None]

    failures: list[str] = []
    with ThreadPoolExecutor(max_workers=clones) as pool:
        if first_nights_at_once:
            for n in range(1, nights + 1):
                found = pool.map(lambda c, n=n: sweep(c, n), range(1, clones + 1))
                failures += [f for f in found if f is not None]
        else:
            for found in pool.map(runner, range(1, clones + 1)):
                failures += found
    check = root / "check"
    subprocess.run(["git", "clone", "-q", str(remote), str(check)], check=True, env=env)
    return read_history(check, env, failures, python)


def _epochs_at(check: Path, commit: str) -> dict[str, dict[str, object]]:
    shown = subprocess.run(
        ["git", "show", f"{commit}:{EPOCHS}"], cwd=check, capture_output=True, text=True
    )
    if shown.returncode != 0:
        return {}
    cells: dict[str, dict[str, object]] = json.loads(shown.stdout).get("cells", {})
    return cells


def read_history(
    check: Path, env: dict[str, str], failures: Sequence[str], python: str
) -> DrillResult:
    """The figures of a drill from a clone of its remote."""
    nights: list[str] = []
    dropping = changed = restarts = 0
    for line in git(check, "rev-list", "--first-parent", "--parents", "HEAD").splitlines():
        commit, *parents = line.split()
        said = git(check, "log", "-1", "--format=%(trailers:key=Kb-Report,valueonly)", commit)
        if said.strip():
            nights.append(said.strip())
        if not parents:
            continue
        now, before = _epochs_at(check, commit), _epochs_at(check, parents[0])
        changed += now != before
        if any(_nights(epoch) - _nights(now.get(cell, {})) for cell, epoch in before.items()):
            dropping += 1
        if any(
            _start(now.get(cell, {})) > _start(epoch) and _reason(now.get(cell, {})) == "first"
            for cell, epoch in before.items()
        ):
            restarts += 1
    kept = {cell: sorted(_nights(epoch)) for cell, epoch in _epochs_at(check, "HEAD").items()}
    verify = subprocess.run(
        [python, "-m", "kb", "verify", *(["--all"] if _has_all(python, check, env) else [])],
        cwd=check,
        env=env,
        capture_output=True,
        text=True,
    )
    return DrillResult(
        sorted(set(nights)),
        kept,
        dropping,
        changed,
        restarts,
        verify.returncode,
        (verify.stdout + verify.stderr).strip(),
        list(failures),
    )


def _start(epoch: dict[str, object]) -> str:
    start = epoch.get("start")
    return str(start.get("observedAt", "")) if isinstance(start, dict) else ""


def _reason(epoch: dict[str, object]) -> str:
    start = epoch.get("start")
    return str(start.get("reason", "")) if isinstance(start, dict) else ""


def _nights(epoch: dict[str, object]) -> set[str]:
    found = epoch.get("nights", [])
    return (
        {str(n["reportId"]) for n in found if isinstance(n, dict)}
        if isinstance(found, list)
        else set()
    )


def _has_all(python: str, check: Path, env: dict[str, str]) -> bool:
    helped = subprocess.run(
        [python, "-m", "kb", "verify", "--help"], cwd=check, env=env, capture_output=True, text=True
    )
    return "--all" in helped.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clones", type=int, default=4)
    parser.add_argument("--nights", type=int, default=20)
    parser.add_argument("--keep", type=Path, default=None, help="Run here and keep it.")
    parser.add_argument("--kb", type=Path, default=ROOT, help="The checkout whose kb runs.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = args.keep or Path(scratch)
        root.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        found = drill(root, args.clones, args.nights, code=args.kb.resolve())
        wall = time.perf_counter() - started
    total = args.clones * args.nights
    shape = f"{args.clones} clones x {args.nights} nights"
    print(f"push drill: {shape} with --push at once ({wall:.0f} s; kb from {args.kb})")
    print(f"  sweeps that failed:          {len(found.failures):>4}   goal 0")
    for failure in found.failures[:5]:
        print(f"    {failure[:300]}")
    print(f"  nights committed:            {len(found.nights):>4}   of {total}")
    for cell, held in sorted(found.kept.items()):
        print(
            f"  nights in {cell}'s epoch:  {len(set(held) & set(found.nights)):>4}   goal {total}"
        )
    print(
        f"  commits that dropped nights: {found.dropping_commits:>4}   goal 0 "
        f"(of {found.epoch_commits} that changed the epochs file)"
    )
    print(f"  restarts without a reason:   {found.restarts:>4}   goal 0")
    print(f"  kb verify: exit {found.verify_code}   goal 0 ({found.verify_said[:200]})")


if __name__ == "__main__":
    main()
