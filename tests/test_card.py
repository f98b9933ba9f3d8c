"""The knowledge card: the verified layer's votes and clamp, notes, determinism, the budget."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kb.card import (
    CARD_BUDGET_CHARS,
    EDITORIAL_MARK,
    LaddersFile,
    compile_verified_layer,
    parse_ladders,
    render_card,
)
from kb.cli import cli
from kb.errors import ConfigError
from kb.store.filestore import CommitContext, KnowledgeStore
from kb.store.models import ModelClaim
from kb.store.ttl import parse_instant
from tests.factories import add, eval_claim, human_claim

AS_OF = parse_instant("2026-11-30")
RUNGS = [{"model": "p:cheap"}, {"model": "p:mid"}, {"model": "p:top", "effort": "high"}]


def ladders(start: int = 1, **extra: Any) -> LaddersFile:
    return parse_ladders(
        {"ladders": [{"name": "general", "rungs": RUNGS, "start_tier": start}], **extra}, "test"
    )


def measured(
    cid: str,
    model: str,
    polarity: str,
    task: str = "extraction",
    effort: str | None = None,
    **kw: Any,
) -> ModelClaim:
    subject = {"model": model, **({"effort": effort} if effort else {})}
    return eval_claim(
        cid,
        subject=subject,
        polarity=polarity,
        taskClass=task,
        observedAt=kw.pop("observedAt", "2026-11-20T00:00:00.000Z"),
        **kw,
    )


def recs(claims: list[ModelClaim], lad: LaddersFile | None = None) -> list[tuple[str, int]]:
    lad = lad or ladders()
    return [
        (r.task_class, r.recommended_tier)
        for r in compile_verified_layer(claims, lad.ladders, AS_OF, lad.floors)
    ]


def test_a_strength_below_the_start_votes_one_rung_cheaper() -> None:
    assert recs([measured("a", "p:cheap", "strength")]) == [("extraction", 0)]


def test_a_weakness_at_or_below_the_start_votes_one_rung_higher() -> None:
    assert recs([measured("a", "p:mid", "weakness")]) == [("extraction", 2)]
    assert recs([measured("a", "p:cheap", "weakness")]) == [("extraction", 2)]


def test_votes_that_do_not_count() -> None:
    # A strength at or above the start, a weakness above it: no vote.
    assert (
        recs(
            [measured("a", "p:mid", "strength"), measured("b", "p:top", "weakness", effort="high")]
        )
        == []
    )
    # The effort is part of the rung: p:top without effort is not on the ladder.
    assert recs([measured("a", "p:top", "weakness")], ladders(start=2)) == []


def test_ties_emit_nothing_and_the_net_moves_exactly_one_rung() -> None:
    tie = [measured("a", "p:cheap", "strength"), measured("b", "p:mid", "weakness")]
    assert recs(tie) == []
    many = [measured(f"w{i}", "p:cheap", "weakness", task="t0") for i in range(5)]
    assert recs(many, ladders(start=0)) == [("t0", 1)]  # five votes still move one rung


def test_the_clamp_keeps_the_start_when_there_is_no_rung_to_move_to() -> None:
    assert recs([measured("a", "p:top", "weakness", effort="high")], ladders(start=2)) == []


def test_only_active_unexpired_eval_measured_claims_vote() -> None:
    claims = [
        measured("stale", "p:cheap", "strength", status="stale"),
        measured("old", "p:cheap", "strength", observedAt="2026-01-01T00:00:00.000Z"),
        human_claim("note", subject={"model": "p:cheap"}, polarity="strength"),
    ]
    assert recs(claims) == []


def test_floors_stay_hard_constraints() -> None:
    floored = ladders(floors={"extraction": ["p:cheap"]})
    assert recs([measured("a", "p:cheap", "strength")], floored) == []
    assert (
        recs([measured("a", "p:mid", "weakness")], ladders(floors={"extraction": ["p:top"]})) == []
    )


def test_a_ladder_with_a_task_class_only_compiles_for_it() -> None:
    lad = parse_ladders(
        {"ladders": [{"name": "x", "rungs": RUNGS, "start_tier": 1, "task_class": "planning"}]}, "t"
    )
    claims = [
        measured("a", "p:cheap", "strength"),
        measured("b", "p:cheap", "strength", task="planning"),
    ]
    assert recs(claims, lad) == [("planning", 0)]


@pytest.mark.parametrize(
    "data",
    [
        {"ladders": [{"name": "x", "rungs": RUNGS, "start_tier": 3}]},
        {"ladders": [{"name": "x", "rungs": [], "start_tier": 0}]},
        {"ladders": [{"name": "x", "rungs": [{"model": "nocolon"}], "start_tier": 0}]},
        {"ladders": [{"name": "x", "rungs": RUNGS, "start_tier": 0, "typo": 1}]},
        {"ladders": [{"name": "x", "rungs": RUNGS, "start_tier": 0}] * 2},
        {"ladders": []},
    ],
)
def test_bad_ladders_are_config_errors(data: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        parse_ladders(data, "ladders.toml")


def test_the_card_is_tier_relative_deterministic_and_marks_notes() -> None:
    lad = ladders(profiles=[{"name": "fast", "model": "p:cheap", "task_class": "extraction"}])
    claims = [
        measured("a", "p:cheap", "strength"),
        measured("b", "p:cheap", "weakness", task="planning"),
        human_claim(
            "n1",
            subject={"model": "p:mid"},
            statement="slow on tables",
            observedAt="2026-11-25T00:00:00.000Z",
        ),
    ]
    text = render_card(claims, lad, AS_OF)
    assert text == render_card(list(claims), lad, AS_OF)  # byte-deterministic
    assert "p:cheap" not in text and "p:mid" not in text  # never names a model
    assert "- ladder general, extraction: start at tier 0 instead of tier 1" in text
    assert "- fast: strong extraction; weak planning" in text
    assert (
        f"ladder general tier 1, extraction: weakness — slow on tables ({EDITORIAL_MARK})" in text
    )


def test_weakness_wins_the_profile_fold() -> None:
    lad = ladders(profiles=[{"name": "fast", "model": "p:cheap", "task_class": "extraction"}])
    claims = [measured("s", "p:cheap", "strength"), measured("w", "p:cheap", "weakness")]
    assert "- fast: weak extraction" in render_card(claims, lad, AS_OF)


def test_the_card_fits_4096_characters_withholding_the_oldest_notes() -> None:
    notes = [
        human_claim(
            f"n{i:03d}",
            subject={"model": "p:mid"},
            observedAt=f"2026-11-{1 + i % 28:02d}T{i % 24:02d}:00:00.000Z",
            statement=f"note number {i} " + "x" * 120,
        )
        for i in range(80)
    ]
    text = render_card(notes, ladders(), AS_OF)
    assert len(text) <= CARD_BUDGET_CHARS
    assert "older editorial notes withheld for length]" in text
    assert "note number 27 " in text  # observed 2026-11-28, among the newest: kept
    assert "note number 0 " not in text  # observed 2026-11-01, the oldest: withheld


def test_kb_card_cli(runner: CliRunner, isolated: Path) -> None:
    KnowledgeStore("rulvar.models.json").commit(
        [add(measured("a", "p:cheap", "strength"))], 0, CommitContext("seed", "t")
    )
    (isolated / "ladders.toml").write_text(
        '[[ladders]]\nname = "general"\nstart_tier = 1\n'
        'rungs = [{ model = "p:cheap" }, { model = "p:mid" }]\n'
    )
    out = runner.invoke(
        cli, ["--as-of", "2026-11-30", "card", "ladders.toml"], catch_exceptions=False
    )
    assert out.exit_code == 0 and "start at tier 0 instead of tier 1" in out.stdout
    js = runner.invoke(
        cli, ["--as-of", "2026-11-30", "card", "ladders.toml", "--json"], catch_exceptions=False
    )
    assert js.stdout.startswith('[\n  {\n    "ladder": "general"')
    bad = runner.invoke(cli, ["card", "missing.toml"])
    assert bad.exit_code == 2 and "no such file" in bad.stderr


def test_notes_never_name_a_model() -> None:
    note = human_claim(
        "n",
        subject={"model": "p:mid"},
        observedAt="2026-11-25T00:00:00.000Z",
        statement="p:mid loses to p:top@high and openai:gpt-4o on tables",
    )
    text = render_card([note], ladders(), AS_OF)
    assert "p:mid" not in text and "p:top" not in text and "gpt-4o" not in text
    assert "[ladder general tier 1] loses to [ladder general tier 2] and [model]" in text
