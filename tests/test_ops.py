"""Ops, gates, the cap, and whole-batch validation."""

from __future__ import annotations

import pytest

from kb.errors import ConfigError
from kb.store.ops import (
    AddClaim,
    AppliedBatch,
    ArchiveClaim,
    EvalCommitterGate,
    HumanGate,
    MarkStale,
    Op,
    SupersedeClaim,
    apply_ops,
)
from kb.store.snapshot import EMPTY_SNAPSHOT, Snapshot
from kb.store.writing import render_store
from tests.factories import GATE, HUMAN, add, eval_claim, human_claim


def apply(snapshot: Snapshot, *ops: Op) -> AppliedBatch:
    return apply_ops(snapshot, list(ops))


def refused(snapshot: Snapshot, *ops: Op) -> tuple[str, ...]:
    with pytest.raises(ConfigError) as caught:
        apply_ops(snapshot, list(ops))
    return caught.value.issues


def base() -> Snapshot:
    return apply(EMPTY_SNAPSHOT, add(eval_claim("c1"))).snapshot


def test_add_bumps_version_and_appends() -> None:
    batch = apply(base(), add(eval_claim("c2")))
    assert batch.snapshot.version == 2
    assert [c.id for c in batch.snapshot.claims] == ["c1", "c2"]
    assert batch.counts.describe() == "+1 claim"


def test_add_refuses_existing_id_also_within_the_batch() -> None:
    assert refused(base(), add(eval_claim("c1"))) == ("ops[0]: claim id 'c1' already exists",)
    issues = refused(EMPTY_SNAPSHOT, add(eval_claim("x")), add(eval_claim("x")))
    assert issues == ("ops[1]: claim id 'x' already exists",)


def test_new_claims_must_be_active_and_expire_after_observation() -> None:
    issues = refused(
        EMPTY_SNAPSHOT,
        add(eval_claim("x", status="stale")),
        add(eval_claim("y", expiresAt="2026-07-01T00:00:00.000Z")),
    )
    assert issues == (
        "ops[0]: a new claim must be active, not 'stale'",
        "ops[1]: expiresAt must be after observedAt",
    )


def test_eval_committer_gate_rules() -> None:
    note = human_claim("n")
    issues = refused(EMPTY_SNAPSHOT, AddClaim(note, GATE))
    assert "ops[0]: eval-committer gate only admits eval-measured claims" in issues
    assert "ops[0]: eval-committer gate needs author.kind 'eval-pipeline'" in issues
    assert "ops[0]: eval-committer gate needs a metrics block" in issues
    empty = EvalCommitterGate(committer_id="", report_id="")
    issues = refused(EMPTY_SNAPSHOT, AddClaim(eval_claim("x"), empty))
    assert issues == (
        "ops[0]: eval-committer gate needs a committerId",
        "ops[0]: eval-committer gate needs a reportId",
    )


def test_human_gate_rules() -> None:
    issues = refused(EMPTY_SNAPSHOT, AddClaim(eval_claim("x"), HUMAN))
    assert "ops[0]: human gate only admits human-editorial claims" in issues
    assert "ops[0]: human gate refuses a metrics block" in issues
    no_attribution = HumanGate(approver="", at="2026-07-01", ruled_out=())
    issues = refused(EMPTY_SNAPSHOT, AddClaim(human_claim("n"), no_attribution))
    assert issues[0] == "ops[0]: human gate needs an approver"
    assert issues[1].startswith("ops[0]: human gate needs attribution.ruledOut")
    bogus = HumanGate(approver="a", at="x", ruled_out=("vibes",))  # type: ignore[arg-type]
    assert refused(EMPTY_SNAPSHOT, AddClaim(human_claim("n"), bogus))[0].startswith(
        "ops[0]: ruledOut value 'vibes'"
    )
    robot_note = human_claim("n", author={"kind": "eval-pipeline", "id": "ci"})
    assert refused(EMPTY_SNAPSHOT, AddClaim(robot_note, HUMAN)) == (
        "ops[0]: human gate needs author.kind 'human'",
    )


def test_supersede_replaces_and_links() -> None:
    batch = apply(base(), SupersedeClaim("c1", eval_claim("c2"), GATE))
    old, new = batch.snapshot.claims
    assert old.status == "superseded" and new.supersedes == "c1"
    assert list(batch.snapshot.wire[1])[-1] == "supersedes"  # appended last, as rulvar writes it
    assert batch.counts.describe() == "+1 claim, 1 superseded"


def test_supersede_only_from_active_or_stale() -> None:
    snapshot = apply(base(), ArchiveClaim("c1", "rejected")).snapshot
    assert refused(snapshot, SupersedeClaim("c1", eval_claim("c2"), GATE)) == (
        "ops[0]: claim 'c1' is archived; only an active or stale claim can be superseded",
    )
    assert refused(base(), SupersedeClaim("zz", eval_claim("c2"), GATE)) == (
        "ops[0]: no claim 'zz' to supersede",
    )
    stale = apply(base(), MarkStale("c1")).snapshot
    assert apply(stale, SupersedeClaim("c1", eval_claim("c2"), GATE)).snapshot.claims[0].status == (
        "superseded"
    )


def test_archive_keeps_the_claim_and_refuses_terminal_ones() -> None:
    batch = apply(base(), ArchiveClaim("c1", "falsified"))
    assert batch.snapshot.claims[0].status == "archived"
    assert batch.counts.describe() == "1 falsified"
    assert refused(batch.snapshot, ArchiveClaim("c1", "stale")) == (
        "ops[0]: claim 'c1' is already archived",
    )
    assert refused(base(), ArchiveClaim("c1", "bored"))[0].startswith(  # type: ignore[arg-type]
        "ops[0]: archive reason 'bored'"
    )


def test_mark_stale_is_idempotent_and_never_revives() -> None:
    once = apply(base(), MarkStale("c1"))
    assert once.snapshot.claims[0].status == "stale" and once.counts.staled == 1
    twice = apply(once.snapshot, MarkStale("c1"))
    assert twice.snapshot.claims[0].status == "stale" and twice.counts.staled == 0
    archived = apply(base(), ArchiveClaim("c1", "rejected")).snapshot
    assert apply(archived, MarkStale("c1")).snapshot.claims[0].status == "archived"
    assert refused(base(), MarkStale("nope")) == ("ops[0]: no claim 'nope' to mark stale",)


def test_status_change_keeps_key_order_so_the_diff_is_one_line() -> None:
    before = render_store(base()).splitlines()
    after = render_store(apply(base(), MarkStale("c1")).snapshot).splitlines()
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert [b for _, b in changed if "status" in b] == ['      "status": "stale",']
    assert all(("version" in a) or ("hash" in a) or ("status" in a) for a, _ in changed)


def test_cap_of_eight_active_claims_per_model_and_task_class() -> None:
    ops = [add(eval_claim(f"c{i}", subject={"model": "a:m", "effort": f"e{i}"})) for i in range(8)]
    full = apply(EMPTY_SNAPSHOT, *ops).snapshot
    issues = refused(full, add(eval_claim("c9", subject={"model": "a:m"})))
    assert issues == (
        "cap: 9 active claims for (a:m, extraction) exceed the cap of 8; "
        "archive or supersede older ones in the same batch",
    )
    # Retiring one in the same batch makes room; another task class is its own pair.
    apply(full, ArchiveClaim("c0", "stale"), add(eval_claim("c9", subject={"model": "a:m"})))
    apply(full, add(eval_claim("c9", subject={"model": "a:m"}, taskClass="planning")))


def test_the_whole_batch_is_refused_with_every_issue() -> None:
    issues = refused(
        base(),
        add(eval_claim("c1")),
        ArchiveClaim("missing", "stale"),
        MarkStale("also-missing"),
        add(eval_claim("ok")),
    )
    assert len(issues) == 3
    assert [issue[:6] for issue in issues] == ["ops[0]", "ops[1]", "ops[2]"]
