"""Batch mode: a phase's runs on providers with a batch API go as one batch each.

Nightly sweeps do not need their answers within seconds, and OpenAI's batch
endpoint charges half its list price for answers within 24 hours. With
``[sweep] batch = true`` (or ``--batch``) the engine sends the runs of each
batchable group — one provider endpoint, one model — as one batch through
litellm's files and batches API, polls it with back-off, and settles every
run from the batch's output and error files. Runs of other providers go live
at the same time; a replay never batches (no provider is called).

What stays as in a live run: the spend envelope authorizes every run in plan
order before anything is sent; each result is journaled the moment the batch
settles it, the cassette records it, and results come back in plan order, so
claims and reports are those of a live run given the same replies (only the
timing differs). What differs: the price (the batch rate from litellm's
table, or a declared price times :data:`BATCH_PRICE_FACTOR`), and a run the
batch could not answer (the batch failed, expired, or rejected the request)
settles ``error`` with the batch's reason — the sweep then treats it as any
failed run (an incomplete cell; ``kb sweep --resume`` asks again in a new
batch).

The batch id is journaled when the batch is created (:meth:`BatchMembers.key`
names its runs), so a sweep stopped while it waits resumes the same batch
instead of paying for a second one; a batch that ended (failed, expired,
cancelled) is journaled as ended and never picked up again.

This module decides what goes in a batch and reads what comes back; only
:mod:`kb.engine.adapter` talks to litellm.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kb.engine.requests import ModelSpec, ProviderRequest, endpoint, response_format
from kb.engine.runs import PlannedRun, PriceSource, RunResult, Usage

BATCH_PROVIDERS = frozenset({"openai", "anthropic"})
"""kb providers with a batch transport: OpenAI (and any OpenAI-compatible endpoint given by
``api_base``) through litellm's files and batches API, Anthropic's Message Batches over
its HTTP API (:mod:`kb.engine.transports.anthropic_batch`)."""

BATCH_PRICE_FACTOR = 0.5
"""A declared price is a list price; a batched run is debited this share of it (OpenAI's
and Anthropic's batch rate). Prices from litellm's table use its own batch rates."""

ENDED = frozenset({"failed", "expired", "cancelled"})
DONE = frozenset({"completed"}) | ENDED

_TRANSPORT = frozenset(
    {
        "api_base",
        "base_url",
        "api_key",
        "api_version",
        "organization",
        "timeout",
        "num_retries",
        "max_retries",
        "extra_headers",
    }
)
"""Call params that say where and how to send, not what to ask: never in a batch line."""


LIVE_ONLY_ANTHROPIC = frozenset(
    {"reasoning_effort", "response_format", "tools", "tool_choice", "functions", "user"}
)
"""Params litellm turns into something else for Anthropic (extended thinking, a tool call,
metadata): a Message Batch would not send them as a live call does, so those runs stay live."""


def batchable(spec: ModelSpec) -> bool:
    """The model's runs can go as batches exactly as they would go live."""
    if spec.provider == "anthropic":
        asked = set(spec.params) | set(spec.params.get("extra") or {})
        return spec.effort is None and not (asked & LIVE_ONLY_ANTHROPIC)
    return spec.provider in BATCH_PROVIDERS


@dataclass(frozen=True)
class BatchForecast:
    """What batch mode will do with a night's target runs (the plan's line, ``--dry-run``)."""

    asked: int
    """Target runs that will be sent (a resume's journaled runs are not)."""
    batched: int
    """Of those, the runs that go in a batch (the rest run live)."""
    reused: int
    """Runs served from the journal of a stopped sweep (sent nowhere)."""
    judged: bool = False
    """The night may have judge runs (they go the same way as their model's)."""

    def to_json(self) -> dict[str, int]:
        """``--dry-run --json``'s ``batch``."""
        return {
            "targetRuns": self.asked,
            "batched": self.batched,
            "live": self.asked - self.batched,
            "reused": self.reused,
        }

    @property
    def text(self) -> str:
        """The plan's line."""
        runs = "target run" if self.asked == 1 else "target runs"
        sent = f"{self.asked} {runs}" + (" still to send" if self.reused else "")
        again = f" ({self.reused} more served from the journal)" if self.reused else ""
        judges = "; judges of those models likewise" if self.judged else ""
        if not self.batched:
            return (
                "batch mode: no run here can go in a batch (kb reaches OpenAI's, and "
                "Anthropic's for models without an effort or tools); every run is live"
            )
        which = (
            f"the {sent} goes"
            if self.asked == 1
            else f"all {sent} go"
            if self.batched == self.asked
            else f"{self.batched} of the {sent} go"
        )
        live = "" if self.batched == self.asked else ", the others run live (at the live price)"
        return (
            f"batch mode: {which} through the provider's batch API at the batch price "
            f"(OpenAI and Anthropic models){live}{again}{judges}"
        )


def batch_forecast(
    runs: Sequence[Any],
    accepts: Callable[[Any], bool],
    reused: Callable[[Any], bool] = lambda run: False,
    *,
    judged: bool = False,
) -> BatchForecast:
    """How many of ``runs`` (target runs) go as batches.

    ``accepts`` is the batch transport's own (the rule that sends them: a run
    with a response schema, say, goes live and is priced live);
    ``reused`` tells a run served from the journal of a stopped sweep (sent
    nowhere); ``judged``: the night may have judge runs.
    """
    asked = [run for run in runs if not reused(run)]
    batched = sum(1 for run in asked if accepts(run))
    return BatchForecast(len(asked), batched, len(runs) - len(asked), judged)


def group_key(spec: ModelSpec, request: ProviderRequest) -> tuple[str, str, str, str]:
    """Runs that may share one batch: the same provider, endpoint, key and model.

    The key is told by its variable's name (``api_key_env``) or the model's ref when a
    literal key is given: a batch is sent with one key, its first run's.
    """
    key = spec.params.get("api_key_env")
    return spec.provider, endpoint(request) or "", str(key or spec.ref), request.model


@dataclass(frozen=True)
class BatchMembers:
    """The runs of one batch, in plan order: each one's label and request key."""

    members: tuple[tuple[str, str], ...]

    @property
    def key(self) -> str:
        """What names this set of runs in the journal (sha256 of labels and keys)."""
        text = json.dumps([list(m) for m in self.members], separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def custom_id(self, index: int) -> str:
        """The batch line id of member ``index`` (its place: labels can be long)."""
        return f"kb-{index}"


def batch_line(custom_id: str, request: ProviderRequest) -> dict[str, Any]:
    """One line of the batch's input file: the chat request as the endpoint takes it."""
    body: dict[str, Any] = {
        name: value
        for name, value in request.call_params.items()
        if name not in _TRANSPORT and not name.startswith("kb_")
    }
    body["model"] = request.model.split("/", 1)[1] if "/" in request.model else request.model
    body["messages"] = [dict(m) for m in request.messages]
    if request.response_schema is not None:
        body["response_format"] = response_format(request.response_schema)
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


def input_file(members: BatchMembers, requests: Sequence[ProviderRequest]) -> bytes:
    """The JSONL the batch is made from."""
    return "".join(
        json.dumps(batch_line(members.custom_id(i), r), ensure_ascii=False, sort_keys=True) + "\n"
        for i, r in enumerate(requests)
    ).encode("utf-8")


@dataclass(frozen=True)
class BatchAnswer:
    """What the batch said for one request: an answer or why there is none."""

    text: str | None
    usage: Usage
    error: str | None = None


@dataclass(frozen=True)
class BatchState:
    """A batch as the provider last described it."""

    batch_id: str
    status: str
    total: int
    completed: int
    failed: int
    output_file_id: str | None
    error_file_id: str | None
    errors: str | None
    """The batch-level error (a failed batch), in words."""

    @property
    def done(self) -> bool:
        """Nothing more will happen to it."""
        return self.status in DONE


def batch_state(raw: Any) -> BatchState:
    """A litellm batch object (or its dict) as a :class:`BatchState`."""
    data: Mapping[str, Any] = raw if isinstance(raw, Mapping) else _as_dict(raw)
    counts = data.get("request_counts") or {}
    counts = counts if isinstance(counts, Mapping) else _as_dict(counts)
    errors = data.get("errors")
    errors = errors if isinstance(errors, Mapping) or errors is None else _as_dict(errors)
    said = None
    if errors:
        found = [
            str(e.get("message") if isinstance(e, Mapping) else getattr(e, "message", e))
            for e in errors.get("data") or []
        ]
        said = "; ".join(found) or None
    return BatchState(
        batch_id=str(data["id"]),
        status=str(data.get("status") or "unknown"),
        total=int(counts.get("total") or 0),
        completed=int(counts.get("completed") or 0),
        failed=int(counts.get("failed") or 0),
        output_file_id=data.get("output_file_id"),
        error_file_id=data.get("error_file_id"),
        errors=said,
    )


def _as_dict(value: Any) -> dict[str, Any]:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        found: dict[str, Any] = dump()
        return found
    return dict(vars(value))


def read_results(output: bytes | None, errors: bytes | None) -> dict[str, BatchAnswer]:
    """The answers of the output file and the failures of the error file, by custom id.

    A line that cannot be read (nested too deep to parse included) is skipped: its
    run then settles as one the batch did not answer, never as a wrong answer.
    """
    found: dict[str, BatchAnswer] = {}
    for blob in (output, errors):
        # "\n" alone ends a line (str.splitlines would split a reply at U+2028)
        for line in (blob or b"").decode("utf-8", "replace").split("\n"):
            try:
                entry = json.loads(line)
                custom_id = str(entry["custom_id"])
            except (ValueError, KeyError, TypeError, RecursionError):
                continue
            found[custom_id] = _answer(entry)
    return found


def _answer(entry: Mapping[str, Any]) -> BatchAnswer:
    none = Usage(0, 0)
    error = entry.get("error")
    response = entry.get("response")
    if error:
        message = error.get("message") if isinstance(error, Mapping) else str(error)
        code = error.get("code") if isinstance(error, Mapping) else None
        if code == "batch_expired":  # said as when the request has no line at all
            return BatchAnswer(
                None, none, f"expired (its 24 h window) before this request ran ({message})"
            )
        return BatchAnswer(
            None, none, f"the batch did not answer it ({code or 'error'}: {message})"
        )
    if not isinstance(response, Mapping):
        return BatchAnswer(None, none, "the batch's line has no response")
    body = response.get("body") or {}
    status = response.get("status_code")
    if status != 200:
        said = body.get("error", {}).get("message") if isinstance(body, Mapping) else None
        return BatchAnswer(None, none, f"the batch's request failed: HTTP {status}: {said}")
    try:
        text = body["choices"][0]["message"]["content"] or ""
        usage = body.get("usage") or {}
        counted = Usage(
            int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        )
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        return BatchAnswer(None, none, f"malformed batch reply: {exc}")
    return BatchAnswer(str(text), counted)


def missing_reason(state: BatchState) -> str:
    """Why a request has no line in either file, from how the batch ended."""
    if state.status == "failed":
        return f"the batch {state.batch_id} failed: {state.errors or 'no reason given'}"
    if state.status == "expired":  # as when the provider lists the request as expired
        return f"batch {state.batch_id}: expired (its 24 h window) before this request ran"
    if state.status == "cancelled":
        return f"the batch {state.batch_id} was cancelled before this request ran"
    return f"the batch {state.batch_id} ended ({state.status}) without an answer for it"


def failed_run(
    run: PlannedRun, message: str, started: float, *, cancelled: bool = False
) -> RunResult:
    """A batched run the batch did not answer (``cancelled``: the phase stopped first)."""
    return RunResult(
        label=run.label,
        kind=run.kind,
        model=run.spec.key,
        status="cancelled" if cancelled else "error",
        request=run.request,
        error=message,
        attempts=1,
        started_at=started,
        ended_at=time.monotonic(),
    )


def answered_run(
    run: PlannedRun,
    found: BatchAnswer | None,
    missing: str,
    state: BatchState,
    price: Callable[[Usage], tuple[float, PriceSource]],
    started: float,
    ended: float,
) -> RunResult:
    """A batched run as the batch's answer for it settles it (``missing``: why it has none)."""
    if found is None:
        return failed_run(run, missing, started)
    if found.text is None:
        return failed_run(run, f"batch {state.batch_id}: {found.error}", started)
    cost, source = price(found.usage)
    return replace(
        failed_run(run, "", started),
        status="ok",
        error=None,
        output=found.text,
        usage=found.usage,
        cost_usd=cost,
        price_source=source,
        ended_at=ended,
    )


def poll_delays(first_s: float, most_s: float) -> Iterator[float]:
    """Seconds to wait before each poll: doubling from ``first_s`` up to ``most_s``."""
    delay = first_s
    while True:
        yield delay
        delay = min(most_s, delay * 2)
