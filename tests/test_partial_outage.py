"""A partial outage never retires a true strength; a resume asks an outage's answers again.

SPEC 13.1 "Partial outages". Reproduced as met on v3, through a real loopback
HTTP server and real litellm: a provider that starts answering HTTP 200 with
the same error page after request K left a cell of real answers and error
pages, scored in between; the detector alarmed and the true strength was
archived ``falsified`` and committed. And after an all-empty outage night
(correctly not committed) a ``--resume`` reused the journaled empty canary
probes, so every claim of the resumed night lost its canary fingerprint.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from kb.engine.runs import RunResult, Usage
from kb.evals.cases import Case, GoldenGrader
from kb.evals.suite import CaseVerdict
from kb.store.validation import parse_store
from kb.sweep.health import answer_health
from tests.cli_helpers import kb
from tests.fake_openai import Seen, fake_openai_server
from tests.test_never_lose import NIGHT_1, NIGHT_2, STORE, active, loopback_spec, state

ERROR_PAGE = "<html><body>Service temporarily unavailable</body></html>"


@pytest.fixture
def server() -> Iterator[tuple[str, Seen]]:
    with fake_openai_server() as found:
        yield found


def claims(repo: Path) -> list[dict[str, object]]:
    return json.loads((repo / STORE).read_text())["claims"]  # type: ignore[no-any-return]


def prompts_since(seen: Seen, since: int) -> list[str]:
    with seen.lock:
        return [r["body"]["messages"][-1]["content"] for r in seen.requests[since:]]


@pytest.mark.parametrize(
    ("cases", "real", "page"),
    [(30, 15, ERROR_PAGE), (20, 16, "<html>" + "x" * 30_000 + "</html>")],
    ids=["error page from request 16", "4 identical 30 KB pages in 20"],
)
def test_an_error_page_from_request_k_on_is_suspect_and_resumed_with_real_answers(
    runner: CliRunner,
    repo: Path,
    server: tuple[str, Seen],
    cases: int,
    real: int,
    page: str,
) -> None:
    base, seen = server
    assert kb(runner, "init").exit_code == 0
    spec = loopback_spec(repo / "s.toml", base, cases=cases, extra_sweep='sampling = "full"')
    assert kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1).exit_code == 0
    assert active(repo) == [("strength", "active")]
    before = state(repo)
    epochs_before = (repo / "rulvar.models.epochs.json").read_bytes()
    start = len(seen.requests)
    seen.outage, seen.outage_after, seen.junk_text = "junk", start + real, page
    night = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_2)
    assert night.exit_code == 1, night.stderr
    assert f"suspect: {cases - real} of {cases} replies were" in night.stderr
    # No claim, no retirement, nothing added to the epoch: the store is as it was.
    assert state(repo) == before
    assert (repo / "rulvar.models.epochs.json").read_bytes() == epochs_before
    assert active(repo) == [("strength", "active")]
    # The provider is back: the resume asks again exactly the replies that were pages.
    paged = {p for p in prompts_since(seen, start + real)}
    assert len(paged) == cases - real
    seen.outage = None
    resume_start = len(seen.requests)
    resumed = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_2, "--resume")
    assert resumed.exit_code == 0, resumed.stderr
    assert sorted(prompts_since(seen, resume_start)) == sorted(paged)
    live = [c for c in claims(repo) if c["status"] == "active"]
    assert [c["polarity"] for c in live] == ["strength"]
    assert str(live[0]["id"]).startswith("kb-sweep-2026-11-29T02:00:00.000Z/")
    parse_store((repo / STORE).read_bytes(), STORE)


def test_an_all_empty_canary_is_asked_again_on_resume(
    runner: CliRunner, repo: Path, server: tuple[str, Seen]
) -> None:
    base, seen = server
    assert kb(runner, "init").exit_code == 0
    spec = loopback_spec(repo / "s.toml", base, cases=20, canary=True)
    before = state(repo)
    seen.outage = "empty"
    night = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1)
    assert night.exit_code == 1
    assert state(repo) == before  # nothing committed from an outage
    seen.outage = None
    start = len(seen.requests)
    resumed = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1, "--resume")
    assert resumed.exit_code == 0, resumed.stderr
    asked = prompts_since(seen, start)
    assert asked.count("Ping?") == 1 and asked.count("Pong?") == 1  # probes asked again
    (claim,) = claims(repo)
    fingerprint = claim["modelEpoch"]["canaryFingerprint"]  # type: ignore[index]
    assert isinstance(fingerprint, str) and len(fingerprint) == 64


# -- the rule, on its own -------------------------------------------------------------------


def verdict(name: str, reply: str, expected: str) -> CaseVerdict:
    run = RunResult(
        label=f"target:m/{name}",
        kind="target",
        model="openai:m",
        status="ok",
        output=reply,
        usage=Usage(1, 1),
        cost_usd=0.0,
    )
    return CaseVerdict(name, "t", run, (), (), False, reply.strip() == expected)


def case(name: str, expected: str) -> Case:
    return Case(
        name=name,
        task_class="t",
        prompt=f"classify {name}",
        graders=[GoldenGrader(kind="golden", expected=expected)],
    )


def test_a_classifier_that_always_answers_one_label_is_measured_not_suspect() -> None:
    labels = {f"c{i}": label for i, label in enumerate(["positive"] * 10 + ["negative"] * 20)}
    cases = {name: case(name, label) for name, label in labels.items()}
    verdicts = [verdict(name, "positive", label) for name, label in labels.items()]
    assert answer_health(verdicts, cases) is None


@given(
    real=st.integers(min_value=0, max_value=40),
    pages=st.integers(min_value=0, max_value=40),
)
def test_one_failing_reply_is_suspect_exactly_at_three_prompts_and_a_tenth(
    real: int, pages: int
) -> None:
    names = [f"c{i}" for i in range(real + pages)]
    cases = {name: case(name, f"answer {name}") for name in names}
    verdicts = [verdict(n, f"answer {n}", f"answer {n}") for n in names[:real]]
    verdicts += [verdict(n, ERROR_PAGE, f"answer {n}") for n in names[real:]]
    found = answer_health(verdicts, cases)
    expect = pages >= 3 and pages >= 0.1 * (real + pages)
    assert (found is not None) == expect
    if found is not None:
        assert found.labels == {f"target:m/{n}" for n in names[real:]}


def test_error_pages_that_differ_only_in_their_body_are_one_reply() -> None:
    names = [f"c{i}" for i in range(24)]
    cases = {name: case(name, f"answer {name}") for name in names}
    page = "<!DOCTYPE html><html><head><title>503 Service Unavailable</title></head>"
    verdicts = [verdict(n, f"answer {n}", f"answer {n}") for n in names[:8]]
    verdicts += [
        verdict(n, f"{page}<body>Ray ID: {i:08x}{n}</body></html>", f"answer {n}")
        for i, n in enumerate(names[8:])
    ]
    found = answer_health(verdicts, cases)
    assert found is not None
    assert "16 of 24 replies were '<!DOCTYPE html><html><head><title>503 Service" in found.reason
    assert len(found.labels) == 16


def test_answers_that_contain_html_are_not_taken_for_one_error_page() -> None:
    """A model failing an HTML task writes pages; each is its own answer."""
    names = [f"c{i}" for i in range(20)]
    cases = {name: case(name, f"answer {name}") for name in names}
    verdicts = [verdict(n, f"answer {n}", f"answer {n}") for n in names[:16]]
    verdicts += [
        verdict(n, f"```html\n<html><body><h1>Page {n}</h1></body></html>\n```", f"answer {n}")
        for n in names[16:]
    ]
    assert answer_health(verdicts, cases) is None


def test_whole_page_answers_with_a_plain_title_are_each_their_own_answer() -> None:
    names = [f"c{i}" for i in range(20)]
    cases = {name: case(name, f"answer {name}") for name in names}
    verdicts = [verdict(n, f"answer {n}", f"answer {n}") for n in names[:16]]
    verdicts += [
        verdict(
            n,
            f"<!DOCTYPE html><html><head><title>Document</title></head><body>{n}</body></html>",
            f"answer {n}",
        )
        for n in names[16:]
    ]
    assert answer_health(verdicts, cases) is None
