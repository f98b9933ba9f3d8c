"""Run the fake OpenAI server in its own process (benchmarks: no GIL shared with the client).

usage: python -m tests.fake_openai_main LATENCY_S — prints the api_base, serves until stdin closes.
"""

from __future__ import annotations

import sys

from tests.fake_openai import fake_openai_server

if __name__ == "__main__":
    with fake_openai_server(latency_s=float(sys.argv[1])) as (base, _):
        print(base, flush=True)
        sys.stdin.read()
