"""The only module that imports litellm: one provider call, classified.

* **Lazy.** litellm costs seconds to import, so nothing imports this module
  until a run is about to call a model; ``kb --help``, ``kb list`` and every
  store command never pay for it.
* **Offline and quiet by construction.** Before the import, kb sets
  ``LITELLM_LOCAL_MODEL_COST_MAP`` and ``LITELLM_OFFLINE_MODE`` (the bundled
  price table, no fetches) and ``HF_HUB_OFFLINE`` unless the user set them;
  telemetry and debug banners are off and litellm's loggers only pass errors,
  without propagating to the root logger.
* **kb's own providers** (``scripted``, ``local``) are registered through
  litellm's custom-provider hook, so they take the same path as real ones.
* **No retries here.** litellm is called with ``num_retries=0`` and
  ``max_retries=0``; a failure becomes a :class:`ProviderFailure` that says
  whether it is worth retrying and for how long the provider asked us to
  wait. The engine owns retries, back-off and concurrency.
* **Secrets.** API keys come from the environment variable named by
  ``api_key_env`` (else a literal ``api_key`` param), live and batched alike,
  and are passed to litellm only; error messages are scrubbed of them before
  they leave this module.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kb.engine.prices import declared_cost
from kb.engine.providers.local import LocalModel
from kb.engine.providers.scripted import scripted_model
from kb.engine.requests import (
    SECRET_VALUES,
    ModelSpec,
    ProviderRequest,
    endpoint,
    response_format,
    scrub_secrets,
    secret_values,
)
from kb.engine.runs import PriceSource, Usage
from kb.errors import ConfigError, ProviderFailure, ScriptedFault
from kb.logprobs import TopLogprobs
from kb.textwidth import shorten

OFFLINE_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_OFFLINE_MODE": "True",
    "HF_HUB_OFFLINE": "1",
}
_LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm", "httpx")
_RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})

_litellm: Any = None
_CONNECTION = re.compile(r"connection (error|refused|reset)|cannot connect", re.IGNORECASE)
"""How a failure to reach the server reads (litellm wraps it as a 500 or a connection error)."""
_MISSING_KEY = re.compile(
    r"missing credentials|api[_ ]key (must|is) (be set|required|not (set|provided))|"
    r"no api[_ ]key",
    re.IGNORECASE,
)
"""What a provider (or litellm) says when no key was sent at all."""
_NO_CREDENTIALS = re.compile(
    r"missing credentials|api[_ ]key (must|is|was) (be set|required|not (set|provided))|"
    r"invalid api key|incorrect api key",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class ProviderReply:
    """A successful provider call."""

    text: str
    usage: Usage
    cost_usd: float
    price_source: PriceSource
    logprobs: TopLogprobs | None = None
    """The top log-probabilities per output token (only when the request asked for them)."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """The provider's rate-limit headers (what pacing reads; nothing else is kept)."""


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Keep the cyclic garbage collector out of litellm's import, then freeze what it built.

    The import builds ~530,000 tracked objects (3,000 modules, 2,500 pydantic
    classes) and almost none of them become garbage, yet the collector would
    rescan them on every generation-2 pass: measured on a 2-core machine, the
    import takes 2.8 s of CPU with the collector and 2.0 s without it, and a
    whole process 3.7 s against 2.1 s. Freezing moves the import's objects out
    of later collections (the sweep's own garbage is still collected). What
    little garbage the import did make stays frozen; collecting it first
    would cost 0.3 s and did not lower the peak memory (195 MB either way).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


def load_litellm() -> Any:
    """Import and configure litellm once (offline, quiet, kb's providers registered)."""
    global _litellm
    if _litellm is not None:
        return _litellm
    for name, value in OFFLINE_ENV.items():
        os.environ.setdefault(name, value)
    with _collector_paused():
        import litellm
        from litellm.llms.custom_llm import CustomLLM

    litellm.suppress_debug_info = True
    litellm.telemetry = False
    litellm.drop_params = True
    for name in _LITELLM_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(logging.ERROR)
        logger.propagate = False

    class ScriptedHandler(CustomLLM):
        async def acompletion(self, *args: Any, **kwargs: Any) -> Any:
            return await _scripted_completion(litellm, kwargs)

    class LocalHandler(CustomLLM):
        async def acompletion(self, *args: Any, **kwargs: Any) -> Any:
            return await _local_completion(litellm, kwargs)

    litellm.custom_provider_map = [
        entry
        for entry in litellm.custom_provider_map
        if entry.get("provider") not in ("scripted", "local")
    ] + [
        {"provider": "scripted", "custom_handler": ScriptedHandler()},
        {"provider": "local", "custom_handler": LocalHandler()},
    ]
    _litellm = litellm
    return litellm


_warmed = False


def _warm_up(litellm: Any) -> None:
    """One completion litellm answers itself (``mock_response``: nothing is sent), once.

    litellm finishes importing on its first completion (~40 more modules, 130–250 ms
    measured): done here, before any run's clock starts, it is not counted as the
    first runs' provider latency. Not in :func:`load_litellm`: the workers' parent
    imports litellm and then forks, and this starts litellm's logging thread.
    """
    global _warmed
    if _warmed:
        return
    _warmed = True
    try:
        litellm.completion(
            model="openai/kb-warm-up",
            messages=[{"role": "user", "content": "warm-up"}],
            mock_response="ok",
            api_key="sk-kb-warm-up-not-sent",
        )
    except Exception:  # noqa: BLE001 - only a head start; the first real call pays instead
        pass


def _fill(litellm: Any, kwargs: Mapping[str, Any], text: str, prompt: int, completion: int) -> Any:
    response = kwargs["model_response"]
    response.choices[0].message.content = text
    response.model = kwargs["model"]
    response.usage = litellm.Usage(
        prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
    )
    return response


async def _scripted_completion(litellm: Any, kwargs: Mapping[str, Any]) -> Any:
    params = kwargs.get("optional_params") or {}
    model = scripted_model(params, where=f"scripted:{kwargs['model']}")
    if model.latency_ms:
        await asyncio.sleep(model.latency_ms / 1000.0)
    try:
        reply = model.respond(kwargs["messages"], int(params.get("kb_occurrence", 0)))
    except ScriptedFault as fault:
        if fault.kind == "timeout":
            raise litellm.Timeout(
                str(fault), model=kwargs["model"], llm_provider="scripted"
            ) from None
        raise litellm.ServiceUnavailableError(
            str(fault), model=kwargs["model"], llm_provider="scripted"
        ) from None
    return _fill(litellm, kwargs, reply.text, reply.prompt_tokens, reply.completion_tokens)


async def _local_completion(litellm: Any, kwargs: Mapping[str, Any]) -> Any:
    params = dict(kwargs.get("optional_params") or {})
    model = LocalModel.shared(kwargs["model"], params)
    reply = await asyncio.to_thread(
        model.complete, kwargs["messages"], params, _local_response_format(params)
    )
    response = _fill(litellm, kwargs, reply.text, reply.prompt_tokens, reply.completion_tokens)
    if reply.logprobs is not None:
        response.choices[0].logprobs = dict(reply.logprobs)
    return response


def _local_response_format(params: Mapping[str, Any]) -> dict[str, Any] | None:
    requested = params.get("response_format")
    if not isinstance(requested, Mapping):
        return None
    schema = (requested.get("json_schema") or {}).get("schema")
    return {"type": "json_object", **({"schema": schema} if schema else {})}


def _field(value: Any, name: str) -> Any:
    """``value.name`` or ``value[name]``: litellm hands back objects or plain dicts."""
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)


def top_logprobs(choice: Any) -> TopLogprobs | None:
    """A choice's top log-probabilities per token, OpenAI's shape (``None``: none given).

    A token's entry lists its alternatives (``top_logprobs``); a non-finite or
    non-numeric log-probability is dropped, never turned into a number.
    """
    content = _field(_field(choice, "logprobs"), "content")
    if not isinstance(content, list | tuple) or not content:
        return None
    tokens = []
    for item in content:
        found: dict[str, float] = {}
        for alternative in _field(item, "top_logprobs") or ():
            token, value = _field(alternative, "token"), _field(alternative, "logprob")
            if isinstance(token, str) and isinstance(value, int | float):
                if math.isfinite(value) and not isinstance(value, bool):
                    found.setdefault(token, float(value))
        tokens.append(found)
    return tuple(tokens)


def _api_key(spec: ModelSpec) -> str | None:
    env_name = spec.params.get("api_key_env")
    if env_name is None:
        return None
    value = os.environ.get(str(env_name))
    if not value:
        raise ConfigError(
            f"models[{spec.ref}].params.api_key_env", f"environment variable {env_name} is not set"
        )
    return value


def key_source(spec: ModelSpec, request: ProviderRequest) -> str | None:
    """Where the model's key comes from (``None``: kb sends none; litellm may find one)."""
    env_name = spec.params.get("api_key_env")
    if env_name is not None:
        return f"${env_name}"
    if request.call_params.get("api_key"):
        return "params.api_key"
    from kb.engine.known_providers import DEFAULT_KEY_ENV

    found = [name for name in DEFAULT_KEY_ENV.get(spec.provider, ()) if os.environ.get(name)]
    return f"${found[0]}" if found else None


def _secrets(spec: ModelSpec) -> list[str]:
    """What must be cut from any message about this model's calls: its key and secret params."""
    return [_api_key(spec) or "", *SECRET_VALUES.get(spec.params, secret_values)]


def rate_headers(headers: Any) -> dict[str, str]:
    """The rate-limit headers among a reply's (litellm's ``llm_provider-`` prefix taken off).

    Only these are kept: a reply's other headers (cookies, request ids) have no
    use in kb and some carry what a log should not.
    """
    found: dict[str, str] = {}
    try:
        items = list(headers.items()) if headers else []
    except (AttributeError, TypeError):
        return found
    for name, value in items:
        key = str(name).lower().removeprefix("llm_provider-")
        if key.startswith(_RATE_HEADERS) and isinstance(value, str | int | float):
            found.setdefault(key, str(value))
    return found


_RATE_HEADERS = ("x-ratelimit-", "anthropic-ratelimit-", "retry-after")


def _error_headers(error: BaseException) -> Any:
    headers: Any = getattr(error, "litellm_response_headers", None)
    response = getattr(error, "response", None)
    if headers is None and response is not None:
        headers = getattr(response, "headers", None)
    return headers


def _retry_after(error: BaseException) -> float | None:
    headers = _error_headers(error)
    if not headers:
        return None
    value = headers.get("retry-after") or headers.get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def classify(
    error: BaseException, secrets: list[str], *, where: str | None = None, key: str | None = None
) -> ProviderFailure:
    """Turn any exception from a call into a :class:`ProviderFailure`.

    ``where``: the endpoint the call went to (a connection error names it);
    ``key``: where the model's key came from (``$VAR``, ``params.api_key``), so a
    refused key is told apart from a missing one.
    """
    litellm = load_litellm()
    message = scrub_secrets(f"{type(error).__name__}: {error}", secrets).strip()
    message = shorten(message, 500, "...")  # never half of another model's key
    if where and where not in message and _CONNECTION.search(message):
        message += f" (connecting to {where})"  # litellm's own text names no server
    if isinstance(error, asyncio.TimeoutError | TimeoutError | litellm.Timeout):
        return ProviderFailure(message, retryable=True)
    if isinstance(error, litellm.AuthenticationError) or _NO_CREDENTIALS.search(message):
        # A missing or refused key does not come back on a retry, whatever status wraps it.
        if key is None or _MISSING_KEY.search(message):
            hint = "no API key was sent: set params.api_key_env to the variable holding it"
        else:
            hint = f"the provider refused the key it was sent (from {key}): check its value"
        return ProviderFailure(
            f"{message} ({hint})",
            retryable=False,
            status_code=getattr(error, "status_code", None),
        )
    status = getattr(error, "status_code", None)
    if isinstance(error, litellm.APIConnectionError):
        return ProviderFailure(message, retryable=True, status_code=status)
    if isinstance(status, int):
        return ProviderFailure(
            message,
            retryable=status in _RETRYABLE_STATUS,
            retry_after=_retry_after(error),
            status_code=status,
            headers=rate_headers(_error_headers(error)),
        )
    # A reply that could not be parsed (malformed JSON, a truncated body) is
    # usually a glitch on the provider's side: worth another try.
    return ProviderFailure(message, retryable=isinstance(error, ValueError | litellm.APIError))


class LiteLLMAdapter:
    """Makes single provider calls through litellm."""

    def __init__(self) -> None:
        self._litellm = load_litellm()
        _warm_up(self._litellm)

    async def complete(
        self, spec: ModelSpec, request: ProviderRequest, *, occurrence: int, timeout_s: float
    ) -> ProviderReply:
        """One attempt at ``request``; raises :class:`ProviderFailure`."""
        litellm = self._litellm
        api_key = _api_key(spec)
        secrets = _secrets(spec)
        kwargs: dict[str, Any] = dict(request.call_params)
        if api_key is not None:
            kwargs["api_key"] = api_key
        if spec.provider == "scripted":
            kwargs["kb_occurrence"] = occurrence
        price = spec.params.get("price")
        if isinstance(price, Mapping) and "input_cost_per_token" not in kwargs:
            # litellm prices every reply itself; told the declared price it does so without
            # searching its table (~0.5 ms of CPU a call for a model it does not know)
            kwargs["input_cost_per_token"] = float(price.get("input_per_mtok", 0)) / 1e6
            kwargs["output_cost_per_token"] = float(price.get("output_per_mtok", 0)) / 1e6
        if request.response_schema is not None:
            kwargs["response_format"] = response_format(request.response_schema)
        try:
            async with asyncio.timeout(timeout_s):
                response = await litellm.acompletion(
                    model=request.model,
                    messages=[dict(m) for m in request.messages],
                    num_retries=0,
                    max_retries=0,
                    timeout=timeout_s,
                    **kwargs,
                )
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            raise ProviderFailure(
                f"timed out: no reply within {timeout_s:g}s", retryable=True
            ) from None
        except Exception as error:  # noqa: BLE001 - every provider failure is classified
            raise classify(
                error, secrets, where=endpoint(request), key=key_source(spec, request)
            ) from None
        return self._reply(spec, request, response, secrets)

    def _reply(
        self, spec: ModelSpec, request: ProviderRequest, response: Any, secrets: list[str]
    ) -> ProviderReply:
        # A 200 without a usable reply was answered (and may be billed): retrying
        # would pay again for the same broken reply, so it is not retried.
        if not getattr(response, "choices", None):
            raise ProviderFailure(
                "the provider answered without choices (HTTP 200 with no reply)", retryable=False
            )
        try:
            text = response.choices[0].message.content or ""
            raw = getattr(response, "usage", None)
            usage = Usage(
                int(getattr(raw, "prompt_tokens", 0) or 0),
                int(getattr(raw, "completion_tokens", 0) or 0),
            )
        except (AttributeError, IndexError, TypeError, ValueError) as error:
            raise ProviderFailure(
                scrub_secrets(f"malformed reply: {error}", secrets), retryable=False
            ) from None
        cost = declared_cost(spec, usage)
        source: PriceSource = "declared"
        if cost is None:
            cost = self._price_table_cost(request, response)
            source = "litellm" if cost is not None else "unpriced"
        logprobs = (
            top_logprobs(response.choices[0]) if request.call_params.get("logprobs") else None
        )
        hidden = getattr(response, "_hidden_params", None) or {}
        return ProviderReply(
            text=str(text),
            usage=usage,
            cost_usd=cost or 0.0,
            price_source=source,
            logprobs=logprobs,
            headers=rate_headers(hidden.get("additional_headers")),
        )

    def _price_table_cost(self, request: ProviderRequest, response: Any) -> float | None:
        """The price-table cost litellm already attached to the reply (computed if absent)."""
        hidden = getattr(response, "_hidden_params", None) or {}
        if "response_cost" in hidden:  # litellm priced it already; None = not in its table
            known = hidden["response_cost"]
            return float(known) if isinstance(known, int | float) else None
        try:
            return float(
                self._litellm.completion_cost(completion_response=response, model=request.model)
            )
        except Exception:  # noqa: BLE001 - litellm raises many types for unknown models
            return None

    # -- batches (kb.engine.batch decides what goes in one and reads what comes back) --

    def _batch_kwargs(self, spec: ModelSpec, request: ProviderRequest) -> dict[str, Any]:
        """Where the batch calls go, each on a connection closed after its reply.

        litellm builds a new OpenAI client for each files/batches call and never
        closes it, so a kept-alive connection would stay open until the client is
        collected; a batch is polled a few times a minute at most, so kb asks
        for ``Connection: close`` instead and leaves nothing open.
        """
        kwargs: dict[str, Any] = {"custom_llm_provider": spec.provider}
        where = endpoint(request)
        if where:
            kwargs["api_base"] = where
        # the key a live call sends: the api_key_env variable's, else a literal api_key
        literal = request.call_params.get("api_key")
        api_key = _api_key(spec) or (literal if isinstance(literal, str) else None)
        if api_key is not None:
            kwargs["api_key"] = api_key
        kwargs["extra_headers"] = {"Connection": "close"}
        return kwargs

    async def _batch_call(self, spec: ModelSpec, what: str, call: Any) -> Any:
        secrets = _secrets(spec)
        try:
            return await call
        except asyncio.CancelledError:
            raise
        except Exception as error:  # noqa: BLE001 - every provider failure is classified
            failure = classify(error, secrets)
            raise ProviderFailure(
                f"{what}: {failure.message}", retryable=failure.retryable
            ) from None

    async def submit_batch(
        self, spec: ModelSpec, request: ProviderRequest, data: bytes, name: str
    ) -> str:
        """Upload ``data`` (the batch's JSONL) and create the batch; its id."""
        litellm = self._litellm
        kwargs = self._batch_kwargs(spec, request)
        uploaded = await self._batch_call(
            spec,
            "uploading the batch file",
            litellm.acreate_file(file=(f"{name}.jsonl", data), purpose="batch", **kwargs),
        )
        created = await self._batch_call(
            spec,
            "creating the batch",
            litellm.acreate_batch(
                completion_window="24h",
                endpoint="/v1/chat/completions",
                input_file_id=uploaded.id,
                metadata={"kb": name[:500]},
                **kwargs,
            ),
        )
        return str(created.id)

    async def batch_status(self, spec: ModelSpec, request: ProviderRequest, batch_id: str) -> Any:
        """The provider's batch object for ``batch_id``."""
        return await self._batch_call(
            spec,
            f"polling batch {batch_id}",
            self._litellm.aretrieve_batch(
                batch_id=batch_id,
                # litellm would otherwise price a finished batch in a background task that
                # downloads its output again on a client nobody closes; kb prices each line
                litellm_metadata={"batch_ignore_default_logging": True},
                **self._batch_kwargs(spec, request),
            ),
        )

    async def batch_file(self, spec: ModelSpec, request: ProviderRequest, file_id: str) -> bytes:
        """The bytes of a batch's output or error file."""
        found = await self._batch_call(
            spec,
            f"downloading batch file {file_id}",
            self._litellm.afile_content(file_id=file_id, **self._batch_kwargs(spec, request)),
        )
        content = getattr(found, "content", found)
        return content if isinstance(content, bytes) else str(content).encode("utf-8")

    def anthropic_max_tokens(self, model: str) -> int:
        """The ``max_tokens`` a live call to Anthropic's ``model`` sends when none is given.

        litellm's default: the model's output limit from its table, else its constant.
        A Message Batch sends the same, so a batched request is the live one.
        """
        from litellm.llms.anthropic.chat.transformation import AnthropicConfig

        name = model.split("/", 1)[1] if "/" in model else model
        return int(AnthropicConfig.get_max_tokens_for_model(name))

    def batch_cost(
        self, spec: ModelSpec, request: ProviderRequest, usage: Usage
    ) -> tuple[float, PriceSource]:
        """A batched run's cost: a declared price at the batch share, else litellm's batch rate."""
        from kb.engine.batch import BATCH_PRICE_FACTOR

        declared = declared_cost(spec, usage)
        if declared is not None:
            return declared * BATCH_PRICE_FACTOR, "declared"
        from litellm.cost_calculator import batch_cost_calculator

        try:
            prompt, completion = batch_cost_calculator(
                usage=self._litellm.Usage(
                    prompt_tokens=usage.prompt_tokens,
                    completion_tokens=usage.completion_tokens,
                    total_tokens=usage.prompt_tokens + usage.completion_tokens,
                ),
                model=request.model,
            )
        except Exception:  # noqa: BLE001 - litellm raises many types for unknown models
            return 0.0, "unpriced"
        if not (prompt or completion) and (usage.prompt_tokens or usage.completion_tokens):
            return 0.0, "unpriced"  # litellm's table does not know the model
        return float(prompt) + float(completion), "litellm"

    async def aclose(self) -> None:
        """Close litellm's cached async HTTP clients (inside the loop that made them)."""
        await self._litellm.close_litellm_async_clients()
