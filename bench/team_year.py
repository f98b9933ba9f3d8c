"""A team's nights, one after another: does the store stay bounded, verify cheap? (SPEC 14.3)

Drives the real ``kb sweep`` (a process per night, the CLI a team's CI runs)
on scripted models — M models × 3 task classes × C cases, every model right
on most cases, under the default interval gate and nightly rule — for N
nights a day apart, with ``kb compact --keep-days 30`` every seventh night
(the README's documented compaction), and ``kb verify`` after every night.
It prints, with the goal beside each figure:

* the store file's bytes at night 30 and at the last night, and their ratio
  (SPEC 14.3: ≤ 1.5 at night 365 against night 30);
* the largest live claim's bytes at night 2 and at the last night (a claim's
  size must not grow with its epoch);
* CPU seconds (user + sys of the child processes) of ``kb verify`` per night,
  after the first (incremental) and of ``kb verify --all`` at the end;
* the run journal's fsyncs per night against its settled runs (group sync:
  at most one per 256 runs or 100 ms, plus the durable lines);
* CPU seconds of a night's ``kb sweep`` per planned run, and its peak RSS;
* the git pack's growth per steady night (``git gc`` at night 30 and at the
  end; the evidence is in git, committed with each night's claims);
* after the last night: CPU seconds and peak RSS of ``kb compare``,
  ``kb matrix --cost``, ``kb route --policy evidence`` and ``kb site``.

CPU and peak RSS are each process's own (``os.wait4``), not the machine's
wall clock, so a loaded machine changes them little.

``--kb DIR`` runs another checkout's kb (a worktree of v4, say) on the same
nights; journal fsyncs are counted with strace when it is installed.

This is not the full team year (20 models × 1,500 cases × 365 nights): it
runs at the scale it is given and says which (``--models 20 --cases 500`` is
1×: 30,000 target runs a night).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLASSES = ("extraction", "synthesis", "planning")
STORE = "rulvar.models.json"


def _vocabulary(size: int = 6000) -> list[str]:
    """Deterministic pseudo-words, 2-10 letters (prose's vocabulary, not its meaning)."""
    state, found = 7, []
    for _ in range(size):
        state = state * 1103515245 + 12345 & 0x7FFFFFFF
        length = 2 + state % 9
        word = ""
        for _ in range(length):
            state = state * 1103515245 + 12345 & 0x7FFFFFFF
            word += "etaoinshrdlucmfwypvbgkjqxz"[min(25, (state >> 8) % 40 % 26)]
        found.append(word)
    return found


WORDS = _vocabulary()


def prose(seed: int) -> str:
    """300-2,000 characters of new prose (gzip ~2.6x, as the SPEC's replies)."""
    state = seed * 2654435761 % 2**31 or 1
    words: list[str] = []
    size = 300 + seed * 7919 % 1700
    length = 0
    while length < size:
        state = state * 1103515245 + 12345 & 0x7FFFFFFF
        rank = int(len(WORDS) * ((state >> 4) / 2**27) ** 6)  # common words more often
        word = WORDS[rank % len(WORDS)] + ("." if state % 13 == 0 else "")
        words.append(word)
        length += len(word) + 1
    return " ".join(words)


def write_spec(folder: Path, models: int, cases: int) -> None:
    """``night.toml`` and a reply script per model: each wrong on a few cases of its own.

    Each reply starts with the answer (``a17.``) and goes on with prose; the
    grader looks for the answer (golden ``contains``).
    """
    lines = ["[sweep]", 'committer = "ci"', f"max_cases = {cases}", "", "[budgets]"]
    lines += ["target_usd = 0.01", "max_total_usd = 1000.0"]
    for m in range(models):
        wrong = {(m * 7 + k * 13) % cases for k in range(max(1, cases // 25))}
        table = {
            f"{cls} Q{i}?": f"{'no' if i in wrong else 'a'}{i}. {prose(m * 100_003 + c * 7_001 + i)}"  # noqa: E501
            for c, cls in enumerate(CLASSES)
            for i in range(cases)
        }
        script = folder / f"m{m:02d}.json"
        script.write_text(json.dumps({"responses": table}))
        cost = 0.0001 * (1 + m)  # a ladder: each model dearer than the one before
        lines += ["", "[[models]]", f'model = "scripted:m{m:02d}"']
        lines += [f'params = {{ cost_usd = {cost:.4f}, script = "{script.name}" }}']
    for cls in CLASSES:
        for i in range(cases):
            lines += ["", "[[cases]]", f'name = "{cls[:3]}-{i:04d}"', f'task_class = "{cls}"']
            lines += [f'prompt = "{cls} Q{i}?"']
            lines += [f'graders = [{{ kind = "golden", match = "contains", expected = "a{i}." }}]']
    (folder / "night.toml").write_text("\n".join(lines) + "\n")


def ladders_text(models: int) -> str:
    rungs = ", ".join(f'{{ model = "scripted:m{m:02d}" }}' for m in range(models))
    return f'[[ladders]]\nname = "team"\nstart_tier = 0\nrungs = [{rungs}]\n'


@dataclass
class Night:
    day: int
    store_bytes: int
    largest_claim: int
    sweep_cpu: float
    runs: int
    verify_cpu: float
    sweep_rss_mb: float
    fsyncs: int | None = None


@dataclass
class Reading:
    """One command after the last night: its own CPU seconds and peak RSS."""

    name: str
    cpu: float
    rss_mb: float
    goal: str


@dataclass
class Year:
    nights: list[Night] = field(default_factory=list)
    verify_all_cpu: float = 0.0
    pack_bytes: dict[int, int] = field(default_factory=dict)
    """Night → the git pack's bytes after ``git gc`` that night."""
    readings: list[Reading] = field(default_factory=list)


LAST_RSS_MB = [0.0]
"""The peak RSS of the last :func:`run` (MB)."""


def run(kb: Path, cwd: Path, *args: str, strace: Path | None = None) -> tuple[float, str]:
    """``kb ARGS`` as a process; its CPU seconds and stdout (its peak RSS in LAST_RSS_MB)."""
    env = {**os.environ, "PYTHONPATH": str(kb), "KB_NO_CACHE": "1"}
    command = [sys.executable, "-m", "kb", *args]
    if strace is not None:
        command = [
            "strace",
            "-f",
            "-qq",
            "-e",
            "trace=openat,close,fsync,fdatasync",
            "-o",
            str(strace),
        ]
        command += [sys.executable, "-m", "kb", *args]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    LAST_RSS_MB[0] = usage.ru_maxrss / 1024  # KiB on Linux
    if child.returncode not in (0, 1):
        raise SystemExit(f"kb {' '.join(args)} exited {child.returncode}: {stderr[-2000:]}")
    return usage.ru_utime + usage.ru_stime, stdout


def git_pack_bytes(root: Path) -> int:
    """The repository's packed bytes after ``git gc`` (what a clone downloads)."""
    subprocess.run(["git", "-C", str(root), "gc", "-q"], check=True)
    counted = subprocess.run(
        ["git", "-C", str(root), "count-objects", "-v"], check=True, capture_output=True, text=True
    ).stdout
    fields = dict(line.split(": ") for line in counted.splitlines())
    return (int(fields["size-pack"]) + int(fields["size"])) * 1024


def readings_after(kb: Path, root: Path, instant: str) -> list[Reading]:
    """The reading commands a team runs on the store after its nights."""
    (root / "ladders.toml").write_text(ladders_text_for(root))
    found = []
    for name, args, goal in (
        ("kb compare", ("compare",), "<= 5 CPU-s, <= 300 MB"),
        ("kb matrix --cost", ("matrix", "--cost"), "<= 3 CPU-s"),
        (
            "kb route --policy evidence",
            ("route", "ladders.toml", "--policy", "evidence"),
            "<= 5 CPU-s",
        ),
        (
            "kb site, the new night (incremental)",
            ("site", str(root.parent / "site")),
            "<= 15 CPU-s",
        ),
    ):
        cpu, _ = run(kb, root, "--as-of", instant, *args)
        found.append(Reading(name, cpu, LAST_RSS_MB[0], goal))
    return found


def ladders_text_for(root: Path) -> str:
    spec = (root / "night.toml").read_text()
    return ladders_text(spec.count("[[models]]"))


def journal_fsyncs(trace: Path) -> int:
    """fsyncs of the run journal (``*.journal.jsonl``) while it was open, over every process."""
    open_fds: set[tuple[str, str]] = set()
    count = 0
    for line in trace.read_text().splitlines():
        pid, _, call = line.partition(" ")
        if call.startswith("openat(") and ".journal.jsonl" in call and " = " in call:
            fd = call.rsplit(" = ", 1)[1].split()[0]
            if fd.isdigit():
                open_fds.add((pid, fd))
        elif call.startswith(("fsync(", "fdatasync(")):
            fd = call.split("(", 1)[1].split(")", 1)[0]
            count += (pid, fd) in open_fds
        elif call.startswith("close("):
            open_fds.discard((pid, call.split("(", 1)[1].split(")", 1)[0]))
    return count


def year(kb: Path, models: int, cases: int, nights: int, strace: bool) -> Year:
    found = Year()
    with tempfile.TemporaryDirectory(prefix="kb-team-year-") as scratch:
        root = Path(scratch) / "repo"  # the site is built beside it, in the scratch folder
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        subprocess.run(["git", "-C", str(root), "config", "user.email", "ci@example.com"])
        subprocess.run(["git", "-C", str(root), "config", "user.name", "ci"])
        write_spec(root, models, cases)
        run(kb, root, "init")
        for day in range(1, nights + 1):
            instant = f"2027-{1 + (day - 1) // 28:02d}-{1 + (day - 1) % 28:02d}T02:00:00Z"
            trace = root.parent / "night.strace" if strace else None
            cpu, out = run(
                kb,
                root,
                "--as-of",
                instant,
                "sweep",
                "night.toml",
                "--json",
                "--quiet",
                "--observed-at",
                instant,
                strace=trace,
            )
            sweep_rss = LAST_RSS_MB[0]
            report = json.loads(out)
            runs = len(report.get("runs", []))
            fsyncs = journal_fsyncs(trace) if trace is not None else None
            if day % 7 == 0:
                run(kb, root, "--as-of", instant, "compact", "--keep-days", "30")
            verify_cpu, _ = run(kb, root, "verify")
            data = json.loads((root / STORE).read_text())
            live = [c for c in data["claims"] if c["status"] == "active"]
            largest = max((len(json.dumps(c)) for c in live), default=0)
            store_bytes = (root / STORE).stat().st_size
            found.nights.append(
                Night(day, store_bytes, largest, cpu, runs, verify_cpu, sweep_rss, fsyncs)
            )
            if day in (1, 30, nights):
                found.pack_bytes[day] = git_pack_bytes(root)
            if day == nights - 1 or nights == 1:  # the site of every night but the last
                site = root.parent / "site"
                cpu, _ = run(kb, root, "--as-of", instant, "site", str(site))
                site_before = Reading(
                    f"kb site, first build ({day} nights)", cpu, LAST_RSS_MB[0], "—"
                )
            print(
                f"night {day:3d}: store {store_bytes:>9,} B, largest claim {largest:>6,} B, "
                f"sweep {cpu:6.2f} CPU-s for {runs:5d} runs ({sweep_rss:4.0f} MB), "
                f"verify {verify_cpu:5.2f} CPU-s"
                + (f", journal fsyncs {fsyncs}" if fsyncs is not None else ""),
                flush=True,
            )
        found.verify_all_cpu, _ = run(kb, root, "verify", "--all")
        found.readings = [site_before, *readings_after(kb, root, instant)]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=int, default=5)
    parser.add_argument("--cases", type=int, default=60, help="cases per task class")
    parser.add_argument("--nights", type=int, default=60)
    parser.add_argument("--kb", type=Path, default=ROOT, help="the checkout whose kb runs")
    parser.add_argument("--no-strace", action="store_true")
    args = parser.parse_args()
    strace = not args.no_strace and shutil.which("strace") is not None
    print(
        f"scale: {args.models} models x {len(CLASSES)} task classes x {args.cases} cases, "
        f"{args.nights} nights, compact --keep-days 30 every 7th night; kb from {args.kb}"
    )
    found = year(args.kb, args.models, args.cases, args.nights, strace)
    nights = found.nights
    at30 = nights[min(29, len(nights) - 1)]
    last = nights[-1]
    ratio = last.store_bytes / at30.store_bytes
    print()
    print(f"{'figure':<52} {'measured':>14}  goal")
    print(f"{'store file, night ' + str(at30.day):<52} {at30.store_bytes:>12,} B")
    print(f"{'store file, night ' + str(last.day):<52} {last.store_bytes:>12,} B")
    print(f"{'  ratio':<52} {ratio:>14.2f}  <= 1.5 (SPEC 14.3, at night 365)")
    second = nights[min(1, len(nights) - 1)]
    print(f"{'largest live claim, night ' + str(second.day):<52} {second.largest_claim:>12,} B")
    print(
        f"{'largest live claim, night ' + str(last.day):<52} {last.largest_claim:>12,} B"
        "  bounded (not growing with the nights)"
    )
    later = nights[1:] or nights
    verify = max(n.verify_cpu for n in later)
    print(f"{'kb verify per night (after the first), max':<52} {verify:>12.2f} s  <= 2 CPU-s")
    print(f"{'kb verify --all at the end':<52} {found.verify_all_cpu:>12.2f} s")
    per_run = sum(n.sweep_cpu for n in nights) / max(1, sum(n.runs for n in nights))
    how = "whole process, under strace" if strace else "whole process"
    print(
        f"{f'kb sweep CPU per planned run ({how})':<52} {per_run * 1000:>12.2f} ms"
        "  <= 1 ms beyond the transport (this includes the scripted transport)"
    )
    big, small = max(nights, key=lambda n: n.runs), min(nights, key=lambda n: n.runs)
    if big.runs > small.runs:  # the process's start (litellm's import: ~4 CPU-s) cancels out
        marginal = (big.sweep_cpu - small.sweep_cpu) / (big.runs - small.runs)
        print(
            f"{'kb sweep CPU per further run (nights ' + f'{small.day} and {big.day})':<52} "
            f"{marginal * 1000:>12.2f} ms  <= 1 ms beyond the transport"
        )
    rss = max(n.sweep_rss_mb for n in nights)
    print(f"{'kb sweep peak RSS, largest night':<52} {rss:>12.0f} MB  <= 400 MB (at 1x)")
    packs = sorted(found.pack_bytes.items())
    if len(packs) >= 2:
        (first, low), (last_day, high) = packs[-2], packs[-1]
        if last_day > first:
            growth = (high - low) / (last_day - first)
            print(f"{'git pack, night ' + str(last_day):<52} {high:>12,} B")
            print(
                f"{f'git pack growth per night, nights {first}-{last_day}':<52} "
                f"{growth:>12,.0f} B  <= 1 MB per steady 1x night"
            )
    for reading in found.readings:
        print(
            f"{reading.name + ', after night ' + str(last.day):<52} {reading.cpu:>9.2f} CPU-s "
            f"{reading.rss_mb:5.0f} MB  {reading.goal}"
        )
    if all(n.fsyncs is not None for n in nights):
        fsyncs = sum(n.fsyncs or 0 for n in nights)
        runs = sum(n.runs for n in nights)
        print(
            f"{'journal fsyncs, all nights (runs settled: ' + str(runs) + ')':<52} {fsyncs:>14}"
            "  <= runs/256 + 100 ms groups + durable lines"
        )


if __name__ == "__main__":
    main()
