"""Canary fingerprints identical to rulvar's, drift flips, and noise that is not drift."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import given
from hypothesis import strategies as st

from kb.cli import cli
from kb.store.canonical import JS_WHITESPACE, js_stringify, normalize_output
from kb.store.filestore import KnowledgeStore
from kb.sweep.canary import fingerprint
from tests.conftest import git
from tests.sweep_helpers import responses, write_spec

pytestmark = pytest.mark.usefixtures("initialized_store")

VECTORS = json.loads((Path(__file__).parent / "data" / "js_vectors.json").read_text())["canary"]
STORE = "rulvar.models.json"
PROBES = ["Name the primary colors.", "Sort: 3, 1, 2."]


def text(units: list[int]) -> str:
    return struct.pack(f"<{len(units)}H", *units).decode("utf-16-le", "surrogatepass")


@pytest.mark.parametrize("vector", VECTORS["normalized"], ids=lambda v: str(v["raw"][:6]))
def test_normalization_matches_javascript(vector: dict[str, Any]) -> None:
    assert normalize_output(text(vector["raw"])) == text(vector["normalized"])


@pytest.mark.parametrize("vector", VECTORS["fingerprints"], ids=lambda v: v["fingerprint"][:8])
def test_fingerprint_matches_javascript(vector: dict[str, Any]) -> None:
    outputs = [text(units) for units in vector["outputs"]]
    assert js_stringify([len(outputs), outputs]) == vector["json"]
    assert fingerprint(len(outputs), outputs) == vector["fingerprint"]


def test_the_javascript_whitespace_set_is_not_pythons() -> None:
    assert normalize_output("\ufeff a \ufeff") == "a"  # U+FEFF is JS whitespace
    assert normalize_output("a\x1cb\x85c") == "a\x1cb\x85c"  # Python's \s would eat these


@given(st.text())
def test_normalization_properties(raw: str) -> None:
    once = normalize_output(raw)
    assert normalize_output(once) == once
    assert once == once.strip(JS_WHITESPACE)
    assert not any(c in JS_WHITESPACE for c in once.replace(" ", ""))
    assert "  " not in once


# -- through the CLI ---------------------------------------------------------------------


def canary_spec(
    path: Path,
    answers: list[str] | dict[str, Any],
    *,
    extra_params: str = "",
    repeats: int = 1,
    budgets: dict[str, float] | None = None,
) -> Path:
    canary = dict(zip(PROBES, answers, strict=True)) if isinstance(answers, list) else answers
    params = {"responses": responses(10) | canary}
    model = {"model": "scripted:m", "params": params}
    if extra_params:
        model["params"] = params | json.loads(extra_params)
    prompts = json.dumps(PROBES)
    return write_spec(
        path,
        [model],
        budgets=budgets or {"target_usd": 0.01, "canary_usd": 0.01, "max_total_usd": 5.0},
        extra=f"\n[canary]\nprompts = {prompts}\nrepeats = {repeats}\n",
    )


def kb(runner: CliRunner, *args: str) -> Result:
    return runner.invoke(cli, list(args), catch_exceptions=False)


def sweep(runner: CliRunner, spec: Path, night: int) -> dict[str, Any]:
    result = kb(
        runner,
        "sweep",
        str(spec),
        "--json",
        "--quiet",
        "--observed-at",
        f"2026-11-{night:02d}T02:00:00Z",
    )
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def canary(runner: CliRunner, spec: Path, *args: str) -> tuple[int, list[dict[str, Any]]]:
    result = kb(runner, "canary", str(spec), "--json", *args)
    return result.exit_code, json.loads(result.stdout)


def test_drift_flips_stale_then_the_next_sweep_remeasures(
    runner: CliRunner, isolated: Path
) -> None:
    before = canary_spec(isolated / "a.toml", ["red, yellow, blue", "1, 2, 3"])
    first = sweep(runner, before, 10)
    fp = first["canary"][0]["fingerprint"]
    assert fp == fingerprint(2, ["red, yellow, blue", "1, 2, 3"])
    assert first["claims"][0]["modelEpoch"] == {"canaryFingerprint": fp}

    # The provider silently swaps the model: the same probes answer differently.
    after = canary_spec(isolated / "b.toml", ["Red, Yellow and Blue!", "1, 2, 3"])
    code, (entry,) = canary(runner, after)
    assert code == 0
    assert entry["status"] == "drift" and entry["allOk"] is True
    assert entry["flipped"] == [first["claims"][0]["id"]] and entry["version"] == 2
    assert KnowledgeStore(STORE).read().claims[0].status == "stale"
    code, (again,) = canary(runner, after)  # idempotent: nothing left to flip
    assert again["status"] == "no-drift" and again["flipped"] == [] and "version" not in again
    assert KnowledgeStore(STORE).read().version == 2

    second = sweep(runner, after, 11)  # re-measured; the stale claim is superseded
    assert second["retired"] == [
        {
            "claimId": first["claims"][0]["id"],
            "action": "superseded",
            "by": second["claims"][0]["id"],
        }
    ]
    new_fp = second["claims"][0]["modelEpoch"]["canaryFingerprint"]
    assert new_fp == second["canary"][0]["fingerprint"] != fp


def test_drift_inside_a_sweep_is_committed_with_the_measurement(
    runner: CliRunner, repo: Path
) -> None:
    """One commit, flips first: the drifted claim is marked stale, then superseded."""
    first = sweep(runner, canary_spec(repo / "a.toml", ["red", "1, 2, 3"]), 10)
    report = sweep(runner, canary_spec(repo / "b.toml", ["RED", "1, 2, 3"]), 11)
    assert report["canary"][0]["status"] == "drift"
    assert report["canary"][0]["flipped"] == [first["claims"][0]["id"]]

    assert git(repo, "log", "--format=%s", "-1").splitlines() == [
        "kb: sweep kb-sweep-2026-11-11T02:00:00.000Z: +1 claim, 1 superseded, 1 marked stale, "
        "canary baselines (store v2)",
    ]
    assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == [
        "kb-evidence/kb-sweep-2026-11-11T02:00:00.000Z.jsonl",
        "kb-evidence/kb-sweep-2026-11-11T02:00:00.000Z.report.json",
        "rulvar.models.canary.json",
        "rulvar.models.json",
    ]


def test_a_sweep_that_measured_nothing_flips_nothing(runner: CliRunner, repo: Path) -> None:
    """Drift seen by the canary is not committed when every cell of the sweep is incomplete."""
    first = sweep(runner, canary_spec(repo / "a.toml", ["red", "1, 2, 3"]), 10)
    before = (repo / STORE).read_bytes()
    head = git(repo, "rev-parse", "HEAD")
    errors = json.dumps({"errors": [f"Question {i}?" for i in range(10)]})
    spec = canary_spec(repo / "b.toml", ["RED", "1, 2, 3"], extra_params=errors)
    spec.write_text(spec.read_text().replace("[budgets]", "max_retries = 0\n\n[budgets]", 1))
    result = kb(runner, "sweep", str(spec), "--observed-at", "2026-11-11T02:00:00Z", "--json")
    report = json.loads(result.stdout)
    assert all(cell["outcome"] == "incomplete" for cell in report["cells"])
    assert report["canary"][0]["status"] == "drift"
    assert "version" not in report["canary"][0]
    assert (repo / STORE).read_bytes() == before and git(repo, "rev-parse", "HEAD") == head
    claim = KnowledgeStore(STORE).read().get(first["claims"][0]["id"])
    assert claim is not None and claim.status == "active"


@pytest.mark.parametrize(
    ("answers", "extra", "budgets", "status"),
    [
        ({PROBES[1]: "1, 2, 3"}, '{"errors": ["Name the primary colors."]}', None, "!error"),
        (
            ["x", "y"],
            "",
            {"target_usd": 0.01, "canary_usd": 0.01, "max_total_usd": 0.015},
            "!refused",
        ),
    ],
    ids=["erroring probe", "refused probe"],
)
def test_probes_that_did_not_settle_ok_never_flip(
    runner: CliRunner,
    isolated: Path,
    answers: Any,
    extra: str,
    budgets: dict[str, float] | None,
    status: str,
) -> None:
    sweep(runner, canary_spec(isolated / "a.toml", ["red", "1, 2, 3"]), 10)
    spec = canary_spec(isolated / "b.toml", answers, extra_params=extra, budgets=budgets)
    # --allow-partial: run although the envelope cannot pay for every probe.
    code, (entry,) = canary(runner, spec, "--max-retries", "0", "--allow-partial")
    assert entry["status"] == "incomplete" and entry["allOk"] is False
    assert entry["flipped"] == []
    expected = (
        fingerprint(2, [status, "1, 2, 3"])
        if status == "!error"
        else fingerprint(2, ["x", "!refused"])
    )
    assert entry["fingerprint"] == expected
    assert KnowledgeStore(STORE).read().claims[0].status == "active"


def test_repeats_that_disagree_are_unstable_not_drift(runner: CliRunner, isolated: Path) -> None:
    sweep(runner, canary_spec(isolated / "a.toml", ["red", "1, 2, 3"]), 10)
    flaky = canary_spec(
        isolated / "b.toml", {PROBES[0]: ["red", "RED"], PROBES[1]: "1, 2, 3"}, repeats=1
    )
    code, (entry,) = canary(runner, flaky, "--repeats", "3", "--fail-on-drift")
    assert code == 0
    assert entry["status"] == "unstable" and entry["flipped"] == []
    assert [p["status"] for p in entry["probes"]] == ["ok", "ok"]
    assert KnowledgeStore(STORE).read().claims[0].status == "active"


def test_fail_on_drift_exits_1_and_human_output(runner: CliRunner, isolated: Path) -> None:
    sweep(runner, canary_spec(isolated / "a.toml", ["red", "1, 2, 3"]), 10)
    drifted = canary_spec(isolated / "b.toml", ["blue", "1, 2, 3"])
    result = kb(runner, "canary", str(drifted), "--fail-on-drift")
    assert result.exit_code == 1
    fp = fingerprint(2, ["blue", "1, 2, 3"])
    assert f"scripted:m  {fp[:12]}  DRIFT, 1 claim flipped stale (store v2)" in result.stdout
    assert "drift in 1 model" in result.stderr


def test_claims_without_a_fingerprint_are_untouched(runner: CliRunner, isolated: Path) -> None:
    plain = write_spec(
        isolated / "plain.toml", [{"model": "scripted:m", "params": {"responses": responses(10)}}]
    )
    sweep(runner, plain, 10)  # no canary configured: no fingerprint recorded
    code, (entry,) = canary(runner, canary_spec(isolated / "b.toml", ["x", "y"]))
    assert entry["status"] == "no-drift" and entry["flipped"] == []


def test_canary_file_from_the_spec(runner: CliRunner, isolated: Path) -> None:
    (isolated / "probes.toml").write_text(f"prompts = {json.dumps(PROBES)}\n")
    spec = write_spec(
        isolated / "s.toml",
        [
            {
                "model": "scripted:m",
                "params": {"responses": dict(zip(PROBES, ["a", "b"], strict=True))},
            }
        ],
        budgets={"target_usd": 0.01, "canary_usd": 0.01, "max_total_usd": 1.0},
    )
    spec.write_text('canary = "probes.toml"\n' + spec.read_text())
    code, (entry,) = canary(runner, spec)
    assert code == 0 and entry["fingerprint"] == fingerprint(2, ["a", "b"])


def test_a_spec_without_a_canary_is_a_clear_error(runner: CliRunner, isolated: Path) -> None:
    spec = write_spec(isolated / "s.toml", [{"model": "scripted:m"}])
    result = kb(runner, "canary", str(spec))
    assert result.exit_code == 2 and "no canary configured" in result.stderr


def test_the_shipped_default_canary_loads() -> None:
    from kb.sweep.spec import load_canary_file

    probes = load_canary_file(Path(__file__).parents[1] / "canaries" / "default.toml").prompts
    assert len(probes) == 4 and any("sort" in p.lower() for p in probes)
