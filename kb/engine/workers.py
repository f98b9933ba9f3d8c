"""Provider calls in worker processes: the import overlapped, the per-call CPU spread.

A live sweep spends its first seconds importing litellm (~2 s of CPU on an
idle 2-core machine with the collector paused: ~3,000 modules, the biggest
the openai SDK's and litellm's own pydantic types, none dominant — see
``bench/RESULTS.md``), and then ~4–7 ms of CPU per call inside litellm.
Neither can be cut much from outside litellm, so workers can move both off
the main process: :class:`WorkerPool` starts them the moment a sweep begins;
they import litellm while the main process reads the spec, the store and git
and plans the night, and then make calls for the engine. With more than one
worker (a machine with cores), the per-call CPU is spread across them.

The engine keeps everything a result depends on — plan order, envelope
authorizations, cassette numbering, retries and back-off, the journal — and
asks a worker only for one attempt at one call (:meth:`WorkerPool.complete`,
the same contract as :meth:`kb.engine.adapter.LiteLLMAdapter.complete`), so
which worker answered never changes a result. A worker that dies fails its
calls as retryable and is not used again; when none is left, calls go
in-process.

One parent process imports litellm and forks the workers from itself, so the
import's CPU is paid once whatever their number. The protocol is one JSON
object per line over each worker's own pair of pipes: ``{"id", "spec",
"request", "occurrence", "timeout_s"}`` in, ``{"id", "reply"}`` or ``{"id",
"failure"}`` out; the first line out is ``{"ready": true, "pid"}``. Secrets
travel in memory through the pipes only. The bundled ``local`` model stays in
the main process (one copy of its weights).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from kb.engine.requests import ModelSpec, ProviderRequest
from kb.engine.runs import Usage
from kb.errors import ConfigError, ProviderFailure
from kb.logprobs import parse_top_logprobs

IN_PROCESS_PROVIDERS = frozenset({"local"})
"""Providers the main process calls itself (the local model's weights are loaded once)."""


DEFAULT_WORKERS = 0
"""Workers when ``KB_WORKERS`` is not set: none, every call from the sweep's own process.

Measured on 2 cores (``bench/peers.py``, 0.1 s loopback latency, two runs): a 4-call
sweep takes 2.9-3.3 s whatever the count; a 480-call night 6.7-6.9 s in-process,
7.1-7.8 s with one worker, 6.5-6.6 s with two, for 13-23 % more CPU. Against a
real provider (a second or more a call) the per-call CPU hides in the latency and
workers win nothing, so they are for a user with cores, long nights and a fast
endpoint who measures and asks (``KB_WORKERS=N``)."""


def _spec_json(spec: ModelSpec) -> dict[str, Any]:
    return {"ref": spec.ref, "effort": spec.effort, "params": dict(spec.params)}


def _request_json(request: ProviderRequest) -> dict[str, Any]:
    return {
        "model": request.model,
        "messages": [dict(m) for m in request.messages],
        "params": dict(request.params),
        "response_schema": dict(request.response_schema) if request.response_schema else None,
        "call_params": dict(request.call_params),
    }


def _spec_from(data: Mapping[str, Any]) -> ModelSpec:
    return ModelSpec(data["ref"], data["effort"], data["params"])


def _request_from(data: Mapping[str, Any]) -> ProviderRequest:
    return ProviderRequest(
        model=data["model"],
        messages=tuple(data["messages"]),
        params=data["params"],
        response_schema=data["response_schema"],
        call_params=data["call_params"],
    )


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _soon(loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> None:
    try:
        loop.call_soon_threadsafe(_resolve, future)
    except RuntimeError:
        pass  # the phase that waited has ended and closed its loop


def _settle(future: Future[dict[str, Any]], message: dict[str, Any]) -> None:
    """Hand a reply to the call waiting on it, if it still waits (its phase may be over)."""
    try:
        if not future.done():
            future.set_result(message)
    except (InvalidStateError, RuntimeError):
        pass  # cancelled meanwhile, or its event loop is closed


@dataclass
class _Worker:
    """One worker process; a thread reads its replies and settles the calls waiting on them."""

    requests: BinaryIO
    """The pipe its calls go down (its stdin, in effect)."""
    replies: BinaryIO
    """The pipe its answers come up."""
    pid: int | None = None
    """Known once it says it is ready."""
    ready: threading.Event = field(default_factory=threading.Event)
    """Set once it is ready for calls (or died)."""
    alive: bool = True
    pending: dict[int, Future[dict[str, Any]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    thread: threading.Thread | None = None

    waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = field(
        default_factory=list
    )

    async def when_ready(self) -> None:
        """Wait (in the event loop) until the worker is ready or dead."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self.lock:
            if self.ready.is_set():
                return
            self.waiters.append((loop, future))
        await future

    def _wake(self) -> None:
        self.ready.set()
        with self.lock:
            waiters, self.waiters = self.waiters, []
        for loop, future in waiters:
            _soon(loop, future)

    def read_replies(self) -> None:
        """The reader thread: each reply line settles its call; EOF fails the rest."""
        for line in self.replies:
            message = json.loads(line)
            if message.get("ready"):
                self.pid = int(message["pid"])
                self._wake()
                continue
            with self.lock:
                future = self.pending.pop(int(message["id"]), None)
            if future is not None:
                _settle(future, message)
        with self.lock:
            self.alive = False
            waiting, self.pending = self.pending, {}
        self._wake()
        for future in waiting.values():
            _settle(future, {"failure": {"message": "the worker process died"}})


@dataclass
class WorkerPool:
    """Worker processes that make provider calls; started before the plan, used by phases."""

    count: int = 1
    _workers: list[_Worker] = field(default_factory=list)
    _parent: subprocess.Popen[bytes] | None = None
    _next_id: itertools.count[int] = field(default_factory=itertools.count)
    _turn: itertools.count[int] = field(default_factory=itertools.count)

    def start(self) -> None:
        """Start the workers now (litellm is imported while the caller plans).

        One parent process imports litellm and forks the workers from itself:
        one import's CPU however many workers (an import is ~2 s of CPU, as much
        as a few hundred calls), and on a machine of few cores the workers do
        not fight each other and the planning sweep for them while importing.
        Each worker talks over its own pair of pipes, handed to the parent.
        """
        from kb.engine.adapter import OFFLINE_ENV

        env = {**OFFLINE_ENV, **os.environ}
        theirs: list[int] = []
        ours: list[tuple[int, int]] = []
        for _ in range(self.count):
            calls_in, calls_out = os.pipe()
            replies_in, replies_out = os.pipe()
            theirs += [calls_in, replies_out]
            ours.append((calls_out, replies_in))
        try:
            self._parent = subprocess.Popen(
                [sys.executable, "-m", "kb.engine.workers"]
                + [f"{theirs[2 * k]},{theirs[2 * k + 1]}" for k in range(self.count)],
                stdin=subprocess.DEVNULL,
                env=env,
                pass_fds=theirs,
                start_new_session=True,  # Ctrl-C reaches kb, which stops its workers
            )
        except BaseException:
            for fd in [fd for pair in ours for fd in pair]:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)  # the workers hold these now; a dead one's replies then end
        for calls_out, replies_in in ours:
            worker = _Worker(os.fdopen(calls_out, "wb"), os.fdopen(replies_in, "rb"))
            worker.thread = threading.Thread(target=worker.read_replies, daemon=True)
            worker.thread.start()
            self._workers.append(worker)

    def usable(self, spec: ModelSpec) -> bool:
        """Whether a worker makes this model's calls (else the engine calls in-process)."""
        return spec.provider not in IN_PROCESS_PROVIDERS and any(w.alive for w in self._workers)

    async def when_ready(self) -> None:
        """Until a worker is ready for calls, or none is left."""
        while True:
            alive = [w for w in self._workers if w.alive]
            if not alive or any(w.ready.is_set() for w in alive):
                return
            await asyncio.wait(
                [asyncio.ensure_future(w.when_ready()) for w in alive],
                return_when=asyncio.FIRST_COMPLETED,
            )

    async def _choose(self) -> _Worker:
        """The next ready worker in turn; waits for one to be ready when none is yet."""
        await self.when_ready()
        ready = [w for w in self._workers if w.alive and w.ready.is_set()]
        if not ready:
            raise ProviderFailure("no worker process is left", retryable=True)
        return ready[next(self._turn) % len(ready)]

    async def complete(
        self, spec: ModelSpec, request: ProviderRequest, *, occurrence: int, timeout_s: float
    ) -> Any:
        """One attempt at ``request`` in a worker; raises :class:`ProviderFailure`."""
        from kb.engine.adapter import ProviderReply

        worker = await self._choose()
        call_id = next(self._next_id)
        future: Future[dict[str, Any]] = Future()
        line = {
            "id": call_id,
            "spec": _spec_json(spec),
            "request": _request_json(request),
            "occurrence": occurrence,
            "timeout_s": timeout_s,
        }
        try:
            with worker.lock:
                if not worker.alive:
                    raise BrokenPipeError
                worker.pending[call_id] = future
                worker.requests.write((json.dumps(line) + "\n").encode())
                worker.requests.flush()
        except (BrokenPipeError, ConnectionResetError, ValueError):
            with worker.lock:
                worker.pending.pop(call_id, None)
                worker.alive = False
            raise ProviderFailure("the worker process died", retryable=True) from None
        try:
            message = await asyncio.wrap_future(future)
        finally:
            with worker.lock:
                worker.pending.pop(call_id, None)
        if "refused" in message:
            refused = message["refused"]
            raise ConfigError(str(refused["source"]), list(refused["issues"]))
        if "failure" in message:
            failure = message["failure"]
            raise ProviderFailure(
                str(failure["message"]),
                retryable=bool(failure.get("retryable", True)),
                retry_after=failure.get("retry_after"),
                status_code=failure.get("status_code"),
                headers=failure.get("headers"),
            )
        reply = message["reply"]
        logprobs = reply.get("logprobs")
        return ProviderReply(
            text=reply["text"],
            usage=Usage(*reply["usage"]),
            cost_usd=float(reply["cost_usd"]),
            price_source=reply["price_source"],
            logprobs=parse_top_logprobs(logprobs) if logprobs is not None else None,
            headers=dict(reply.get("headers") or {}),
        )

    def pids(self) -> list[int]:
        """The ready workers' process ids (tests, diagnostics)."""
        return [w.pid for w in self._workers if w.pid is not None]

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Wait until every worker is ready for calls or dead."""
        for worker in self._workers:
            worker.ready.wait(timeout_s)

    def wait_all(self, timeout_s: float = 30.0) -> None:
        """Wait until every worker has exited (its reader saw the end of its output)."""
        for worker in self._workers:
            if worker.thread is not None:
                worker.thread.join(timeout=timeout_s)

    def _kill_all(self) -> None:
        if self._parent is None:
            return
        try:
            os.killpg(self._parent.pid, signal.SIGKILL)  # the parent and every worker it forked
        except (ProcessLookupError, PermissionError):
            pass  # all gone already

    def stop(self) -> None:
        """End the workers: close their input, then make sure they are gone.

        Workers still importing are killed at once (a sweep refused on bad input
        must not wait seconds for an import it will never use).
        """
        importing = any(not w.ready.is_set() for w in self._workers)
        for worker in self._workers:
            with worker.lock:
                if not worker.requests.closed:
                    try:
                        worker.requests.close()
                    except OSError:
                        pass
        if importing:
            self._kill_all()
        if self._parent is not None:
            try:
                self._parent.wait(timeout=10)  # it waits for its workers
            except subprocess.TimeoutExpired:
                self._kill_all()
                self._parent.wait()
        for worker in self._workers:
            if worker.thread is not None:
                worker.thread.join(timeout=10)
            worker.replies.close()
        self._workers.clear()
        self._parent = None


# -- the worker side ---------------------------------------------------------------------------


async def _serve(calls: int, replies: int) -> None:
    from kb.engine.adapter import LiteLLMAdapter

    adapter = LiteLLMAdapter()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**24)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(calls, "rb")
    )
    out = os.fdopen(replies, "wb")

    def send(message: Mapping[str, Any]) -> None:
        out.write((json.dumps(message) + "\n").encode())
        out.flush()

    async def one(message: Mapping[str, Any]) -> None:
        try:
            reply = await adapter.complete(
                _spec_from(message["spec"]),
                _request_from(message["request"]),
                occurrence=int(message["occurrence"]),
                timeout_s=float(message["timeout_s"]),
            )
        except ProviderFailure as failure:
            send(
                {
                    "id": message["id"],
                    "failure": {
                        "message": failure.message,
                        "retryable": failure.retryable,
                        "retry_after": failure.retry_after,
                        "status_code": failure.status_code,
                        "headers": dict(failure.headers or {}),
                    },
                }
            )
        except ConfigError as refused:  # bad input: the main process raises it, as in-process
            send(
                {
                    "id": message["id"],
                    "refused": {"source": refused.source, "issues": list(refused.issues)},
                }
            )
        except Exception as error:  # noqa: BLE001 - a worker answers every call it took
            send({"id": message["id"], "failure": {"message": f"worker: {error}"}})
        else:
            send(
                {
                    "id": message["id"],
                    "reply": {
                        "text": reply.text,
                        "usage": [reply.usage.prompt_tokens, reply.usage.completion_tokens],
                        "cost_usd": reply.cost_usd,
                        "price_source": reply.price_source,
                        "logprobs": (
                            [dict(token) for token in reply.logprobs]
                            if reply.logprobs is not None
                            else None
                        ),
                        "headers": dict(reply.headers),
                    },
                }
            )

    send({"ready": True, "pid": os.getpid()})
    tasks: set[asyncio.Task[None]] = set()
    while True:
        line = await reader.readline()
        if not line:
            break
        task = asyncio.create_task(one(json.loads(line)))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)
    await adapter.aclose()


def main() -> None:
    """``python -m kb.engine.workers IN,OUT …``: import litellm once, fork a worker per pipe pair.

    Each worker serves the calls read from its ``IN`` descriptor until it ends,
    answering on ``OUT``; this process waits for them. A failed import ends it
    at once, quietly: every pipe closes, and the sweep makes its calls itself
    (and reports the import's error as it would without workers).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process decides when to stop
    pairs = [tuple(int(fd) for fd in arg.split(",")) for arg in sys.argv[1:]]
    try:
        from kb.engine.adapter import load_litellm

        load_litellm()  # once, before the forks: the workers share its pages
    except Exception:  # noqa: BLE001 - see above: the sweep reports it in-process
        os._exit(1)
    forked: list[int] = []
    for k, (calls, replies) in enumerate(pairs):
        pid = os.fork()
        if pid == 0:
            for later_calls, later_replies in pairs[k + 1 :]:
                os.close(later_calls)  # another worker's: held here, its death would go unseen
                os.close(later_replies)
            code = 0
            try:
                asyncio.run(_serve(calls, replies))
            except BaseException:  # noqa: BLE001 - a worker ends; the main process sees EOF
                code = 1
            os._exit(code)
        forked.append(pid)
        os.close(calls)
        os.close(replies)
    for pid in forked:
        os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
