"""A reply's top log-probabilities: the shape kb keeps them in, and its JSON.

OpenAI-compatible providers (llama.cpp's server among them) answer
``logprobs: true, top_logprobs: k`` with, for each output token, its ``k``
likeliest alternatives and their natural-log probabilities. kb keeps that as
one ``{token: logprob}`` per output token: the engine carries it on a run, the
journal and the cassette keep it, and the canary's logprob readings
(:mod:`kb.sweep.sensitive`) read the first token's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

TopLogprobs = tuple[Mapping[str, float], ...]
"""Per output token, the top tokens and their log-probabilities (natural log)."""


def parse_top_logprobs(value: object) -> TopLogprobs:
    """:data:`TopLogprobs` from its JSON (a list of ``{token: logprob}``); ``ValueError`` if not.

    The journal and the cassette keep a run's logprobs this way: a resumed or replayed
    logprob reading must be the one the provider gave, or nothing.
    """
    if not isinstance(value, list):
        raise ValueError("topLogprobs must be a list of objects")
    tokens: list[Mapping[str, float]] = []
    for item in value:
        if not isinstance(item, dict) or not all(
            isinstance(key, str)
            and isinstance(v, int | float)
            and not isinstance(v, bool)
            and math.isfinite(v)
            for key, v in item.items()
        ):
            raise ValueError("topLogprobs: each token maps alternatives to finite numbers")
        tokens.append({key: float(v) for key, v in item.items()})
    return tuple(tokens)


def cut_tokens(logprobs: TopLogprobs, cut: Callable[[str], str]) -> TopLogprobs:
    """``logprobs`` with ``cut`` applied to every token (secrets out before they are kept).

    A provider may echo a key one token at a time, or a whole answer may be one
    "token" (a fake, a proxy); tokens that become equal keep the likelier one.
    """
    out: list[Mapping[str, float]] = []
    for token in logprobs:
        found: dict[str, float] = {}
        for text, value in token.items():
            key = cut(text)
            found[key] = max(value, found.get(key, -math.inf))
        out.append(found)
    return tuple(out)
