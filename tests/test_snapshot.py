"""The read boundary and the written file: interop with rulvar, every malformed class."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import rfc8785

from kb.errors import ConfigError
from kb.store.canonical import claims_hash
from kb.store.snapshot import EMPTY_HASH
from kb.store.validation import parse_store
from kb.store.writing import render_store

RULVAR_FILE = Path(__file__).parent / "data" / "rulvar_store.json"


def store_text(claims: list[dict[str, Any]], **top: Any) -> str:
    document = {"version": 1, "hash": claims_hash(claims), "claims": claims}
    document.update(top)
    return json.dumps(document, indent=2)


def good_claim(**overrides: Any) -> dict[str, Any]:
    claim = json.loads(RULVAR_FILE.read_text())["claims"][0]
    claim.update(overrides)
    return claim


def test_reads_a_store_written_by_javascript() -> None:
    text = RULVAR_FILE.read_text()
    snapshot = parse_store(text, "rulvar")
    assert snapshot.version == 7
    assert [c.id for c in snapshot.claims][1] == "01JDNOTE0000000000000000"
    first = snapshot.claims[0]
    assert first.effort == "low" and first.metrics is not None
    assert first.metrics["passRate"] == 1.0
    assert snapshot.claims[1].statement.endswith("😕")
    assert {ev["kind"] for ev in snapshot.claims[1].evidence} == {"journal", "eval"}


def test_rewriting_a_javascript_store_changes_no_byte() -> None:
    text = RULVAR_FILE.read_text()
    assert render_store(parse_store(text, "rulvar")) == text


def test_kb_hash_equals_an_independent_jcs() -> None:
    snapshot = parse_store(RULVAR_FILE.read_text(), "rulvar")
    import hashlib

    independent = hashlib.sha256(rfc8785.dumps([dict(w) for w in snapshot.wire])).hexdigest()
    assert snapshot.hash == independent


def test_empty_store() -> None:
    snapshot = parse_store(json.dumps({"version": 0, "hash": EMPTY_HASH, "claims": []}), "s")
    assert snapshot.version == 0 and snapshot.claims == ()


def issues_of(text: str) -> tuple[str, ...]:
    with pytest.raises(ConfigError) as caught:
        parse_store(text, "store.json")
    assert str(caught.value).startswith("store.json: ")
    return caught.value.issues


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("not json", "not valid JSON"),
        ("[]", "top level must be an object"),
        ('{"version": NaN, "hash": "x", "claims": []}', "not valid JSON"),
        ('{"version": 1e999, "hash": "x", "claims": []}', "not valid JSON"),
    ],
)
def test_not_json(text: str, expected: str) -> None:
    assert expected in issues_of(text)[0]


@pytest.mark.parametrize("version", [-1, 1.5, "1", True, None])
def test_bad_version(version: Any) -> None:
    (issue,) = issues_of(store_text([], version=version))
    assert issue.startswith("version: must be a nonnegative integer")


def test_integral_float_version_is_an_integer_as_in_javascript() -> None:
    assert parse_store(store_text([], version=3.0), "s").version == 3


@pytest.mark.parametrize("bad", ["ABC", "0" * 63, "G" * 64, 5, "A" * 64])
def test_bad_hash_format(bad: Any) -> None:
    (issue,) = issues_of(store_text([], hash=bad))
    assert issue.startswith("hash: must be 64 lowercase hex")


def test_hash_mismatch() -> None:
    text = store_text([good_claim()]).replace('"passRate": 1', '"passRate": 0.5')
    (issue,) = issues_of(text)
    assert issue.startswith("hash: does not match the claims")


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"polarity": "strong"}, "claims[0].polarity"),
        ({"id": ""}, "claims[0].id"),
        ({"subject": {"model": "gpt-4o"}}, "claims[0].subject.model"),
        ({"subject": ["a:b"]}, "claims[0].subject"),
        ({"taskClass": ""}, "claims[0].taskClass"),
        ({"statement": ""}, "claims[0].statement"),
        ({"class": "vibes"}, "claims[0].class"),
        ({"status": "deleted"}, "claims[0].status"),
        ({"evidence": []}, "claims[0].evidence"),
        ({"confidence": "certain"}, "claims[0].confidence"),
        ({"observedAt": "last tuesday"}, "claims[0].observedAt"),
        ({"expiresAt": "2026-07-01T00:00:60Z"}, "claims[0].expiresAt"),
        ({"author": {"kind": "robot", "id": "x"}}, "claims[0].author.kind"),
        ({"author": {"kind": "human", "id": ""}}, "claims[0].author.id"),
    ],
)
def test_what_rulvar_refuses_is_refused_and_named(change: dict[str, Any], path: str) -> None:
    issues = issues_of(store_text([good_claim(**change)]))
    assert any(issue.startswith(f"{path}: ") for issue in issues), issues


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"subject": {"model": ":"}}, "claims[0].subject.model"),
        ({"subject": {"model": "openai:"}}, "claims[0].subject.model"),
        ({"subject": {"model": ":gpt"}}, "claims[0].subject.model"),
        ({"subject": {"model": "a:b", "effort": ""}}, "claims[0].subject.effort"),
        ({"statement": "x" * 201}, "claims[0].statement"),
        (
            {"evidence": [{"kind": "eval", "reportId": 3, "caseIds": []}]},
            "claims[0].evidence[0].reportId",
        ),
        (
            {"evidence": [{"kind": "journal", "runId": "r", "entryRef": "7"}]},
            "claims[0].evidence[0].entryRef",
        ),
        ({"metrics": {"passRate": 1.5, "n": 3, "graderId": "g"}}, "claims[0].metrics.passRate"),
        ({"metrics": {"passRate": 0.5, "n": -1, "graderId": "g"}}, "claims[0].metrics.n"),
        ({"expiresAt": "2026-07-01T00:00:00"}, "claims[0].expiresAt"),
        ({"origin": {"kind": "kb-proposal", "runId": "r"}}, "claims[0].origin.entryRef"),
        ({"supersedes": ""}, "claims[0].supersedes"),
        ({"surprise": 1}, "claims[0].surprise"),
    ],
)
def test_what_rulvar_accepts_but_kb_would_never_write_is_a_warning(
    change: dict[str, Any], path: str
) -> None:
    snapshot = parse_store(store_text([good_claim(**change)]), "s")
    assert any(warning.startswith(f"{path}: ") for warning in snapshot.warnings)
    assert len(snapshot.entries) == 1


def test_metrics_present_iff_eval_measured_is_a_warning_on_read() -> None:
    no_metrics = good_claim()
    del no_metrics["metrics"]
    (warning,) = parse_store(store_text([no_metrics]), "s").warnings
    assert "eval-measured claim needs a metrics block" in warning
    human = good_claim(**{"class": "human-editorial"})
    assert "must not carry metrics" in parse_store(store_text([human]), "s").warnings[0]


def test_statement_length_counts_utf16_units_like_javascript() -> None:
    # 100 emoji are 200 UTF-16 units: what kb writes; one more unit only warns on read.
    assert parse_store(store_text([good_claim(statement="😀" * 100)]), "s").warnings == ()
    long = parse_store(store_text([good_claim(statement="😀" * 100 + "x")]), "s")
    assert "limit is 200" in long.warnings[0]


def test_every_issue_is_listed_at_once() -> None:
    claims = [good_claim(polarity="strong"), good_claim(id="b", status="gone"), good_claim()]
    text = store_text(claims, version=-2, extra=True)
    issues = issues_of(text)
    joined = "\n".join(issues)
    for expected in ("version:", "claims[0].polarity", "claims[1].status"):
        assert expected in joined
    assert len(issues) == 3


def test_duplicate_ids_are_a_warning() -> None:
    snapshot = parse_store(store_text([good_claim(), good_claim()]), "s")
    assert snapshot.warnings == (f"claims[1].id: {good_claim()['id']!r} duplicates claims[0].id",)


def many_claims(count: int) -> list[dict[str, Any]]:
    base = good_claim()
    claims = []
    for index in range(count):
        claim = json.loads(json.dumps(base))
        claim["id"] = f"claim-{index}"
        claims.append(claim)
    # Claims the fast path cannot print: astral text, a lone surrogate, a float that
    # prints with an exponent, an integer beyond 2**53. Spread over several runs.
    claims[3]["statement"] = "astral 😕 here"
    claims[1200]["statement"] = "lone \ud800 surrogate"
    claims[2100]["metrics"] = {**claims[2100]["metrics"], "cost": 1e-7}
    claims[2400]["metrics"] = {**claims[2400]["metrics"], "n": 2**60}
    return claims


def test_runs_of_claims_hash_as_the_general_path_does() -> None:
    claims = many_claims(2500)
    text = store_text(claims)
    canonical = render_store(parse_store(text, "whole"))  # the canonical layout, spans read
    snapshot = parse_store(canonical, "spans")
    assert snapshot.hash == claims_hash(claims)
    assert render_store(snapshot) == canonical


def test_one_broken_claim_in_a_run_is_named() -> None:
    claims = many_claims(2500)
    canonical = render_store(parse_store(store_text(claims), "whole"))
    broken = canonical.replace('"id": "claim-1234",', '"id": "claim-1234",,', 1)
    with pytest.raises(ConfigError) as caught:
        parse_store(broken, "s")
    assert [i for i in caught.value.issues if "not valid JSON" in i][0].startswith(
        "claims[1234]: not valid JSON"
    )


def test_status_changes_inside_runs_rehash_exactly() -> None:
    from kb.store.claim_texts import PatchedTexts, claims_hash_of

    claims = many_claims(2500)
    snapshot = parse_store(render_store(parse_store(store_text(claims), "w")), "spans")
    changed = {0: "superseded", 999: "archived", 1000: "stale", 1200: "archived", 2499: "stale"}
    extra = good_claim(id="appended")
    texts = PatchedTexts(snapshot.texts, changed, [extra])
    expected = [dict(c, status=changed.get(i, c["status"])) for i, c in enumerate(claims)]
    assert claims_hash_of(texts) == claims_hash([*expected, extra])
