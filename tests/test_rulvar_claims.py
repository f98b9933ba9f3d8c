"""Under ``gate = "point"`` a sweep cell's claim is the one rulvar's own sweep writes.

``tests/data/rulvar_sweep_vectors.json`` was made by running rulvar's
``runSweepMatrix`` and file store with Node (``tests/js/make_sweep_vectors.mjs``,
how to run it in ``tests/js/RULVAR.md``): 1,324 cells over n = 1..40, several
bands, with and without effort. rulvar's claims carry no ``metrics.cost``; kb
adds the cell's cost, so the comparison leaves that one key out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kb.engine.requests import ModelSpec
from kb.engine.runs import RunResult
from kb.evals.suite import CaseVerdict
from kb.store.canonical import js_stringify
from kb.store.models import claim_to_wire
from kb.store.ttl import format_instant, parse_instant
from kb.sweep.cells import SweepCell, cell_claim
from kb.sweep.gate import GatePolicy

VECTORS = json.loads((Path(__file__).parent / "data" / "rulvar_sweep_vectors.json").read_text())


def cell_of(given: dict[str, Any]) -> SweepCell:
    member = ModelSpec(given["model"], given.get("effort"))
    cost = given["cost"] / given["n"]
    verdicts = tuple(
        CaseVerdict(
            name,
            given["taskClass"],
            RunResult(
                f"target:{member.key}/{name}", "target", member.key, "ok", "x", cost_usd=cost
            ),
            (),
            (),
            False,
            index < given["passed"],
        )
        for index, name in enumerate(given["caseIds"])
    )
    return SweepCell(member, given["taskClass"], verdicts)


def test_the_vectors_cover_what_they_claim_to() -> None:
    assert len(VECTORS) >= 1000
    assert {v["input"]["n"] for v in VECTORS} >= set(range(1, 41))
    assert any(v["claim"] is None for v in VECTORS) and any("effort" in v["input"] for v in VECTORS)


@pytest.mark.parametrize(
    "vector", VECTORS, ids=lambda v: f"{v['input']['passed']}/{v['input']['n']}"
)
def test_point_gate_claims_are_rulvars(vector: dict[str, Any]) -> None:
    given = vector["input"]
    claim = cell_claim(
        cell_of(given),
        gate=GatePolicy("point", given["strength"], given["weakness"]),
        report_id=given["reportId"],
        observed_at=parse_instant(given["observedAt"]),
        committer=given["committer"],
        canary_fingerprint=given.get("canaryFingerprint"),
    )
    if vector["claim"] is None:
        assert claim is None
        return
    assert claim is not None
    wire = claim_to_wire(claim)
    assert wire["metrics"].pop("cost") == pytest.approx(given["cost"])
    expected = dict(vector["claim"])
    # rulvar writes the observedAt string it was handed; kb takes the sweep instant
    # and always writes it as toISOString() does. The instant, and so expiresAt, agree.
    expected["observedAt"] = format_instant(parse_instant(given["observedAt"]))
    assert js_stringify(wire, indent=2) == js_stringify(expected, indent=2)
