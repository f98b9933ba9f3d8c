"""Writing sweep specs with scripted models of exact pass rates."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

CASES = [(f"case-{i:02d}", f"Question {i}?", f"answer-{i}") for i in range(10)]


def responses(correct: int, cases: list[tuple[str, str, str]] = CASES) -> dict[str, str]:
    """Replies that get exactly ``correct`` of the cases right."""
    return {
        prompt: (answer if i < correct else f"wrong-{i}")
        for i, (_, prompt, answer) in enumerate(cases)
    }


def toml_value(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return (
        json.dumps(value)
        if not isinstance(value, dict)
        else (
            "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
        )
    )


def write_spec(
    path: Path,
    models: list[dict[str, Any]],
    *,
    cases: list[tuple[str, str, str]] = CASES,
    task_class: str = "extraction",
    budgets: dict[str, float] | None = None,
    extra_sweep: str = "",
    extra: str = "",
    graders: str | None = None,
    gate: str = "point",
) -> Path:
    """A spec whose cases are golden-graded ``cases``; models are ``[[models]]`` tables.

    Ten cases are too few for the interval gate to claim a strength, so specs
    for tests about everything else (canary, falsification, commits) pin the
    point gate, whose claims follow from the pass counts alone; the gate's
    own tests pass ``gate="interval"``.
    """
    budgets = budgets if budgets is not None else {"target_usd": 0.01, "max_total_usd": 5.0}
    lines = ["[sweep]", 'committer = "ci"', f'gate = "{gate}"', extra_sweep, "", "[budgets]"]
    lines += [f"{k} = {v}" for k, v in budgets.items()]
    for model in models:
        lines += ["", "[[models]]"] + [f"{k} = {toml_value(v)}" for k, v in model.items()]
    for name, prompt, answer in cases:
        grader = graders or f'{{ kind = "golden", expected = {json.dumps(answer)} }}'
        lines += [
            "",
            "[[cases]]",
            f'name = "{name}"',
            f'task_class = "{task_class}"',
            f"prompt = {json.dumps(prompt)}",
            f"graders = [{grader}]",
        ]
    text = "\n".join(lines) + "\n" + extra
    tomllib.loads(text)  # fail here, not in kb, if a test writes bad TOML
    path.write_text(text)
    return path


def scripted_model(name: str, correct: int, **params: Any) -> dict[str, Any]:
    """A scripted model right on ``correct`` of the cases; any other prompt (a canary
    probe) gets a real answer, as a working model gives (an empty one is an outage)."""
    return {
        "model": f"scripted:{name}",
        "params": {"responses": responses(correct), "default": "a steady answer", **params},
    }


def loopback_model(model: str, base: str) -> dict[str, Any]:
    """An OpenAI model on a loopback fake server, at a declared $1/$2 per Mtok (the key in
    ``KB_TEST_KEY``, which the tests set)."""
    return {
        "model": model,
        "params": {
            "api_base": base,
            "api_key_env": "KB_TEST_KEY",
            "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
        },
    }


def echo_spec(
    path: Path,
    models: dict[str, dict[str, Any]],
    prompts: list[str],
    *,
    sweep: str = "",
    canary: list[str] | None = None,
    task_class: Any = "extraction",
) -> Path:
    """Models on the loopback fake, one case per prompt expecting its echo (``echo: P``).

    ``models``: ref → params; ``sweep``: more ``[sweep]`` lines; ``task_class``: a
    name, or a function of the prompt. Budgets are capped (``canary_usd`` too).
    """
    lines = ["[sweep]", 'committer = "ci"', "max_retries = 0", 'sampling = "full"', sweep]
    lines += ["", "[budgets]", "target_usd = 0.01", "canary_usd = 0.01", "max_total_usd = 50"]
    if canary is not None:
        lines += ["", "[canary]", f"prompts = {json.dumps(canary)}"]
    for ref, params in models.items():
        lines += ["", "[[models]]", f'model = "{ref}"', f"params = {toml_value(params)}"]
    for i, prompt in enumerate(prompts):
        cls = task_class(prompt) if callable(task_class) else task_class
        lines += ["", "[[cases]]", f'name = "c{i:02d}"', f'task_class = "{cls}"']
        lines += [f"prompt = {json.dumps(prompt)}"]
        lines += [f'graders = [{{ kind = "golden", expected = {json.dumps("echo: " + prompt)} }}]']
    path.write_text("\n".join(lines) + "\n")
    return path


def one_key_spec(
    api_base: str,
    cases: int,
    classes: int,
    *,
    model: str,
    price: tuple[float, float],
    sweep: list[str],
) -> str:
    """One OpenAI-compatible model on one key, ``cases`` echo cases over ``classes`` task
    classes (the loopback rate-limited server answers ``echo: <prompt>``): the night many
    shards split, in the CI recipe's tests and in ``bench/ratelimit.py``."""
    lines = ["[sweep]", *sweep, "", "[[models]]", f'model = "{model}"']
    lines.append(
        f'params = {{ api_base = "{api_base}", api_key_env = "OPENAI_API_KEY", '
        f"price = {{ input_per_mtok = {price[0]}, output_per_mtok = {price[1]} }} }}"
    )
    for i in range(cases):
        lines += [
            "",
            "[[cases]]",
            f'name = "case-{i}"',
            f'task_class = "class-{i % classes}"',
            f'prompt = "question {i}"',
            f'graders = [{{ kind = "golden", expected = "echo: question {i}" }}]',
        ]
    return "\n".join(lines) + "\n"
