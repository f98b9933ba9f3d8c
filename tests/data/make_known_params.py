"""Write kb/engine/known_params.py from the installed litellm (run after changing its pin).

    .venv/bin/python tests/data/make_known_params.py > kb/engine/known_params.py

``tests/test_engine.py`` fails when the pinned litellm's answers differ from the file.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

#: Not call params: the arguments kb itself passes, and litellm's own plumbing.
NOT_PARAMS = {"kwargs", "model", "messages", "model_list", "shared_session"}


def known() -> tuple[list[str], dict[str, list[str]]]:
    """litellm.completion's keyword params, and each provider's supported OpenAI params."""
    import litellm

    litellm.suppress_debug_info = True
    general = sorted(set(inspect.signature(litellm.completion).parameters) - NOT_PARAMS)
    per: dict[str, list[str]] = {}
    kb_own = {"scripted", "local"}  # kb registers its own providers once litellm is loaded
    for provider in sorted({str(getattr(p, "value", p)) for p in litellm.provider_list} - kb_own):
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # litellm prints advice for some
                found = litellm.get_supported_openai_params(
                    model="model", custom_llm_provider=provider
                )
        except Exception:  # noqa: BLE001 - a provider litellm cannot answer for: general params
            found = None
        if found:
            per[provider] = sorted(set(found))
    return general, per


def render(general: list[str], per: dict[str, list[str]]) -> str:
    shared: dict[tuple[str, ...], str] = {}
    lines = [
        '"""Params litellm knows, so a typo in ``[[models]].params`` is refused before any call.',
        "",
        "A snapshot for the pinned litellm (validating a spec never imports litellm, which",
        "takes seconds): ``GENERAL_PARAMS`` are ``litellm.completion``'s keyword params;",
        "``PROVIDER_PARAMS`` each provider's ``get_supported_openai_params``. Written by",
        "``tests/data/make_known_params.py``; ``tests/test_engine.py`` fails when it is stale.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        f"GENERAL_PARAMS: frozenset[str] = frozenset({tuple(general)!r})",
        "",
    ]
    for params in per.values():
        key = tuple(params)
        if key not in shared:
            shared[key] = f"_P{len(shared)}"
            lines.append(f"{shared[key]} = frozenset({key!r})")
    lines += ["", "PROVIDER_PARAMS: dict[str, frozenset[str]] = {"]
    lines += [f"    {name!r}: {shared[tuple(params)]}," for name, params in per.items()]
    lines.append("}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render(*known()))
