"""Record and replay provider exchanges, for deterministic CI.

A cassette is JSONL, one line per settled provider call::

    {"format": 1, "key": "<sha256 of the canonical request>", "occurrence": 0, "seq": 12,
     "request": {"model": ..., "messages": [...], "params": {...}},
     "status": "ok" | "error", "output": "...", "usage": {...},
     "costUsd": 0.0012, "error": null, "attempts": 1}

``format`` is the cassette format (:mod:`kb.sidefile`; a line without it,
written before kb stamped one, is format 1). ``key`` hashes the request as
the adapter will send it (resolved litellm model, params and messages;
secret params are never part of a request).
Cassettes are committed next to tests, so the text a line holds is cut as
evidence is (:mod:`kb.sweep.evidence`): every value of 8 characters or more
from an ``api_key``, an ``api_key_env`` variable, an authorization header of
any model recorded, and the environment's credentials, becomes ``***`` in the
request, the output and the error (a reply that quotes its key replays
quoting ``***``). The key is the uncut request's, so a replay still finds it.
``occurrence`` numbers identical requests in **plan order**, so the n-th
identical request replays the n-th recorded answer whatever the concurrency
was at recording or at replay. Lines are written in plan order (``seq``),
so a cassette is itself deterministic. The recorded cost is replayed too:
a replayed call is never reported as free.

Replay raises :class:`VcrMissError` for a request that is not in the
cassette or asks for more occurrences than were recorded. A line that cannot
be read (not JSON, nested too deep to parse, a field missing or out of range)
is a :class:`ConfigError` naming the file and line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from kb.atomicfile import write_atomic
from kb.engine.requests import ProviderRequest, cut_secrets, secrets_to_cut
from kb.engine.runs import PriceSource, Usage
from kb.errors import ConfigError, VcrMissError
from kb.logprobs import TopLogprobs, cut_tokens, parse_top_logprobs
from kb.sidefile import SideFormat, parse_json

CassetteMode = Literal["record", "replay"]
CASSETTE = SideFormat("cassette", absent=1)


@dataclass(frozen=True)
class Exchange:
    """One recorded outcome of a provider call (after kb's retries)."""

    key: str
    occurrence: int
    seq: int
    request: dict[str, Any]
    status: Literal["ok", "error"]
    output: str | None
    usage: Usage
    cost_usd: float
    error: str | None
    attempts: int = 1
    """Provider calls the recorded run took (a replay reports the same)."""
    price_source: PriceSource | None = None
    """Where the recorded cost came from (``None``: a cassette made before kb recorded it)."""
    logprobs: TopLogprobs | None = None
    """The reply's top log-probabilities, when the request asked for them."""

    def to_json(self) -> dict[str, Any]:
        """The JSONL object."""
        return {
            **CASSETTE.stamp(),
            "key": self.key,
            "occurrence": self.occurrence,
            "seq": self.seq,
            "request": self.request,
            "status": self.status,
            "output": self.output,
            "usage": {
                "promptTokens": self.usage.prompt_tokens,
                "completionTokens": self.usage.completion_tokens,
            },
            "costUsd": self.cost_usd,
            "error": self.error,
            "attempts": self.attempts,
            **({"priceSource": self.price_source} if self.price_source else {}),
            **(
                {"topLogprobs": [dict(token) for token in self.logprobs]}
                if self.logprobs is not None
                else {}
            ),
        }

    def without_secrets(self, known: Sequence[str]) -> Exchange:
        """The exchange with each of ``known`` (:func:`secrets_to_cut`) cut from its texts."""
        return replace(
            self,
            request=_cut_strings(self.request, known),
            output=cut_secrets(self.output, known) if self.output is not None else None,
            error=cut_secrets(self.error, known) if self.error is not None else None,
            logprobs=(
                cut_tokens(self.logprobs, lambda text: cut_secrets(text, known))
                if self.logprobs is not None
                else None
            ),
        )


def _cut_strings(value: Any, known: Sequence[str]) -> Any:
    if isinstance(value, dict):
        return {key: _cut_strings(item, known) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_cut_strings(item, known) for item in value]
    return cut_secrets(value, known) if isinstance(value, str) else value


def _parse_line(line: str, where: str) -> Exchange:
    try:
        data = CASSETTE.check(parse_json(line, where), where)
    except ConfigError as exc:
        raise ConfigError(where, f"corrupt cassette line: {'; '.join(exc.issues)}") from None
    try:
        usage = data["usage"]
        exchange = Exchange(
            key=data["key"],
            occurrence=data["occurrence"],
            seq=data["seq"],
            request=data["request"],
            status=data["status"],
            output=data["output"],
            usage=Usage(usage["promptTokens"], usage["completionTokens"]),
            cost_usd=float(data["costUsd"]),
            error=data["error"],
            attempts=data.get("attempts", 1),
            price_source=data.get("priceSource"),
            logprobs=parse_top_logprobs(data["topLogprobs"]) if "topLogprobs" in data else None,
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(where, f"corrupt cassette line: {type(exc).__name__}: {exc}") from None
    problem = _exchange_problem(exchange)
    if problem:
        raise ConfigError(where, f"corrupt cassette line: {problem}")
    return exchange


def _exchange_problem(e: Exchange) -> str | None:
    """What makes a parsed line unusable (a replay must never invent an answer)."""

    def counts(*values: object) -> bool:
        return all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)

    if e.status not in ("ok", "error") or not isinstance(e.key, str):
        return "bad status or key"
    if not counts(e.occurrence, e.seq, e.attempts):
        return "occurrence, seq and attempts must be nonnegative integers"
    if not counts(e.usage.prompt_tokens, e.usage.completion_tokens):
        return "usage must be nonnegative integers"
    if not (math.isfinite(e.cost_usd) and e.cost_usd >= 0):
        return "costUsd must be a finite nonnegative number"
    if e.status == "ok" and not isinstance(e.output, str):
        return "an ok exchange needs a string output"
    if e.status == "error" and not isinstance(e.error, str):
        return "an error exchange needs an error message"
    if not isinstance(e.request, dict):
        return "request must be an object"
    if e.price_source not in (None, "litellm", "declared", "unpriced"):
        return "priceSource must be litellm, declared or unpriced"
    return None


class Cassette:
    """Exchanges by (key, occurrence): loaded for replay, or filled while recording."""

    def __init__(self, path: Path, mode: CassetteMode) -> None:
        self.path = path
        self.mode = mode
        self._exchanges: dict[tuple[str, int], Exchange] = {}
        self._secrets: dict[str, None] = {}
        """The credentials of every model recorded (an ordered set), cut from every line."""
        if mode == "replay":
            self._load()

    def _load(self) -> None:
        try:
            # "\n" alone ends a line: str.splitlines would also split at the U+2028 or
            # U+0085 a recorded reply may hold (json.dumps writes them as they are)
            lines = self.path.read_text(encoding="utf-8").split("\n")
        except FileNotFoundError:
            raise ConfigError(str(self.path), "no such cassette") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(str(self.path), f"not UTF-8 text: {exc}") from None
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            exchange = _parse_line(line, f"{self.path}:{number}")
            self._exchanges[(exchange.key, exchange.occurrence)] = exchange

    def __len__(self) -> int:
        return len(self._exchanges)

    def lookup(self, request: ProviderRequest, occurrence: int, label: str = "") -> Exchange:
        """The recorded outcome of the ``occurrence``-th identical request (run ``label``)."""
        key = request.key
        found = self._exchanges.get((key, occurrence))
        if found is not None:
            return found
        recorded = sum(1 for k, _ in self._exchanges if k == key)
        detail = (
            f"only {recorded} recorded, replay asked for occurrence {occurrence}"
            if recorded
            else "not recorded (the spec, a case or a model's params changed since recording?)"
        )
        what = label or f"{request.model} request"
        raise VcrMissError(str(self.path), f"replay miss for {what} (key {key[:12]}): {detail}")

    def record(self, exchange: Exchange, secrets: Iterable[str] = ()) -> None:
        """Keep an outcome for :meth:`save`.

        ``secrets`` are the credentials of the model that answered
        (:func:`kb.engine.requests.credentials_of`); :meth:`save` cuts every recorded
        model's from every line, as evidence is cut.
        """
        self._exchanges[(exchange.key, exchange.occurrence)] = exchange
        self._secrets.update(dict.fromkeys(secrets))

    def save(self) -> None:
        """Write every recorded exchange in plan order, atomically, without secrets."""
        known = secrets_to_cut(tuple(self._secrets))
        ordered = sorted(self._exchanges.values(), key=lambda e: e.seq)
        text = "".join(
            json.dumps(e.without_secrets(known).to_json(), ensure_ascii=False, sort_keys=True)
            + "\n"
            for e in ordered
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, text.encode("utf-8"))
