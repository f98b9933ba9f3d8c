"""[[datasets]]: JSONL and CSV case sets, field mapping, templates, stable samples, errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from kb.cli import cli
from kb.errors import ConfigError
from kb.evals.cases import GoldenGrader, RubricGrader
from kb.evals.datasets import DatasetSpec, load_dataset, render_template
from kb.store.filestore import CommitContext, KnowledgeStore
from kb.sweep.spec import load_spec
from tests.factories import add, eval_claim

pytestmark = pytest.mark.usefixtures("initialized_store")

HEAD = '[sweep]\ncommitter = "ci"\n\n[budgets]\ntarget_usd = 0.01\nmax_total_usd = 5.0\n'
MODEL = '\n[[models]]\nmodel = "scripted:m"\nparams = {{ responses = {replies} }}\n'


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    return write(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))


def spec_with(path: Path, datasets: str, replies: dict[str, str] | None = None) -> Path:
    table = (
        "{ "
        + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in (replies or {}).items())
        + " }"
    )
    return write(path, HEAD + MODEL.format(replies=table) + datasets)


def load_issues(path: Path) -> tuple[str, ...]:
    with pytest.raises(ConfigError) as caught:
        load_spec(path)
    return caught.value.issues


def test_jsonl_records_become_cases_with_templates(isolated: Path) -> None:
    jsonl(
        isolated / "cases" / "ex.jsonl",
        [
            {"id": "paris", "question": "Capital of France?", "answer": "Paris"},
            {"id": "ü-city", "question": "Wo liegt München?", "answer": "Bayern"},
        ],
    )
    spec = spec_with(
        isolated / "s.toml",
        """
[[datasets]]
path = "cases/ex.jsonl"
task_class = "extraction"
fields = { name = "id" }
prompt_template = "Answer in one word. {question} {{literal}}"
graders = [
  { kind = "golden", expected = "{answer}", match = "normalized" },
  { kind = "rubric", criteria = [{ name = "short", regex = "^\\\\w{1,20}$" }] },
]
""",
    )
    cases = load_spec(spec).cases
    assert [c.name for c in cases] == ["paris", "ü-city"]
    assert cases[0].prompt == "Answer in one word. Capital of France? {literal}"
    assert cases[1].prompt == "Answer in one word. Wo liegt München? {literal}"
    golden, rubric = cases[1].graders
    assert isinstance(golden, GoldenGrader) and golden.expected == "Bayern"
    assert isinstance(rubric, RubricGrader) and rubric.criteria[0].regex == "^\\w{1,20}$"


def test_csv_with_quoted_commas_newlines_and_utf8(isolated: Path) -> None:
    write(
        isolated / "arith.csv",
        "id,question,answer,category\n"
        'a1,"What is 1,000 + 1?",1001,math\n'
        'a2,"Two lines:\nwhat is 2 + 2?",4,"wörd problems"\n'
        "\n"
        'a3,"Say ""hi""",hi,quotes\n',
    )
    spec = spec_with(
        isolated / "s.toml",
        """
[[datasets]]
path = "arith.csv"
task_class_field = "category"
fields = { name = "id", prompt = "question", expected = "answer" }
""",
    )
    cases = load_spec(spec).cases
    assert [(c.name, c.task_class) for c in cases] == [
        ("a1", "math"),
        ("a2", "wörd problems"),
        ("a3", "quotes"),
    ]
    assert cases[1].prompt == "Two lines:\nwhat is 2 + 2?"
    assert cases[2].prompt == 'Say "hi"'
    (grader,) = cases[0].graders
    assert isinstance(grader, GoldenGrader) and grader.expected == "1001"
    assert grader.match == "normalized"


def test_default_names_are_file_stem_and_line(isolated: Path) -> None:
    jsonl(isolated / "qa.jsonl", [{"prompt": "p1", "a": "x"}, {"prompt": "p2", "a": "y"}])
    (isolated / "qa.jsonl").write_text("\n" + (isolated / "qa.jsonl").read_text())
    spec = spec_with(
        isolated / "s.toml",
        '[[datasets]]\npath = "qa.jsonl"\ntask_class = "t"\nfields = { expected = "a" }\n',
    )
    assert [c.name for c in load_spec(spec).cases] == ["qa-2", "qa-3"]


@pytest.mark.parametrize(
    ("name", "content", "issue"),
    [
        ("bad.jsonl", '{"prompt": "a", "a": "x"}\n{"prompt": \n', "bad.jsonl:2: not valid JSON"),
        ("list.jsonl", '["not", "an", "object"]\n', "list.jsonl:1: a record must be a JSON object"),
        ("empty.jsonl", "\n\n", "empty.jsonl: the file holds no records"),
        ("empty.csv", "", "empty.csv: the file holds no records"),
        ("short.csv", "prompt,a\np1,x\np2\n", "short.csv:3: has 1 column, the header has 2"),
        ("long.csv", "prompt,a\np1,x,extra\n", "long.csv:2: has 3 columns, the header has 2"),
        (
            "field.jsonl",
            '{"prompt": "a", "a": "x"}\n{"question": "b", "a": "y"}\n',
            "field.jsonl:2: no field 'prompt' (the record has: question, a)",
        ),
        (
            "nested.jsonl",
            '{"prompt": {"x": 1}, "a": "x"}\n',
            "nested.jsonl:1: field 'prompt' is not text (got dict)",
        ),
        ("missing.jsonl", None, "missing.jsonl: no such file"),
    ],
)
def test_every_error_names_file_and_line(
    isolated: Path, name: str, content: str | None, issue: str
) -> None:
    if content is not None:
        write(isolated / name, content)
    spec = spec_with(
        isolated / "s.toml",
        f'[[datasets]]\npath = "{name}"\ntask_class = "t"\nfields = {{ expected = "a" }}\n',
    )
    issues = load_issues(spec)
    assert any(i.startswith(issue) for i in issues), issues


def test_all_problems_at_once_and_a_repeated_one_once(isolated: Path) -> None:
    jsonl(isolated / "a.jsonl", [{"prompt": f"p{i}", "x": "y"} for i in range(5)])
    write(isolated / "b.jsonl", "{oops\n")
    spec = spec_with(
        isolated / "s.toml",
        """
[[datasets]]
path = "a.jsonl"
task_class = "t"
graders = [{ kind = "golden", expected = "{x}", mtach = "exact" }]

[[datasets]]
path = "b.jsonl"
task_class = "t"
fields = { expected = "x" }

[[datasets]]
path = "c.txt"
task_class = "t"
fields = { expected = "x" }
""",
    )
    issues = load_issues(spec)
    assert "a.jsonl:1: graders[0].mtach: unknown key (and 4 more records)" in issues
    assert any(i.startswith("b.jsonl:1: not valid JSON") for i in issues)
    assert any("path 'c.txt' must end in .jsonl or .csv" in i for i in issues)


def test_names_are_unique_across_the_spec(isolated: Path) -> None:
    jsonl(isolated / "d.jsonl", [{"id": "capital", "prompt": "p", "a": "x"}])
    spec = spec_with(
        isolated / "s.toml",
        """
[[cases]]
name = "capital"
task_class = "t"
prompt = "q"
graders = [{ kind = "golden", expected = "x" }]

[[datasets]]
path = "d.jsonl"
task_class = "t"
fields = { name = "id", expected = "a" }
""",
    )
    assert load_issues(spec) == (
        "cases: 'capital' is defined twice (s.toml: cases[0] and d.jsonl:1)",
    )


def test_datasets_in_included_files_resolve_against_the_include(isolated: Path) -> None:
    jsonl(isolated / "more" / "data" / "x.jsonl", [{"prompt": "p", "a": "x"}])
    write(
        isolated / "more" / "inc.toml",
        '[[datasets]]\npath = "data/x.jsonl"\ntask_class = "t"\nfields = { expected = "a" }\n',
    )
    spec = write(isolated / "s.toml", 'include = ["more/*.toml"]\n' + HEAD)
    assert [c.name for c in load_spec(spec).cases] == ["x-1"]


# -- sample --------------------------------------------------------------------------------------


def sampled(path: Path, n: int, sample: int, seed: int = 1) -> list[str]:
    jsonl(path, [{"id": f"r{i}", "prompt": f"p{i}", "a": "x"} for i in range(n)])
    spec = DatasetSpec.model_validate(
        {
            "path": path.name,
            "task_class": "t",
            "fields": {"name": "id", "expected": "a"},
            "sample": sample,
            "seed": seed,
        }
    )
    issues: list[str] = []
    cases = load_dataset(spec, path.parent, issues)
    assert not issues
    return [c.case.name for c in cases]


def test_a_sample_is_the_same_subset_on_every_load(isolated: Path) -> None:
    first = sampled(isolated / "d.jsonl", 200, 40)
    assert len(first) == 40 and first == sampled(isolated / "d.jsonl", 200, 40)
    assert first != sampled(isolated / "d.jsonl", 200, 40, seed=2)
    names = [f"r{i}" for i in range(200)]
    assert first == [n for n in names if n in set(first)]  # file order is kept


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(5, 60))
def test_only_new_records_can_displace_a_chosen_one(seed: int, size: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "d.jsonl"
        before = set(sampled(path, 300, size, seed))
        after = set(sampled(path, 330, size, seed))
    assert len(after) == len(before) == size
    assert all(int(name[1:]) >= 300 for name in after - before)


def test_adding_ten_percent_more_records_keeps_most_of_the_sample(isolated: Path) -> None:
    """A uniform sample must admit each new record with probability size/total, so the
    guarantee is in expectation: over 40 seeds, a 40-case sample keeps >= 85 % on average."""
    kept = []
    for seed in range(40):
        before = set(sampled(isolated / "d.jsonl", 400, 40, seed))
        after = set(sampled(isolated / "d.jsonl", 440, 40, seed))
        kept.append(len(before & after) / 40)
    assert sum(kept) / len(kept) >= 0.85
    assert min(kept) >= 0.7


# -- templates -----------------------------------------------------------------------------------


_plain = st.text(alphabet=st.characters(blacklist_characters="{}"), max_size=20)


@given(_plain, _plain, _plain)
def test_render_replaces_fields_and_keeps_other_braces(a: str, b: str, sep: str) -> None:
    values = {"a": a, "b": b}
    assert render_template("{a}" + sep + "{b}", values) == a + sep + b
    assert render_template("{{a}} {a}", values) == "{a} " + a
    assert render_template("x{2,3}y{}", values) == "x{2,3}y{}"


def test_render_names_the_missing_field() -> None:
    with pytest.raises(KeyError, match="answer"):
        render_template("{answer}", {"question": "q"})


# -- end to end ----------------------------------------------------------------------------------


def test_a_sweep_from_a_dataset_end_to_end(runner: CliRunner, isolated: Path) -> None:
    records = [{"id": f"q{i:02d}", "q": f"What is {i}+{i}?", "a": str(2 * i)} for i in range(20)]
    jsonl(isolated / "cases" / "sums.jsonl", records)
    replies = {f"Reply with a number. What is {i}+{i}?": str(2 * i) for i in range(20)}
    spec = spec_with(
        isolated / "s.toml",
        """
[[datasets]]
path = "cases/sums.jsonl"
task_class = "arithmetic"
fields = { name = "id" }
prompt_template = "Reply with a number. {q}"
graders = [{ kind = "golden", expected = "{a}", match = "exact" }]
""",
        replies,
    )
    result = runner.invoke(
        cli,
        ["sweep", str(spec), "--json", "--quiet", "--observed-at", "2026-11-29T02:00:00Z"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    (cell,) = report["cells"]
    assert cell["caseNames"] == [f"q{i:02d}" for i in range(20)]
    assert (cell["n"], cell["passRate"], cell["outcome"]) == (20, 1, "strength")
    (claim,) = report["claims"]
    assert claim["evidence"][0]["caseIds"] == [f"q{i:02d}" for i in range(20)]


def test_checkpoint_refuses_a_dataset_case_that_seeded_the_claims(
    runner: CliRunner, isolated: Path
) -> None:
    from tests.test_checkpoint import write_world

    claim = eval_claim(
        "seed/cheap/extraction",
        subject={"model": "scripted:cheap"},
        observedAt="2026-11-20T00:00:00.000Z",
        evidence=[{"kind": "eval", "reportId": "seed", "caseIds": ["inv-7"]}],
    )
    KnowledgeStore("rulvar.models.json").commit([add(claim)], 0, CommitContext("seed", "t"))
    jsonl(isolated / "held.jsonl", [{"id": "inv-7", "prompt": "Total of invoice 7?", "a": "9"}])
    world = write_world(isolated / "cp.toml", cheap_right=True).read_text()
    world += (
        '\n[[datasets]]\npath = "held.jsonl"\ntask_class = "extraction"\n'
        'fields = { name = "id", expected = "a" }\n'
    )
    (isolated / "cp.toml").write_text(world)
    result = runner.invoke(
        cli,
        ["--as-of", "2026-11-30", "checkpoint", str(isolated / "cp.toml")],
        catch_exceptions=False,
    )
    assert result.exit_code == 2
    assert "'inv-7' is a case that produced the store's claims" in result.stderr
