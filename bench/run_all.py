"""``make bench``: run every benchmark and write bench/RESULTS.md (machine, commands, figures).

Each benchmark prints its own markdown (the machine, the exact command, and our figure
next to the baseline's or the ideal's from the same run); this script runs them one
after another, so they never compete for the machine, and collects the output.
"""

from __future__ import annotations

import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHES = [
    ["store_bench.py"],
    ["store_year.py"],
    ["store_year.py", "--nights", "120", "--no-compaction"],  # the same without compaction
    ["engine_bench.py"],
    ["sweep_bench.py"],
    ["dataset_bench.py"],
    ["truth_sim.py", "--seeds", "1000", "--real-seeds", "10"],  # about 30 minutes
    ["peers.py"],  # inspect_ai and promptfoo when installed (skipped with a line when not)
    ["ratelimit.py"],  # the 2,000-call sweep under 600 RPM, kb and the peers (10+ minutes)
    ["kill_points.py"],  # a fresh night killed at every write of its commit (minutes)
    ["canary_sensitivity.py", "--trials", "20"],  # the real model behind a proxy (an hour+)
]


def demote_headings(markdown: str) -> str:
    """One level down, so each benchmark is a section of the results page."""
    return "\n".join("#" + line if line.startswith("#") else line for line in markdown.splitlines())


def main() -> None:
    sections = []
    for bench, *args in BENCHES:
        print(f"running bench/{bench} {' '.join(args)} ...", file=sys.stderr, flush=True)
        result = subprocess.run(
            [sys.executable, str(ROOT / "bench" / bench), *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        sections.append(result.stdout.strip())
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        cpu = platform.processor() or "unknown"
    header = (
        "# kb benchmark results\n\n"
        f"Written by `make bench` (bench/run_all.py) on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.\n"
        f"Machine: {cpu}, {platform.machine()}, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}.\n"
        "Every figure below comes from this one run; ratios compare kb with the baseline "
        "or ideal measured in the same run.\n"
    )
    text = header + "\n\n" + "\n\n".join(demote_headings(section) for section in sections) + "\n"
    (ROOT / "bench" / "RESULTS.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
