"""Model references and the canonical request every provider call is keyed by.

A model ref is ``provider:model`` (rulvar style). kb's own providers keep
their prefix (``scripted:NAME``, ``local:smollm2``); every other provider
maps to litellm's ``provider/model`` route. Nothing here imports litellm.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from kb.errors import ConfigError, ModelRefError
from kb.schema import ModelRef, Subject, subject_key
from kb.store.canonical import Verbatim, canonical_json, sha256_hex

#: Params naming a local file: keyed by content, never by absolute path.
FILE_PARAMS = ("script", "model_path")
_URL_USERINFO = re.compile(r"(\w+://)[^/@\s]+@")

#: Params that configure kb rather than the provider call.
KB_PARAMS = (
    "api_key_env",
    "cost_usd",
    "price",
    "timeout_s",
    "input_cost_per_token",
    "output_cost_per_token",
    "extra",
)

# Names ending in key/token/secret/password (not "max_tokens"), and header maps,
# which may carry an Authorization header.
_SECRET_KEY = re.compile(
    r"((^|_)(key|token|secret|password|credentials?)$|apikey$|^authorization$|^(extra_)?headers$)",
    re.IGNORECASE,
)

#: Providers whose models accept litellm's ``reasoning_effort``.
EFFORT_PROVIDERS = (
    "openai",
    "anthropic",
    "gemini",
    "vertex_ai",
    "xai",
    "deepseek",
    "azure",
    "scripted",
)


def parse_ref(ref: str) -> ModelRef:
    """``provider:model`` parsed; a malformed ref is a ``ConfigError``."""
    try:
        return ModelRef.parse(ref)
    except ModelRefError as exc:
        raise ConfigError("model", str(exc)) from None


def litellm_model(ref: str) -> str:
    """The litellm route for a ref: ``openai:gpt-4o-mini`` → ``openai/gpt-4o-mini``."""
    return parse_ref(ref).litellm_route


def is_secret_param(name: str) -> bool:
    """Params whose values must never reach a cassette, report, store or log."""
    return name != "api_key_env" and _SECRET_KEY.search(name) is not None


@dataclass(frozen=True)
class ModelSpec:
    """A model as a sweep configures it: ref, optional effort, litellm params."""

    ref: str
    effort: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def provider(self) -> str:
        """The part before the colon."""
        return parse_ref(self.ref).provider

    @property
    def subject(self) -> Subject:
        """Who claims about this model are about: the ref and the effort."""
        return Subject(self.ref, self.effort)

    @property
    def key(self) -> str:
        """``model`` or ``model@effort``: the subject key claims use."""
        return subject_key(self.ref, self.effort)


@dataclass(frozen=True)
class ProviderRequest:
    """One call as the adapter will make it, minus secrets: what cassettes key on."""

    model: str
    """The litellm route (``openai/gpt-4o-mini``, ``scripted/NAME``)."""
    messages: tuple[Mapping[str, str], ...]
    params: Mapping[str, Any]
    """litellm call params (temperature, max_tokens, api_base, reasoning_effort …),
    without kb's own params and without secrets."""
    response_schema: Mapping[str, Any] | None = None
    call_params: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """What the adapter actually sends: the same params with secrets and kb's file
    params intact. Never hashed, recorded or printed."""

    def canonical(self) -> dict[str, Any]:
        """The JSON object the cassette key hashes."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(m) for m in self.messages],
            "params": dict(self.params),
        }
        if self.response_schema is not None:
            body["schema"] = dict(self.response_schema)
        return body

    @cached_property
    def key(self) -> str:
        """sha256 of the canonical request (RFC 8785).

        A large param value (a scripted model's reply table) is serialized once
        per sweep, not once per request: its text is memoized by identity.
        """
        body = self.canonical()
        body["params"] = {
            name: _CANONICAL.get(value, lambda v: Verbatim(canonical_json(v)))
            if isinstance(value, Mapping | list | tuple)
            else value
            for name, value in self.params.items()
        }
        return sha256_hex(canonical_json(body))


def response_format(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The chat API's ``response_format`` asking for JSON that fits ``schema`` (a verdict)."""
    return {
        "type": "json_schema",
        "json_schema": {"name": "verdict", "schema": dict(schema), "strict": True},
    }


def build_request(
    spec: ModelSpec,
    prompt: str,
    *,
    system: str | None = None,
    response_schema: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> ProviderRequest:
    """The request for ``prompt`` against ``spec`` (``overrides`` win over spec params)."""
    call = {
        name: value
        for name, value in {**spec.params, **(overrides or {})}.items()
        if name not in KB_PARAMS
    }
    extra = spec.params.get("extra")
    if isinstance(extra, Mapping):  # provider-specific keys, passed as they are
        call.update(extra)
    if spec.effort is not None and spec.provider in EFFORT_PROVIDERS:
        call["reasoning_effort"] = spec.effort
    params = key_params(call)
    messages: list[Mapping[str, str]] = []
    if system:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": prompt})
    return ProviderRequest(
        model=litellm_model(spec.ref),
        messages=tuple(messages),
        params=params,
        response_schema=response_schema,
        call_params=call,
    )


def key_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The params a request is keyed and recorded by: secrets out, paths made portable.

    Secret-named params are dropped at any depth, credentials in URLs are cut,
    and a local file param (a scripted ``script``, a local ``model_path``) is
    replaced by what identifies its content, so a cassette recorded in one
    checkout replays in another.
    """
    keyed: dict[str, Any] = {}
    for name, value in params.items():
        if is_secret_param(name):
            continue
        if name in FILE_PARAMS and isinstance(value, str):
            keyed[f"{name}_identity"] = file_identity(value, hash_content=name == "script")
        elif isinstance(value, Mapping | list | tuple):
            keyed[name] = _SCRUBBED.get(value, _scrubbed_value)
        else:
            keyed[name] = _scrubbed_value(value)
    return keyed


class IdentityMemo:
    """A pure function's results on large values nobody mutates (a spec's params), by identity.

    Every planned request of a model shares its spec's param values: scrubbing,
    serializing or walking a 1,500-entry reply table once per request made a
    team-sized scripted night quadratic (SPEC 14.3). The value itself is kept
    beside its result, so an id is never mistaken after the value is gone.
    """

    def __init__(self, size: int = 256) -> None:
        self._size = size
        self._found: dict[int, tuple[Any, Any]] = {}

    def get(self, value: Any, compute: Callable[[Any], Any]) -> Any:
        hit = self._found.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        result = compute(value)
        if len(self._found) >= self._size:
            self._found.clear()
        self._found[id(value)] = (value, result)
        return result


_SCRUBBED = IdentityMemo()
_CANONICAL = IdentityMemo()
SECRET_VALUES = IdentityMemo()
"""Per spec params: :func:`secret_values` (the adapter cuts them from every message)."""


def secret_values(params: Mapping[str, Any]) -> list[str]:
    """Every string under a secret-named param, at any depth (to cut from messages)."""
    found: list[str] = []

    def walk(value: Any, secret: bool) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                walk(item, secret or is_secret_param(str(key)))
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item, secret)
        elif secret and isinstance(value, str) and value:
            found.append(value)
            scheme, _, token = value.partition(" ")
            if token and scheme.lower() in ("bearer", "basic", "token"):
                found.append(token.strip())  # a provider may echo the bare token

    walk(params, False)
    return found


def _scrubbed_value(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _scrubbed_value(v) for k, v in value.items() if not is_secret_param(str(k))}
    if isinstance(value, list | tuple):
        return [_scrubbed_value(v) for v in value]
    if isinstance(value, str):
        return _URL_USERINFO.sub(r"\1", value)
    return value


def file_identity(path: str, *, hash_content: bool) -> str:
    """A file's content hash (small files) or name and size (model weights).

    Every planned request is keyed by it, so a content hash is computed once
    per version of the file (its size, mtime and inode), not once per request.
    """
    file = Path(path)
    try:
        if hash_content:
            found = file.stat()
            return _content_hash(path, (found.st_size, found.st_mtime_ns, found.st_ino))
        return f"{file.name}:{file.stat().st_size}"
    except OSError:
        return f"missing:{file.name}"


@functools.lru_cache(maxsize=64)
def _content_hash(path: str, signature: tuple[int, int, int]) -> str:
    del signature  # part of the cache key only: a rewritten file is hashed again
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


#: Providers kb implements itself (registered with litellm as custom providers).
KB_PROVIDERS = ("scripted", "local")


def provider_issue(ref: str) -> str | None:
    """Why a ref's provider cannot be called (``None`` when kb or litellm knows it)."""
    import difflib

    from kb.engine.known_providers import LITELLM_PROVIDERS

    provider = parse_ref(ref).provider
    if provider in KB_PROVIDERS or provider in LITELLM_PROVIDERS:
        return None
    known = [*KB_PROVIDERS, *LITELLM_PROVIDERS]
    # provider names are lower case: "OpenAI" is a near miss of "openai", not a stranger
    close = difflib.get_close_matches(provider.lower(), known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"provider {provider!r} is neither kb's own (scripted, local) nor known to litellm{hint}"


def endpoint(request: ProviderRequest) -> str | None:
    """The server a request goes to when the spec names one (``api_base``/``base_url``)."""
    where = request.call_params.get("api_base") or request.call_params.get("base_url")
    return str(where) if where else None


def credentials_of(params: Mapping[str, Any]) -> list[str]:
    """Every secret a model's params carry: secret-named values and its ``api_key_env`` key."""
    found = secret_values(params)
    name = params.get("api_key_env")
    if isinstance(name, str) and os.environ.get(name):
        found.append(os.environ[name])
    return found


def credential_issues(models: Sequence[ModelSpec]) -> list[str]:
    """``api_key_env`` variables that are not set (checked before any call, unless replaying)."""
    issues = []
    for spec in models:
        name = spec.params.get("api_key_env")
        if name is not None and not os.environ.get(str(name)):
            issues.append(f"{spec.key}: {name} is not set in the environment")
    return issues


def unset_default_key(spec: ModelSpec) -> tuple[str, ...] | None:
    """The variables litellm would read this model's key from, when none of them is set.

    ``None`` when the model names its own key (``api_key``, ``api_key_env``)
    or endpoint (``api_base``: a local server may need no key), when its
    provider can authenticate without a key variable, or when one is set.
    """
    from kb.engine.known_providers import DEFAULT_KEY_ENV

    if any(name in spec.params for name in ("api_key", "api_key_env", "api_base", "base_url")):
        return None
    names = DEFAULT_KEY_ENV.get(spec.provider)
    if names is None or any(os.environ.get(name) for name in names):
        return None
    return names


_SECRET_ENV = re.compile(r"(_API_KEY|_KEY|_TOKEN|_SECRET|_PASSWORD)$")
MIN_SECRET_LENGTH = 8
"""Shorter values are placeholders (``api_key = "none"`` for a local server), not secrets:
cutting them would cut that word from every answer."""


def scrub_secrets(text: str, secrets: Sequence[str] = ()) -> str:
    """Cut secret values from ``text``, and nothing else.

    The secrets are the values kb was given: keys from ``api_key`` or
    ``api_key_env``, authorization headers (``secrets``), and the
    environment's credentials (providers read ``*_API_KEY`` variables on
    their own, so those are cut even when no spec named them) — each of at
    least :data:`MIN_SECRET_LENGTH` characters. Text that merely looks like a
    key is left alone: a model asked to write one is not leaking anything.
    Used on every provider error and on everything kb writes as evidence.
    """
    return cut_secrets(text, secrets_to_cut(secrets))


def secrets_to_cut(secrets: Sequence[str] = ()) -> tuple[str, ...]:
    """What :func:`scrub_secrets` cuts, longest first: ``secrets`` and the environment's.

    Read once for many texts (a night's evidence) instead of once a text: reading
    the environment is most of a scrub's cost.
    """
    known = [s for s in secrets if len(s) >= MIN_SECRET_LENGTH] + [
        value
        for name, value in os.environ.items()
        if _SECRET_ENV.search(name) and len(value) >= MIN_SECRET_LENGTH
    ]
    return tuple(sorted(set(known), key=len, reverse=True))


def cut_secrets(text: str, known: Sequence[str]) -> str:
    """``text`` with each of ``known`` (from :func:`secrets_to_cut`) replaced by ``***``."""
    for secret in known:
        text = text.replace(secret, "***")
    return text
