"""Anthropic's Message Batches API as a batch transport, over its documented HTTP API.

litellm 1.110.2 can read an Anthropic batch but cannot create one, so this
transport speaks the four calls itself (httpx, never litellm):

* ``POST /v1/messages/batches`` — one batch per endpoint, key and model, each
  run a ``{"custom_id", "params"}`` request (the Messages API body);
* ``GET /v1/messages/batches/{id}`` — polled with back-off until its
  ``processing_status`` is ``ended``;
* its ``results_url`` — JSONL, one line per request: ``succeeded`` (the
  message), ``errored``, ``canceled`` or ``expired``;
* ``POST /v1/messages/batches/{id}/cancel`` — when the batch was created but
  the journal refused to note it: no resume could ever collect it, so it is
  cancelled rather than left running (and billed) for nothing.

As with OpenAI's batches (:mod:`.openai_batch`), the batch id is journaled
when it is created, so a stopped sweep resumes by polling the same batch; a
batch that ended cancelled or expired is journaled as ended. Each run is
debited at the batch price (:meth:`LiteLLMAdapter.batch_cost`: a declared
price at half, else litellm's batch rate). A run settles ``error`` with the
batch's reason when its request errored, expired or was cancelled; the sweep
treats it as any failed run.

What goes in a request: the conversation (system messages become the
``system`` field), ``max_tokens`` (when the spec gives none, what litellm
sends live: the model's output limit from its table, else 128,000; the
Messages API requires one), and the sampling params the
Messages API knows (:data:`MESSAGE_PARAMS`; ``stop`` becomes
``stop_sequences``); any other param is left out, as litellm drops params a
provider does not take. Runs with a response schema stay live (litellm turns
a schema into a tool call; a batch would not).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from kb.engine.batch import (
    BatchAnswer,
    BatchMembers,
    BatchState,
    batchable,
    group_key,
)
from kb.engine.requests import ProviderRequest, endpoint, scrub_secrets, secret_values
from kb.engine.runs import PlannedRun, PriceSource, RunResult, Usage
from kb.engine.transports.base import BatchPhase
from kb.engine.transports.lifecycle import settle_batch
from kb.errors import ConfigError, ProviderFailure

if TYPE_CHECKING:
    from kb.engine.transports.live import LiveTransport

API_VERSION = "2023-06-01"
DEFAULT_BASE = "https://api.anthropic.com"
MESSAGE_PARAMS = frozenset(
    {"temperature", "top_p", "top_k", "stop_sequences", "metadata", "thinking", "service_tier"}
)
"""Call params the Messages API takes as they are."""
_RETRYABLE = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
_BATCH_ID = re.compile(r"[A-Za-z0-9_-]{1,200}")
"""What a batch id may look like: it goes into the URLs the key is sent to."""


@dataclass(frozen=True)
class Where:
    """Where a group's batch goes and what authenticates it."""

    base: str
    key: str | None
    secrets: tuple[str, ...]

    def headers(self) -> dict[str, str]:
        """The headers of every call (the key only when there is one)."""
        found = {"anthropic-version": API_VERSION, "content-type": "application/json"}
        if self.key:
            found["x-api-key"] = self.key
        return found


def where(run: PlannedRun) -> Where:
    """The endpoint and key of ``run``'s calls, as a live call of the model would use them."""
    base = (endpoint(run.request) or DEFAULT_BASE).rstrip("/")
    base = base.removesuffix("/v1")
    env_name = run.spec.params.get("api_key_env")
    if env_name is not None:
        key = os.environ.get(str(env_name))
        if not key:
            raise ConfigError(
                f"models[{run.spec.ref}].params.api_key_env",
                f"environment variable {env_name} is not set",
            )
    else:
        literal = run.request.call_params.get("api_key")
        key = literal if isinstance(literal, str) else os.environ.get("ANTHROPIC_API_KEY")
    return Where(base, key, tuple(s for s in (key, *secret_values(run.spec.params)) if s))


def message_params(
    custom_id: str, request: ProviderRequest, default_max_tokens: int
) -> dict[str, Any]:
    """One request of the batch: the Messages API body of ``request``.

    ``default_max_tokens`` is what a live call sends when the spec names none (litellm's
    default for the model), so the batched request is the live one.
    """
    call = request.call_params
    system = [m["content"] for m in request.messages if m.get("role") == "system"]
    body: dict[str, Any] = {
        "model": request.model.split("/", 1)[1] if "/" in request.model else request.model,
        "max_tokens": int(call.get("max_tokens") or default_max_tokens),
        "messages": [dict(m) for m in request.messages if m.get("role") != "system"],
    }
    if system:
        body["system"] = "\n\n".join(system)
    for name in sorted(MESSAGE_PARAMS & set(call)):
        body[name] = call[name]
    stop = call.get("stop")
    if stop is not None and "stop_sequences" not in body:
        body["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    return {"custom_id": custom_id, "params": body}


def batch_state(raw: Mapping[str, Any]) -> BatchState:
    """A Message Batch object as a :class:`BatchState` (``ended`` read as how it ended).

    Raises :class:`ProviderFailure` (retryable: a proxy's page may pass) for a reply
    that is not one: no id, or counts that are not counts.
    """
    batch_id = raw.get("id")
    if not isinstance(batch_id, str) or not _BATCH_ID.fullmatch(batch_id):
        raise ProviderFailure("polling the batch: the reply names no batch", retryable=True)
    counts = raw.get("request_counts") or {}
    counts = counts if isinstance(counts, Mapping) else {}
    number = {name: _count(counts.get(name)) for name in _COUNTS}
    processing = str(raw.get("processing_status") or "unknown")
    status = processing
    if processing == "ended":
        if raw.get("cancel_initiated_at"):
            status = "cancelled"
        elif number["expired"] and not (number["succeeded"] or number["errored"]):
            status = "expired"
        else:
            status = "completed"
    return BatchState(
        batch_id=batch_id,
        status=status,
        total=sum(number.values()),
        completed=number["succeeded"],
        failed=number["errored"] + number["canceled"] + number["expired"],
        output_file_id=str(raw["results_url"]) if raw.get("results_url") else None,
        error_file_id=None,
        errors=None,
    )


_COUNTS = ("processing", "succeeded", "errored", "canceled", "expired")


def _count(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if value is None:
        return 0
    raise ProviderFailure(
        f"polling the batch: a count that is not one ({value!r:.40})", retryable=True
    )


def read_results(blob: bytes, secrets: tuple[str, ...] = ()) -> dict[str, BatchAnswer]:
    """The results file, by custom id.

    A line that cannot be read is skipped (its run has no answer); of two lines with
    one custom id the first is kept; the provider's words in an error are cut of
    ``secrets`` (a provider may quote the key it refused).
    """
    found: dict[str, BatchAnswer] = {}
    for line in blob.decode("utf-8", "replace").split("\n"):
        try:
            entry = json.loads(line)
            custom_id = str(entry["custom_id"])
            answer = _answer(entry["result"])
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError, OverflowError):
            continue
        if answer.error is not None:
            answer = BatchAnswer(None, answer.usage, scrub_secrets(answer.error, secrets))
        found.setdefault(custom_id, answer)
    return found


def _answer(result: Mapping[str, Any]) -> BatchAnswer:
    none = Usage(0, 0)
    kind = result.get("type")
    if kind == "errored":
        error = result.get("error") or {}
        inner = error.get("error", error) if isinstance(error, Mapping) else {}
        said = inner.get("message") if isinstance(inner, Mapping) else None
        code = inner.get("type") if isinstance(inner, Mapping) else None
        return BatchAnswer(None, none, f"the batch did not answer it ({code or 'error'}: {said})")
    if kind == "canceled":
        return BatchAnswer(None, none, "cancelled before this request ran")
    if kind == "expired":
        return BatchAnswer(None, none, "expired (its 24 h window) before this request ran")
    if kind != "succeeded":
        return BatchAnswer(None, none, f"the batch's line has an unknown result ({kind})")
    message = result["message"]
    content = message.get("content") or []
    text = "".join(
        str(block.get("text") or "")
        for block in content
        if isinstance(block, Mapping) and block.get("type") == "text"
    )
    usage = message.get("usage") or {}
    counted = [usage.get("input_tokens") or 0, usage.get("output_tokens") or 0]
    if not all(isinstance(n, int | float) and math.isfinite(n) for n in counted):
        raise ValueError("usage that is not a count")
    return BatchAnswer(text, Usage(*(max(0, int(n)) for n in counted)))


class AnthropicBatchTransport:
    """Sends groups of Anthropic runs as Message Batches (see the module docstring)."""

    def __init__(self, live: LiveTransport, poll_s: float, poll_max_s: float) -> None:
        self.live = live
        self.poll_s = poll_s
        self.poll_max_s = poll_max_s

    def accepts(self, run: PlannedRun) -> bool:
        """A target or judge run of an Anthropic model that a batch sends as live would."""
        return (
            run.kind != "canary"
            and run.spec.provider == "anthropic"
            and batchable(run.spec)
            and run.request.response_schema is None
        )

    def group(self, run: PlannedRun) -> Hashable:
        """One batch per endpoint, key and model."""
        return group_key(run.spec, run.request)

    async def settle(
        self,
        runs: Sequence[PlannedRun],
        phase: BatchPhase,
        on_batch: Callable[[BatchState], None] | None,
    ) -> list[RunResult]:
        """Send ``runs`` as one batch (or poll the one a resume finds), then settle each."""
        target = where(runs[0])
        most = self.live.adapter().anthropic_max_tokens(runs[0].request.model)
        async with _Api(target, most) as api:
            return await settle_batch(
                api,
                runs,
                phase,
                on_batch,
                poll_s=self.poll_s,
                poll_max_s=self.poll_max_s,
                price=self._price,
            )

    def _price(self, run: PlannedRun) -> Callable[[Usage], tuple[float, PriceSource]]:
        def price(usage: Usage) -> tuple[float, PriceSource]:
            return self.live.adapter().batch_cost(run.spec, run.request, usage)

        return price


class _Api:
    """The Message Batches calls of one endpoint and key (a :class:`BatchApi`)."""

    def __init__(self, target: Where, max_tokens: int) -> None:
        self.target = target
        self.max_tokens = max_tokens
        """What a live call sends as ``max_tokens`` when none is given (litellm's default)."""
        self.client = httpx.AsyncClient(
            base_url=target.base, headers=target.headers(), timeout=httpx.Timeout(60.0)
        )

    async def __aenter__(self) -> _Api:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()

    async def create(self, runs: Sequence[PlannedRun], members: BatchMembers) -> str:
        """The new batch's id."""
        requests = [
            message_params(members.custom_id(i), run.request, self.max_tokens)
            for i, run in enumerate(runs)
        ]
        made = await self._call(
            "creating the batch", "POST", "/v1/messages/batches", {"requests": requests}
        )
        batch_id = made.get("id")
        if not isinstance(batch_id, str) or not _BATCH_ID.fullmatch(batch_id):
            raise ProviderFailure(
                "creating the batch: the reply names no batch id kb can use", retryable=False
            )
        return batch_id

    async def poll(self, batch_id: str) -> BatchState:
        """The batch as the provider describes it now."""
        found = await self._call("polling the batch", "GET", f"/v1/messages/batches/{batch_id}")
        return batch_state(found)

    def ended(self, state: BatchState) -> bool:
        """Only "ended" ends it: a status Anthropic has not documented is polled again."""
        return state.status in ("completed", "cancelled", "expired")

    async def answers(self, state: BatchState) -> dict[str, BatchAnswer]:
        """The results file, read (a key quoted in a result's error cut)."""
        return read_results(await self.results(state), self.target.secrets)

    def missing(self, state: BatchState) -> str:
        """A request the results file does not name."""
        return f"the batch {state.batch_id} has no result for it"

    async def results(self, state: BatchState) -> bytes:
        """The results file (JSONL): where the batch says, else its documented path."""
        own = f"/v1/messages/batches/{state.batch_id}/results"
        url = httpx.URL(state.output_file_id or own)
        if url.is_absolute_url and (url.scheme, url.host, url.port) != (
            self.client.base_url.scheme,
            self.client.base_url.host,
            self.client.base_url.port,
        ):
            # the key goes with the request: never to a host other than the endpoint's own
            url = httpx.URL(own)
        response = await self._send("reading the batch's results", "GET", str(url))
        return response.content

    async def cancel(self, batch_id: str) -> None:
        """Ask the provider to cancel; a failure here changes nothing kb reports."""
        try:
            await self._call(
                "cancelling the batch", "POST", f"/v1/messages/batches/{batch_id}/cancel"
            )
        except ProviderFailure:
            pass

    async def _call(self, what: str, method: str, path: str, body: Any = None) -> dict[str, Any]:
        response = await self._send(what, method, path, body)
        try:
            found = response.json()
        except ValueError:
            raise ProviderFailure(f"{what}: the reply is not JSON", retryable=True) from None
        if not isinstance(found, dict):
            raise ProviderFailure(f"{what}: the reply is not a JSON object", retryable=True)
        return found

    async def _send(self, what: str, method: str, path: str, body: Any = None) -> httpx.Response:
        secrets = list(self.target.secrets)
        try:
            response = await self.client.request(method, path, json=body)
        except httpx.HTTPError as error:
            said = scrub_secrets(f"{type(error).__name__}: {error}", secrets)
            raise ProviderFailure(f"{what}: {said}", retryable=True) from None
        if response.status_code >= 400:
            said = scrub_secrets(_error_message(response), secrets)
            raise ProviderFailure(
                f"{what}: HTTP {response.status_code}: {said}",
                retryable=response.status_code in _RETRYABLE,
                status_code=response.status_code,
            )
        return response


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:300]
    except ValueError:
        pass
    return response.text[:300] or "(no body)"
