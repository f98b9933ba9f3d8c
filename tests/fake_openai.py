"""A real OpenAI-compatible HTTP server on 127.0.0.1 with scripted faults.

The reply depends on the last user message:
* ``rate-limit-once`` — 429 with ``retry-after: 0.3`` the first time, then ok;
* ``server-error`` — always 500;
* ``malformed`` — 200 with a body that is not JSON;
* ``quote-500``, ``quote-401``, ``quote-429`` (once, then ok) — that status, the error
  body quoting ``seen.quoted``;
* ``echo-auth`` — 401 whose message quotes the API key it was sent;
* ``echo-key`` — 200 whose reply quotes the API key it was sent (a model repeating
  what it was given);
* ``hang`` (or ``hang <anything>``, so held calls can be told apart) — holds the
  request for ``hang_s`` seconds (``None``: until ``seen.release`` is set) before
  answering;
* a prompt in ``seen.distributions`` — 200 with an answer drawn from that prompt's
  ``{answer: weight}`` table, with the request's ``seed`` (a different seed, a new
  draw; at temperature 0 the heaviest answer): a model sampled at temperature 1;
  asked for ``logprobs``, its first token's ``top_logprobs`` are the table's
  weights (normalized, heaviest first, ``top_logprobs`` of them) unless
  ``seen.no_logprobs`` is set (an echo's: ``echo`` at probability 1);
* anything else — 200 with ``echo: <prompt>``, unless ``seen.outage`` is set:
  ``empty`` (200 with empty text), ``junk`` (200 with the same error page for every
  prompt) or ``no-choices`` (200 with an empty ``choices`` list) — a provider
  failing quietly.
Every request is recorded (arrival time, headers, body) for assertions.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Seen:
    """What the server received."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    counts: dict[str, int] = field(default_factory=dict)
    failing: set[str] = field(default_factory=set)
    """Models (the request's ``model``) answered with HTTP 503 while listed."""
    outage: str | None = None
    """``empty``, ``junk`` or ``no-choices``: how ordinary prompts are answered instead."""
    outage_after: int | None = None
    """The outage starts with the request after this many (``None``: from the first)."""
    junk_text: str = "<html>502 Bad Gateway</html>"
    """The error page a ``junk`` outage answers with (``{n}``: the request's number, as a
    CDN's page carries a request id)."""
    distributions: dict[str, dict[str, float]] = field(default_factory=dict)
    """Prompt (or ``model|prompt``, which wins) → answer weights: drawn per request."""
    no_logprobs: bool = False
    """Answer requests for ``logprobs`` without them (a provider that dropped the field)."""
    release: threading.Event = field(default_factory=threading.Event)
    """Set to answer the ``hang`` requests still held (always set when the server stops)."""
    echo_key: set[str] = field(default_factory=set)
    """Models (the request's ``model``) whose every ordinary reply quotes the key they were
    sent (``echo_text``): a provider echoing what it was given."""
    echo_text: str = "sure: env key {key} at your service"
    """What an ``echo_key`` model answers (``{key}``: the key it was sent)."""
    refuse: dict[str, int] = field(default_factory=dict)
    """Model (the request's ``model``) → the status every request for it is answered with
    (401: a wrong key, 403: no access, 404: a model the endpoint does not know)."""
    refusals: dict[str, tuple[set[str], str]] = field(default_factory=dict)
    """Model → (prompts, the text it answers them with instead of the echo): a canned
    refusal, or (the same text for several models) an endpoint's own page. ``{count}``
    in the text is how many times the prompt was asked before (a reply that varies)."""
    changed: str | None = None
    """Set: the provider changed the model (a hidden system prompt): every ordinary reply is
    ``<changed>: <prompt>`` instead of the echo."""
    quoted: str = ""
    """What the error bodies of ``quote-500``, ``quote-429`` (once) and ``quote-401``
    quote (another model's key, say)."""


def _completion(model: str, text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }


def _logprobs(table: dict[str, float], top: Any) -> dict[str, Any]:
    """OpenAI's ``logprobs`` for a one-token answer: the table's weights, heaviest first."""
    import math

    total = sum(table.values())
    ranked = sorted(table, key=lambda a: (-table[a], a))[: int(top or 1)]
    alternatives = [
        {"token": a, "logprob": math.log(table[a] / total), "bytes": None} for a in ranked
    ]
    return {"content": [{**alternatives[0], "top_logprobs": alternatives}]}


@contextmanager
def fake_openai_server(
    *, latency_s: float = 0.0, hang_s: float | None = 5.0
) -> Iterator[tuple[str, Seen]]:
    """Serve on an ephemeral loopback port; yields ``(api_base, seen)``."""
    seen = Seen()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes; with Nagle on, the client's delayed
        # ACK adds ~40 ms to every response and the benchmark would measure that.
        disable_nagle_algorithm = True

        def log_message(self, *args: Any) -> None:  # keep test output clean
            pass

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test): nothing to tell it

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            prompt = body["messages"][-1]["content"]
            with seen.lock:
                seen.requests.append(
                    {"at": time.monotonic(), "headers": dict(self.headers), "body": body}
                )
                count = seen.counts.get(prompt, 0)
                seen.counts[prompt] = count + 1
                arrived = len(seen.requests)
                outage = seen.outage
                if seen.outage_after is not None and arrived <= seen.outage_after:
                    outage = None
            if latency_s:
                time.sleep(latency_s)
            refused = seen.refuse.get(str(body.get("model")))
            if refused is not None:
                said = {401: "Incorrect API key provided", 403: "no access", 404: "model_not_found"}
                message = {"error": {"message": said.get(refused, "refused"), "code": refused}}
                self._send(refused, json.dumps(message).encode())
            elif body.get("model") in seen.failing:
                self._send(503, b'{"error": {"message": "overloaded", "type": "server_error"}}')
            elif prompt == "rate-limit-once" and count == 0:
                error = {"error": {"message": "slow down", "type": "rate_limit"}}
                self._send(429, json.dumps(error).encode(), {"retry-after": "0.3"})
            elif prompt == "server-error":
                self._send(500, b'{"error": {"message": "boom", "type": "server_error"}}')
            elif prompt == "echo-auth":  # some providers quote the key they refused
                auth = self.headers.get("Authorization", "")
                message = f"Incorrect API key provided: {auth.removeprefix('Bearer ')}"
                self._send(401, json.dumps({"error": {"message": message}}).encode())
            elif prompt == "echo-key":
                auth = self.headers.get("Authorization", "")
                reply = _completion(body["model"], f"you sent {auth.removeprefix('Bearer ')}")
                self._send(200, json.dumps(reply).encode())
            elif prompt.startswith("quote-") and prompt[6:] in ("500", "401", "429"):
                status = int(prompt[6:])
                message = {"error": {"message": f"failed ({status}) for key {seen.quoted}"}}
                if status != 429 or count == 0:
                    self._send(status, json.dumps(message).encode(), {"retry-after": "0"})
                else:
                    self._send(200, json.dumps(_completion(body["model"], "answered")).encode())
            elif prompt == "malformed":
                self._send(200, b"{this is not json")
            elif f"{body.get('model')}|{prompt}" in seen.distributions or (
                prompt in seen.distributions
            ):
                table = seen.distributions.get(
                    f"{body.get('model')}|{prompt}", seen.distributions.get(prompt, {})
                )
                if float(body.get("temperature", 1.0)) == 0:
                    answer = max(table, key=lambda a: (table[a], a))
                else:
                    draw = random.Random(f"{body.get('seed')}\0{prompt}")
                    answer = draw.choices(sorted(table), [table[a] for a in sorted(table)])[0]
                reply = _completion(body["model"], answer)
                if body.get("logprobs") and not seen.no_logprobs:
                    reply["choices"][0]["logprobs"] = _logprobs(table, body.get("top_logprobs"))
                self._send(200, json.dumps(reply).encode())
            else:
                if prompt == "hang" or prompt.startswith("hang "):
                    seen.release.wait(hang_s)
                reply = _completion(body["model"], f"echo: {prompt}")
                if seen.changed is not None:
                    reply = _completion(body["model"], f"{seen.changed}: {prompt}")
                refusing, text = seen.refusals.get(body["model"], (set(), ""))
                if prompt in refusing:
                    reply = _completion(body["model"], text.replace("{count}", str(count)))
                if body["model"] in seen.echo_key:
                    key = self.headers.get("Authorization", "").removeprefix("Bearer ")
                    reply = _completion(body["model"], seen.echo_text.replace("{key}", key))
                if body.get("logprobs") and not seen.no_logprobs and outage is None:
                    reply["choices"][0]["logprobs"] = _logprobs({"echo": 1.0}, 1)
                if outage == "empty":
                    reply["choices"][0]["message"]["content"] = ""
                elif outage == "junk":
                    with seen.lock:
                        number = len(seen.requests)
                    reply["choices"][0]["message"]["content"] = seen.junk_text.replace(
                        "{n}", str(number)
                    )
                elif outage == "no-choices":
                    reply["choices"] = []
                self._send(200, json.dumps(reply).encode())

    with serving(Handler) as port:
        try:
            yield f"http://127.0.0.1:{port}/v1", seen
        finally:
            seen.release.set()  # before the server stops: the held requests are answered


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # the default 5 drops bursts of connects into SYN retries
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up (a stopped sweep cuts its calls short) is not news;
        # printed, it would land in the stderr of an in-process kb under test.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    """``handler`` served on a free loopback port in a thread; yields the port."""
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
