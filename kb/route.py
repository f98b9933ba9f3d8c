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
model and effort, and its key is written so that LiteLLM never falls back
to another provider's key for that endpoint (:func:`spec_issues`): an
``api_key_env`` becomes ``os.environ/<VAR>`` (LiteLLM reads the variable), a
literal placeholder that is no secret (``none``, ``EMPTY``,
``sk-no-key-required``, anything under 8 characters) is written as it is,
and any other literal key, a rung with an ``api_base`` and no key, or a rung
the spec does not have (it would go to the provider's public endpoint)
refuses the whole file. Pure: the same claims, ladders, spec and instant
give the same bytes.

The ladders file is checked as a whole before anything is routed
(:func:`load_route_ladders`): a start tier off its ladder, a name used
twice, and a ladder for a task class whose every rung from its start tier up
is floored for it are all reported in one error.
"""

from __future__ import annotations

import difflib
import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from kb.card import (
    Ladder,
    LaddersFile,
    Rung,
    compile_verified_layer,
    parse_ladders,
    usable_claims,
)
from kb.compare import CellCost, class_costs
from kb.engine.known_providers import DEFAULT_KEY_ENV
from kb.engine.requests import MIN_SECRET_LENGTH, ModelSpec, litellm_model
from kb.errors import ConfigError
from kb.evidence_index import EvidenceIndex
from kb.money import usd
from kb.paired import margin_text
from kb.schema import DEFAULT_MARGIN
from kb.store.canonical import to_fixed_2
from kb.store.models import ModelClaim
from kb.store.ttl import format_instant
from kb.tomlfile import read_toml

if TYPE_CHECKING:
    from kb.store.filestore import KnowledgeStore
    from kb.sweep.spec import SweepSpec

ALIAS_PREFIX = "kb/"
ENDPOINT_PARAMS = ("api_base", "base_url", "api_version")
PLACEHOLDER_KEYS = frozenset({"none", "EMPTY", "sk-no-key-required"})
"""Literal keys that are no secret: what local OpenAI-compatible servers are given."""


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
    why: str = ""
    """Which policy chose the rung, and on what evidence (a comment in the config)."""


def load_route_ladders(path: Path) -> LaddersFile:
    """The ladders file, every problem in it reported at once (one :class:`ConfigError`).

    Besides what the card refuses (a start tier off its ladder, a name used
    twice — which pydantic reports only once every ladder parses, so it is
    looked for here too), a ladder for a task class whose every rung from its
    start tier up is floored for that task class is refused: no route could be
    written for it.
    """
    source = str(path)
    data = read_toml(path, source)
    problems = [*_names_used_twice(data), *_floored_ladders(data)]
    try:
        ladders = parse_ladders(data, source)
    except ConfigError as error:
        more = [problem for problem in problems if problem not in error.issues]
        raise ConfigError(source, [*error.issues, *more]) from None
    if problems:
        raise ConfigError(source, problems)
    return ladders


def _tables(data: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    found = data.get(key)
    return [t for t in found if isinstance(t, Mapping)] if isinstance(found, list) else []


def _names_used_twice(data: Mapping[str, Any]) -> list[str]:
    """Ladder and profile names used twice, in the card's words (read from the raw file)."""
    issues = []
    for kind, key in (("ladder", "ladders"), ("profile", "profiles")):
        names = Counter(t["name"] for t in _tables(data, key) if isinstance(t.get("name"), str))
        twice = sorted(name for name, count in names.items() if count > 1)
        if twice:
            issues.append(f"duplicate {kind} names: {', '.join(twice)}")
    return issues


def _floored_ladders(data: Mapping[str, Any]) -> list[str]:
    """Ladders for a task class that floors bar from every rung they could start on."""
    floors = data.get("floors")
    floors = floors if isinstance(floors, Mapping) else {}
    issues = []
    for index, ladder in enumerate(_tables(data, "ladders")):
        task_class, tier = ladder.get("task_class"), ladder.get("start_tier")
        barred = floors.get(task_class) if isinstance(task_class, str) else None
        rungs = ladder.get("rungs")
        models = (
            [r.get("model") for r in rungs if isinstance(r, Mapping)]
            if isinstance(rungs, list)
            else []
        )
        if not isinstance(barred, list) or not isinstance(tier, int) or not 0 <= tier < len(models):
            continue  # nothing floored, or a malformed ladder the card's own check names
        if all(model in barred for model in models[tier:]):
            issues.append(
                f"ladders[{index}] ({ladder.get('name')!r}): every rung from its start tier "
                f"({tier}) up is floored for {task_class!r} (floors.{task_class}); no route "
                "could be written for it"
            )
    return issues


def unknown_task_classes(
    ladders: LaddersFile, claims: Sequence[ModelClaim], case_classes: Sequence[str] | None
) -> list[str]:
    """A warning for each task class a ladder or a floor names that no claim or case has.

    Most likely a typo: its alias is written (or its floor kept) but no
    evidence will ever move or bar anything for it. ``case_classes`` are the
    task classes of the spec's cases (``None`` without a spec).
    """
    known = sorted({c.task_class for c in claims} | set(case_classes or ()))
    where_not = "no claim in the store" + (
        " and no case in the spec" if case_classes is not None else ""
    )
    named = [(f"ladder {x.name!r}", x.task_class) for x in ladders.ladders if x.task_class]
    named += [("floors", task_class) for task_class in ladders.floors]
    warnings = []
    for where, task_class in named:
        if task_class is None or task_class in known:
            continue
        close = difflib.get_close_matches(task_class, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else " (a typo?)"
        warnings.append(f"{where}: task class {task_class!r} has {where_not}{hint}")
    return warnings


def unknown_rungs(
    ladders: LaddersFile, claims: Sequence[ModelClaim], spec_models: Sequence[str] | None
) -> list[str]:
    """A warning for each rung that looks like a typo of a model kb knows.

    A rung no claim (nor, with ``--spec``, the spec) names is normal — a top
    rung nobody measured yet — but one a letter or two away from a known
    model of the same provider is almost surely a typo: the config would
    route to a model nobody measured, and a claim on a neighbour could even
    move a route onto it.
    """
    known = sorted({c.model for c in claims} | set(spec_models or ()))
    warnings = []
    for ladder in ladders.ladders:
        for index, rung in enumerate(ladder.rungs):
            if rung.model in known:
                continue
            provider, _, name = rung.model.partition(":")
            # a typo keeps the length within a letter or two (gpt-4o-mini is no typo of gpt-4o)
            same = {
                k.partition(":")[2]: k
                for k in known
                if k.partition(":")[0] == provider and abs(len(k) - len(rung.model)) <= 2
            }
            close = difflib.get_close_matches(name, list(same), n=1, cutoff=0.6)
            if close:
                warnings.append(
                    f"ladder {ladder.name!r} rung {index}: {rung.model} has no claim in the "
                    f"store; did you mean {same[close[0]]!r}?"
                )
    return warnings


RoutePolicy = Literal["card", "evidence"]
CostsOf = Callable[[Sequence[str]], Mapping[str, Mapping[str, CellCost]]]
"""Candidate subjects → task class → their :class:`kb.compare.CellCost` (:func:`class_costs`)."""


def plan_routes(
    ladders: LaddersFile,
    claims: Sequence[ModelClaim],
    as_of: int,
    evidence: CostsOf | None = None,
) -> tuple[list[Route], list[str]]:
    """Every route, and a warning for each task class no usable rung can serve.

    The default policy is the card's: the ladder's start tier, moved at most
    one rung by the live claims (rulvar's blast radius). With ``evidence``
    (``kb route --policy evidence``), a task class whose ladder has rungs
    measured in their current epochs goes to the cheapest of them that is
    non-inferior, paired on shared cases, to the best measured rung
    (:func:`kb.compare.class_costs`); one with none keeps the card's rule,
    and its ``why`` says so.
    """
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
        warnings += _repeated_rungs(ladder)
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
            route = _class_route(ladder, task_class, tier, ladders.floors, evidence)
            if route is None:
                warnings.append(
                    f"task class {task_class!r}: every rung of {ladder.name!r} from "
                    f"tier {tier} is floored; no route written"
                )
                continue
            taken.add(task_class)
            routes.append(route)
        if ladder.task_class is None and "default" not in taken:
            start = ladder.start_tier
            route = _route(ladder, "default", start, {}, False, _card_why(ladder, start))
            if route is not None:
                taken.add("default")
                routes.append(route)
    return routes, warnings + _routes_to_retired(routes, claims, as_of)


def _repeated_rungs(ladder: Ladder) -> list[str]:
    return [
        f"ladder {ladder.name!r}: rung {index} repeats {rung.key} (a move up or "
        "down would land on the same model)"
        for index, rung in enumerate(ladder.rungs)
        if any(rung.key == other.key for other in ladder.rungs[:index])
    ]


def _routes_to_retired(
    routes: Sequence[Route], claims: Sequence[ModelClaim], as_of: int
) -> list[str]:
    """Routes whose first rung the store doubts on their class: retired, or a live weakness."""
    retired = _retired_only(claims, as_of)
    weak = {
        (c.subject_key, c.task_class): c
        for c in usable_claims([c for c in claims if c.claim_class == "eval-measured"], as_of)
        if c.polarity == "weakness"
    }
    found = []
    for route in routes:
        cell = (route.rungs[0].key, route.task_class)
        if cell in retired:
            found.append(
                f"{route.alias} goes to {route.rungs[0].key}, whose every claim on "
                f"{route.task_class!r} was retired (a canary drift or a falsified claim): "
                "measure it again before trusting this route"
            )
        elif cell in weak:
            metrics = weak[cell].metrics
            rate = metrics.get("passRate") if metrics is not None else None
            measured = f" (passRate {to_fixed_2(float(rate))})" if rate is not None else ""
            found.append(
                f"{route.alias} goes to {route.rungs[0].key}, which holds a live weakness on "
                f"{route.task_class!r}{measured}: {weak[cell].id}; the card's one-rung rule "
                "did not move it (raise start_tier, or route by --policy evidence)"
            )
    return found


def _retired_only(claims: Sequence[ModelClaim], as_of: int) -> set[tuple[str, str]]:
    """(subject, task class) cells with eval claims, none of them live."""
    measured = [c for c in claims if c.claim_class == "eval-measured"]
    seen = {(c.subject_key, c.task_class) for c in measured}
    return seen - {(c.subject_key, c.task_class) for c in usable_claims(measured, as_of)}


def _on_ladder(ladder: Ladder, claims: Sequence[ModelClaim], task_class: str) -> bool:
    keys = {rung.key for rung in ladder.rungs}
    return any(c.task_class == task_class and c.subject_key in keys for c in claims)


def evidence_costs(index: EvidenceIndex, margin: float) -> CostsOf:
    """The evidence policy's view of a ladder: :func:`kb.compare.class_costs` of its rungs."""

    def costs(subjects: Sequence[str]) -> dict[str, dict[str, CellCost]]:
        return class_costs(index, margin=margin, subjects=subjects)

    return costs


def _class_route(
    ladder: Ladder,
    task_class: str,
    tier: int,
    floors: Mapping[str, Sequence[str]],
    evidence: CostsOf | None,
) -> Route | None:
    """The route of one task class: the card's tier, or the evidence policy's."""
    why = _card_why(ladder, tier)
    if evidence is not None:
        tier, why = _evidence_tier(ladder, task_class, floors, evidence, tier, why)
    return _route(ladder, task_class, tier, floors, tier != ladder.start_tier, why)


def _card_why(ladder: Ladder, tier: int) -> str:
    if tier == ladder.start_tier:
        return f"card rule: the start tier of ladder {ladder.name!r} (tier {tier})"
    return (
        f"card rule: ladder {ladder.name!r} moved from tier {ladder.start_tier} to {tier} "
        "by the live claims"
    )


def _evidence_tier(
    ladder: Ladder,
    task_class: str,
    floors: Mapping[str, Sequence[str]],
    evidence: CostsOf,
    card_tier: int,
    card_why: str,
) -> tuple[int, str]:
    """The tier of the cheapest rung as good as the best measured one, and why."""
    usable = [
        (index, rung)
        for index, rung in enumerate(ladder.rungs)
        if rung.model not in floors.get(task_class, ())
    ]
    row = evidence([rung.key for _, rung in usable]).get(task_class, {})
    if not row:
        return card_tier, f"{card_why} (evidence policy: no rung measured in a current epoch)"
    chosen = next((cost for cost in row.values() if cost.cheapest_non_inferior), None)
    if chosen is None:  # no qualifying rung has a known cost: the best, the safe side
        chosen = next(cost for cost in row.values() if cost.versus_best is None)
    tier = next(index for index, rung in usable if rung.key == chosen.subject)
    start = ladder.rungs[ladder.start_tier]
    moved = (
        ""
        if tier == ladder.start_tier
        else f"tier {ladder.start_tier} -> {tier} ({'up' if tier > ladder.start_tier else 'down'}"
        f" from the start rung {start.key}" + _start_reading(row.get(start.key)) + "): "
    )
    return tier, moved + evidence_why(chosen, len(row))


def _start_reading(start: CellCost | None) -> str:
    """How the start rung read against the best (why the route left it)."""
    if start is None:
        return ", not measured"
    pair = start.versus_best
    if pair is None:
        return ""
    d = pair.difference
    return (
        f", {pair.reading.reading} against the best: {to_fixed_2(d.difference)} "
        f"[{to_fixed_2(d.low)}, {to_fixed_2(d.high)}] on {d.n} cases"
        + ("; more cases would tell" if pair.reading.reading == "inconclusive" else "")
    )


def evidence_why(chosen: CellCost, measured: int) -> str:
    """Why the evidence policy chose ``chosen`` among ``measured`` measured rungs."""
    money = chosen.costs.cost_per_case
    cost = f"{usd(money)}/case" if money is not None else "cost unknown"
    pair = chosen.versus_best
    if pair is None and not chosen.cheapest_non_inferior:
        return (
            f"evidence: {chosen.subject} is the best measured rung (pass rate "
            f"{to_fixed_2(chosen.pass_rate)} over {chosen.n} cases); no cost is known (no "
            "evidence files), so no cheaper rung can be chosen"
        )
    if pair is None:
        others = measured - 1
        rest = (
            f"; none of the {others} other measured rung{'s' if others != 1 else ''} is "
            "cheaper and non-inferior"
            if others
            else "; the only rung measured"
        )
        return (
            f"evidence: {chosen.subject} is the best measured rung "
            f"(pass rate {to_fixed_2(chosen.pass_rate)} over {chosen.n} cases, {cost}){rest}"
        )
    d = pair.difference
    best_money = pair.costs_b.cost_per_case
    best_cost = f"{usd(best_money)}/case" if best_money is not None else "cost unknown"
    return (
        f"evidence: {chosen.subject} is the cheapest rung non-inferior to the best measured "
        f"({chosen.best}) on {d.n} shared cases: difference {to_fixed_2(d.difference)} "
        f"[{to_fixed_2(d.low)}, {to_fixed_2(d.high)}] ({pair.reading.reading}, margin "
        f"{margin_text(pair.margin)}); {cost} vs {best_cost}"
    )


def _route(
    ladder: Ladder,
    task_class: str,
    tier: int,
    floors: Mapping[str, Sequence[str]],
    moved: bool,
    why: str = "",
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
        why,
    )


def is_placeholder_key(value: str) -> bool:
    """A literal ``api_key`` that is no secret (a local server's ``none``), written as it is."""
    return value in PLACEHOLDER_KEYS or len(value) < MIN_SECRET_LENGTH


def _deployment_key(spec: ModelSpec) -> tuple[str | None, str | None]:
    """The ``api_key`` a rung's deployment is written with, and why it cannot be (one is None).

    Both are None for a rung with neither key nor endpoint: the provider's own
    variable, at the provider's own endpoint, is what the user asked for.
    """
    env = spec.params.get("api_key_env")
    if isinstance(env, str):
        return f"os.environ/{env}", None
    literal = spec.params.get("api_key")
    if isinstance(literal, str) and is_placeholder_key(literal):
        return literal, None
    if literal is not None:
        return None, (
            "a literal api_key is never written to a routing config; name the environment "
            "variable holding it with api_key_env (written as os.environ/VAR)"
        )
    if any(isinstance(spec.params.get(name), str) for name in ("api_base", "base_url")):
        default = DEFAULT_KEY_ENV.get(spec.provider)
        whose = f" ({default[0]})" if default else ""
        return None, (
            f"has an api_base and no key, so LiteLLM would send it the provider's own "
            f'key{whose}; give api_key_env, or api_key = "none" for a server that takes no key'
        )
    return None, None


def spec_issues(ladders: LaddersFile, models: Mapping[str, ModelSpec]) -> list[str]:
    """Why the sweep spec cannot give every rung of every ladder a safe deployment.

    A rung the spec does not have would go to its provider's public endpoint
    with the provider's default key; a rung whose key would be a secret, or
    missing beside an ``api_base``, would leak one. Every ladder's every rung is
    checked, not only tonight's routes: claims move routes, the file should not
    start failing when they do.
    """
    issues: list[str] = []
    missing: list[str] = []
    for ladder in ladders.ladders:
        for rung in ladder.rungs:
            spec = models.get(rung.key)
            if spec is None:
                missing.append(f"{rung.key} (ladder {ladder.name!r})")
                continue
            reason = _deployment_key(spec)[1]
            if reason and f"rung {rung.key}: {reason}" not in issues:
                issues.append(f"rung {rung.key}: {reason}")
    if missing:
        issues.insert(
            0,
            f"rungs not among the spec's [[models]]: {', '.join(dict.fromkeys(missing))} "
            "(a deployment would go to the provider's public endpoint; add each with its "
            "api_base and key, or take it off its ladder)",
        )
    return issues


def _params(rung: Rung, models: Mapping[str, ModelSpec]) -> dict[str, Any]:
    """A rung's litellm_params (its spec entry checked by :func:`spec_issues` first)."""
    params: dict[str, Any] = {"model": litellm_model(rung.model)}
    if rung.effort is not None:
        params["reasoning_effort"] = rung.effort
    spec = models.get(rung.key)
    if spec is not None:
        for name in ENDPOINT_PARAMS:
            if isinstance(spec.params.get(name), str):
                params[name] = spec.params[name]
        key = _deployment_key(spec)[0]
        if key is not None:
            params["api_key"] = key
    return params


def router_config(
    routes: Sequence[Route], models: Mapping[str, ModelSpec] | None = None
) -> dict[str, Any]:
    """``{"model_list": [...], "router_settings": {"fallbacks": [...]}}``."""
    models = models or {}
    model_list: list[dict[str, Any]] = []
    fallbacks: list[dict[str, list[str]]] = []
    for route in routes:
        names = []
        for step, rung in enumerate(route.rungs):
            name = route.alias if step == 0 else f"{route.alias}/fallback-{step}"
            model_list.append(
                {
                    "model_name": name,
                    "litellm_params": _params(rung, models),
                    "model_info": {"id": f"{name}:{rung.key}"},
                }
            )
            names.append(name)
        if len(names) > 1:
            fallbacks.append({route.alias: names[1:]})
    return {"model_list": model_list, "router_settings": {"fallbacks": fallbacks}}


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
                "why": r.why,
                "model": r.rungs[0].model,
                "effort": r.rungs[0].effort,
                "litellmParams": _params(r.rungs[0], models),
                "fallbacks": [
                    {"model": x.model, "effort": x.effort, "litellmParams": _params(x, models)}
                    for x in r.rungs[1:]
                ],
            }
            for r in routes
        ],
    }


def render_yaml(
    config: Mapping[str, Any], header: str, notes: Mapping[str, str] | None = None
) -> str:
    """The router config as YAML (every scalar JSON-quoted: valid YAML, no escaping traps).

    ``notes``: model name → a comment written above its entry (why a route goes where).
    """
    lines = [f"# {line}" for line in header.splitlines()]
    lines.append("model_list:" if config["model_list"] else "model_list: []")
    for item in config["model_list"]:
        note = (notes or {}).get(item["model_name"])
        if note:
            lines.append(f"  # {' '.join(note.splitlines())}")
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


@dataclass(frozen=True)
class RouteConfig:
    """What ``kb route`` writes, decided: the routes, what to warn about, the deployments."""

    routes: list[Route]
    warnings: list[str]
    """Every warning (unknown task classes and rungs, routes the store doubts, missing
    evidence), in the order a person reads them."""
    models: dict[str, ModelSpec]
    """The sweep spec's models by key (each rung's ``api_base`` and key), or none."""
    as_of: int
    policy: str
    margin: float

    def json(self) -> dict[str, Any]:
        """``--format json``."""
        return routes_json(self.routes, self.as_of, self.models)

    def yaml(self, ladders_name: str, store_name: str) -> str:
        """``--format litellm``: the Router/proxy config, each alias with why it goes there."""
        why = (
            "Each kb/<task class> is the rung the verified claims recommend (the ladder's start "
            "moved at most one rung)"
            if self.policy == "card"
            else f"Policy evidence (margin {self.margin}): each kb/<task class> is the cheapest "
            "rung non-inferior (paired) to the best measured one"
        )
        header = (
            f"kb route {ladders_name}: generated from {store_name} as of "
            f"{format_instant(self.as_of)}; regenerate rather than edit.\n{why};\nits fallbacks "
            "are the higher rungs in escalation order; the comment above each alias says why "
            "it goes there."
        )
        notes = {route.alias: route.why for route in self.routes}
        return render_yaml(router_config(self.routes, self.models), header, notes)


def route_config(
    ladders: LaddersFile,
    store: KnowledgeStore,
    as_of: int,
    *,
    spec: SweepSpec | None = None,
    policy: str = "card",
    margin: float = DEFAULT_MARGIN,
    evidence_dir: Path | None = None,
) -> RouteConfig:
    """Decide ``kb route``: the routes of ``ladders`` from the store's claims (and evidence).

    ``spec`` (``--spec``): the sweep spec whose models give every rung its endpoint and
    key (a rung it lacks is refused); ``policy``: ``card`` (the start tier moved at most
    one rung, rulvar's rule) or ``evidence`` (the cheapest rung non-inferior to the best
    measured one, from the evidence beside the store or in ``evidence_dir``).
    """
    models = {m.key: m for m in spec.models} if spec else {}
    if spec is not None:
        issues = spec_issues(ladders, models)
        if issues:
            raise ConfigError(f"--spec {spec.path}", issues)
    claims = store.read().claims
    evidence = None
    missing = None
    if policy == "evidence":
        rungs = {rung.key for ladder in ladders.ladders for rung in ladder.rungs}
        index = EvidenceIndex.load(store, evidence_dir, subjects=rungs)
        evidence = evidence_costs(index, margin)
        missing = index.warning()
    routes, warnings = plan_routes(ladders, claims, as_of, evidence)
    cases = [case.task_class for case in spec.cases] if spec else None
    refs = [m.ref for m in spec.models] if spec else None
    unknown = [
        *unknown_task_classes(ladders, claims, cases),
        *unknown_rungs(ladders, claims, refs),
    ]
    said = [*unknown, *warnings, *([missing] if missing is not None else [])]
    return RouteConfig(routes, said, models, as_of, policy, margin)
