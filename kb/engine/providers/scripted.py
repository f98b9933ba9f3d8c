"""``scripted:NAME`` — the deterministic stand-in model for tests, demos and fault drills.

Params (all optional; from ``[[models]] params`` in a sweep spec):

* ``responses`` — table of prompt text → reply. A list value is a sequence
  of replies used in turn: the n-th identical request (in plan order) gets
  item ``n mod len``, so a scripted model can alternate or drift.
* ``script`` — path to a JSON file with any of these same keys; keys given
  directly in params win over the file's.
* ``contains`` — table of substring → reply, for prompts not in ``responses``:
  the first substring (in table order) found in the prompt wins. Handy when
  part of a prompt is generated (a knowledge card, a judge's framing).
* ``default`` — the reply for any other prompt (default ``""``).
* ``cost_usd`` — what each call costs (the provider's declared price).
* ``latency_ms`` — how long each call takes.
* ``errors`` — prompts whose calls fail with a provider error (HTTP 503).
* ``timeouts`` — prompts whose calls time out.

With no params at all (a model pulled into a sweep from an old claim) it
replies ``""`` to everything. Usage is counted as whitespace-split tokens.
The prompt is the last user message of the request.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from kb.errors import ConfigError, ScriptedFault

SCRIPTED_KEYS = frozenset(
    {"responses", "contains", "script", "default", "cost_usd", "latency_ms", "errors", "timeouts"}
)


@dataclass(frozen=True)
class ScriptedReply:
    """What the scripted model answers, and the usage it reports."""

    text: str
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class ScriptedModel:
    """One scripted model's behaviour, resolved from its params."""

    responses: Mapping[str, str | tuple[str, ...]] = field(default_factory=dict)
    contains: Mapping[str, str | tuple[str, ...]] = field(default_factory=dict)
    default: str = ""
    cost_usd: float = 0.0
    latency_ms: float = 0.0
    errors: frozenset[str] = frozenset()
    timeouts: frozenset[str] = frozenset()

    @classmethod
    def from_params(cls, params: Mapping[str, Any], where: str = "scripted") -> ScriptedModel:
        """Resolve ``params`` (and the ``script`` file they name) into a model."""
        merged: dict[str, Any] = {}
        if params.get("script") is not None:
            path = str(params["script"])
            merged.update(_load_script(path, file_signature(path), where))
        merged.update({k: v for k, v in params.items() if k in SCRIPTED_KEYS and k != "script"})
        return cls(
            responses=_responses(merged.get("responses", {}), where),
            contains=_responses(merged.get("contains", {}), where, "contains"),
            default=_text(merged.get("default", ""), f"{where}.default"),
            cost_usd=_number(merged.get("cost_usd", 0), f"{where}.cost_usd"),
            latency_ms=_number(merged.get("latency_ms", 0), f"{where}.latency_ms"),
            errors=frozenset(_strings(merged.get("errors", []), f"{where}.errors")),
            timeouts=frozenset(_strings(merged.get("timeouts", []), f"{where}.timeouts")),
        )

    def respond(
        self, prompt_messages: Sequence[Mapping[str, str]], occurrence: int
    ) -> ScriptedReply:
        """The reply to a request (the n-th identical one, ``occurrence`` = n)."""
        prompt = next(
            (m.get("content", "") for m in reversed(prompt_messages) if m.get("role") == "user"), ""
        )
        if prompt in self.timeouts:
            raise ScriptedFault("timeout", prompt)
        if prompt in self.errors:
            raise ScriptedFault("error", prompt)
        reply = self.responses.get(prompt)
        if reply is None:
            reply = next((r for part, r in self.contains.items() if part in prompt), self.default)
        if isinstance(reply, tuple):
            reply = reply[occurrence % len(reply)] if reply else ""
        prompt_tokens = sum(len(m.get("content", "").split()) for m in prompt_messages)
        return ScriptedReply(reply, prompt_tokens, len(reply.split()))


_BUILT: dict[tuple[Any, ...], tuple[tuple[Any, ...], ScriptedModel]] = {}
_BUILT_MAX = 256


def scripted_model(params: Mapping[str, Any], where: str = "scripted") -> ScriptedModel:
    """:meth:`ScriptedModel.from_params`, built once per params and script file version.

    A night asks a scripted model thousands of times with the same params
    (litellm copies the params' top level per call, never the tables in it),
    and rebuilding a 500-prompt table per call was over half of a rehearsal
    night's CPU. The cache is keyed by the identity of each param value (the
    values are kept, so an id is never reused while it is cached) and by the
    script file's size, mtime and inode, so an edited script is read again.
    """
    names = tuple(sorted(k for k in params if k in SCRIPTED_KEYS))
    values = tuple(params[k] for k in names)
    script = params.get("script")
    key = (  # not ``where``: it only names the params in an error, and errors are not cached
        names,
        tuple(id(v) for v in values),
        file_signature(str(script)) if script is not None else None,
    )
    hit = _BUILT.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], values, strict=True)):
        return hit[1]
    model = ScriptedModel.from_params(params, where)
    if len(_BUILT) >= _BUILT_MAX:
        _BUILT.pop(next(iter(_BUILT)))
    _BUILT[key] = (values, model)
    return model


def file_signature(path: str) -> tuple[int, int, int] | None:
    """What changes when a file is rewritten: size, mtime (ns), inode (``None``: missing)."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_size, found.st_mtime_ns, found.st_ino)


@lru_cache(maxsize=64)
def _load_script(path: str, signature: tuple[int, int, int] | None, where: str) -> dict[str, Any]:
    del signature  # part of the cache key only: a rewritten file is read again
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{where}.script", f"no such file: {path}") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise ConfigError(f"{where}.script", f"{path}: not a JSON object: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}.script", f"{path}: must hold a JSON object")
    unknown = sorted(set(data) - SCRIPTED_KEYS - {"script"})
    if unknown:
        raise ConfigError(f"{where}.script", f"{path}: unknown keys {', '.join(unknown)}")
    return data


def _responses(value: Any, where: str, key: str = "responses") -> dict[str, str | tuple[str, ...]]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}.{key}", "must be a table of prompt = reply")
    table: dict[str, str | tuple[str, ...]] = {}
    for prompt, reply in value.items():
        if isinstance(reply, list):
            table[str(prompt)] = tuple(_strings(reply, f"{where}.{key}[{prompt!r}]"))
        else:
            table[str(prompt)] = _text(reply, f"{where}.{key}[{prompt!r}]")
    return table


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(where, f"must be a string, got {type(value).__name__}")
    return value


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(where, "must be a list of strings")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(where, f"must be a nonnegative number, got {value!r}")
    return float(value)
