"""Which ``[[models]].params`` a model may have: what litellm knows, what kb owns, what passes.

A param litellm does not know for the provider is not an error there: with
unsupported params dropped, a typo (``temprature = 0``) is silently forwarded
nowhere and the sweep runs without it. So every param is checked before the
plan:

* **kb's own** — ``model``, ``messages``, ``stream``, ``n``, ``timeout``,
  ``max_retries``, ``num_retries`` — are refused, naming the kb option that
  does the job (kb builds the call and owns retries, timeouts and repeats);
* **kb's settings** — ``api_key_env``, ``cost_usd``, ``price``,
  ``input_cost_per_token``, ``output_cost_per_token``, ``timeout_s`` — are
  read by kb and never sent;
* a key litellm does not know for that provider (its
  ``get_supported_openai_params``, else ``litellm.completion``'s own
  keywords, plus the client's ``api_base``/``api_key``/``extra_headers`` …)
  is refused with the nearest known name;
* provider-specific keys go through, unchecked, in ``params.extra = {…}``.

kb's own providers know their own params (``scripted``: its script keys;
``local``: ``temperature``, ``max_tokens``, ``seed``, ``n_ctx``,
``model_path``). The lists are a snapshot of the pinned litellm
(:mod:`kb.engine.known_params`), so validating a spec never imports it.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from typing import Any

from kb.engine.known_params import GENERAL_PARAMS, PROVIDER_PARAMS
from kb.engine.providers.scripted import SCRIPTED_KEYS

#: Keys kb sets itself, each with the kb option to use instead.
KB_OWNED = {
    "model": "the model is [[models]].model",
    "messages": "a case's prompt and system are the messages",
    "stream": "kb reads whole replies (streaming is not supported)",
    "n": "to ask a case several times use [sweep] repeats",
    "timeout": "use params.timeout_s (or [sweep] timeout_s)",
    "max_retries": "kb retries failed calls itself: use [sweep] max_retries",
    "num_retries": "kb retries failed calls itself: use [sweep] max_retries",
}
#: kb's settings, read by kb and never sent to the provider.
KB_SETTINGS = frozenset(
    {
        "api_key_env",
        "cost_usd",
        "price",
        "input_cost_per_token",
        "output_cost_per_token",
        "timeout_s",
        "extra",
    }
)
#: How litellm reaches the provider (for every provider).
CLIENT_PARAMS = frozenset(
    {
        "api_base",
        "base_url",
        "api_key",
        "api_version",
        "organization",
        "extra_headers",
        "headers",
        "extra_body",
        "deployment_id",
        "reasoning_effort",
    }
)
LOCAL_PARAMS = frozenset({"temperature", "max_tokens", "seed", "n_ctx", "model_path"})


def known_params(provider: str) -> frozenset[str]:
    """Every param a model of ``provider`` may carry outside ``extra``."""
    if provider == "scripted":
        return SCRIPTED_KEYS | GENERAL_PARAMS | CLIENT_PARAMS | KB_SETTINGS
    if provider == "local":
        return LOCAL_PARAMS | KB_SETTINGS
    return PROVIDER_PARAMS.get(provider, GENERAL_PARAMS) | CLIENT_PARAMS | KB_SETTINGS


def param_issues(provider: str, params: Mapping[str, Any], where: str) -> list[str]:
    """Every problem with a model's params, each prefixed with ``where`` (``models[2].params``)."""
    issues = []
    known = known_params(provider)
    for name in params:
        if name in KB_OWNED:
            issues.append(f"{where}.{name}: kb sets {name} itself; {KB_OWNED[name]}")
        elif name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.7)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            issues.append(
                f"{where}.{name}: not a param litellm knows for {provider}{hint} (pass a "
                "provider-specific key in params.extra = {...})"
            )
        elif name in TYPED_PARAMS:
            issue = TYPED_PARAMS[name](params[name])
            if issue:
                issues.append(f"{where}.{name}: {issue} (got {params[name]!r})")
    if "api_key" in params and "api_key_env" in params:
        issues.append(
            f"{where}: both api_key and api_key_env; keep one (api_key_env names the "
            "environment variable that holds the key)"
        )
    extra = params.get("extra")
    if extra is not None and not isinstance(extra, Mapping):
        issues.append(f"{where}.extra: must be a table of provider-specific keys")
    elif isinstance(extra, Mapping):
        for key in extra:
            if key in KB_OWNED:
                issues.append(f"{where}.extra.{key}: kb sets {key} itself; {KB_OWNED[key]}")
            elif key in KB_SETTINGS:
                # Inside extra it would be sent to the provider, never read by kb.
                issues.append(f"{where}.extra.{key}: a kb setting; set it as {where}.{key}")
            elif key in known:
                issues.append(
                    f"{where}.extra.{key}: litellm knows {key} for {provider}; set it as "
                    f"{where}.{key} so kb checks it (extra is for provider-specific keys)"
                )
    return issues


def _number(low: float | None = None, high: float | None = None) -> Any:
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return "must be a number"
        if not math.isfinite(value):
            return "must be a finite number"
        if high is not None and not (low is None or low <= value <= high):
            return f"must be between {low:g} and {high:g}"
        if low is not None and value < low:
            return f"must be at least {low:g}"
        return None

    return check


def _integer(low: int) -> Any:
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int):
            return "must be a whole number"
        return f"must be at least {low}" if value < low else None

    return check


def _text(value: Any) -> str | None:
    return None if isinstance(value, str) and value else "must be a non-empty string"


#: Common sampling params whose type a provider would otherwise reject mid-sweep
#: (after other cells had already spent) — checked before the plan.
TYPED_PARAMS = {
    "temperature": _number(0.0, 2.0),
    "top_p": _number(0.0, 1.0),
    "presence_penalty": _number(-2.0, 2.0),
    "frequency_penalty": _number(-2.0, 2.0),
    "max_tokens": _integer(1),
    "max_completion_tokens": _integer(1),
    "seed": _integer(-(2**63)),
    "n_ctx": _integer(1),
    "api_key": _text,
    "api_base": _text,
    "base_url": _text,
    "api_key_env": _text,
}
