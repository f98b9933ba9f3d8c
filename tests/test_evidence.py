"""Evidence a reviewer can open: the per-run file, kb show, kb report, kb diff, --summary."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from kb.cli import cli
from kb.store.runs_file import parse_runs
from tests.cli_helpers import unwrapped
from tests.conftest import git
from tests.sweep_helpers import CASES, responses, scripted_model, toml_value, write_spec

pytestmark = pytest.mark.usefixtures("initialized_store")

STORE = "rulvar.models.json"
SECRET = "sk-evidence-secret-0123456789"
JUDGE_PARAMS = {"default": '{"passed": true, "reason": "looks right"}', "cost_usd": 0.0002}
JUDGE = (
    '{ kind = "judge", model = "scripted:judge", instructions = "Is it right?", '
    f"params = {toml_value(JUDGE_PARAMS)} }}"
)


def kb(runner: CliRunner, *args: str) -> Result:
    return runner.invoke(cli, list(args), catch_exceptions=False)


def sweep(runner: CliRunner, spec: Path, day: int, *args: str) -> dict[str, Any]:
    observed = f"2026-11-{day:02d}T02:00:00Z"
    result = kb(runner, "sweep", str(spec), "--json", "--quiet", "--observed-at", observed, *args)
    assert result.exit_code == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def leaky_model() -> dict[str, Any]:
    """Echoes its own key in one answer and writes a very long one in another."""
    replies = responses(9) | {"Question 9?": "answer-9 " + "y" * 4100}
    replies["Question 0?"] = f"answer-0 (my key is {SECRET})"
    return {"model": "scripted:m", "params": {"responses": replies, "api_key": SECRET}}


def test_the_evidence_file_holds_every_run(runner: CliRunner, repo: Path) -> None:
    spec = write_spec(
        repo / "s.toml",
        [leaky_model(), scripted_model("other", 10)],
        graders=f'{{ kind = "golden", expected = "answer", match = "contains" }}, {JUDGE}',
        budgets={"target_usd": 0.01, "judge_usd": 0.01, "canary_usd": 0.01, "max_total_usd": 5},
        extra='\n[canary]\nprompts = ["Name the primary colors."]\n',
    )
    report = sweep(runner, spec, 29)
    path = repo / "kb-evidence" / "kb-sweep-2026-11-29T02:00:00.000Z.jsonl"
    # format 3: the file in case order with each case's request once; read back, the runs
    lines = [r.to_wire() for r in parse_runs(path.read_bytes(), str(path))]
    assert sorted(lines, key=lambda r: r["label"]) == sorted(
        report["runs"], key=lambda r: r["label"]
    )
    assert [json.loads(line)["kind"] for line in path.read_text().splitlines()][:2] == [
        "canary"
    ] * 2
    kinds = [line["kind"] for line in lines]
    # 2 canary probes, 10 targets per model, one judge per target of each model.
    assert kinds.count("canary") == 2 and kinds.count("target") == 20
    assert kinds.count("judge") == 20
    first = next(line for line in lines if line["kind"] == "target")
    assert list(first) == [
        "format", "kind", "label", "model", "case", "taskClass", "repeat", "status", "output",
        "verdicts", "costUsd", "latencyMs", "attempts", "request", "params", "usage",
        "priceSource", "caseFingerprint", "expected",
    ]  # fmt: skip
    assert first["expected"] == "contains 'answer' · judge scripted:judge: Is it right?"
    # Format 2 records what was asked: the request text, params, tokens, price source.
    assert first["format"] == 4
    assert first["request"] == {"user": "Question 0?"}
    assert first["params"] == {}  # the scripted model's replies are the model, not params
    assert first["usage"] == {"promptTokens": 2, "completionTokens": 5}
    assert first["priceSource"] == "declared" and len(first["caseFingerprint"]) == 64
    assert first["label"] == "target:scripted:m/case-00" and first["case"] == "case-00"
    assert first["verdicts"][0] == {
        "grader": "golden:contains",
        "passed": True,
        "reason": "matches contains 'answer'",
    }
    assert first["verdicts"][1]["grader"] == "judge:scripted:judge"
    assert first["output"] == "answer-0 (my key is ***)"
    assert SECRET not in path.read_text() and SECRET not in json.dumps(report)
    long = next(line for line in lines if line["case"] == "case-09" and line["kind"] == "target")
    assert len(long["output"]) == 4000
    full = "answer-9 " + "y" * 4100
    assert long["outputSha256"] == hashlib.sha256(full.encode()).hexdigest()
    judge = next(line for line in lines if line["kind"] == "judge")
    assert judge["model"] == "scripted:judge" and judge["output"].startswith('{"passed": true')
    canary = next(line for line in lines if line["kind"] == "canary")
    assert canary["case"] == "Name the primary colors." and canary["taskClass"] is None
    # The same commit as the store change, nothing else.
    assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == [
        "kb-evidence/kb-sweep-2026-11-29T02:00:00.000Z.jsonl",
        "kb-evidence/kb-sweep-2026-11-29T02:00:00.000Z.report.json",
        "rulvar.models.canary.json",
        STORE,
    ]
    body = json.loads((path.parent / (path.stem + ".report.json")).read_text())
    assert body == {key: value for key, value in report.items() if key != "runs"}


def test_evidence_can_be_turned_off_or_kept_outside_git(runner: CliRunner, repo: Path) -> None:
    spec = write_spec(repo / "s.toml", [scripted_model("m", 10)])
    sweep(runner, spec, 28, "--no-evidence")
    assert not (repo / "kb-evidence").exists()
    outside = repo.parent / "big-evidence"
    spec = write_spec(
        repo / "t.toml", [scripted_model("m", 10)], extra_sweep=f'evidence_dir = "{outside}"'
    )
    sweep(runner, spec, 29)
    written = outside / "kb-sweep-2026-11-29T02:00:00.000Z.jsonl"
    assert written.is_file()  # written ...
    assert "big-evidence" not in git(
        repo, "show", "--name-only", "--format=", "HEAD"
    )  # not committed
    off = write_spec(repo / "u.toml", [scripted_model("m", 10)], extra_sweep="evidence = false")
    report = sweep(runner, off, 30)
    assert report["runs"] and not (repo / "kb-evidence").exists()


def test_kb_show_prints_the_cases_even_from_history(runner: CliRunner, repo: Path) -> None:
    spec = write_spec(repo / "s.toml", [scripted_model("m", 9)])
    (claim,) = sweep(runner, spec, 29)["claims"]
    shown = kb(runner, "show", claim["id"])
    assert shown.exit_code == 0
    assert (
        "cases (9 of 10 runs passed; evidence of kb-sweep-2026-11-29T02:00:00.000Z from "
        "the work tree)" in unwrapped(shown.stdout)
    )
    assert "  FAIL  case-09  'wrong-9'  — does not match exact 'answer-9'" in shown.stdout
    assert "  PASS  case-00  'answer-0'" in shown.stdout
    git(repo, "rm", "-q", "-r", "kb-evidence")
    git(repo, "commit", "-q", "-m", "user: drop evidence")
    later = kb(runner, "show", claim["id"])
    assert later.exit_code == 0
    assert "evidence of kb-sweep-2026-11-29T02:00:00.000Z from git " in unwrapped(later.stdout)
    assert "  FAIL  case-09" in later.stdout
    report = kb(runner, "report", "kb-sweep-2026-11-29T02:00:00.000Z")
    assert report.exit_code == 0 and "(from the evidence in git " in unwrapped(report.stdout)
    missing = kb(runner, "report", "no-such-night")
    assert missing.exit_code == 2 and "no evidence for report 'no-such-night'" in missing.stderr


def test_kb_diff_over_two_nights(runner: CliRunner, repo: Path) -> None:
    first = write_spec(
        repo / "n1.toml",
        [scripted_model("strong", 10), scripted_model("weak", 2), scripted_model("gone", 10)],
        extra='\n[canary]\nprompts = ["Ping?"]\n',
        budgets={"target_usd": 0.01, "canary_usd": 0.01, "max_total_usd": 5},
    )
    night1 = sweep(runner, first, 1)
    ids = {c["subject"]["model"]: c["id"] for c in night1["claims"]}
    # Night 2: strong measured again (superseded), weak now mid-band (archived: the
    # point gate falsifies), gone's provider drifted (flipped stale, then incomplete).
    second = write_spec(
        repo / "n2.toml",
        [
            scripted_model("strong", 10),
            scripted_model("weak", 7),
            # The canary answers differently, and every case fails at the provider:
            # the drift is committed (stale), the cell stays incomplete.
            {
                "model": "scripted:gone",
                "params": {
                    "responses": responses(10) | {"Ping?": "changed"},
                    "errors": [prompt for _, prompt, _ in CASES],
                },
            },
        ],
        cases=CASES,
        extra='\n[canary]\nprompts = ["Ping?"]\n',
        budgets={"target_usd": 0.01, "canary_usd": 0.01, "max_total_usd": 5},
        extra_sweep="max_retries = 0",
    )
    night2 = sweep(runner, second, 20, "--allow-incomplete", "--summary", "summary.md")
    assert night2["canary"][2]["status"] == "drift"
    lines = kb(runner, "--as-of", "2026-12-31", "diff").stdout.splitlines()
    assert all(len(line) <= 80 for line in lines if "kb-sweep-" not in line)  # ids kept whole
    text = unwrapped("\n".join(lines))
    assert "+ added" not in text  # the one new claim replaced an older one
    # what changed a belief first; the re-measurement at the same rate is a count
    assert text.index(f"- archived {ids['scripted:weak']} (falsified: was ") < text.index(
        f"! stale {ids['scripted:gone']} (canary drift: the provider changed the model)"
    )
    assert text.endswith("= 1 claim re-measured, no belief changed (kb diff --all lists them)")
    every = unwrapped(kb(runner, "--as-of", "2026-12-31", "diff", "--all").stdout)
    assert (
        f"= re-measured {ids['scripted:strong']} by {night2['claims'][0]['id']} "
        "(passRate 1.00 -> 1.00)"
    ) in every
    assert lines[0] == "store v1 (HEAD~1, night 2026-11-01) -> v2 (HEAD, night 2026-11-20)"
    data = json.loads(kb(runner, "diff", "--json").stdout)
    assert [a["reason"] for a in data["archived"]] == ["falsified"]
    assert data["superseded"][0]["newPassRate"] == 1
    assert data["superseded"][0]["beliefChanged"] is False and data["unchangedCount"] == 1
    markdown = kb(runner, "diff", "--markdown").stdout
    assert "**Superseded**" not in markdown and "| 1.00 → 1.00 |" not in markdown
    assert "1 claim re-measured, no belief changed (`kb diff --all` lists them)." in markdown
    listed = kb(runner, "diff", "--markdown", "--all").stdout
    assert "**Re-measured, no belief changed** (1)" in listed and "| 1.00 → 1.00 |" in listed
    assert "**Flipped stale (canary drift)** (1)" in markdown
    summary = (repo / "summary.md").read_text()
    assert summary.startswith("## kb sweep `kb-sweep-2026-11-20T02:00:00.000Z`")
    # The same changes as kb diff of the sweep's commit (the header names the commits).
    changes = markdown.split("\n", 3)[3]
    assert changes in summary and "**Falsified** (1)" in changes


def test_kb_diff_lists_claims_that_expired_between_the_two_instants(
    runner: CliRunner, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIT_COMMITTER_DATE", "2026-11-02T00:00:00Z")  # the commits' instants
    spec = write_spec(repo / "s.toml", [scripted_model("strong", 10), scripted_model("weak", 2)])
    claims = {c["subject"]["model"]: c["id"] for c in sweep(runner, spec, 1)["claims"]}
    # HEAD~1 (2026-11-02) vs the work tree at --as-of: the weakness lapsed on 2026-12-01.
    before = kb(runner, "--as-of", "2026-11-30", "diff", "HEAD~1").stdout
    assert "expired" not in before
    after = kb(runner, "--as-of", "2026-12-05", "diff", "HEAD~1").stdout
    assert f"x expired {claims['scripted:weak']} (at 2026-12-01T02:00:00.000Z)" in unwrapped(after)
    assert claims["scripted:strong"] not in after.split("added")[-1].split("expired")[-1]


def test_a_specs_evidence_dir_is_recorded_so_every_command_finds_it(
    runner: CliRunner, repo: Path
) -> None:
    spec = write_spec(
        repo / "s.toml", [scripted_model("m", 9)], extra_sweep='evidence_dir = "nightly-evidence"'
    )
    (claim,) = sweep(runner, spec, 29)["claims"]
    settings = json.loads((repo / "rulvar.models.settings.json").read_text())
    assert settings == {"format": 1, "evidenceDirs": ["nightly-evidence", "kb-evidence"]}
    committed = git(repo, "show", "--name-only", "--format=", "HEAD").split()
    assert "rulvar.models.settings.json" in committed
    assert "nightly-evidence/kb-sweep-2026-11-29T02:00:00.000Z.jsonl" in committed
    # No flag: kb show, kb report and kb compact read where the spec put the evidence.
    shown = kb(runner, "show", claim["id"]).stdout
    assert "cases (9 of 10 runs passed; evidence of kb-sweep-2026-11-29T02:00:00.000Z" in shown
    report = kb(runner, "report", "kb-sweep-2026-11-29T02:00:00.000Z")
    assert report.exit_code == 0 and "(from the evidence in the work tree)" in report.stdout
    # A second night of the same spec records nothing new.
    sweep(runner, spec, 30)
    assert "rulvar.models.settings.json" not in git(
        repo, "show", "--name-only", "--format=", "HEAD"
    )


def test_a_broken_settings_file_is_refused_before_any_call(runner: CliRunner, repo: Path) -> None:
    (repo / "rulvar.models.settings.json").write_text('{"format": 1, "evidenceDirr": "x"}')
    spec = write_spec(repo / "s.toml", [scripted_model("m", 9)])
    result = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", "2026-11-29T02:00:00Z")
    assert result.exit_code == 2
    assert "rulvar.models.settings.json: evidenceDirr: unknown key" in result.stderr


def test_kb_diff_refuses_revisions_given_newest_first(runner: CliRunner, repo: Path) -> None:
    spec = write_spec(repo / "s.toml", [scripted_model("m", 9)])
    sweep(runner, spec, 1)
    sweep(runner, spec, 2)
    result = kb(runner, "diff", "HEAD", "HEAD~1")
    assert result.exit_code == 2
    assert result.stderr.strip().endswith(
        "HEAD~1 is older than HEAD: give the earlier revision first (kb diff HEAD~1 HEAD)"
    )
    assert "compacted" not in result.stdout


def test_kb_diff_over_several_nights_is_net_of_the_steps_between(
    runner: CliRunner, repo: Path
) -> None:
    spec = write_spec(repo / "s.toml", [scripted_model("m", 9)])
    first, _, third = (sweep(runner, spec, day)["claims"][0]["id"] for day in (1, 2, 3))
    found = json.loads(
        kb(runner, "--as-of", "2026-11-04", "diff", "HEAD~2", "HEAD", "--json").stdout
    )
    # night 1's claim, replaced by night 3's: night 2's claim was only a step between them
    assert [(s["id"], s["by"]) for s in found["superseded"]] == [(first, third)]
    assert found["added"] == []
    text = unwrapped(kb(runner, "--as-of", "2026-11-04", "diff", "HEAD~2", "HEAD", "--all").stdout)
    assert f"= re-measured {first} by {third}" in text
    assert "kb-sweep-2026-11-02" not in text
