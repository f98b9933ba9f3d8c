"""Knowledge that follows the model (SPEC 12.2), through the real ``kb sweep``.

Scripted models on a pool of 60 cases under the interval gate: the epoch
pools nights by case, a settled cell runs a rotating sample, each epoch
start (first, a changed suite, a canary drift, a detector alarm,
``--new-epoch``) is exercised, and the epochs file merges and keeps its
evidence through ``kb compact``.

Most of these tests run ``sampling = "full"`` (every case of the pool every
night, under the nightly rule's detectors) so their epochs are exact; the
ones about what a settled night runs use ``sampling = "adaptive"``. v3's
rule and its confirm passes left kb in v5 (SPEC 14.2); the nightly rule's
sampling and detectors are tested in ``tests/test_nightly.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kb.store.epochs import read_epochs
from kb.store.manifests import manifest_path, parse_manifest
from kb.store.validation import parse_store
from tests.cli_helpers import kb, unwrapped
from tests.conftest import git
from tests.sweep_helpers import write_spec

pytestmark = pytest.mark.usefixtures("initialized_store")

STORE = "rulvar.models.json"
EPOCHS = "rulvar.models.epochs.json"
POOL = [(f"case-{i:02d}", f"Question {i}?", f"answer-{i}") for i in range(60)]
CELL = "scripted:m|extraction"
FULL = 'sampling = "full"'
ADAPTIVE = 'sampling = "adaptive"'


def model(
    wrong: set[int] | frozenset[int] = frozenset(),
    name: str = "m",
    probes: dict[str, str] | None = None,
    **params: Any,
) -> dict:
    answers = {
        prompt: (f"wrong-{i}" if i in wrong else answer)
        for i, (_, prompt, answer) in enumerate(POOL)
    } | (probes or {})
    return {
        "model": f"scripted:{name}",
        "params": {"responses": answers, "default": "a steady answer", **params},
    }


def spec(
    path: Path, *models: dict, cases: list = POOL, extra_sweep: str = "", extra: str = ""
) -> Path:
    budgets = {"target_usd": 0.01, "canary_usd": 0.01, "max_total_usd": 5.0}
    if "sampling" not in extra_sweep:
        extra_sweep = f"{FULL}\n{extra_sweep}"
    return write_spec(
        path,
        list(models),
        cases=cases,
        gate="interval",
        extra_sweep=extra_sweep,
        extra=extra,
        budgets=budgets,
    )


def night(runner: CliRunner, path: Path, day: int, *args: str, code: int = 0) -> dict[str, Any]:
    observed = f"2026-11-{day:02d}T02:00:00Z"
    result = kb(runner, "sweep", str(path), "--json", "--quiet", "--observed-at", observed, *args)
    assert result.exit_code == code, result.stderr
    return json.loads(result.stdout)


def claims(path: Path = Path(STORE)) -> list[Any]:
    return list(parse_store(path.read_bytes(), "store").claims)


def active() -> list[tuple[str, str]]:
    return [(c.subject["model"], c.polarity) for c in claims() if c.status == "active"]


# -- the epoch pools nights by case ---------------------------------------------------------


def test_an_epoch_pools_nights_by_case_and_a_settled_cell_runs_fewer(
    runner: CliRunner, isolated: Path
) -> None:
    path = spec(isolated / "s.toml", model(), extra_sweep=ADAPTIVE)
    first = night(runner, path, 1)
    (cell,) = first["cells"]
    # the nightly cold start: 35 of 60 all passed is clear of the bands (test_nightly)
    assert cell["plannedN"] == 35 and cell["epoch"]["ran"] == 35
    assert (
        cell["epoch"]["reason"] == "first"
        and "new epoch (first measurement)" in cell["epoch"]["why"]
    )
    second = night(runner, path, 2)
    (cell,) = second["cells"]
    # A held strength runs a rotating sample, not the pool, and says why.
    assert 0 < cell["epoch"]["ran"] < 60 and cell["plannedN"] == cell["epoch"]["ran"]
    assert cell["epoch"]["why"].startswith("the epoch has measured 35 of its 60 cases")
    assert len(second["runs"]) == cell["epoch"]["ran"]
    # n counts distinct cases: the cases run again tonight are not new cases.
    pooled = 35 + cell["epoch"]["ran"]
    assert cell["epoch"]["n"] == pooled and cell["epoch"]["nights"] == 2
    (claim,) = second["claims"]
    assert claim["metrics"]["n"] == pooled
    assert claim["statement"].startswith(
        f"sweep passRate 1.00 over {pooled} extraction cases and 2 nights"
    )
    # It cites the epoch through its manifest (SPEC 14.3), then tonight's night.
    manifest, tonight = claim["evidence"]
    pooled = parse_manifest(
        manifest_path(isolated / "kb-evidence", manifest["reportId"]).read_bytes(),
        "manifest",
        manifest["reportId"],
    )
    assert pooled.reports == (
        "kb-sweep-2026-11-01T02:00:00.000Z",
        "kb-sweep-2026-11-02T02:00:00.000Z",
    )
    assert len(pooled.nights[0].cases) == 35
    assert tonight["reportId"] == "kb-sweep-2026-11-02T02:00:00.000Z"
    assert tonight["caseIds"] == sorted(r["case"] for r in second["runs"])
    # The rotation moves on: the third night runs cases the second did not.
    third = night(runner, path, 3)
    assert set(third["claims"][0]["evidence"][1]["caseIds"]) - set(tonight["caseIds"])
    assert third["cells"][0]["epoch"]["why"].startswith("the epoch has measured")
    # once the epoch has covered its pool, a held strength runs its rotating sample
    fourth = night(runner, path, 4)
    assert fourth["cells"][0]["epoch"]["why"].startswith("settled (a held strength): 20 of 60")
    epoch = read_epochs(isolated / EPOCHS).cells[CELL]
    assert [n.report_id for n in epoch.nights][-1] == "kb-sweep-2026-11-04T02:00:00.000Z"
    ran = [len(r["runs"]) for r in (first, second, third, fourth)]
    assert sum(epoch.counts) == sum(ran) and ran[0] == 35


def test_a_case_measured_on_several_nights_contributes_its_mean(
    runner: CliRunner, isolated: Path
) -> None:
    night(runner, spec(isolated / "a.toml", model(extra_sweep := set())), 1)
    # Tonight every case is asked again (full sampling) and case 0 now fails: its mean is 0.5.
    full = spec(isolated / "b.toml", model({0}), extra_sweep='sampling = "full"')
    report = night(runner, full, 2)
    (cell,) = report["cells"]
    assert cell["n"] == 60 and cell["passRate"] == 59 / 60  # tonight
    assert cell["epoch"]["n"] == 60 and cell["epoch"]["passRate"] == pytest.approx(59.5 / 60)
    epoch = read_epochs(isolated / EPOCHS).cells[CELL]
    assert epoch.counts == (2,) * 60 and epoch.scores[0] == 1.0
    assert extra_sweep == set()


# -- each epoch start --------------------------------------------------------------------------


def test_a_changed_case_is_a_new_suite_not_a_changed_model(
    runner: CliRunner, isolated: Path
) -> None:
    night(runner, spec(isolated / "a.toml", model()), 1)
    (before,) = claims()
    edited = [*POOL[:-1], ("case-59", "Question 59, reworded?", "answer-59")]
    changed = model()
    changed["params"]["responses"]["Question 59, reworded?"] = "answer-59"
    report = night(runner, spec(isolated / "b.toml", changed, cases=edited), 2)
    (cell,) = report["cells"]
    assert cell["epoch"]["reason"] == "suite" and cell["epoch"]["ran"] == 60
    assert cell["epoch"]["nights"] == 1  # nothing pooled from the old suite
    (claim,) = report["claims"]
    assert claim["metrics"]["graderId"].startswith("eval-suite@")
    assert claim["metrics"]["graderId"] != before.metrics["graderId"]
    assert report["retired"] == [{"claimId": before.id, "action": "superseded", "by": claim["id"]}]


def test_new_epoch_flag_starts_over(runner: CliRunner, isolated: Path) -> None:
    path = spec(isolated / "s.toml", model())
    night(runner, path, 1)
    night(runner, path, 2)
    report = night(runner, path, 3, "--new-epoch")
    (cell,) = report["cells"]
    assert cell["epoch"]["reason"] == "manual" and cell["epoch"]["nights"] == 1
    assert cell["epoch"]["ran"] == 60 and "--new-epoch" in cell["epoch"]["why"]


def test_a_canary_drift_starts_a_new_epoch_and_the_claim_is_earned_from_it_alone(
    runner: CliRunner, isolated: Path
) -> None:
    canary = '\n[canary]\nprompts = ["Ping?", "Pong?"]\n'
    path = spec(
        isolated / "a.toml", model(probes={"Ping?": "pong v1", "Pong?": "ping v1"}), extra=canary
    )
    night(runner, path, 1)
    night(runner, path, 2)
    # The provider swaps the model: the canary answers differently, and 10 cases now fail.
    drifted = spec(
        isolated / "b.toml",
        model(set(range(10)), probes={"Ping?": "pong v2", "Pong?": "ping v2"}),
        extra=canary,
    )
    report = night(runner, drifted, 3)
    (cell,) = report["cells"]
    assert report["canary"][0]["status"] == "drift"
    assert cell["epoch"]["reason"] == "drift" and cell["epoch"]["nights"] == 1
    assert cell["epoch"]["ran"] == 60  # the new epoch measures the pool
    # 50/60 from the new epoch alone: not a strength (the old nights are not pooled).
    assert cell["epoch"]["passRate"] == 50 / 60 and cell["outcome"] == "none"
    assert ("scripted:m", "strength") not in active()


def test_a_detector_alarm_retires_the_strength_and_it_is_not_re_earned_that_night(
    runner: CliRunner, isolated: Path
) -> None:
    night(runner, spec(isolated / "a.toml", model()), 1)
    night(runner, spec(isolated / "b.toml", model()), 2)
    # The model silently gets half of the cases wrong (no canary to tell).
    summary, page = isolated / "s.md", isolated / "r.html"
    report = night(
        runner,
        spec(isolated / "c.toml", model(set(range(0, 60, 2)))),
        3,
        "--summary",
        str(summary),
        "--html",
        str(page),
    )
    alarm = "the change detector saw a drop in scripted:m · extraction"
    # CI sees it without a canary (the names inert, as everything a spec chose)
    marked = "the change detector saw a drop in `scripted:m` · `extraction`"
    assert f"> **Alarm:** {marked}" in summary.read_text()
    assert f"<strong>Alarm:</strong> {alarm}" in page.read_text()
    (cell,) = report["cells"]
    assert cell["epoch"]["alarm"] == "down" and cell["epoch"]["reason"] == "alarm"
    assert "ALARM" not in cell["epoch"]["why"]
    assert cell["outcome"] != "strength" and report["claims"] == []
    (retired,) = report["retired"]
    assert retired["action"] == "archived" and retired["reason"] == "falsified"
    assert active() == []
    # The new epoch began with tonight's runs only.
    epoch = read_epochs(isolated / EPOCHS).cells[CELL]
    assert epoch.start.reason == "alarm" and len(epoch.nights) == 1
    text = kb(runner, "report", report["reportId"]).stdout
    assert "ALARM: a drop (the strength is retired)" in unwrapped(text)


def test_a_rise_is_claimed_the_night_it_is_seen(runner: CliRunner, isolated: Path) -> None:
    weak = model(set(range(60)) - {0, 1, 2, 3, 4, 5})  # 6 of 60: a weakness
    night(runner, spec(isolated / "a.toml", weak), 1)
    second = night(runner, spec(isolated / "a.toml", weak), 2)
    assert second["cells"][0]["epoch"]["ran"] == 60  # sampling = full: the whole pool
    assert active() == [("scripted:m", "weakness")]
    # The model gets everything right: the rise detector alarms, the weakness is retired,
    # and the new epoch starts from tonight's 60 runs, enough to earn the strength at once.
    report = night(runner, spec(isolated / "b.toml", model()), 3)
    (cell,) = report["cells"]
    assert cell["epoch"]["alarm"] == "up" and cell["epoch"]["reason"] == "alarm"
    assert cell["epoch"]["ran"] == 60 and cell["epoch"]["n"] == 60
    assert "the detector alarmed (a rise)" in cell["epoch"]["why"]
    assert cell["outcome"] == "strength"
    assert active() == [("scripted:m", "strength")]
    (retired,) = report["retired"]
    assert retired["reason"] == "falsified"


def test_a_steady_model_never_alarms_over_many_nights(runner: CliRunner, isolated: Path) -> None:
    path = spec(isolated / "s.toml", model({3, 17, 41}))  # 0.95, steady
    outcomes = []
    for day in range(1, 15):
        report = night(runner, path, day)
        (cell,) = report["cells"]
        assert "alarm" not in cell["epoch"]
        outcomes.append(cell["outcome"])
    assert outcomes == ["strength"] * 14
    epoch = read_epochs(isolated / EPOCHS).cells[CELL]
    assert epoch.start.reason == "first" and len(epoch.nights) == 14


# -- no grandfathered beliefs ---------------------------------------------------------------


def test_a_claim_from_too_few_cases_is_re_decided_by_the_first_measurement(
    runner: CliRunner, isolated: Path
) -> None:
    small = POOL[:6]
    point = write_spec(isolated / "old.toml", [model(set(range(6)) - {0})], cases=small)
    old = kb(runner, "sweep", str(point), "--quiet", "--observed-at", "2026-11-01T02:00:00Z")
    assert old.exit_code == 0 and active() == [("scripted:m", "weakness")]  # 1/6 under point
    # Measured under the interval gate on the same six cases: [0.03, 0.56] is no weakness
    # (its upper bound is not <= 0.6 by much, but the point claim never met this gate).
    report = night(
        runner, spec(isolated / "new.toml", model(set(range(6)) - {0, 1, 2}), cases=small), 2
    )
    (cell,) = report["cells"]
    assert cell["outcome"] == "none"
    (retired,) = report["retired"]
    assert retired["reason"] == "stale" and active() == []


# -- the epochs file: merged, kept by compaction, shown, refused when broken -------------------


def test_two_branches_epochs_merge_cell_by_cell(runner: CliRunner, repo: Path) -> None:
    installed = kb(runner, "merge-driver", "--install")
    assert installed.exit_code == 0, installed.stderr
    night(runner, spec(repo / "s.toml", model(), model(name="n")), 1)
    git(repo, "checkout", "-q", "-b", "other")
    night(runner, spec(repo / "o.toml", model(name="n")), 2)
    git(repo, "checkout", "-q", "main")
    night(runner, spec(repo / "p.toml", model()), 3)
    merged = git(repo, "merge", "-q", "--no-edit", "other")
    assert "CONFLICT" not in merged
    epochs = read_epochs(repo / EPOCHS).cells
    assert [n.report_id[9:19] for n in epochs[CELL].nights] == ["2026-11-01", "2026-11-03"]
    assert [n.report_id[9:19] for n in epochs["scripted:n|extraction"].nights] == [
        "2026-11-01",
        "2026-11-02",
    ]
    assert kb(runner, "verify").exit_code == 0


def test_compaction_keeps_an_open_epochs_evidence(runner: CliRunner, repo: Path) -> None:
    middling = model(set(range(0, 60, 4)))  # 0.75: no claim, yet an epoch
    night(runner, spec(repo / "s.toml", middling), 1)
    night(runner, spec(repo / "s.toml", middling), 2)
    done = kb(runner, "--as-of", "2027-06-01", "compact", "--keep-days", "0")
    assert done.exit_code == 0, done.stderr
    for day in ("01", "02"):
        assert (repo / "kb-evidence" / f"kb-sweep-2026-11-{day}T02:00:00.000Z.jsonl").exists()


def test_kb_show_prints_the_claims_epoch(runner: CliRunner, isolated: Path) -> None:
    path = spec(isolated / "s.toml", model())
    night(runner, path, 1)
    report = night(runner, path, 2)
    shown = kb(runner, "--as-of", "2026-11-03", "show", report["claims"][0]["id"])
    assert shown.exit_code == 0, shown.stderr
    assert (
        "epoch: began 2026-11-01T02:00:00.000Z (first measurement, "
        "kb-sweep-2026-11-01T02:00:00.000Z); 2 nights, 60 of 60 cases" in unwrapped(shown.stdout)
    )


def test_a_broken_epochs_file_is_refused_and_nothing_moves(
    runner: CliRunner, isolated: Path
) -> None:
    path = spec(isolated / "s.toml", model())
    night(runner, path, 1)
    store = (isolated / STORE).read_bytes()
    (isolated / EPOCHS).write_text('{"format": 1, "cells": {"x": {"suite": 3}}}\n')
    result = kb(runner, "sweep", str(path), "--quiet", "--observed-at", "2026-11-02T02:00:00Z")
    assert result.exit_code == 2
    assert f"{isolated / EPOCHS}" in result.stderr and "cells.x" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert (isolated / STORE).read_bytes() == store


def test_the_point_gate_has_no_epochs(runner: CliRunner, isolated: Path) -> None:
    path = write_spec(isolated / "p.toml", [model()], cases=POOL)
    for day in (1, 2):
        result = kb(
            runner,
            "sweep",
            str(path),
            "--json",
            "--quiet",
            "--observed-at",
            f"2026-11-0{day}T02:00:00Z",
        )
        assert result.exit_code == 0, result.stderr
        report = json.loads(result.stdout)
        assert len(report["runs"]) == 60 and "epoch" not in report["cells"][0]
        assert report["claims"][0]["metrics"]["graderId"] == "eval-suite"
    assert not (isolated / EPOCHS).exists()


# -- hysteresis within an epoch, and only there (sweep_ops on a built cell) ------------------


def _cell_with_epoch(successes: float, n: int, started: str, grader: str) -> Any:
    from kb.engine.requests import ModelSpec
    from kb.store.epochs import CellEpoch, EpochNight, EpochStart
    from kb.sweep.cells import SweepCell
    from kb.sweep.sampling import CellEpochNight, CellSuite

    member = ModelSpec("openai:gpt-4o-mini", None, {})
    names = tuple(f"c{i:02d}" for i in range(n))
    whole = int(successes)
    scores = (1.0,) * whole + (successes - whole,) * (n > whole) + (0.0,) * (n - whole - 1)
    epoch = CellEpoch(
        suite=grader.removeprefix("eval-suite@").ljust(64, "0"),
        start=EpochStart(report_id="r0", observed_at=started, reason="first"),
        nights=(EpochNight(report_id="r1", observed_at="2026-07-02T00:00:00.000Z", cases=names),),
        cases=names,
        scores=scores[:n],
        counts=(1,) * n,
    )
    suite = CellSuite(member, "extraction", names, epoch.suite, epoch, None, "strength")
    night = CellEpochNight(suite, epoch, None, None, n, n, "settled")
    from kb.engine.runs import RunResult
    from kb.evals.suite import CaseVerdict

    def verdict(name: str) -> CaseVerdict:
        run = RunResult(f"target:m/{name}", "target", "m", "ok", "x", price_source="declared")
        return CaseVerdict(name, "extraction", run, (), (), False, True)

    return SweepCell(member, "extraction", tuple(map(verdict, names)), epoch=night)


@pytest.mark.parametrize(
    ("observed", "grader", "n", "kept"),
    [
        ("2026-07-01T00:00:00.000Z", "eval-suite@abcdefabcdefabcd", 30, True),  # its own epoch
        ("2026-06-01T00:00:00.000Z", "eval-suite@abcdefabcdefabcd", 30, False),  # before it
        ("2026-07-01T00:00:00.000Z", "eval-suite", 30, False),  # another gate's claim
        ("2026-07-01T00:00:00.000Z", "eval-suite@0000000000000000", 30, False),  # other suite
        ("2026-07-01T00:00:00.000Z", "eval-suite@abcdefabcdefabcd", 8, False),  # too few cases
    ],
)
def test_hysteresis_protects_only_a_claim_of_this_epoch(
    observed: str, grader: str, n: int, kept: bool
) -> None:
    from kb.store.ops import EvalCommitterGate
    from kb.store.snapshot import Snapshot
    from kb.sweep.falsify import sweep_ops
    from kb.sweep.gate import GatePolicy
    from tests.factories import eval_claim

    prior = eval_claim(
        "prior",
        observedAt=observed,
        metrics={"passRate": 1.0 if n == 8 else 29 / 30, "n": n, "graderId": grader},
    )
    snapshot = Snapshot(version=1, hash="0" * 64, claims=(prior,))
    # Tonight's pooled estimate, 28/30 ([0.79, 0.98]), is uncertain: no claim, no contradiction.
    cell = _cell_with_epoch(28, 30, "2026-06-15T00:00:00.000Z", "eval-suite@abcdefabcdefabcd")
    gate = EvalCommitterGate(committer_id="ci", report_id="r1")
    ops = sweep_ops(snapshot, [(cell, None)], gate, GatePolicy("interval", 0.9, 0.5, 0.1))
    assert [(op.claim_id, op.reason) for op in ops] == ([] if kept else [("prior", "stale")])


# -- newcomer findings: max_cases, a store the epochs file does not match, dirty files ------


def test_max_cases_cuts_the_pool_and_says_so(runner: CliRunner, isolated: Path) -> None:
    path = spec(isolated / "s.toml", model(), extra_sweep=f"{ADAPTIVE}\nmax_cases = 10")
    dry = kb(runner, "sweep", str(path), "--dry-run", "--observed-at", "2026-11-01T02:00:00Z")
    # the worst case, and the envelope, count only the pool's ten cases
    assert "planned (the worst case): 10 target runs" in dry.stdout + dry.stderr
    first = night(runner, path, 1)
    (cell,) = first["cells"]
    assert cell["epoch"]["pool"] == 10 and cell["epoch"]["ran"] == 10 and cell["n"] == 10
    assert cell["epoch"]["why"] == (
        "new epoch (first measurement): 10 of its 10 cases (max_cases = 10 of 60)"
    )
    second = night(runner, path, 2)
    # ten cases cannot earn a strength (10/10 is [0.72, 1.00]): no claim, 5 a night
    assert second["cells"][0]["epoch"]["ran"] == 5 and second["claims"] == []
    third = night(runner, path, 3)
    assert third["cells"][0]["epoch"]["n"] == 10  # the same ten cases, never the others


def test_an_epoch_the_store_does_not_match_starts_over(runner: CliRunner, repo: Path) -> None:
    """A merge that kept one side's store and the other side's epochs file."""
    path = spec(repo / "s.toml", model())
    night(runner, path, 1)
    night(runner, path, 2)
    stale_epochs = (repo / EPOCHS).read_bytes()
    # the model breaks: night 3 alarms, retires the strength and claims a weakness
    broken = spec(repo / "b.toml", model(set(range(0, 60)) - {0, 1, 2, 3, 4, 5}))
    night(runner, broken, 3)
    assert active() == [("scripted:m", "weakness")]
    # the epochs file goes back to before the alarm (as a merge taking the other side would)
    (repo / EPOCHS).write_bytes(stale_epochs)
    git(repo, "add", EPOCHS)
    git(repo, "commit", "-q", "-m", "merge: their epochs")
    report = night(runner, broken, 4)
    (cell,) = report["cells"]
    assert cell["epoch"]["reason"] == "resync" and cell["epoch"]["ran"] == 60
    assert "new epoch (the store holds a night the epochs file does not)" in cell["epoch"]["why"]
    # no false strength from the pre-alarm nights: the weakness stands
    assert active() == [("scripted:m", "weakness")]


def test_an_uncommitted_epochs_edit_is_refused_before_any_call(
    runner: CliRunner, repo: Path
) -> None:
    path = spec(repo / "s.toml", model())
    night(runner, path, 1)
    (repo / EPOCHS).write_text((repo / EPOCHS).read_text().replace('"cursor": 0', '"cursor": 1'))
    store_before = (repo / STORE).read_bytes()
    result = kb(runner, "sweep", str(path), "--quiet", "--observed-at", "2026-11-02T02:00:00Z")
    assert result.exit_code == 2
    assert "has changes git has not committed" in result.stderr
    assert "git restore" in result.stderr and "remove it" not in result.stderr
    assert not list((repo / "kb-evidence").glob("*2026-11-02*"))  # nothing ran
    assert (repo / STORE).read_bytes() == store_before


def test_new_epoch_under_the_point_gate_is_refused(runner: CliRunner, isolated: Path) -> None:
    path = write_spec(isolated / "p.toml", [model()], cases=POOL[:10])
    before = (isolated / STORE).read_bytes()
    result = kb(runner, "sweep", str(path), "--new-epoch", "--observed-at", "2026-11-01T02:00:00Z")
    assert result.exit_code == 2
    assert "--new-epoch: the point gate keeps no epochs" in result.stderr
    assert (isolated / STORE).read_bytes() == before


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["cells"].update({"nonsense": d["cells"].pop(CELL)}), "is not 'model|task"),
        (lambda d: d["cells"][CELL].update({"cursor": 9999}), "cursor must be from 0 to 59"),
        (lambda d: d["cells"][CELL].update({"cursor": -5}), "cursor must be from 0 to 59"),
        (lambda d: d["cells"][CELL].update({"suite": "zz"}), "suite must be 64 hex digits"),
        (
            lambda d: d["cells"][CELL]["nights"][0]["cases"].append("case-xx"),
            "nights name cases the epoch does not hold: case-xx",
        ),
    ],
)
def test_kb_verify_checks_the_epochs_file(
    runner: CliRunner, repo: Path, edit: Any, message: str
) -> None:
    night(runner, spec(repo / "s.toml", model()), 1)
    assert kb(runner, "verify").exit_code == 0
    data = json.loads((repo / EPOCHS).read_text())
    edit(data)
    (repo / EPOCHS).write_text(json.dumps(data, indent=2))
    result = kb(runner, "verify")
    assert result.exit_code == 2 and message in result.stderr


def test_the_human_cell_line_tells_tonight_from_the_epoch(
    runner: CliRunner, isolated: Path
) -> None:
    path = spec(isolated / "s.toml", model({3, 17, 41}), extra_sweep=ADAPTIVE)
    night(runner, path, 1)
    observed = "2026-11-02T02:00:00Z"
    text = kb(runner, "sweep", str(path), "--quiet", "--observed-at", observed).stdout
    lines = text.splitlines()
    at = lines.index("  scripted:m · extraction: strength")
    numbers = lines[at + 1]  # the cell's numbers on the line under its name
    # tonight's own cases (the epoch's rest of its pool), beside the pooled epoch
    assert re.match(r"    tonight \d+/(\d+)  epoch", numbers)
    assert "epoch 0.95 [" in numbers and "n=60" in numbers


def test_the_dry_run_says_what_the_first_pass_runs(runner: CliRunner, isolated: Path) -> None:
    path = spec(isolated / "s.toml", model(), extra_sweep=ADAPTIVE)
    night(runner, path, 1)
    observed = "2026-11-02T02:00:00Z"
    text = kb(runner, "sweep", str(path), "--dry-run", "--observed-at", observed).stderr
    text += kb(runner, "sweep", str(path), "--dry-run", "--observed-at", observed).stdout
    assert "planned (the worst case): 60 target runs" in text
    assert "epochs: 1 of 1 cells go on" in text
    assert "first pass: 20 target runs (then 5 more at a time where a detector is" in text
    fresh = kb(runner, "sweep", str(path), "--dry-run", "--new-epoch", "--observed-at", observed)
    assert "new: 1 (--new-epoch)" in fresh.stdout + fresh.stderr
    found = json.loads(
        kb(runner, "sweep", str(path), "--dry-run", "--json", "--observed-at", observed).stdout
    )
    assert found["epochs"] == [
        {"model": "scripted:m", "taskClass": "extraction", "restart": None, "firstPassRuns": 20}
    ]


def test_a_diff_over_several_nights_tells_each_claims_fate(runner: CliRunner, repo: Path) -> None:
    night(runner, spec(repo / "a.toml", model()), 1)
    night(runner, spec(repo / "a.toml", model()), 2)
    night(runner, spec(repo / "c.toml", model(set(range(0, 60, 2)))), 3)  # alarm: falsified
    found = json.loads(kb(runner, "diff", "HEAD~3", "HEAD", "--json").stdout)
    # night 1's claim was superseded by night 2's, which night 3 falsified: nothing live added
    assert found["added"] == []
    assert [(c["id"][9:19], c["reason"]) for c in found["archived"]] == [
        ("2026-11-02", "falsified")
    ]


def test_a_detector_alarm_is_told_on_stderr_as_a_drift_is(
    runner: CliRunner, isolated: Path
) -> None:
    night(runner, spec(isolated / "a.toml", model()), 1)
    night(runner, spec(isolated / "b.toml", model()), 2)
    dropped = spec(isolated / "c.toml", model(set(range(0, 60, 2))))
    result = kb(runner, "sweep", str(dropped), "--quiet", "--observed-at", "2026-11-03T02:00:00Z")
    assert result.exit_code == 0, result.stderr
    assert "alarm: the change detector saw a drop in scripted:m · extraction" in result.stderr
    assert len([line for line in result.stderr.splitlines() if line.startswith("alarm:")]) == 1
