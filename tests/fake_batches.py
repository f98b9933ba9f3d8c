"""A real loopback server speaking OpenAI's chat, files and batches endpoints.

Live ``POST /v1/chat/completions`` and batched requests get the same answer
for the same prompt (``answer``), so a batched sweep can be compared with a
live one. A batch moves one step per poll (``validating`` → ``in_progress``
→ its end) and ends as ``scenario`` says:

* ``complete`` — every request answered (the output file);
* ``fail`` — the batch failed validation (``errors``), nothing ran;
* ``expire`` — the 24 h window ran out after ``answered`` requests: those are in
  the output file, the rest in the error file as ``batch_expired``;
* ``partial`` — completed, but the requests whose prompt holds ``reject`` failed
  one by one (HTTP 400 lines in the error file).

Every request is recorded (method, path, body, Authorization header) for assertions.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fake_openai import _completion


def echo(model: str, prompt: str) -> str:
    """The default answer: the prompt echoed."""
    return f"echo: {prompt}"


@dataclass
class BatchSeen:
    """What the server holds and received."""

    scenario: str = "complete"
    answered: int = 1
    """``expire``: how many requests ran before the window closed."""
    answer: Callable[[str, str], str] = echo
    polls_to_finish: int = 2
    """Polls a batch takes: the first says ``validating``, then ``in_progress`` …"""
    id_prefix: str = "batch_"
    """Batch ids are this and a count (OpenAI's are ``batch_`` and 32 hex digits)."""
    requests: list[tuple[str, str, bytes]] = field(default_factory=list)
    authorization: list[str] = field(default_factory=list)
    """The ``Authorization`` header of each request, in the order of ``requests``."""
    files: dict[str, bytes] = field(default_factory=dict)
    batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    polls: dict[str, int] = field(default_factory=dict)
    polled: threading.Event = field(default_factory=threading.Event)
    """Set at the first poll of any batch."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    reject_message: str = "this prompt was rejected"
    """``partial``: the error a rejected request's line carries."""

    def calls(self, method: str, path: str) -> int:
        """How many requests matched ``method`` and the path pattern."""
        return sum(1 for m, p, _ in self.requests if m == method and re.fullmatch(path, p))


def _prompt(body: dict[str, Any]) -> str:
    return str([m for m in body["messages"] if m["role"] == "user"][-1]["content"])


def _multipart_file(content_type: str, body: bytes) -> bytes:
    boundary = content_type.split("boundary=", 1)[1].strip('"').encode()
    for part in body.split(b"--" + boundary):
        head, _, data = part.partition(b"\r\n\r\n")
        if b'name="file"' in head:
            return data.rsplit(b"\r\n", 1)[0]
    raise ValueError("no file part")


def _finish(seen: BatchSeen, batch: dict[str, Any]) -> None:
    """Run the batch's requests as the scenario says and write its result files."""
    lines = [json.loads(line) for line in seen.files[batch["input_file_id"]].splitlines() if line]
    if seen.scenario == "fail":
        batch.update(
            status="failed",
            failed_at=2,
            errors={
                "object": "list",
                "data": [{"code": "invalid_request", "message": "model not batchable", "line": 1}],
            },
        )
        return
    out, err = [], []
    for index, line in enumerate(lines):
        custom_id, body = line["custom_id"], line["body"]
        prompt = _prompt(body)
        if seen.scenario == "expire" and index >= seen.answered:
            err.append(
                {
                    "id": f"batch_req_{index}",
                    "custom_id": custom_id,
                    "response": None,
                    "error": {
                        "code": "batch_expired",
                        "message": "This request could not be executed before the "
                        "completion window expired.",
                    },
                }
            )
        elif seen.scenario == "partial" and "reject" in prompt:
            err.append(
                {
                    "id": f"batch_req_{index}",
                    "custom_id": custom_id,
                    "response": {
                        "status_code": 400,
                        "request_id": f"req_{index}",
                        "body": {"error": {"message": seen.reject_message}},
                    },
                    "error": None,
                }
            )
        else:
            text = seen.answer(body["model"], prompt)
            out.append(
                {
                    "id": f"batch_req_{index}",
                    "custom_id": custom_id,
                    "response": {
                        "status_code": 200,
                        "request_id": f"req_{index}",
                        "body": _completion(body["model"], text),
                    },
                    "error": None,
                }
            )
    for key, rows in (("output_file_id", out), ("error_file_id", err)):
        if rows:
            file_id = f"file-{len(seen.files) + 1}"
            seen.files[file_id] = "".join(json.dumps(r) + "\n" for r in rows).encode()
            batch[key] = file_id
    batch["request_counts"] = {"total": len(lines), "completed": len(out), "failed": len(err)}
    if seen.scenario == "expire":
        batch.update(status="expired", expired_at=2)
    else:
        batch.update(status="completed", completed_at=2)


@contextmanager
def fake_batch_server(seen: BatchSeen | None = None) -> Iterator[tuple[str, BatchSeen]]:
    """Serve on a free loopback port; yields the ``/v1`` base URL and what was seen."""
    state = seen or BatchSeen()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, value: Any, raw: bytes | None = None) -> None:
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
                state.authorization.append(self.headers.get("Authorization", ""))
            return body

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = self._body()
            with state.lock:
                if self.path == "/v1/chat/completions":
                    request = json.loads(body)
                    text = state.answer(request["model"], _prompt(request))
                    self._send(200, _completion(request["model"], text))
                elif self.path == "/v1/files":
                    data = _multipart_file(self.headers["content-type"], body)
                    file_id = f"file-{len(state.files) + 1}"
                    state.files[file_id] = data
                    self._send(
                        200,
                        {
                            "id": file_id,
                            "object": "file",
                            "bytes": len(data),
                            "created_at": 0,
                            "filename": "batch.jsonl",
                            "purpose": "batch",
                            "status": "processed",
                        },
                    )
                elif self.path == "/v1/batches":
                    request = json.loads(body)
                    batch_id = f"{state.id_prefix}{len(state.batches) + 1}"
                    batch = {
                        "id": batch_id,
                        "object": "batch",
                        "endpoint": request["endpoint"],
                        "errors": None,
                        "input_file_id": request["input_file_id"],
                        "completion_window": request["completion_window"],
                        "status": "validating",
                        "output_file_id": None,
                        "error_file_id": None,
                        "created_at": 1,
                        "request_counts": {"total": 0, "completed": 0, "failed": 0},
                        "metadata": request.get("metadata"),
                    }
                    state.batches[batch_id] = batch
                    self._send(200, batch)
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._body()
            with state.lock:
                found = re.fullmatch(r"/v1/batches/([^/?]+)", self.path)
                content = re.fullmatch(r"/v1/files/([^/?]+)/content", self.path)
                if found and found.group(1) in state.batches:
                    batch = state.batches[found.group(1)]
                    polls = state.polls[batch["id"]] = state.polls.get(batch["id"], 0) + 1
                    state.polled.set()
                    if batch["status"] in ("validating", "in_progress"):
                        if polls >= state.polls_to_finish:
                            _finish(state, batch)
                        else:
                            batch["status"] = "in_progress"
                    self._send(200, batch)
                elif content and content.group(1) in state.files:
                    self._send(200, None, state.files[content.group(1)])
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", state
    finally:
        server.shutdown()
        server.server_close()
