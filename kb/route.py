"""The routing export: a LiteLLM Router config from the verified layer of the card.

``kb route LADDERS.toml`` turns what the store knows into the config a
LiteLLM Router (or the LiteLLM proxy) loads. Per (ladder, task class) one
alias ``kb/<task class>`` whose deployment is the rung the verified layer
recommends — the ladder's start tier, moved at most one rung by the live
eval claims (the card's blast radius, :func:`kb.card.compile_verified_layer`),
floors respected — and, as fallbacks in escalation order, every higher rung
(``kb/<task class>/fallback-1`` …). A ladder without a ``task_class``
serves every task class the store measured on its rungs, plus
``kb/default`` (its start tier).

Endpoints and keys come from an optional sweep spec (``--spec``): a rung's
``api_base`` is copied from the spec's ``[[models]]`` entry of the same
model and effort, and its ``api_key_env`` becomes ``os.environ/<VAR>``
(LiteLLM reads the variable). A literal ``api_key`` is never written. Pure:
the same claims, ladders, spec and instant give the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kb.card import Ladder, LaddersFile, Rung, compile_verified_layer, usable_claims
from kb.engine.requests import ModelSpec, litellm_model
from kb.store.models import ModelClaim
from kb.store.ttl import format_instant

ALIAS_PREFIX = "kb/"
ENDPOINT_PARAMS = ("api_base", "base_url", "api_version")


@dataclass(frozen=True)
class Route:
    """Where requests for one task class go, and where they fall back to."""

    task_class: str
    ladder: str
    alias: str
    default_tier: int
    tier: int
    rungs: tuple[Rung, ...]
    """The chosen rung, then the fallbacks (higher rungs, not floored), in order."""
    moved: bool
    """The verified layer moved the start tier (else the ladder's start)."""


def plan_routes(
    ladders: LaddersFile, claims: Sequence[ModelClaim], as_of: int
) -> tuple[list[Route], list[str]]:
    """Every route, and a warning for each task class no usable rung can serve."""
    moves = {
        (r.ladder, r.task_class): r.recommended_tier
        for r in compile_verified_layer(claims, ladders.ladders, as_of, ladders.floors)
    }
    measured = {c.task_class for c in usable_claims(claims, as_of)}
    routes: list[Route] = []
    warnings: list[str] = []
    taken: set[str] = set()
    # a ladder made for a task class routes it before any general ladder, whatever the order
    ordered = [x for x in ladders.ladders if x.task_class is not None]
    ordered += [x for x in ladders.ladders if x.task_class is None]
    for ladder in ordered:
        for index, rung in enumerate(ladder.rungs):
            if any(rung.key == other.key for other in ladder.rungs[:index]):
                warnings.append(
                    f"ladder {ladder.name!r}: rung {index} repeats {rung.key} (a move up or "
                    "down would land on the same model)"
                )
        if ladder.task_class is not None and ladder.task_class in taken:
            warnings.append(
                f"ladder {ladder.name!r}: task class {ladder.task_class!r} is routed by an "
                "earlier ladder for it; this one is not written"
            )
            continue
        classes = (
            [ladder.task_class]
            if ladder.task_class is not None
            else sorted(c for c in measured if _on_ladder(ladder, claims, c))
        )
        for task_class in classes:
            if task_class in taken:
                continue  # the first ladder serving a task class routes it
            tier = moves.get((ladder.name, task_class), ladder.start_tier)
            route = _route(ladder, task_class, tier, ladders.floors, tier != ladder.start_tier)
            if route is None:
                warnings.append(
                    f"task class {task_class!r}: every rung of {ladder.name!r} from "
                    f"tier {tier} is floored; no route written"
                )
                continue
            taken.add(task_class)
            routes.append(route)
        if ladder.task_class is None and "default" not in taken:
            route = _route(ladder, "default", ladder.start_tier, {}, False)
            if route is not None:
                taken.add("default")
                routes.append(route)
    retired = _retired_only(claims, as_of)
    for route in routes:
        chosen = route.rungs[0].key
        if (chosen, route.task_class) in retired:
            warnings.append(
                f"{route.alias} goes to {chosen}, whose every claim on {route.task_class!r} "
                "was retired (a canary drift or a falsified claim): measure it again before "
                "trusting this route"
            )
    return routes, warnings


def _retired_only(claims: Sequence[ModelClaim], as_of: int) -> set[tuple[str, str]]:
    """(subject, task class) cells with eval claims, none of them live."""
    measured = [c for c in claims if c.claim_class == "eval-measured"]
    seen = {(c.subject_key, c.task_class) for c in measured}
    return seen - {(c.subject_key, c.task_class) for c in usable_claims(measured, as_of)}


def _on_ladder(ladder: Ladder, claims: Sequence[ModelClaim], task_class: str) -> bool:
    keys = {rung.key for rung in ladder.rungs}
    return any(c.task_class == task_class and c.subject_key in keys for c in claims)


def _route(
    ladder: Ladder,
    task_class: str,
    tier: int,
    floors: Mapping[str, Sequence[str]],
    moved: bool,
) -> Route | None:
    allowed = [
        (index, rung)
        for index, rung in enumerate(ladder.rungs)
        if index >= tier and rung.model not in floors.get(task_class, ())
    ]
    if not allowed:
        return None
    first = allowed[0][0]
    return Route(
        task_class,
        ladder.name,
        ALIAS_PREFIX + task_class,
        ladder.start_tier,
        first,
        tuple(rung for _, rung in allowed),
        moved,
    )


def _params(rung: Rung, models: Mapping[str, ModelSpec]) -> tuple[dict[str, Any], str | None]:
    """A rung's litellm_params, and a warning when a literal key was left out."""
    params: dict[str, Any] = {"model": litellm_model(rung.model)}
    if rung.effort is not None:
        params["reasoning_effort"] = rung.effort
    spec = models.get(rung.key)
    warning = None
    if spec is not None:
        for name in ENDPOINT_PARAMS:
            if isinstance(spec.params.get(name), str):
                params[name] = spec.params[name]
        env = spec.params.get("api_key_env")
        if isinstance(env, str):
            params["api_key"] = f"os.environ/{env}"
        elif "api_key" in spec.params:
            warning = (
                f"{rung.key}: the spec's literal api_key is not written (use api_key_env, or "
                "add the key to the router config yourself)"
            )
    return params, warning


def router_config(
    routes: Sequence[Route], models: Mapping[str, ModelSpec] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """``{"model_list": [...], "router_settings": {"fallbacks": [...]}}`` and warnings."""
    models = models or {}
    model_list: list[dict[str, Any]] = []
    fallbacks: list[dict[str, list[str]]] = []
    warnings: list[str] = []
    for route in routes:
        names = []
        for step, rung in enumerate(route.rungs):
            name = route.alias if step == 0 else f"{route.alias}/fallback-{step}"
            params, warning = _params(rung, models)
            if warning and warning not in warnings:
                warnings.append(warning)
            model_list.append(
                {
                    "model_name": name,
                    "litellm_params": params,
                    "model_info": {"id": f"{name}:{rung.key}"},
                }
            )
            names.append(name)
        if len(names) > 1:
            fallbacks.append({route.alias: names[1:]})
    return {"model_list": model_list, "router_settings": {"fallbacks": fallbacks}}, warnings


def routes_json(
    routes: Sequence[Route], as_of: int, models: Mapping[str, ModelSpec] | None = None
) -> dict[str, Any]:
    """The ``--format json`` form (each rung with the ``litellm_params`` the config gets)."""
    models = models or {}
    return {
        "asOf": format_instant(as_of),
        "routes": [
            {
                "taskClass": r.task_class,
                "alias": r.alias,
                "ladder": r.ladder,
                "defaultTier": r.default_tier,
                "tier": r.tier,
                "movedByClaims": r.moved,
                "model": r.rungs[0].model,
                "effort": r.rungs[0].effort,
                "litellmParams": _params(r.rungs[0], models)[0],
                "fallbacks": [
                    {"model": x.model, "effort": x.effort, "litellmParams": _params(x, models)[0]}
                    for x in r.rungs[1:]
                ],
            }
            for r in routes
        ],
    }


def render_yaml(config: Mapping[str, Any], header: str) -> str:
    """The router config as YAML (every scalar JSON-quoted: valid YAML, no escaping traps)."""
    lines = [f"# {line}" for line in header.splitlines()]
    lines.append("model_list:")
    for item in config["model_list"]:
        lines.append(f"  - model_name: {json.dumps(item['model_name'])}")
        lines.append("    litellm_params:")
        for key, value in item["litellm_params"].items():
            lines.append(f"      {key}: {json.dumps(value)}")
        lines.append("    model_info:")
        for key, value in item["model_info"].items():
            lines.append(f"      {key}: {json.dumps(value)}")
    lines.append("router_settings:")
    fallbacks = config["router_settings"]["fallbacks"]
    if not fallbacks:
        lines.append("  fallbacks: []")
    else:
        lines.append("  fallbacks:")
        for entry in fallbacks:
            ((alias, names),) = entry.items()
            lines.append(f"    - {json.dumps(alias)}: [{', '.join(json.dumps(n) for n in names)}]")
    return "\n".join(lines) + "\n"
