"""A real loopback server speaking Anthropic's Messages and Message Batches endpoints.

``POST /v1/messages`` (live) and a batch's requests get the same answer for
the same prompt (``answer``), so a batched run can be compared with a live
one. A batch stays ``in_progress`` for ``polls_to_finish`` polls, then ends
as ``scenario`` says:

* ``complete`` — every request ``succeeded``, except those whose prompt holds
  ``reject`` (``errored``: an ``invalid_request_error``);
* ``expire`` — the 24 h window ran out after ``answered`` requests: the rest
  are ``expired``;
* a ``POST …/cancel`` moves the batch to ``canceling``; the next poll ends it,
  requests not yet run (from ``answered`` on) ``canceled``.

``results_host`` (when set) is the host its ``results_url`` names instead of
its own (a reply pointing the key elsewhere). Every request is recorded
(method, path, body, ``x-api-key`` header).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fake_openai import serving


def echo(model: str, prompt: str) -> str:
    """The default answer: the prompt echoed."""
    return f"echo: {prompt}"


@dataclass
class AnthropicSeen:
    """What the server holds and received."""

    scenario: str = "complete"
    answered: int = 1
    answer: Callable[[str, str], str] = echo
    polls_to_finish: int = 2
    results_host: str | None = None
    flaky_polls: int = 0
    """The first this many polls answer HTTP 529 (overloaded)."""
    refused_key: str = "sk-ant-refused-key"
    """Requests with this key get a 401 that quotes it (as some providers do)."""
    batch_id: str | None = None
    """The id a new batch is given (``None``: ``msgbatch_`` and a count)."""
    poll_reply: Callable[[dict[str, Any]], Any] | None = None
    """What a poll answers instead of the batch (given the batch): a hostile provider."""
    result_rows: Callable[[list[dict[str, Any]]], list[Any]] | None = None
    """Rewrites the results file's rows before it is written."""
    requests: list[tuple[str, str, bytes]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    inputs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    results: dict[str, bytes] = field(default_factory=dict)
    polls: dict[str, int] = field(default_factory=dict)
    polled: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def calls(self, method: str, path: str) -> int:
        """How many requests matched ``method`` and the path pattern."""
        return sum(1 for m, p, _ in self.requests if m == method and re.fullmatch(path, p))


def message(model: str, text: str) -> dict[str, Any]:
    """A Messages API reply."""
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 2},
    }


def _prompt(body: dict[str, Any]) -> str:
    content = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content)
    return str(content)


def _end(seen: AnthropicSeen, batch: dict[str, Any], cancelled: bool) -> None:
    """Run the batch as the scenario says, write its results, and end it."""
    rows, counts = [], dict.fromkeys(("succeeded", "errored", "canceled", "expired"), 0)
    for index, request in enumerate(seen.inputs[batch["id"]]):
        params, prompt = request["params"], _prompt(request["params"])
        if cancelled and index >= seen.answered:
            kind: dict[str, Any] = {"type": "canceled"}
        elif seen.scenario == "expire" and index >= seen.answered:
            kind = {"type": "expired"}
        elif "reject" in prompt:
            kind = {
                "type": "errored",
                "error": {
                    "type": "error",
                    "error": {"type": "invalid_request_error", "message": "prompt rejected"},
                },
            }
        else:
            kind = {
                "type": "succeeded",
                "message": message(params["model"], seen.answer(params["model"], prompt)),
            }
        counts[kind["type"]] += 1
        rows.append({"custom_id": request["custom_id"], "result": kind})
    if seen.result_rows is not None:
        rows = seen.result_rows(rows)
    seen.results[batch["id"]] = "".join(
        (r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows
    ).encode()
    batch.update(processing_status="ended", ended_at="2026-12-02T00:00:00Z")
    batch["request_counts"] = {"processing": 0, **counts}


@contextmanager
def fake_anthropic_server(
    seen: AnthropicSeen | None = None,
) -> Iterator[tuple[str, AnthropicSeen]]:
    """Serve on a free loopback port; yields the base URL and what was seen."""
    state = seen or AnthropicSeen()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, value: Any = None, raw: bytes | None = None) -> None:
            body = raw if raw is not None else json.dumps(value).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _body(self) -> bytes:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            with state.lock:
                state.requests.append((self.command, self.path, body))
                state.keys.append(self.headers.get("x-api-key", ""))
            return body

        def _base(self) -> str:
            return state.results_host or f"http://127.0.0.1:{self.server.server_address[1]}"

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = self._body()
            if self.headers.get("x-api-key") == state.refused_key:
                said = f"invalid x-api-key: {state.refused_key}"
                self._send(401, {"type": "error", "error": {"message": said}})
                return
            if self.headers.get("anthropic-version") is None:
                self._send(400, {"type": "error", "error": {"message": "no anthropic-version"}})
                return
            with state.lock:
                if self.path == "/v1/messages":
                    request = json.loads(body)
                    self._send(
                        200,
                        message(request["model"], state.answer(request["model"], _prompt(request))),
                    )
                elif self.path == "/v1/messages/batches":
                    requests = json.loads(body)["requests"]
                    batch_id = state.batch_id or f"msgbatch_{len(state.batches) + 1}"
                    state.inputs[batch_id] = requests
                    state.batches[batch_id] = {
                        "id": batch_id,
                        "type": "message_batch",
                        "processing_status": "in_progress",
                        "request_counts": {
                            "processing": len(requests),
                            "succeeded": 0,
                            "errored": 0,
                            "canceled": 0,
                            "expired": 0,
                        },
                        "ended_at": None,
                        "created_at": "2026-12-02T00:00:00Z",
                        "expires_at": "2026-12-03T00:00:00Z",
                        "cancel_initiated_at": None,
                        "results_url": None,
                    }
                    self._send(200, state.batches[batch_id])
                elif m := re.fullmatch(r"/v1/messages/batches/([^/]+)/cancel", self.path):
                    batch = state.batches.get(m.group(1))
                    if batch is None:
                        self._send(404, {"type": "error", "error": {"message": "no such batch"}})
                        return
                    if batch["processing_status"] == "in_progress":
                        batch.update(
                            processing_status="canceling",
                            cancel_initiated_at="2026-12-02T00:00:01Z",
                        )
                    self._send(200, batch)
                else:
                    self._send(404, {"type": "error", "error": {"message": "not found"}})

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._body()
            with state.lock:
                if m := re.fullmatch(r"/v1/messages/batches/([^/]+)", self.path):
                    batch = state.batches.get(m.group(1))
                    if batch is None:
                        self._send(404, {"type": "error", "error": {"message": "no such batch"}})
                        return
                    state.polled.set()
                    if state.flaky_polls > 0:
                        state.flaky_polls -= 1
                        self._send(529, {"type": "error", "error": {"message": "overloaded"}})
                        return
                    count = state.polls.get(batch["id"], 0) + 1
                    state.polls[batch["id"]] = count
                    if batch["processing_status"] == "canceling":
                        _end(state, batch, cancelled=True)
                    elif (
                        batch["processing_status"] == "in_progress"
                        and count > state.polls_to_finish
                    ):
                        _end(state, batch, cancelled=False)
                    if batch["processing_status"] == "ended":
                        batch["results_url"] = (
                            f"{self._base()}/v1/messages/batches/{batch['id']}/results"
                        )
                    if state.poll_reply is not None:
                        self._send(200, state.poll_reply(batch))
                    else:
                        self._send(200, batch)
                elif m := re.fullmatch(r"/v1/messages/batches/([^/]+)/results", self.path):
                    blob = state.results.get(m.group(1))
                    if blob is None:
                        self._send(404, {"type": "error", "error": {"message": "not ended"}})
                    else:
                        self._send(200, raw=blob)
                else:
                    self._send(404, {"type": "error", "error": {"message": "not found"}})

    with serving(Handler) as port:
        yield f"http://127.0.0.1:{port}", state
