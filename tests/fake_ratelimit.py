"""A loopback provider that enforces rate limits as OpenAI documents them (SPEC 13.5).

Per API key, two token buckets refilled continuously: ``rpm`` requests and
``tpm`` tokens per minute, each holding at most a minute's worth. A request
costs one request and its estimated tokens (the prompt's characters ÷ 4,
rounded up, plus ``max_tokens``; 16 when it names none); one the buckets
cannot pay is answered 429 with ``retry-after`` (and ``retry-after-ms``) and
costs nothing. Every reply carries the buckets' state:

* ``POST /v1/chat/completions`` — OpenAI's ``x-ratelimit-{limit,remaining,reset}-
  {requests,tokens}`` (resets as durations: ``1s``, ``6m0s``, ``20ms``);
* ``POST /v1/messages`` — Anthropic's Messages API with ``anthropic-ratelimit-
  {requests,tokens}-{limit,remaining,reset}`` (resets as RFC 3339 instants).

``GET /stats`` gives what it served (requests, 429s, the first and last
arrival); ``POST /reset`` fills the buckets and zeroes the counts (a bench's
next round). ``full=False`` starts the buckets empty, so a short test meets
the limit at once instead of after a minute's burst.

Run alone: ``python -m tests.fake_ratelimit --rpm 600 --tpm 200000 --latency 0.05``
prints its base URL and serves until stdin closes.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fake_openai import serving

DEFAULT_MAX_TOKENS = 16


@dataclass
class Bucket:
    """A token bucket of ``per_minute`` refilled continuously."""

    per_minute: float
    level: float
    at: float

    def now(self, now: float) -> float:
        """The level at ``now``."""
        self.level = min(self.per_minute, self.level + self.per_minute / 60.0 * (now - self.at))
        self.at = now
        return self.level

    def wait_s(self, amount: float, now: float) -> float:
        """Seconds until it holds ``amount``."""
        return max(0.0, (amount - self.now(now)) * 60.0 / self.per_minute)

    def reset_s(self, now: float) -> float:
        """Seconds until it is full again."""
        return (self.per_minute - self.now(now)) * 60.0 / self.per_minute


@dataclass
class Limits:
    """The server's limits, its buckets per key and what it served."""

    rpm: float
    tpm: float
    full: bool = True
    latency_s: float = 0.0
    buckets: dict[str, tuple[Bucket, Bucket]] = field(default_factory=dict)
    served: int = 0
    limited: int = 0
    tokens: float = 0.0
    """Tokens the admitted requests were counted at."""
    first: float | None = None
    last: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def of(self, key: str, now: float) -> tuple[Bucket, Bucket]:
        """The key's buckets (full, or empty, on first use)."""
        found = self.buckets.get(key)
        if found is None:
            share = 1.0 if self.full else 0.0
            found = (
                Bucket(self.rpm, self.rpm * share, now),
                Bucket(self.tpm, self.tpm * share, now),
            )
            self.buckets[key] = found
        return found

    def admit(self, key: str, tokens: float) -> tuple[bool, dict[str, Any]]:
        """Pay for one request of ``tokens`` (``False``: it cannot be paid now)."""
        with self.lock:
            now = time.monotonic()
            self.first = now if self.first is None else self.first
            self.last = now
            requests, budget = self.of(key, now)
            wait = max(requests.wait_s(1.0, now), budget.wait_s(tokens, now))
            admitted = wait <= 0
            if admitted:
                requests.level -= 1.0
                budget.level -= tokens
                self.served += 1
                self.tokens += tokens
            else:
                self.limited += 1
            state = {
                "requests": (self.rpm, requests.now(now), requests.reset_s(now)),
                "tokens": (self.tpm, budget.now(now), budget.reset_s(now)),
                "wait": wait,
            }
        return admitted, state

    def stats(self) -> dict[str, Any]:
        """What was served so far."""
        with self.lock:
            span = (self.last - self.first) if self.first is not None and self.last else 0.0
            return {
                "served": self.served,
                "limited": self.limited,
                "requests": self.served + self.limited,
                "tokens": self.tokens,
                "span_s": span,
            }

    def reset(self) -> None:
        """Full buckets (or empty ones), no counts."""
        with self.lock:
            self.buckets.clear()
            self.served = self.limited = 0
            self.tokens = 0.0
            self.first = self.last = None


def estimated_tokens(body: dict[str, Any]) -> float:
    """The prompt's characters ÷ 4 (rounded up) plus ``max_tokens`` (16 when not named)."""
    chars = 0
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            chars += sum(len(str(part.get("text", ""))) for part in content)
    system = body.get("system")
    chars += len(system) if isinstance(system, str) else 0
    most = body.get("max_tokens")
    return math.ceil(chars / 4) + (most if isinstance(most, int) else DEFAULT_MAX_TOKENS)


def openai_duration(seconds: float) -> str:
    """OpenAI's reset format: ``20ms``, ``1.5s``, ``6m0s``."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60.0)
    return f"{int(minutes)}m{rest:.3g}s" if minutes else f"{rest:.3g}s"


def openai_headers(state: dict[str, Any]) -> dict[str, str]:
    """``x-ratelimit-*`` for the buckets' state."""
    found = {}
    for name in ("requests", "tokens"):
        limit, level, reset = state[name]
        found[f"x-ratelimit-limit-{name}"] = str(int(limit))
        found[f"x-ratelimit-remaining-{name}"] = str(max(0, math.floor(level)))
        found[f"x-ratelimit-reset-{name}"] = openai_duration(reset)
    return found


def anthropic_headers(state: dict[str, Any], wall: float | None = None) -> dict[str, str]:
    """``anthropic-ratelimit-*`` for the buckets' state (resets as instants from ``wall``)."""
    found = {}
    wall = time.time() if wall is None else wall
    for name in ("requests", "tokens"):
        limit, level, reset = state[name]
        at = datetime.fromtimestamp(wall + reset, UTC).isoformat(timespec="milliseconds")
        found[f"anthropic-ratelimit-{name}-limit"] = str(int(limit))
        found[f"anthropic-ratelimit-{name}-remaining"] = str(max(0, math.floor(level)))
        found[f"anthropic-ratelimit-{name}-reset"] = at.replace("+00:00", "Z")
    return found


def _prompt(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content)
    return str(content)


@contextmanager
def rate_limited_server(
    rpm: float, tpm: float, *, full: bool = True, latency_s: float = 0.0
) -> Iterator[tuple[str, Limits]]:
    """Serve on a free loopback port; yields ``(base URL, limits)``."""
    limits = Limits(rpm, tpm, full, latency_s)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, value: Any, headers: dict[str, str] | None = None) -> None:
            body = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            for name, said in (headers or {}).items():
                self.send_header(name, said)
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path == "/stats":
                self._send(200, limits.stats())
            else:
                self._send(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path == "/reset":
                limits.reset()
                self._send(200, {"reset": True})
                return
            body = json.loads(raw or b"{}")
            anthropic = self.path == "/v1/messages"
            key = self.headers.get("x-api-key") or self.headers.get("authorization") or ""
            admitted, state = limits.admit(key, estimated_tokens(body))
            headers = anthropic_headers(state) if anthropic else openai_headers(state)
            if not admitted:
                wait = state["wait"]
                headers["retry-after"] = str(max(1, math.ceil(wait)))
                headers["retry-after-ms"] = str(max(1, math.ceil(wait * 1000)))
                error = {"message": "Rate limit reached", "type": "rate_limit_error"}
                if anthropic:
                    self._send(429, {"type": "error", "error": error}, headers)
                else:
                    self._send(429, {"error": {**error, "code": "rate_limit_exceeded"}}, headers)
                return
            if limits.latency_s:
                time.sleep(limits.latency_s)
            text = f"echo: {_prompt(body)}"
            if anthropic:
                reply: dict[str, Any] = {
                    "id": "msg_rl",
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model"),
                    "content": [{"type": "text", "text": text}],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": 5, "output_tokens": 2},
                }
            else:
                reply = {
                    "id": "chatcmpl-rl",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
                }
            self._send(200, reply, headers)

    with serving(Handler) as port:
        yield f"http://127.0.0.1:{port}", limits


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rpm", type=float, default=600)
    parser.add_argument("--tpm", type=float, default=200_000)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--empty", action="store_true", help="start with empty buckets")
    args = parser.parse_args()
    with rate_limited_server(args.rpm, args.tpm, full=not args.empty, latency_s=args.latency) as (
        base,
        _,
    ):
        print(base, flush=True)
        sys.stdin.read()
