"""Docs a newcomer follows (SPEC 14.6): every example runs, every key is documented.

* every TOML block in ``README.md`` and ``docs/`` is loaded by kb's own loader
  (a fragment — a ``[[cases]]`` or ``[[models]]`` table — inside a minimal
  spec), so no documented spec rots;
* every shell block marked ``<!-- runnable -->`` runs, as written, against
  scripted models in a fresh git folder;
* the README stays a front door (at most 150 lines) and every spec key the
  reference generates has a description;
* ``kb init --example`` writes a spec kb loads, and never overwrites a file.

``make docs`` (part of ``make test``) builds the site with ``mkdocs build
--strict``: a broken link, anchor or reference fails it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kb.card import load_ladders
from kb.checkpoint import load_checkpoint_spec
from kb.cli import cli
from kb.examples import EXAMPLES, example_files
from kb.sweep.spec import load_canary_file, load_spec

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
FENCE = re.compile(r"(<!-- runnable -->\n)?```(\w+)\n(.*?)```", re.S)
MINIMAL = """[sweep]
committer = "docs"
gate = "point"
[budgets]
target_usd = 0.01
judge_usd = 0.01
max_total_usd = 1
"""
A_MODEL = '\n[[models]]\nmodel = "scripted:docs"\n'
A_CASE = """
[[cases]]
name = "docs-case"
task_class = "docs"
prompt = "Say yes."
graders = [ { kind = "golden", expected = "yes" } ]
"""


def blocks(language: str) -> list[tuple[str, bool, str]]:
    """Every fenced block of ``language``: (where, marked runnable, text)."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in FENCE.finditer(text):
            if match.group(2) == language:
                line = text.count("\n", 0, match.start()) + 1
                where = f"{page.relative_to(ROOT)}:{line}"
                found.append((where, match.group(1) is not None, match.group(3)))
    return found


TOML = blocks("toml")
RUNNABLE = [(where, text) for where, marked, text in blocks("sh") if marked]


def test_the_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150, len(lines)
    assert "make docs" in "\n".join(lines)
    assert len(TOML) >= 6 and len(RUNNABLE) >= 2  # the collection itself works


def world(root: Path) -> None:
    """The files the docs' specs name (a dataset, an include, a canary file)."""
    (root / "cases").mkdir()
    (root / "cases" / "more.toml").write_text(A_CASE.replace("docs-case", "more-case"))
    record = {"id": "r1", "text": "Ann met Bo.", "question": "Who met Bo?", "answer": "Ann"}
    (root / "cases" / "extraction.jsonl").write_text(json.dumps(record) + "\n")
    (root.parent / "canaries").mkdir(exist_ok=True)
    (root.parent / "canaries" / "default.toml").write_text('prompts = ["Ping?"]\n')


@pytest.mark.parametrize(
    ("where", "text"), [(w, t) for w, _, t in TOML], ids=[w for w, _, _ in TOML]
)
def test_every_toml_block_loads(where: str, text: str, tmp_path: Path) -> None:
    root = tmp_path / "spec"
    root.mkdir()
    world(root)
    path = root / "block.toml"
    if "[checkpoint]" in text:
        path.write_text(text)
        load_checkpoint_spec(path)
    elif "[[ladders]]" in text:
        path.write_text(text)
        load_ladders(path)
    elif re.search(r"^\[sensitive\]", text, re.M):
        path.write_text('prompts = ["Ping?"]\n' + text)
        load_canary_file(path)
    else:
        spec = text if "[sweep]" in text else MINIMAL + text
        spec += A_MODEL if "[[models]]" not in spec else ""
        spec += A_CASE if "[[cases]]" not in spec and "[[datasets]]" not in spec else ""
        path.write_text(spec)
        load_spec(path)


@pytest.mark.parametrize(("where", "text"), RUNNABLE, ids=[w for w, _ in RUNNABLE])
def test_every_runnable_block_runs_as_written(where: str, text: str, isolated: Path) -> None:
    bin_dir = str(Path(sys.executable).parent)  # kb is installed beside this python
    env = os.environ | {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", text],
        cwd=isolated,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"{where}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"


def test_every_spec_key_is_described() -> None:
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import hooks  # docs/hooks.py: what the site's spec reference is made from
    finally:
        sys.path.remove(str(ROOT / "docs"))
    bare = [
        f"{model.__name__}.{name}"
        for _, model in hooks.spec_tables()
        for name, field in model.model_fields.items()
        if not (field.description or hooks.field_docs(model).get(name))
    ]
    assert bare == []
    page = hooks.spec_keys_markdown()
    assert "| `max_total_usd` | number (optional) | — |" in page
    assert '| `gate` | `"interval"` \\| `"point"` | `"interval"` |' in page
    assert "| `self_judge` |" in page and "| `models` |" in page


@pytest.mark.parametrize("name", EXAMPLES)
def test_each_example_is_a_spec_kb_loads(name: str, tmp_path: Path) -> None:
    for rel, text in example_files(name).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    spec = load_spec(tmp_path / "kb.toml")
    assert len(spec.cases) == 40 and {c.task_class for c in spec.cases} == {"geography"}
    assert load_ladders(tmp_path / "ladders.toml").ladders


def test_init_example_never_overwrites_a_file(runner: CliRunner, repo: Path) -> None:
    (repo / "ladders.toml").write_text("# mine\n")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True
    ).stdout
    result = runner.invoke(cli, ["init", "--example", "scripted"])
    assert result.exit_code == 2 and "ladders.toml already exists" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert (repo / "ladders.toml").read_text() == "# mine\n"
    assert not (repo / "kb.toml").exists() and not (repo / "rulvar.models.json").exists()
    again = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True)
    assert again.stdout == head
    # a file where the example needs a folder is in the way too, before anything is written
    (repo / "cases").write_text("mine\n")
    blocked = runner.invoke(cli, ["init", "--example", "openai"])
    assert blocked.exit_code == 2 and f"{repo / 'cases'}," in blocked.stderr
    assert not (repo / "rulvar.models.json").exists()
    (repo / "cases").unlink()
    # beside an existing store: the store is kept, the example written
    (repo / "ladders.toml").unlink()
    assert runner.invoke(cli, ["init"]).exit_code == 0
    store = (repo / "rulvar.models.json").read_bytes()
    beside = runner.invoke(cli, ["init", "--example", "openai"])
    assert beside.exit_code == 0, beside.stderr
    assert "exists: the example goes beside it" in beside.stdout
    assert (repo / "rulvar.models.json").read_bytes() == store and (repo / "kb.toml").exists()
