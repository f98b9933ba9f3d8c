"""The canary's sensitive tier (SPEC 13.4) through a real loopback HTTP server and litellm.

Two models on one OpenAI-compatible fake that samples its answers to three
border prompts from weighted tables (the request's seed makes each draw) and
answers everything else deterministically. ``kb canary --calibrate`` keeps
the three border prompts per model (deterministic prompts have no entropy),
writes them to a private probes file outside the repository and commits only
their ids and baseline counts. An unchanged night is steady; when the
provider silently changes one model's answer distribution, the next night
says ``canary: distribution shift`` with the probe and p-value, measures that
model's cells in full, flips nothing, and the exact fingerprint stays.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from kb.distribution_shift import LOGPROB_FLOOR, logprob_shift, shift_p_value
from kb.errors import ConfigError
from kb.sweep.calibrate import BORDER_PROMPTS
from kb.sweep.sensitive import probe_id, short_answer
from tests.cli_helpers import kb
from tests.fake_openai import fake_openai_server
from tests.sweep_helpers import toml_value

pytestmark = pytest.mark.usefixtures("initialized_store")

COIN, COLOUR, NUMBER = BORDER_PROMPTS[0], BORDER_PROMPTS[1], BORDER_PROMPTS[2]
LONGEST = max(BORDER_PROMPTS, key=len)  # kept for its length: a context cut shows there first
TABLES = {
    COIN: {"Heads": 0.5, "Tails.": 0.5},
    COLOUR: {"red": 0.4, "Blue": 0.4, "green": 0.2},
    NUMBER: {"3": 0.3, "7": 0.5, "5": 0.2},
}
SHIFTED = {COIN: {"Heads": 1.0}, COLOUR: {"green": 1.0}, NUMBER: {"7": 1.0}}


def spec(folder: Path, base: str, probes: Path, key: str = "sk-test") -> Path:
    lines = ["[sweep]", 'committer = "ci"', "max_retries = 0", "", "[budgets]"]
    lines += ["target_usd = 0.01", "canary_usd = 0.01", "max_total_usd = 50"]
    for name in ("watched", "control"):
        params = {"api_base": base, "api_key": key, "cost_usd": 0.0001}
        lines += ["", "[[models]]", f'model = "openai:{name}"', f"params = {toml_value(params)}"]
    lines += ["", "[canary]", 'prompts = ["Ping?", "Pong?"]', "", "[canary.sensitive]"]
    lines += [f"probes = {json.dumps(str(probes))}"]
    for i in range(30):
        lines += ["", "[[cases]]", f'name = "c{i:02d}"', 'task_class = "extraction"']
        lines += [f'prompt = "q{i}"', f'graders = [{{ kind = "golden", expected = "echo: q{i}" }}]']
    path = folder / "sweep.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def night(runner: CliRunner, path: Path, day: int, *extra: str) -> tuple[dict[str, Any], str]:
    result = kb(
        runner,
        "sweep",
        str(path),
        "--json",
        "--quiet",
        "--observed-at",
        f"2026-11-{day:02d}T02:00:00Z",
        *extra,
    )
    assert result.exit_code == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report, result.stderr


def canary_of(report: dict[str, Any], model: str) -> dict[str, Any]:
    (found,) = [c for c in report["canary"] if c["model"] == model]
    return found  # type: ignore[no-any-return]


def cell_of(report: dict[str, Any], model: str) -> dict[str, Any]:
    (found,) = [c for c in report["cells"] if c["model"] == model]
    return found  # type: ignore[no-any-return]


def test_calibrate_then_a_steady_night_then_a_silent_shift(
    runner: CliRunner, isolated: Path
) -> None:
    private = isolated.parent / "private-probes" / "probes.json"  # outside the repository
    with fake_openai_server() as (base, seen):
        seen.distributions.update(TABLES)
        path = spec(isolated, base, private)
        calibrated = kb(
            runner, "--as-of", "2026-11-27T12:00:00Z", "canary", "--calibrate", str(path)
        )
        assert calibrated.exit_code == 0, calibrated.stderr
        lines = calibrated.stdout.splitlines()
        assert len(lines) == 2 and all("kept 4 of" in line for line in lines), lines
        probes = json.loads(private.read_text())
        # three near-ties, and the longest candidate (one answer, but read for its logprobs)
        assert set(probes["models"]["openai:watched"]) == {COIN, COLOUR, NUMBER, LONGEST}
        baselines = (isolated / "rulvar.models.canary.json").read_text()
        assert COIN not in baselines and probe_id(COIN) in baselines  # ids, never prompts
        counts = json.loads(baselines)["subjects"]["openai:watched"]["sensitive"]
        assert sum(counts[probe_id(COIN)].values()) == 64  # 4 x 16 fresh samples

        first, stderr = night(runner, path, 28)
        for model in ("openai:watched", "openai:control"):
            tier = canary_of(first, model)["sensitive"]
            assert tier["status"] == "steady", tier
            assert len(tier["probes"]) == 4
        assert "distribution shift" not in stderr

        for prompt, table in SHIFTED.items():  # the provider changes one model, silently
            seen.distributions[f"watched|{prompt}"] = table
        html, summary = isolated / "night-2.html", isolated / "summary.md"
        second, stderr = night(runner, path, 29, "--html", str(html), "--summary", str(summary))
    watched = canary_of(second, "openai:watched")
    assert watched["status"] == "no-drift" and watched["flipped"] == []  # exact tier: unchanged
    assert watched["sensitive"]["status"] == "shift"
    assert watched["sensitive"]["pValue"] < 0.01 / 8  # 4 answer tests and 4 logprob tests
    assert "canary: distribution shift — openai:watched: probe " in stderr
    assert " of 4 (id " in stderr and COIN not in stderr  # by number and id, never the prompt
    assert COIN not in summary.read_text() and COIN not in json.dumps(second)
    assert "> **canary: distribution shift** — `openai:watched`: probe" in summary.read_text()
    assert "canary: distribution shift</strong> — openai:watched: probe" in html.read_text()
    site = isolated / "site"
    assert kb(runner, "--as-of", "2026-11-29T03:00:00Z", "site", str(site)).exit_code == 0
    assert "shift: openai:watched" in (site / "index.html").read_text()
    night_page = (site / "night-kb-sweep-2026-11-29T02_00_00.000Z.html").read_text()
    assert "canary: distribution shift</strong> — openai:watched: probe" in night_page
    assert canary_of(second, "openai:control")["sensitive"]["status"] == "steady"
    # the shifted model's cell is measured in full tonight; the control's settles
    assert cell_of(second, "openai:watched")["n"] == 30
    assert (
        "more while the canary saw its model's answers shift"
        in (cell_of(second, "openai:watched")["epoch"]["why"])
    )
    assert cell_of(second, "openai:control")["n"] < 30
    active = json.loads((isolated / "rulvar.models.json").read_text())["claims"]
    assert not [c for c in active if c["status"] == "stale"]  # a shift flips nothing
    (claim,) = [c["id"] for c in active if "openai:watched" in c["id"] and c["status"] == "active"]
    shown = " ".join(kb(runner, "--as-of", "2026-11-29T03:00:00Z", "show", claim).stdout.split())
    assert (
        "sensitive tier: 4 border probes calibrated (64 baseline answers each; "
        "logprob readings for 4, 16 each)" in shown
    )


def test_a_provider_echoing_the_key_never_puts_it_in_the_counts(
    runner: CliRunner, isolated: Path
) -> None:
    key = "sk-live-4f9a2c7e1b3d5f8a0c2e4b6d"
    private = isolated.parent / "private-probes" / "echo.json"
    with fake_openai_server() as (base, seen):
        seen.distributions.update(TABLES)
        seen.distributions[COIN] = {f"{key} heads": 0.5, "tails": 0.5}  # a model repeating it
        path = spec(isolated, base, private, key=key)
        calibrated = kb(
            runner, "--as-of", "2026-11-27T12:00:00Z", "canary", "--calibrate", str(path)
        )
        assert calibrated.exit_code == 0, calibrated.stderr
        first, _ = night(runner, path, 28)
    committed = (isolated / "rulvar.models.canary.json").read_text()
    assert key[:8] not in committed and key[:8] not in json.dumps(first)
    counts = json.loads(committed)["subjects"]["openai:watched"]["sensitive"][probe_id(COIN)]
    assert set(counts) == {"heads", "tails"}  # the key was cut before the first word was taken


@pytest.mark.parametrize("outage", ["junk", "every sample one error page"])
def test_an_outage_is_never_a_shift(runner: CliRunner, isolated: Path, outage: str) -> None:
    private = isolated.parent / "private-probes" / "outage.json"
    with fake_openai_server() as (base, seen):
        seen.distributions.update(TABLES)
        path = spec(isolated, base, private)
        calibrated = kb(
            runner, "--as-of", "2026-11-27T12:00:00Z", "canary", "--calibrate", str(path)
        )
        assert calibrated.exit_code == 0, calibrated.stderr
        page = "<html>502 Bad Gateway</html>"
        if outage == "junk":  # the exact probes get the provider's error page (HTTP 200)
            seen.outage = "junk"
        else:  # every sensitive sample gets it (an error page comes without logprobs)
            for prompt in [*TABLES, LONGEST]:
                seen.distributions[prompt] = {page: 1.0}
            seen.no_logprobs = True
        result = runner.invoke(
            __import__("kb.cli", fromlist=["cli"]).cli,
            ["sweep", str(path), "--json", "--quiet", "--observed-at", "2026-11-28T02:00:00Z"],
        )
    report = json.loads(result.stdout)
    tier = canary_of(report, "openai:watched")["sensitive"]
    assert tier["status"] == "incomplete", tier
    assert "distribution shift" not in result.stderr


def test_the_plan_and_the_envelope_count_every_sample(runner: CliRunner, isolated: Path) -> None:
    private = isolated / "probes.json"
    private.write_text(json.dumps({"format": 1, "models": {"openai:watched": [COIN, COLOUR]}}))
    with fake_openai_server() as (base, _):
        path = spec(isolated, base, private)
        dry = kb(runner, "sweep", str(path), "--dry-run")
    assert dry.exit_code == 0, dry.stderr
    said = " ".join(dry.stdout.split())
    # and 4 logprob readings per probe (openai takes logprobs)
    assert "60 target runs, 4 canary probes + 32 sensitive-tier samples + 8 logprob readings" in (
        said
    )
    assert "worst-case authorized spend: $1.0400" in said  # 104 runs x the $0.01 ceiling
    assert said.count("canary~openai:watched/") == 40  # each listed with its ceiling
    assert said.count("@lp#") == 8


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ('{"format": 1, "models": {"openai:watched": "not a list"}}', "not a probes file"),
        ('{"format": 9, "models": {}}', "upgrade kb"),
        ("{not json", "probes"),
    ],
)
def test_a_broken_probes_file_is_one_line_and_exit_2(
    runner: CliRunner, isolated: Path, content: str, said: str
) -> None:
    private = isolated / "probes.json"
    private.write_text(content)
    store = isolated / "rulvar.models.json"
    before = store.read_bytes()
    path = spec(isolated, "http://127.0.0.1:9/v1", private)
    result = runner.invoke(__import__("kb.cli", fromlist=["cli"]).cli, ["sweep", str(path)])
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    assert said in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert store.read_bytes() == before


def test_short_answers_are_first_words() -> None:
    assert short_answer("  Heads! It is heads.") == "heads"
    assert short_answer("Tails.") == "tails"
    assert short_answer("**Blue**") == "blue"
    assert short_answer("") == "(empty)"
    assert short_answer("...") == "(empty)"
    assert short_answer("don't know") == "don't"


answers = st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 30), max_size=6)


@settings(max_examples=60, deadline=None)
@given(answers, answers)
def test_the_p_value_is_a_probability_and_a_function_of_the_counts(
    baseline: dict[str, int], tonight: dict[str, int]
) -> None:
    p = shift_p_value(baseline, tonight, resamples=500)
    assert 0 < p <= 1
    assert shift_p_value(dict(reversed(list(baseline.items()))), tonight, resamples=500) == p


def test_the_same_distribution_is_not_a_shift_and_a_moved_one_is() -> None:
    base = Counter({"heads": 32, "tails": 32})
    assert shift_p_value(base, {"heads": 8, "tails": 8}) > 0.5
    assert shift_p_value(base, {"heads": 16}) < 0.001


def test_sensitive_baselines_merge_with_the_subject_and_stay_byte_identical_without(
    tmp_path: Path,
) -> None:
    from kb.store.baselines import (
        CanaryBaselines,
        SubjectBaselines,
        merge_baselines,
        parse_baselines,
    )

    def write(name: str, sensitive: dict[str, dict[str, int]] | None) -> Path:
        subject = SubjectBaselines({"p1": "f1"}, frozenset({"f1"}), sensitive or {})
        path = tmp_path / name
        path.write_bytes(CanaryBaselines({"p1": ("2+2?",)}, {"m": subject}).render())
        return path

    base, ours = write("base", None), write("ours", None)
    assert b"sensitive" not in base.read_bytes()  # a store without the tier: as before
    theirs = write("theirs", {"abc": {"heads": 30, "tails": 34}})  # calibrated on a branch
    assert merge_baselines(base, ours, theirs, "x.canary.json") == 1
    merged = parse_baselines(ours.read_bytes(), "ours").subjects["m"]
    assert merged.sensitive == {"abc": {"heads": 30, "tails": 34}}
    assert merged.baselines == {"p1": "f1"}


@pytest.mark.parametrize(
    ("field", "sensitive"),
    [
        ("sensitive", {"abc": {"heads": -1}}),
        ("sensitive", {"abc": {"heads": 1.5}}),
        ("sensitive", {"abc": ["heads"]}),
        ("sensitive", ["abc"]),
        ("sensitiveLogprobs", {"abc": [{"heads": "-0.7"}]}),
        ("sensitiveLogprobs", {"abc": {"heads": -0.7}}),
        ("sensitiveLogprobs", {"abc": [{"heads": True}]}),
        ("sensitiveLogprobs", ["abc"]),
        ("sensitiveLogprobs", {"abc": [{"heads": 3.0}]}),
    ],
    ids=[
        "negative",
        "fraction",
        "list of answers",
        "list of probes",
        "logprob a string",
        "readings not a list",
        "logprob a boolean",
        "readings a list of probes",
        "logprob above 0",
    ],
)
def test_malformed_sensitive_baselines_are_one_clear_line(
    runner: CliRunner, isolated: Path, field: str, sensitive: Any
) -> None:
    path = isolated / "rulvar.models.canary.json"
    document = {
        "probeSets": {},
        "subjects": {"openai:watched": {"baselines": {}, "current": [], field: sensitive}},
        "version": 1,
    }
    path.write_text(json.dumps(document))
    before = (isolated / "rulvar.models.json").read_bytes()
    private = isolated / "probes.json"
    private.write_text(json.dumps({"format": 1, "models": {"openai:watched": [COIN]}}))
    with fake_openai_server() as (base, _):
        result = runner.invoke(
            __import__("kb.cli", fromlist=["cli"]).cli,
            ["sweep", str(spec(isolated, base, private)), "--quiet"],
        )
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "rulvar.models.canary.json" in lines[0], lines
    assert "not a canary baselines file" in lines[0]
    assert (isolated / "rulvar.models.json").read_bytes() == before


@pytest.mark.parametrize("commit", [True, False])
def test_calibrate_refuses_a_malformed_baselines_file_before_any_call(
    runner: CliRunner, isolated: Path, commit: bool
) -> None:
    path = isolated / "rulvar.models.canary.json"
    document = {
        "probeSets": {},
        "subjects": {"openai:watched": {"baselines": {}, "current": [], "sensitive": ["x"]}},
        "version": 1,
    }
    path.write_text(json.dumps(document))
    before = (isolated / "rulvar.models.json").read_bytes(), path.read_bytes()
    with fake_openai_server() as (base, seen):
        calibrate = ["canary", "--calibrate", str(spec(isolated, base, isolated / "p.json"))]
        result = kb(runner, *calibrate, *([] if commit else ["--no-commit"]))
        asked = len(seen.requests)
    assert result.exit_code == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a canary baselines file" in lines[0], lines
    assert asked == 0  # nothing paid for
    assert ((isolated / "rulvar.models.json").read_bytes(), path.read_bytes()) == before


def test_calibrate_without_a_sensitive_section_is_one_line_before_any_call(
    runner: CliRunner, isolated: Path
) -> None:
    path = spec(isolated, "http://127.0.0.1:9/v1", isolated / "p.json")
    text = path.read_text()
    path.write_text(text[: text.index("[canary.sensitive]")] + text[text.index("[[cases]]") :])
    result = runner.invoke(
        __import__("kb.cli", fromlist=["cli"]).cli, ["canary", "--calibrate", str(path)]
    )
    assert result.exit_code == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f'Error: {path}: no [sensitive] in the canary: add probes = "PATH" to calibrate'
    ]


# -- logprob readings ------------------------------------------------------------------------


def calibrated(runner: CliRunner, isolated: Path, base: str, name: str) -> Path:
    path = spec(isolated, base, isolated.parent / "private-probes" / f"{name}.json")
    done = kb(runner, "--as-of", "2026-11-27T12:00:00Z", "canary", "--calibrate", str(path))
    assert done.exit_code == 0, done.stderr
    assert all("logprob readings for 4" in line for line in done.stdout.splitlines())
    return path


def test_a_shift_only_the_logprobs_see_is_caught(runner: CliRunner, isolated: Path) -> None:
    """The coin leans 60/40 instead of 50/50: 16 samples rarely show it, the readings do."""
    with fake_openai_server() as (base, seen):
        seen.distributions.update(TABLES)
        path = calibrated(runner, isolated, base, "lean")
        baselines = json.loads((isolated / "rulvar.models.canary.json").read_text())
        readings = baselines["subjects"]["openai:watched"]["sensitiveLogprobs"]
        assert len(readings[probe_id(COIN)]) == 16
        assert readings[probe_id(COIN)][0] == {"Heads": -0.6931, "Tails.": -0.6931}
        first, stderr = night(runner, path, 28)
        steady = canary_of(first, "openai:watched")["sensitive"]
        assert steady["status"] == "steady" and "distribution shift" not in stderr
        assert all(p["logprobPValue"] == 1.0 for p in steady["probes"])  # nothing moved
        assert "steady over 8 tests of 4 probes" in steady["line"]
        seen.distributions[f"watched|{COIN}"] = {"Heads": 0.6, "Tails.": 0.4}
        second, stderr = night(runner, path, 29)
    tier = canary_of(second, "openai:watched")["sensitive"]
    assert tier["status"] == "shift", tier
    assert tier["probe"] == probe_id(COIN)
    (coin,) = [p for p in tier["probes"] if p["probe"] == probe_id(COIN)]
    assert coin["logprobPValue"] == pytest.approx(1 / 4845)  # the one split that separates them
    assert coin["logprobDistance"] == pytest.approx(0.1, abs=1e-3)
    assert tier["pValue"] == coin["logprobPValue"]
    assert "its top-2 logprobs moved 0.100, p = 0.00021" in tier["line"]
    assert "canary: distribution shift — openai:watched: probe" in stderr
    assert canary_of(second, "openai:control")["sensitive"]["status"] == "steady"
    assert cell_of(second, "openai:watched")["n"] == 30  # escalated, as an answer shift does


def test_a_provider_that_stops_giving_logprobs_is_incomplete_not_a_shift(
    runner: CliRunner, isolated: Path
) -> None:
    with fake_openai_server() as (base, seen):
        seen.distributions.update(TABLES)
        path = calibrated(runner, isolated, base, "dropped")
        seen.no_logprobs = True
        report, stderr = night(runner, path, 28)
    tier = canary_of(report, "openai:watched")["sensitive"]
    assert tier["status"] == "incomplete", tier
    assert "a logprob reading came back without logprobs" in tier["line"]
    assert "distribution shift" not in stderr


def test_logprob_readings_replay_from_a_cassette_and_keep_no_key(
    runner: CliRunner, isolated: Path
) -> None:
    key = "sk-live-9e8d7c6b5a4f3e2d1c0b"
    with fake_openai_server() as (base, seen):
        seen.distributions.update(TABLES)
        seen.distributions[COIN] = {f"{key} heads": 0.5, "tails": 0.5}  # a token with the key
        path = spec(isolated, base, isolated.parent / "private-probes" / "cassette.json", key=key)
        done = kb(runner, "--as-of", "2026-11-27T12:00:00Z", "canary", "--calibrate", str(path))
        assert done.exit_code == 0, done.stderr
        recorded, _ = night(runner, path, 28, "--record", "c.jsonl", "--no-commit")
    cassette = (isolated / "c.jsonl").read_text()
    assert key[:8] not in cassette and '"topLogprobs"' in cassette
    assert key[:8] not in (isolated / "rulvar.models.canary.json").read_text()
    replayed, _ = night(runner, path, 28, "--replay", "c.jsonl", "--no-commit")
    for model in ("openai:watched", "openai:control"):
        assert canary_of(replayed, model)["sensitive"] == canary_of(recorded, model)["sensitive"]
    coin = [
        p
        for p in canary_of(replayed, "openai:watched")["sensitive"]["probes"]
        if p["probe"] == probe_id(COIN)
    ]
    assert coin[0]["logprobPValue"] == 1.0  # the cut token still matches its cut baseline


tokens = st.sampled_from(["a", "b", " the", "7", "(empty)"])
readings = st.lists(
    st.dictionaries(tokens, st.floats(min_value=-12, max_value=0), min_size=1, max_size=4),
    min_size=1,
    max_size=12,
)


@settings(max_examples=80, deadline=None)
@given(readings, readings)
def test_the_logprob_p_value_is_a_probability_the_order_of_readings_does_not_change(
    baseline: list[dict[str, float]], tonight: list[dict[str, float]]
) -> None:
    p, distance = logprob_shift(baseline, tonight)
    assert 0 < p <= 1 and 0 <= distance <= 1 + 1e-9
    assert logprob_shift(list(reversed(baseline)), list(reversed(tonight))) == pytest.approx(
        (p, distance)
    )
    if distance <= LOGPROB_FLOOR:
        assert p == 1.0
    assert logprob_shift(baseline, baseline[: len(tonight)] or baseline)[0] <= 1.0


def test_a_deterministic_server_that_moved_gives_the_smallest_p_and_one_that_did_not_gives_1() -> (
    None
):
    base = [{"The": -1.5642, "A": -2.0569, "One": -2.8513}] * 16
    same = logprob_shift(base, [{"The": -1.5642, "A": -2.0569, "One": -2.8513}] * 4)
    assert same == (1.0, pytest.approx(0.0, abs=1e-12))
    p, distance = logprob_shift(base, [{"The": -1.2, "A": -2.5, "One": -2.85}] * 4)
    assert p == pytest.approx(1 / 4845) and distance > LOGPROB_FLOOR
    # a jitter under the floor is never a shift, however consistent
    assert logprob_shift(base, [{"The": -1.56, "A": -2.06, "One": -2.85}] * 4)[0] == 1.0
    # readings that jitter as much tonight as in the baseline are not a shift either
    noisy = [{"The": -1.0 - 0.1 * (k % 5), "A": -2.0 + 0.1 * (k % 3)} for k in range(20)]
    assert logprob_shift(noisy[:16], noisy[16:])[0] > 0.01
    # past MAX_SPLITS the splits are sampled: still valid, never 0, the same every time
    many = logprob_shift(base * 2, [{"The": -1.2, "A": -2.5}] * 8)
    assert many == logprob_shift(base * 2, [{"The": -1.2, "A": -2.5}] * 8)
    assert 0 < many[0] < 1e-3


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"logprobs": None}, None),
        ({"logprobs": {"content": []}}, None),
        (
            {"logprobs": {"content": [{"top_logprobs": [{"token": "a", "logprob": -0.1}]}]}},
            ({"a": -0.1},),
        ),
        (  # non-finite, boolean and string log-probabilities are dropped, not turned into numbers
            {
                "logprobs": {
                    "content": [
                        {
                            "top_logprobs": [
                                {"token": "a", "logprob": float("-inf")},
                                {"token": "b", "logprob": True},
                                {"token": "c", "logprob": "-1"},
                                {"token": "d", "logprob": -2},
                            ]
                        }
                    ]
                }
            },
            ({"d": -2.0},),
        ),
    ],
)
def test_a_reply_s_top_logprobs_are_read_as_given_or_not_at_all(
    choice: dict[str, Any], expected: Any
) -> None:
    from kb.engine.adapter import top_logprobs

    assert top_logprobs(choice) == expected


def test_a_journaled_reading_resumes_with_its_logprobs_and_without_the_key(
    tmp_path: Path,
) -> None:
    """A stopped night's readings are reused on --resume exactly as read, the key cut out."""
    from kb.engine.journal import RunJournal, read_journal
    from kb.engine.runs import RunResult
    from tests.engine_helpers import plan, scripted

    key = "sk-live-0a1b2c3d4e5f6a7b8c9d"
    (run,) = plan(scripted(), ["Heads or tails?"])
    path = tmp_path / "night.journal.jsonl"
    journal = RunJournal.open(
        path,
        "kb-sweep-x",
        "2026-11-28T02:00:00.000Z",
        spec="s.toml",
        cut=lambda text: text.replace(key, "***"),
    )
    read = ({f"{key}heads": -0.5108, "tails": -0.9163}, {"!": -0.01})
    journal.record(
        RunResult(
            run.label,
            "canary",
            "scripted:demo",
            "ok",
            output="heads",
            request=run.request,
            logprobs=read,
        )
    )
    journal.close()
    assert key[:8] not in path.read_text()
    state = read_journal(path)
    assert state is not None
    (_, resumed) = state.settled[run.label]
    assert resumed.logprobs == ({"***heads": -0.5108, "tails": -0.9163}, {"!": -0.01})
    # a line whose logprobs are not numbers is a broken journal line, never a reading
    lines = path.read_text().splitlines()
    broken = lines[-1].replace("-0.9163", '"-0.9163"')
    path.write_text("\n".join([*lines, broken]) + "\n" + lines[-1] + "\n")
    with pytest.raises(ConfigError, match="not a journaled run: .*topLogprobs"):
        read_journal(path)


def test_a_broken_template_answering_everything_alike_is_a_shift_by_its_logprobs(
    runner: CliRunner, isolated: Path
) -> None:
    """Every probe gets the same text, as an error page would — but with the model's own
    logprobs, which moved: the exact tier cannot judge (incomplete), the readings can."""
    garbage = "018.com/2018/10/22/101111.html"
    with fake_openai_server() as (base, seen):
        seen.distributions.update(TABLES)
        path = calibrated(runner, isolated, base, "template")
        seen.outage, seen.junk_text = "junk", garbage  # the exact probes: one text for all
        for prompt in [*TABLES, LONGEST]:
            seen.distributions[f"watched|{prompt}"] = {garbage: 1.0}
        # (the cases get that text too: their cells are suspect, not measured)
        report, stderr = night(runner, path, 28, "--allow-incomplete")
        said = kb(runner, "--as-of", "2026-11-28T03:00:00Z", "canary", str(path), "--no-commit")
    # kb canary's own line says both: the exact tier cannot judge, the readings moved
    (line,) = [x for x in said.stdout.splitlines() if x.startswith("openai:watched")]
    assert "incomplete (every probe answered" in line and "; sensitive: distribution shift" in line
    watched = canary_of(report, "openai:watched")
    assert watched["status"] == "incomplete" and watched["flipped"] == []
    tier = watched["sensitive"]
    assert tier["status"] == "shift" and "logprobs moved" in tier["line"], tier
    assert all("pValue" not in p for p in tier["probes"])  # the answers are not evidence
    assert "canary: distribution shift — openai:watched" in stderr


CDN_PAGE = (
    "<html><head><title>503 Service Unavailable</title></head>"
    "<body>Service Unavailable. Request id {n}</body></html>"
)


def test_an_error_page_with_a_request_id_is_an_outage_not_a_drift(
    runner: CliRunner, isolated: Path
) -> None:
    """Each probe gets the page with its own request id: told by its title, it is one reply."""
    with fake_openai_server() as (base, seen):
        seen.distributions.update(TABLES)
        path = calibrated(runner, isolated, base, "cdn")
        first, _ = night(runner, path, 28)  # the exact baseline and a claim
        before = (isolated / "rulvar.models.canary.json").read_text()
        seen.outage, seen.junk_text = "junk", CDN_PAGE
        for prompt in [*TABLES, LONGEST]:  # the sensitive tier's prompts get it too
            seen.distributions[prompt] = {CDN_PAGE.replace("{n}", "7"): 1.0}
        seen.no_logprobs = True
        result = kb(
            runner,
            "canary",
            str(path),
            "--json",
            "--as-of",
            "2026-11-29T02:00:00Z",
        )
    (record,) = [r for r in json.loads(result.stdout) if r["model"] == "openai:watched"]
    assert record["status"] == "incomplete" and record["flipped"] == [], record
    assert "error page, not drift" in record["reason"]
    assert record["sensitive"]["status"] == "incomplete"
    after = json.loads((isolated / "rulvar.models.canary.json").read_text())
    assert after["subjects"]["openai:watched"] == json.loads(before)["subjects"]["openai:watched"]


def test_a_drift_drops_the_sensitive_baselines_and_says_how_to_make_new_ones(
    runner: CliRunner, isolated: Path
) -> None:
    with fake_openai_server() as (base, seen):
        seen.distributions.update(TABLES)
        path = calibrated(runner, isolated, base, "drift")
        night(runner, path, 28)
        seen.distributions["watched|Ping?"] = {"pong, changed": 1.0}  # the exact tier moves
        drifted, _ = night(runner, path, 29)
        assert canary_of(drifted, "openai:watched")["status"] == "drift"
        # the drift night's report itself says the tier must be calibrated again
        said = kb(runner, "report", "kb-sweep-2026-11-29T02:00:00.000Z").stdout
        assert "dropped with the drift: kb canary --calibrate SPEC" in " ".join(said.split())
        subject = json.loads((isolated / "rulvar.models.canary.json").read_text())["subjects"]
        assert "sensitive" not in subject["openai:watched"]  # not one night's 16 samples
        assert "sensitiveLogprobs" not in subject["openai:watched"]
        assert "sensitive" in subject["openai:control"]
        after, _ = night(runner, path, 30)
    tier = canary_of(after, "openai:watched")["sensitive"]
    assert tier["status"] == "uncalibrated"
    assert "dropped when the exact fingerprint drifted" in tier["line"]
    assert "kb canary --calibrate SPEC" in tier["line"]


def test_a_missing_probes_file_with_baselines_is_said_not_passed_over(
    runner: CliRunner, isolated: Path
) -> None:
    with fake_openai_server() as (base, seen):
        seen.distributions.update(TABLES)
        path = calibrated(runner, isolated, base, "gone")
        (isolated.parent / "private-probes" / "gone.json").unlink()  # a CI runner without it
        report, _ = night(runner, path, 28)
    line = canary_of(report, "openai:watched")["sensitive"]["line"]
    assert "gone.json is missing, but the baselines hold 4" in line, line
