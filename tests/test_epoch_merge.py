"""The epochs file merged three ways, night by night (SPEC 14.1 item 3).

Two writers that continued one epoch from a common base — two clones pushing
nights, two branches, a night rebased onto a store that moved — must end
with every night of both, case sums as if the nights had been committed one
after another, whichever side is "ours"; a first measurement never replaces
an epoch; a deliberate restart after the other side's nights stands.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from kb.store.baselines import (
    CanaryBaselines,
    SubjectBaselines,
    merge_baselines,
    merge_subject,
    read_baselines,
)
from kb.store.epochs import CellEpoch, EpochNight, EpochStart, merge_cell, read_epochs
from tests.cli_helpers import kb
from tests.conftest import git
from tests.sweep_helpers import write_spec

CASES = ("c0", "c1", "c2", "c3")
SUITE = "a" * 64

Night = tuple[int, dict[str, float]]
"""(day of the month, case → score that night)."""


def night_of(day: int, scores: dict[str, float]) -> EpochNight:
    return EpochNight(
        report_id=f"n{day:02d}",
        observed_at=f"2026-10-{day:02d}T02:00:00.000Z",
        cases=tuple(sorted(scores)),
        passes=sum(scores.values()),
    )


def epoch_of(start: int, reason: str, nights: list[Night]) -> CellEpoch:
    """An epoch begun on ``start`` (a day) that pooled ``nights`` in order."""
    scores = [0.0] * len(CASES)
    counts = [0] * len(CASES)
    for _, found in nights:
        for case, score in found.items():
            scores[CASES.index(case)] += score
            counts[CASES.index(case)] += 1
    ordered = sorted(nights, key=lambda n: n[0])
    return CellEpoch(
        suite=SUITE,
        start=EpochStart(
            report_id=f"n{start:02d}",
            observed_at=f"2026-10-{start:02d}T02:00:00.000Z",
            reason=reason,  # type: ignore[arg-type]
        ),
        nights=tuple(night_of(day, found) for day, found in ordered),
        cases=CASES,
        scores=tuple(scores),
        counts=tuple(counts),
    )


def summed(epoch: CellEpoch | None) -> tuple[tuple[str, ...], tuple[float, ...], tuple[int, ...]]:
    assert epoch is not None
    return epoch.reports, epoch.scores, epoch.counts


scores_st = st.dictionaries(
    st.sampled_from(CASES), st.sampled_from([0.0, 1.0]), min_size=1, max_size=len(CASES)
)


@st.composite
def two_writers(draw: st.DrawFn) -> tuple[list[Night], list[Night], list[Night]]:
    """A base's nights, then the nights each of two writers added (distinct days, any order)."""
    days = draw(st.lists(st.integers(2, 28), min_size=2, max_size=12, unique=True))
    base_count = draw(st.integers(0, len(days) - 1))
    base_days, rest = sorted(days)[:base_count], sorted(days)[base_count:]
    split = draw(st.lists(st.booleans(), min_size=len(rest), max_size=len(rest)))
    nights = {day: draw(scores_st) for day in days}
    mine = [(d, nights[d]) for d, side in zip(rest, split, strict=True) if side]
    theirs = [(d, nights[d]) for d, side in zip(rest, split, strict=True) if not side]
    return [(d, nights[d]) for d in base_days], mine, theirs


@given(two_writers())
def test_two_writers_of_one_epoch_keep_every_night_as_if_committed_in_order(
    found: tuple[list[Night], list[Night], list[Night]],
) -> None:
    base_nights, mine, theirs = found
    base = epoch_of(base_nights[0][0], "first", base_nights) if base_nights else None

    def written(added: list[Night]) -> CellEpoch | None:
        """A writer's epoch: the base's, continued; else its own first night began one."""
        nights = base_nights + added
        if not nights:
            return None
        first = base_nights[0][0] if base_nights else min(day for day, _ in added)
        return epoch_of(first, "first", nights)

    ours, others = written(mine), written(theirs)
    sequential = written(mine + theirs)
    for merged in (merge_cell(base, ours, others), merge_cell(base, others, ours)):
        assert summed(merged) == summed(sequential)
        assert merged is not None and sequential is not None
        assert merged.start == sequential.start


def test_a_first_measurement_never_replaces_an_epoch() -> None:
    # clone A's night 3 pooled into the remote's epoch; clone B, which knew of no epoch,
    # measured night 4 as a first night: both nights stay, in the epoch that began first
    remote = epoch_of(1, "first", [(1, {"c0": 1.0}), (3, {"c1": 1.0})])
    fresh = epoch_of(4, "first", [(4, {"c2": 0.0})])
    merged = merge_cell(None, fresh, remote)
    assert merged is not None and merged.reports == ("n01", "n03", "n04")
    assert merged.start.report_id == "n01" and merged.counts == (1, 1, 1, 0)


def test_two_first_nights_at_once_pool_into_the_earlier() -> None:
    one = epoch_of(5, "first", [(5, {"c0": 1.0, "c1": 1.0})])
    two = epoch_of(6, "first", [(6, {"c0": 0.0, "c2": 1.0})])
    for merged in (merge_cell(None, one, two), merge_cell(None, two, one)):
        assert merged is not None and merged.reports == ("n05", "n06")
        assert merged.start.report_id == "n05"
        assert merged.scores == (1.0, 1.0, 1.0, 0.0) and merged.counts == (2, 1, 1, 0)


def test_an_alarm_after_the_other_sides_nights_starts_a_new_epoch() -> None:
    base = epoch_of(1, "first", [(1, {"c0": 1.0})])
    theirs = epoch_of(1, "first", [(1, {"c0": 1.0}), (2, {"c1": 1.0})])
    alarm = epoch_of(3, "alarm", [(3, {"c0": 0.0})])
    merged = merge_cell(base, alarm, theirs)
    assert merged == alarm  # night 2 is older than the change: it stays in the old epoch


def test_an_older_nights_alarm_does_not_displace_newer_nights() -> None:
    base = epoch_of(1, "first", [(1, {"c0": 1.0})])
    theirs = epoch_of(1, "first", [(1, {"c0": 1.0}), (5, {"c1": 1.0})])
    late_alarm = epoch_of(3, "alarm", [(3, {"c0": 0.0})])  # committed after night 5
    assert merge_cell(base, late_alarm, theirs, rebasing=True) == theirs
    # two branches merged: both committed, in the order of their instants the alarm
    # came first, and night 5 belongs to the epoch it began
    merged = merge_cell(base, late_alarm, theirs)
    assert merged is not None and merged.start == late_alarm.start
    assert merged.reports == ("n03", "n05")


def test_nights_after_a_restart_join_the_new_epoch() -> None:
    base = epoch_of(1, "first", [(1, {"c0": 1.0})])
    drifted = epoch_of(2, "drift", [(2, {"c0": 0.0})])  # the remote: a drift at night 2
    ours = epoch_of(1, "first", [(1, {"c0": 1.0}), (4, {"c1": 0.0})])  # planned before it
    merged = merge_cell(base, ours, drifted)
    assert merged is not None and merged.start == drifted.start
    assert merged.reports == ("n02", "n04") and merged.counts == (1, 1, 0, 0)


def test_one_side_unchanged_takes_the_other_and_a_removed_epoch_keeps_the_others_data() -> None:
    base = epoch_of(1, "first", [(1, {"c0": 1.0})])
    more = epoch_of(1, "first", [(1, {"c0": 1.0}), (2, {"c1": 1.0})])
    assert merge_cell(base, base, more) == more
    assert merge_cell(base, more, base) == more
    assert merge_cell(base, None, base) is None  # the epoch ended and nobody added to it
    assert merge_cell(base, None, more) == more  # ended here, but another writer added a night


# -- the merge driver, kb verify and four clones: through git and the real CLI -----------------


def night_spec(path: Path) -> Path:
    """The interval gate (epochs) on 20 cases a scripted model answers right."""
    cases = [(f"c{i:02d}", f"Q{i}?", f"a{i}") for i in range(20)]
    model = {"model": "scripted:m", "params": {"responses": {q: a for _, q, a in cases}}}
    return write_spec(path, [model], cases=cases, gate="interval", extra_sweep='sampling = "full"')


def sweep_night(runner: CliRunner, spec: Path, day: int) -> None:
    observed = f"2026-11-{day:02d}T02:00:00Z"
    done = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", observed)
    assert done.exit_code == 0, done.stderr


def epoch_nights(repo: Path) -> list[str]:
    (epoch,) = read_epochs(repo / "rulvar.models.epochs.json").cells.values()
    return [night.report_id[9:19] for night in epoch.nights]


def test_merging_two_branches_keeps_both_branches_nights(repo: Path, runner: CliRunner) -> None:
    assert kb(runner, "init").exit_code == 0
    spec = night_spec(repo / "night.toml")
    git(repo, "add", "night.toml")
    git(repo, "commit", "-q", "-m", "spec")
    sweep_night(runner, spec, 1)
    git(repo, "checkout", "-q", "-b", "feature")
    sweep_night(runner, spec, 2)
    git(repo, "checkout", "-q", "main")
    sweep_night(runner, spec, 3)
    merged = subprocess.run(
        ["git", "merge", "--no-edit", "feature"], cwd=repo, capture_output=True, text=True
    )
    assert merged.returncode == 0, merged.stdout + merged.stderr
    # v4 kept the side that measured later: night 2 was gone from the epoch
    assert epoch_nights(repo) == ["2026-11-01", "2026-11-02", "2026-11-03"]
    (epoch,) = read_epochs(repo / "rulvar.models.epochs.json").cells.values()
    assert list(epoch.counts) == [3] * 20  # each case measured on each of the three nights
    verify = kb(runner, "verify")
    assert verify.exit_code == 0, verify.stderr


def test_kb_verify_fails_when_a_committed_night_was_dropped_from_the_epochs_file(
    repo: Path, runner: CliRunner
) -> None:
    assert kb(runner, "init").exit_code == 0
    spec = night_spec(repo / "night.toml")
    sweep_night(runner, spec, 1)
    first = (repo / "rulvar.models.epochs.json").read_bytes()
    sweep_night(runner, spec, 2)
    assert kb(runner, "verify").exit_code == 0
    # a writer that replaced the file with its own view (v4's concurrent pushes did)
    (epoch,) = read_epochs(repo / "rulvar.models.epochs.json").cells.values()
    assert epoch_nights(repo) == ["2026-11-01", "2026-11-02"]
    (repo / "rulvar.models.epochs.json").write_bytes(first)
    git(repo, "commit", "-q", "-am", "a writer's own view of the epochs")
    verify = kb(runner, "verify")
    assert verify.exit_code == 2
    said = " ".join(verify.stderr.split())
    assert "rulvar.models.epochs.json lost 1 night of scripted:m|extraction's epoch" in said
    assert "kb-sweep-2026-11-02T02:00:00.000Z" in said


def test_canary_baselines_merge_probe_by_probe(tmp_path: Path) -> None:
    def write(name: str, subject: SubjectBaselines) -> Path:
        path = tmp_path / name
        path.write_bytes(CanaryBaselines({"p1": ("2+2?",)}, {"m": subject}).render())
        return path

    base = SubjectBaselines({"p1": "f1"}, frozenset({"f1"}))
    ours = SubjectBaselines({"p1": "f1", "p2": "g1"}, frozenset({"f1", "g1"}))
    theirs = SubjectBaselines({"p1": "f1"}, frozenset({"f1"}), {"probe-a": {"yes": 9, "no": 7}})
    merged_at = write("ours", ours)
    merge_baselines(write("base", base), merged_at, write("theirs", theirs), "x.canary.json")
    subject = read_baselines(merged_at).subjects["m"]
    # v4 refused: the subject changed on both sides; each side changed another probe
    assert dict(subject.baselines) == {"p1": "f1", "p2": "g1"}
    assert subject.current == {"f1", "g1"}
    assert dict(subject.sensitive) == {"probe-a": {"yes": 9, "no": 7}}
    # a drift on one side drops the old fingerprint from current, whatever the other kept
    drifted = SubjectBaselines({"p1": "f2"}, frozenset({"f2"}))
    assert merge_subject(base, drifted, theirs) == SubjectBaselines(
        {"p1": "f2"}, frozenset({"f2"}), {"probe-a": {"yes": 9, "no": 7}}
    )
    with pytest.raises(ValueError, match="probe set p1"):
        merge_subject(base, drifted, SubjectBaselines({"p1": "f3"}, frozenset({"f3"})))


@pytest.mark.slow
def test_clones_pushing_nights_at_once_keep_every_night(tmp_path: Path) -> None:
    """The push drill at test size: first nights at once, then nights interleaved."""
    from bench.push_drill import drill

    at_once = drill(tmp_path / "at-once", clones=2, nights=1, first_nights_at_once=True)
    assert at_once.failures == [] and len(at_once.nights) == 2
    assert {cell: sorted(held) for cell, held in at_once.kept.items()} == {
        cell: at_once.nights for cell in at_once.kept
    }
    found = drill(tmp_path / "interleaved", clones=3, nights=3)
    assert found.failures == [] and len(found.nights) == 9
    for held in found.kept.values():
        assert sorted(held) == found.nights  # every night, in every cell's epoch
    assert found.dropping_commits == 0
    assert found.restarts == 0
    assert found.verify_code == 0, found.verify_said
