"""What a call costs, and whether kb can know before the first call.

A run's cost comes from, in order: a price the spec declares in the model's
params — ``cost_usd`` (per call), ``price = { input_per_mtok, output_per_mtok }``
(USD per million tokens) or litellm's own ``input_cost_per_token`` /
``output_cost_per_token`` — kb's own providers (``scripted``: its
``cost_usd``, 0 when not given; ``local``: free, it runs on this machine), or
litellm's price table. Each run records which (``declared``, ``litellm``) or
``unpriced`` when none knew.

An unpriced model under a capped envelope would spend without being
counted: every run "costs" $0, no per-run ceiling ever triggers, and a cost
comparison against it is meaningless. So :func:`unpriced` tells, before the
plan, which models have no price — by the declared params, kb's own
providers, or litellm's bundled table read as a file (never importing
litellm) — and sweeps refuse them under a cap unless ``allow_unpriced``.
"""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from kb.engine.providers.scripted import scripted_model
from kb.engine.requests import ModelSpec
from kb.engine.runs import Usage

PRICE_TABLE = "model_prices_and_context_window_backup.json"
DECLARE_HINT = (
    "declare its price in the model's params — price = { input_per_mtok = …, "
    "output_per_mtok = … } (USD per million tokens) or cost_usd = … (per call)"
)


def declared_cost(spec: ModelSpec, usage: Usage) -> float | None:
    """The call's cost by the spec's declared price (or kb's own provider), if any."""
    params = spec.params
    if spec.provider == "scripted":
        return scripted_model(params, where=f"scripted:{spec.ref}").cost_usd
    if spec.provider == "local":
        return 0.0
    if "cost_usd" in params:
        return float(params["cost_usd"])
    price = params.get("price")
    if isinstance(price, Mapping):
        return (
            usage.prompt_tokens * float(price.get("input_per_mtok", 0))
            + usage.completion_tokens * float(price.get("output_per_mtok", 0))
        ) / 1_000_000
    if "input_cost_per_token" in params or "output_cost_per_token" in params:
        return usage.prompt_tokens * float(params.get("input_cost_per_token", 0)) + (
            usage.completion_tokens * float(params.get("output_cost_per_token", 0))
        )
    return None


def _declares_price(params: Mapping[str, Any]) -> bool:
    return any(
        key in params
        for key in ("cost_usd", "price", "input_cost_per_token", "output_cost_per_token")
    )


@lru_cache(maxsize=1)
def _price_table() -> Mapping[str, Any]:
    """Litellm's bundled price table, read as the file it ships (no import of litellm)."""
    found = importlib.util.find_spec("litellm")
    locations = found.submodule_search_locations if found is not None else None
    if not locations:
        return {}
    try:
        table = json.loads((Path(next(iter(locations))) / PRICE_TABLE).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return table if isinstance(table, dict) else {}


def in_price_table(spec: ModelSpec) -> bool:
    """Whether litellm's table prices this model (as its own lookup keys it)."""
    ref = spec.subject.ref
    table = _price_table()
    for key in (f"{ref.provider}/{ref.name}", ref.name):
        entry = table.get(key)
        if isinstance(entry, dict) and "input_cost_per_token" in entry:
            provider = entry.get("litellm_provider")
            if key != ref.name or provider in (None, ref.provider):
                return True
    return False


def unpriced(spec: ModelSpec) -> bool:
    """No declared price, not kb's own provider, not in litellm's table."""
    if spec.provider in ("scripted", "local") or _declares_price(spec.params):
        return False
    return not in_price_table(spec)


def price_param_issues(params: Mapping[str, Any], where: str) -> list[str]:
    """A declared ``price`` must be ``{input_per_mtok, output_per_mtok}`` of USD amounts."""
    declared = [
        key
        for key in ("cost_usd", "price", "input_cost_per_token", "output_cost_per_token")
        if key in params
    ]
    if "cost_usd" in declared and len(declared) > 1 or "price" in declared and len(declared) > 1:
        return [
            f"{where}: declares its price twice ({', '.join(declared)}); keep one "
            "(cost_usd per call, price per million tokens, or litellm's *_cost_per_token)"
        ]
    per_token = [k for k in ("input_cost_per_token", "output_cost_per_token") if k in params]
    if len(per_token) == 1:
        other = ({"input_cost_per_token", "output_cost_per_token"} - set(per_token)).pop()
        return [f"{where}.{other}: missing (beside {per_token[0]}; 0 if it is free)"]
    price = params.get("price")
    if price is None:
        return []
    if not isinstance(price, Mapping):
        return [f"{where}.price: must be a table {{ input_per_mtok = …, output_per_mtok = … }}"]
    issues = [
        f"{where}.price.{key}: unknown key (input_per_mtok, output_per_mtok)"
        for key in price
        if key not in ("input_per_mtok", "output_per_mtok")
    ]
    for key in ("input_per_mtok", "output_per_mtok"):
        value = price.get(key)
        if value is None:
            issues.append(f"{where}.price.{key}: missing")
        elif (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not (math.isfinite(value) and value >= 0)
        ):
            issues.append(f"{where}.price.{key}: must be a nonnegative number (got {value!r})")
    return issues
