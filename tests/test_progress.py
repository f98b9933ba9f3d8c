"""Progress with meaning (SPEC 12.4): phase, done/planned per kind, errors, spend."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kb.engine.progress import RunTally
from kb.engine.runs import RunResult
from tests.sweep_helpers import write_spec


def run(kind: str, status: str = "ok", cost: float = 0.001, source: str = "declared") -> RunResult:
    return RunResult(
        label=f"{kind}:x",
        kind=kind,
        model="m",
        status=status,
        cost_usd=cost,  # type: ignore[arg-type]
        price_source=source,  # type: ignore[arg-type]
    )


def test_the_tally_names_the_phase_counts_errors_and_spend() -> None:
    tally = RunTally({"canary": 2, "target": 10, "judge": 0})
    assert tally.describe() == "canary 0/2 · targets 0/10 · $0.0000"
    tally.add(run("canary"))
    tally.add(run("canary"))
    tally.add(run("target"))
    tally.add(run("target", status="error", cost=0.0))
    assert tally.describe() == "targets 2/10 · canary 2/2 · 1 error · $0.0030"
    tally.add(run("target", source="unpriced", cost=0.0))
    assert tally.describe().endswith("1 error · $0.0030 + 1 unpriced")


@pytest.mark.usefixtures("initialized_store")
def test_a_terminal_sees_the_progress_and_a_pipe_does_not(isolated: Path) -> None:
    cases = [(f"c{i}", f"Q{i}?", f"a{i}") for i in range(4)]
    model = {"model": "scripted:m", "params": {"responses": {p: a for _, p, a in cases}}}
    spec = write_spec(isolated / "s.toml", [model], cases=cases)
    command = [
        sys.executable,
        "-m",
        "kb",
        "sweep",
        str(spec),
        "--observed-at",
        "2026-11-01T02:00:00Z",
        "--no-commit",
    ]
    leader, follower = pty.openpty()
    # The terminal is read while kb writes to it: a pty holds a few KB, and a loaded
    # machine redraws the progress line often enough to fill it and block kb.
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=follower, cwd=isolated)
    os.close(follower)
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: kb exited and the terminal closed
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    out, _ = process.communicate(timeout=120)
    reader.join(timeout=60)
    os.close(leader)
    done = subprocess.CompletedProcess(command, process.returncode, out)
    seen = b"".join(chunks)
    assert done.returncode == 0
    text = seen.decode("utf-8", "replace")
    assert "targets" in text and "/4" in text and "$" in text
    assert "lowest scripted:m·extraction 1.00 (" in text  # the running pass rate
    assert b"targets 0/4" not in done.stdout  # the bar never reaches stdout
    piped = subprocess.run(command, capture_output=True, cwd=isolated, timeout=120)
    assert b"targets 0/4" not in piped.stderr  # not a terminal: quiet


def test_the_tally_names_the_lowest_running_pass_rates() -> None:
    verdicts = {"a": ("m·x", True), "b": ("m·x", False), "c": ("n·x", True), "d": ("o·x", False)}

    def grade(result: RunResult) -> tuple[str, bool] | None:
        return verdicts.get(result.label.removeprefix("target:"))

    tally = RunTally({"target": 4}, grade=grade)
    for label in "abcd":
        tally.add(RunResult(label=f"target:{label}", kind="target", model="m", status="ok"))
    assert tally.describe().endswith("lowest o·x 0.00 (1), m·x 0.50 (2)")


def test_the_progress_line_shows_each_open_batch() -> None:
    from kb.engine.batch import BatchState
    from kb.engine.progress import RunTally

    tally = RunTally({"target": 10})
    state = BatchState("batch_1", "in_progress", 10, 3, 1, None, None, None)
    tally.add_batch(state)
    assert "batch batch_1 in_progress 4/10" in tally.describe()
    tally.add_batch(BatchState("batch_1", "completed", 10, 9, 1, "file-2", None, None))
    assert "batch" not in tally.describe()  # a finished batch leaves the line
