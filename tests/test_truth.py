"""Claims that stay true, end to end: the interval gate, hysteresis, repeats,
pulled-in subjects measured only as configured, and canary probe-set baselines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from kb.cli import cli
from kb.stats import wilson_interval
from kb.store.filestore import CommitContext, KnowledgeStore
from tests.conftest import git
from tests.factories import add, eval_claim
from tests.sweep_helpers import responses, write_spec

pytestmark = pytest.mark.usefixtures("initialized_store")

STORE = "rulvar.models.json"
CASES30 = [(f"case-{i:02d}", f"Question {i}?", f"answer-{i}") for i in range(30)]


def kb(runner: CliRunner, *args: str) -> Result:
    return runner.invoke(cli, list(args), catch_exceptions=False)


def model(name: str, correct: int, **params: Any) -> dict[str, Any]:
    return {
        "model": f"scripted:{name}",
        "params": {"responses": responses(correct, CASES30), **params},
    }


def spec30(path: Path, models: list[dict[str, Any]], **kwargs: Any) -> Path:
    kwargs.setdefault("gate", "interval")
    return write_spec(path, models, cases=CASES30, **kwargs)


def sweep(runner: CliRunner, spec: Path, night: int, *args: str) -> dict[str, Any]:
    observed = f"2026-11-{night:02d}T02:00:00Z"
    result = kb(runner, "sweep", str(spec), "--json", "--quiet", "--observed-at", observed, *args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_the_interval_gate_claims_what_the_evidence_supports(
    runner: CliRunner, isolated: Path
) -> None:
    spec = spec30(
        isolated / "s.toml",
        [model("a", 29), model("b", 28), model("c", 12), model("d", 13)],
    )
    report = sweep(runner, spec, 1)
    assert report["gate"] == {
        "kind": "interval",
        "tolerance": 0.1,
        "strength": 0.9,
        "weakness": 0.5,
    }
    assert {c["model"]: c["outcome"] for c in report["cells"]} == {
        "scripted:a": "strength",
        "scripted:b": "none",  # 0.93 is above the band, but [0.79, 0.98] is not clear of 0.8
        "scripted:c": "weakness",
        "scripted:d": "none",
    }
    strong = next(c for c in report["claims"] if c["subject"]["model"] == "scripted:a")
    assert strong["statement"] == (
        "sweep passRate 0.97 over 30 extraction cases and 1 night: strength "
        "(95% interval 0.83-0.99, lower bound >= 0.80)"
    )
    cell = next(c for c in report["cells"] if c["model"] == "scripted:a")
    assert cell["wilson95"][0] >= 0.8
    # kb list shows the interval the gate used.
    listed = kb(runner, "--as-of", "2026-11-02", "list", "--model", "scripted:a").stdout
    low, high = cell["wilson95"]
    assert f"[{low:.2f}, {high:.2f}]" in listed.splitlines()[1]
    long = kb(runner, "--as-of", "2026-11-02", "list", "--model", "scripted:a", "--long").stdout
    assert f"wilson95 [{low:.2f}, {high:.2f}]" in long


def test_a_belief_is_kept_only_by_its_own_epochs_evidence(
    runner: CliRunner, isolated: Path
) -> None:
    """v2 kept a strength through any uncertain night; v3 keeps one only within its epoch
    (``tests/test_epochs.py`` covers hysteresis there). A new epoch re-decides it."""
    first = sweep(runner, spec30(isolated / "n1.toml", [model("m", 30)]), 1)
    assert first["cells"][0]["outcome"] == "strength"
    # 27/30 from a new epoch alone is uncertain ([0.74, 0.97]): the old strength is not
    # this epoch's evidence, so it is re-decided, and nothing supports it tonight.
    second = sweep(runner, spec30(isolated / "n2.toml", [model("m", 27)]), 2, "--new-epoch")
    assert second["cells"][0]["outcome"] == "none"
    assert second["retired"] == [
        {"claimId": first["claims"][0]["id"], "action": "archived", "reason": "stale"}
    ]
    assert [c.status for c in KnowledgeStore(STORE).read().claims] == ["archived"]


def test_the_point_gate_falsifies_on_every_complete_night(
    runner: CliRunner, isolated: Path
) -> None:
    first = sweep(runner, spec30(isolated / "a.toml", [model("m", 30)], gate="point"), 1)
    second = sweep(runner, spec30(isolated / "b.toml", [model("m", 26)], gate="point"), 2)
    assert first["claims"][0]["statement"] == (
        "sweep passRate 1.00 over 30 extraction cases: at or above the strength band"
    )
    assert second["retired"] == [
        {"claimId": first["claims"][0]["id"], "action": "archived", "reason": "falsified"}
    ]


def test_repeats_label_flaky_cases_and_never_inflate_n(runner: CliRunner, isolated: Path) -> None:
    params = responses(30, CASES30)
    # Two cases answer right on one repeat in three: flaky, not broken.
    params["Question 0?"] = ["answer-0", "no", "no"]  # type: ignore[assignment]
    params["Question 1?"] = ["no", "no", "answer-1"]  # type: ignore[assignment]
    params["Question 2?"] = "no"
    steady = responses(30, CASES30)
    steady["Question 0?"] = ["no", "answer-0", "answer-0"]  # type: ignore[assignment]
    spec = spec30(
        isolated / "s.toml",
        [
            {"model": "scripted:m", "params": {"responses": params}},
            {"model": "scripted:steady", "params": {"responses": steady}},
        ],
        extra_sweep="repeats = 3",
    )
    report = sweep(runner, spec, 1)
    cell, steady_cell = report["cells"]
    assert cell["n"] == cell["plannedN"] == 30 and cell["repeats"] == 3
    stability = {case["name"]: case["stability"] for case in cell["cases"]}
    assert stability["case-00"] == stability["case-01"] == "flaky"
    assert stability["case-02"] == "stable-fail"
    assert list(stability.values()).count("stable-pass") == 27
    assert cell["passRate"] == (27 * 3 + 2) / 90
    assert cell["outcome"] == "none"  # 0.93 over 30 cases, not 90: [0.79, 0.98]
    (claim,) = report["claims"]
    assert claim["subject"]["model"] == "scripted:steady"
    assert claim["metrics"]["n"] == 30 and claim["metrics"]["passRate"] == 89 / 90
    assert "over 30 extraction cases x3 repeats" in claim["statement"]
    assert steady_cell["wilson95"] == pytest.approx(list(wilson_interval(89 / 3, 30)))
    plan = kb(runner, "sweep", str(spec), "--dry-run", "--observed-at", "2026-11-02T02:00:00Z")
    assert "target:scripted:m/case-00#3" in plan.stdout
    assert "planned (the worst case): 180 target runs" in plan.stdout


def test_a_pulled_in_subject_without_a_configured_entry_is_skipped(
    runner: CliRunner, repo: Path
) -> None:
    """v1 measured scripted:oracle with no params (it answered "") and superseded its claim."""
    weakness = eval_claim(
        "old/oracle",
        subject={"model": "scripted:oracle"},
        polarity="weakness",
        observedAt="2026-11-20T00:00:00.000Z",
        metrics={"passRate": 0.25, "n": 8, "graderId": "eval-suite"},
    )
    KnowledgeStore(STORE).commit([add(weakness)], 0, CommitContext("seed", "t"))
    before = json.loads((repo / STORE).read_text())["claims"]
    budgets = {"target_usd": 0.01, "canary_usd": 0.01, "max_total_usd": 5.0}
    spec = spec30(repo / "s.toml", [model("m", 30)], budgets=budgets, extra=canary_table(["a"]))
    report = sweep(runner, spec, 25)
    pool = {p["model"]: p for p in report["pool"]}
    assert pool["scripted:m"] == {"model": "scripted:m", "origin": "configured", "measured": True}
    assert pool["scripted:oracle"]["measured"] is False
    assert "no [[models]] entry for scripted:oracle" in pool["scripted:oracle"]["skipped"]
    assert [c["model"] for c in report["cells"]] == ["scripted:m"]
    assert [c["model"] for c in report["canary"]] == ["scripted:m"]
    after = json.loads((repo / STORE).read_text())["claims"]
    assert after[0] == before[0]  # the oracle's claim, byte for byte


PROBES = ["Name the primary colors.", "Sort: 3, 1, 2."]


def canary_table(prompts: list[str]) -> str:
    return f"\n[canary]\nprompts = {json.dumps(prompts)}\n"


def canary_model(answers: dict[str, str]) -> dict[str, Any]:
    return {"model": "scripted:m", "params": {"responses": responses(30, CASES30) | answers}}


def test_a_new_probe_set_rebaselines_then_real_drift_is_drift(
    runner: CliRunner, repo: Path
) -> None:
    budgets = {"target_usd": 0.01, "canary_usd": 0.01, "max_total_usd": 5.0}
    old = {PROBES[0]: "red, yellow, blue", PROBES[1]: "1, 2, 3", "Spell cat.": "c-a-t"}
    spec = spec30(repo / "a.toml", [canary_model(old)], budgets=budgets, extra=canary_table(PROBES))
    first = sweep(runner, spec, 1)
    (claim,) = first["claims"]

    # The user edits the probes; the model is the same.
    edited = [PROBES[0], "Spell cat."]
    spec_b = spec30(
        repo / "b.toml", [canary_model(old)], budgets=budgets, extra=canary_table(edited)
    )
    text = kb(runner, "canary", str(spec_b), "--no-commit").stdout
    assert "rebaselined (a new probe set: its baseline recorded, nothing flipped)" in text
    result = kb(runner, "canary", str(spec_b), "--json")
    (entry,) = json.loads(result.stdout)
    assert entry["status"] == "rebaselined" and entry["flipped"] == []
    assert KnowledgeStore(STORE).read().get(claim["id"]).status == "active"  # type: ignore[union-attr]
    assert (
        git(repo, "log", "-1", "--format=%s").strip()
        == "kb: canary: canary baselines (store v1, claims unchanged)"
    )
    again = json.loads(kb(runner, "canary", str(spec_b), "--json").stdout)
    assert again[0]["status"] == "no-drift"

    # Now the provider really changes the model under the new probe set.
    changed = old | {"Spell cat.": "C A T"}
    spec_c = spec30(
        repo / "c.toml", [canary_model(changed)], budgets=budgets, extra=canary_table(edited)
    )
    (drift,) = json.loads(kb(runner, "canary", str(spec_c), "--json").stdout)
    assert drift["status"] == "drift" and drift["flipped"] == [claim["id"]]
    assert KnowledgeStore(STORE).read().get(claim["id"]).status == "stale"  # type: ignore[union-attr]
    # The claim still records rulvar's fingerprint, untouched by the baselines file.
    baselines = json.loads((repo / "rulvar.models.canary.json").read_text())
    assert (
        claim["modelEpoch"]["canaryFingerprint"]
        not in baselines["subjects"]["scripted:m"]["current"]
    )


def test_the_power_warning_comes_at_validation(runner: CliRunner, isolated: Path) -> None:
    spec = write_spec(isolated / "s.toml", [model("m", 5)], gate="interval")  # 10 cases
    result = kb(runner, "sweep", str(spec), "--dry-run", "--observed-at", "2026-11-02T02:00:00Z")
    assert result.exit_code == 0
    assert (
        "warning: task class 'extraction' has 10 cases: the interval gate can never claim "
        "strength (a strength needs at least 16)"
    ) in result.stderr
