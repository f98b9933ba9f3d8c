"""Run the fake OpenAI server in its own process (benchmarks: no GIL shared with the client).

usage: python -m tests.fake_openai_main LATENCY_S — prints the api_base, serves until stdin closes.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from tests.fake_openai import fake_openai_server

ROOT = Path(__file__).resolve().parents[1]


def server_process(latency_s: float) -> AbstractContextManager[str]:
    """The fake server in a child process (no GIL shared with a client being measured)."""
    return child_server("tests.fake_openai_main", str(latency_s))


@contextmanager
def child_server(module: str, *args: str) -> Iterator[str]:
    """A server module run as ``python -m module args`` that prints its base URL first and
    serves until its stdin closes; yields the URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


if __name__ == "__main__":
    with fake_openai_server(latency_s=float(sys.argv[1])) as (base, _):
        print(base, flush=True)
        sys.stdin.read()
