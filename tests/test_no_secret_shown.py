"""Nothing kb shows carries a secret (SPEC 14.1 item 2), on the real path.

A provider that echoes the key it was sent in every reply, error bodies that
quote another model's key (500, 429, 401) and a batch whose error line quotes
one: every file and stream kb writes afterwards — stdout, stderr, the summary,
the HTML and JSON reports, the evidence, the journal, the cassette, the site,
the store and git's objects — is grepped for both keys.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import given
from hypothesis import strategies as st

from tests.cli_helpers import kb, unwrapped
from tests.conftest import git
from tests.fake_batches import BatchSeen, fake_batch_server
from tests.fake_openai import fake_openai_server
from tests.sweep_helpers import echo_spec

KEY_A = "sk-SECRETKEY-1234567890abcdef"
"""A literal ``api_key`` in the spec."""
KEY_B = "sk-OTHERKEY-fedcba0987654321"
"""A key from the environment (``api_key_env``)."""
NIGHT = "2026-11-28T02:00:00Z"
REPORT = "kb-sweep-2026-11-28T02:00:00.000Z"


def write_spec(path: Path, base: str, *, batch: bool = False, canary: bool = True) -> None:
    models = {
        "openai:echoes": {"api_base": base, "api_key": KEY_A, "cost_usd": 0.001},
        "openai:quotes": {"api_base": base, "api_key_env": "B_KEY", "cost_usd": 0.001},
    }
    prompts = [f"q{i}" for i in range(6)] + ["quote-500", "quote-429", "quote-401"]
    echo_spec(
        path,
        models,
        prompts + (["reject this one"] if batch else []),
        sweep="batch = true\nbatch_poll_s = 0.01" if batch else "",
        canary=["Ping?", "Pong?", "Pang?"] if canary else None,
        task_class=lambda p: "errors" if p.startswith(("quote", "reject")) else "extraction",
    )


@pytest.fixture
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("private")


def leaks(text: str) -> list[str]:
    return [key for key in (KEY_A, KEY_B) if key in text]


def every_file(root: Path) -> dict[str, str]:
    """Every file below ``root`` as text, and every object in its git history."""
    found = {
        str(path.relative_to(root)): path.read_bytes().decode("utf-8", "replace")
        for path in root.rglob("*")
        if path.is_file() and ".git" not in path.relative_to(root).parts
    }
    if (root / ".git").exists():
        objects = subprocess.run(
            ["git", "cat-file", "--batch-all-objects", "--batch"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout
        found[".git objects"] = objects.decode("utf-8", "replace")
    return found


def streams(result: Result) -> str:
    return result.stdout + result.stderr


def test_an_echoed_key_and_quoted_keys_reach_no_file_and_no_stream(
    runner: CliRunner, repo: Path, monkeypatch: pytest.MonkeyPatch, outside: Path
) -> None:
    monkeypatch.setenv("B_KEY", KEY_B)
    spec = outside / "s.toml"  # it holds a literal key: the user keeps it out of git
    assert kb(runner, "init").exit_code == 0
    shown: list[Result] = []
    with fake_openai_server() as (base, seen):
        seen.echo_key.add("echoes")  # every reply of openai:echoes quotes its key
        seen.echo_text = '{"error": "sure: env key {key} at your service"}'  # as an error
        seen.quoted = f"{KEY_A} / {KEY_B}"  # the error bodies quote both keys
        write_spec(spec, base)
        swept = kb(
            runner,
            "sweep",
            str(spec),
            "--observed-at",
            NIGHT,
            "--summary",
            "summary.md",
            "--html",
            "report.html",
            "--record",
            "cassette.jsonl",
        )
        shown.append(swept)
        again = kb(runner, "sweep", str(spec), "--json", "--no-commit", "--observed-at", NIGHT)
        shown.append(again)
    assert swept.exit_code == 1, swept.stderr  # the echoing cell is suspect: incomplete
    # the reasons are there, only without the keys
    assert """suspect: every reply was '{"error": "sure: env key *** at…'""" in unwrapped(
        swept.stdout
    )
    wire = json.loads(again.stdout)
    quoted = [run["error"] for run in wire["runs"] if run.get("error")]
    assert any("for key *** / ***" in error for error in quoted), quoted
    canary = {c["model"]: c for c in wire["canary"]}
    assert canary["openai:echoes"]["status"] == "incomplete"
    assert "sure: env key ***" in canary["openai:echoes"]["reason"]
    shown += [
        kb(runner, "report", REPORT, "--html", "again.html"),
        kb(runner, "report", REPORT, "--json"),
        kb(runner, "--as-of", NIGHT, "site", "site"),
        kb(runner, "--as-of", NIGHT, "list", "--all"),
        kb(runner, "diff", "--markdown"),
        kb(runner, "--as-of", NIGHT, "matrix"),
        kb(runner, "--as-of", NIGHT, "compare"),
    ]
    for result in shown:
        assert not leaks(streams(result)), streams(result)
    git(repo, "add", "-A")  # the user's own commit of whatever kb left behind
    git(repo, "commit", "-q", "-m", "user: everything")
    files = every_file(repo)
    assert {"summary.md", "report.html", "cassette.jsonl", "again.html", "site/index.html"} <= set(
        files
    )
    assert {name: leaks(text) for name, text in files.items() if leaks(text)} == {}


def test_a_stopped_nights_journal_and_its_resume_show_no_key(
    runner: CliRunner, repo: Path, monkeypatch: pytest.MonkeyPatch, outside: Path
) -> None:
    monkeypatch.setenv("B_KEY", KEY_B)
    spec = outside / "s.toml"  # it holds a literal key: the user keeps it out of git
    assert kb(runner, "init").exit_code == 0
    with fake_openai_server() as (base, seen):
        seen.echo_key.add("echoes")
        seen.quoted = f"{KEY_A} / {KEY_B}"
        write_spec(spec, base)
        seen.failing.add("quotes")  # 503: the night stops incomplete, its journal stays
        first = kb(runner, "sweep", str(spec), "--observed-at", NIGHT)
        journal = repo / "kb-evidence" / f"{REPORT}.journal.jsonl"
        assert journal.exists()
        seen.failing.clear()
        resumed = kb(runner, "sweep", str(spec), "--resume", "--observed-at", NIGHT)
    for result in (first, resumed):
        assert not leaks(streams(result)), streams(result)
    assert {name: leaks(text) for name, text in every_file(repo).items() if leaks(text)} == {}


def test_a_batch_error_quoting_a_key_is_cut(
    runner: CliRunner, repo: Path, monkeypatch: pytest.MonkeyPatch, outside: Path
) -> None:
    monkeypatch.setenv("B_KEY", KEY_B)
    spec = outside / "s.toml"  # it holds a literal key: the user keeps it out of git
    assert kb(runner, "init").exit_code == 0
    seen = BatchSeen(scenario="partial", reject_message=f"rejected: {KEY_A} and {KEY_B}")
    with fake_batch_server(seen) as (base, _):
        write_spec(spec, base, batch=True, canary=False)
        swept = kb(
            runner, "sweep", str(spec), "--observed-at", NIGHT, "--summary", "s.md", "--json"
        )
    assert swept.exit_code == 1, swept.stderr
    errors = [r.get("error") or "" for r in json.loads(swept.stdout)["runs"]]
    assert any("rejected: *** and ***" in error for error in errors), errors
    assert not leaks(streams(swept)), streams(swept)
    assert {name: leaks(text) for name, text in every_file(repo).items() if leaks(text)} == {}


@given(
    st.text(alphabet=st.sampled_from("ab -_=:'\"\n"), max_size=80),
    st.integers(min_value=1, max_value=60),
)
def test_a_shortened_quote_never_ends_inside_a_token(text: str, limit: int) -> None:
    from kb.textwidth import _BOUNDARY, shorten

    shown = shorten(text, limit)
    assert len(shown) <= limit or shown == "…"
    if len(text) <= limit:
        assert shown == text
        return
    kept = shown.removesuffix("…")
    assert text.startswith(kept)
    ends_on_boundary = not kept or bool(_BOUNDARY.match(kept[-1]))
    next_is_boundary = bool(_BOUNDARY.match(text[len(kept)]))
    assert ends_on_boundary or next_is_boundary
