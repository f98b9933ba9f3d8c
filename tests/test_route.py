"""``kb route`` (SPEC 12.4): the card's recommended rung per task class as a LiteLLM config,
loaded into a real ``litellm.Router`` that routes requests to a loopback server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from kb.store.filestore import CommitContext, KnowledgeStore
from tests.cli_helpers import kb
from tests.factories import add, eval_claim
from tests.fake_openai import fake_openai_server

STORE = "rulvar.models.json"
AT = "2026-07-02"
LADDERS = """
floors = { planning = ["openai:tiny"] }

[[ladders]]
name = "openai"
start_tier = 1
rungs = [{ model = "openai:tiny" }, { model = "openai:mid" }, { model = "openai:big" }]
"""


def claims(*specs: tuple[str, str, str]) -> None:
    found = [
        add(
            eval_claim(
                f"c{i}",
                subject={"model": model},
                taskClass=task_class,
                polarity=polarity,
                metrics={
                    "passRate": 0.97 if polarity == "strength" else 0.2,
                    "n": 60,
                    "graderId": "eval-suite",
                },
            )
        )
        for i, (model, task_class, polarity) in enumerate(specs)
    ]
    KnowledgeStore(Path(STORE)).commit(found, 0, CommitContext("seed", "t"))


def routes(runner: CliRunner, *args: str) -> dict[str, Any]:
    result = kb(runner, "--as-of", AT, "route", "ladders.toml", "--format", "json", *args)
    assert result.exit_code == 0, result.stderr
    return {r["taskClass"]: r for r in json.loads(result.stdout)["routes"]}


def test_each_task_class_routes_to_the_recommended_rung(runner: CliRunner, isolated: Path) -> None:
    Path("ladders.toml").write_text(LADDERS)
    claims(
        ("openai:tiny", "extraction", "strength"),  # cheaper works: one rung down
        ("openai:mid", "planning", "weakness"),  # the start is weak: one rung up
        ("openai:mid", "summaries", "strength"),  # a strength on the start: no move
    )
    found = routes(runner)
    assert found["extraction"]["model"] == "openai:tiny" and found["extraction"]["tier"] == 0
    assert [f["model"] for f in found["extraction"]["fallbacks"]] == ["openai:mid", "openai:big"]
    assert found["planning"]["model"] == "openai:big" and found["planning"]["movedByClaims"]
    assert found["planning"]["fallbacks"] == []
    assert found["summaries"]["model"] == "openai:mid" and not found["summaries"]["movedByClaims"]
    assert found["default"]["model"] == "openai:mid"


def test_a_floor_is_never_routed_to(runner: CliRunner, isolated: Path) -> None:
    Path("ladders.toml").write_text(LADDERS)
    claims(("openai:tiny", "planning", "strength"))  # the floor bars the cheaper rung
    found = routes(runner)
    assert found["planning"]["model"] == "openai:mid"
    assert "openai:tiny" not in [f["model"] for f in found["planning"]["fallbacks"]]


def sweep_spec(base: str) -> None:
    lines = ['[sweep]\ncommitter = "ci"\nallow_unbounded = true\n']
    for name in ("tiny", "mid", "big"):
        lines.append(
            f'[[models]]\nmodel = "openai:{name}"\n'
            f'params = {{ api_base = "{base}", api_key_env = "KB_ROUTE_TEST_KEY" }}\n'
        )
    lines.append(
        '[[cases]]\nname = "a"\ntask_class = "t"\nprompt = "p"\n'
        'graders = [{ kind = "golden", expected = "x" }]\n'
    )
    Path("sweep.toml").write_text("\n".join(lines))


ROUTE_CLIENT = """
import json, sys
from kb.engine.adapter import load_litellm
load_litellm()  # litellm with kb's offline switches: no cost-map fetch
import yaml
from litellm.router import Router
config = yaml.safe_load(open(sys.argv[1]))
router = Router(
    model_list=config["model_list"],
    fallbacks=config["router_settings"]["fallbacks"],
    num_retries=0,
)
answers = []
for prompt in sys.argv[2:]:
    reply = router.completion(model="kb/extraction", messages=[{"role": "user", "content": prompt}])
    answers.append(reply.choices[0].message.content)
print(json.dumps(answers))
"""


OPENAI_SENTINEL = "sk-openai-sentinel-never-sent"


def route_client(config: Path, *prompts: str) -> list[str]:
    """A real litellm.Router in its own process (its event loops and sockets die with it).

    ``OPENAI_API_KEY`` holds a sentinel: a deployment written without its own key
    would send it.
    """
    env = {**os.environ, "KB_ROUTE_TEST_KEY": "sk-route-test", "OPENAI_API_KEY": OPENAI_SENTINEL}
    done = subprocess.run(
        [sys.executable, "-c", ROUTE_CLIENT, str(config), *prompts],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_real_litellm_router_routes_and_falls_back(runner: CliRunner, isolated: Path) -> None:
    Path("ladders.toml").write_text(LADDERS)
    claims(("openai:tiny", "extraction", "strength"))
    with fake_openai_server() as (base, seen):
        sweep_spec(base)
        result = kb(runner, "--as-of", AT, "route", "ladders.toml", "--spec", "sweep.toml")
        assert result.exit_code == 0, result.stderr
        Path("litellm.yaml").write_text(result.stdout)
        config = yaml.safe_load(result.stdout)
        assert config["model_list"][0]["litellm_params"] == {
            "model": "openai/tiny",
            "api_base": base,
            "api_key": "os.environ/KB_ROUTE_TEST_KEY",  # the key stays in the environment
        }
        assert route_client(isolated / "litellm.yaml", "hello") == ["echo: hello"]
        first = seen.requests[-1]
        assert first["body"]["model"] == "tiny"
        headers = {k.lower(): v for k, v in first["headers"].items()}
        assert headers["authorization"] == "Bearer sk-route-test"
        # the recommended rung is down: the router escalates to the next rung
        seen.failing.add("tiny")
        assert route_client(isolated / "litellm.yaml", "again") == ["echo: again"]
        assert [r["body"]["model"] for r in seen.requests[-2:]] == ["tiny", "mid"]


def keyed_spec(base: str, keys: dict[str, str]) -> None:
    """A sweep spec whose models tiny, mid and big carry ``keys`` (params as TOML)."""
    lines = ['[sweep]\ncommitter = "ci"\nallow_unbounded = true\n']
    for name, key in keys.items():
        lines.append(
            f'[[models]]\nmodel = "openai:{name}"\nparams = {{ api_base = "{base}"{key} }}\n'
        )
    lines.append(
        '[[cases]]\nname = "a"\ntask_class = "extraction"\nprompt = "p"\n'
        'graders = [{ kind = "golden", expected = "x" }]\n'
    )
    Path("sweep.toml").write_text("\n".join(lines))


def authorization(request: dict[str, Any]) -> str:
    return next(v for k, v in request["headers"].items() if k.lower() == "authorization")


def test_each_deployment_sends_its_own_key_never_another_providers(
    runner: CliRunner, isolated: Path
) -> None:
    Path("ladders.toml").write_text(LADDERS)
    claims(("openai:tiny", "extraction", "strength"))
    with fake_openai_server() as (base, seen):
        keyed_spec(
            base,
            {
                "tiny": ', api_key_env = "KB_ROUTE_TEST_KEY"',
                "mid": ', api_key = "none"',  # the README's local recipe
                "big": ', api_key = "sk-no-key-required"',
            },
        )
        result = kb(runner, "--as-of", AT, "route", "ladders.toml", "--spec", "sweep.toml")
        assert result.exit_code == 0, result.stderr
        Path("litellm.yaml").write_text(result.stdout)
        assert route_client(isolated / "litellm.yaml", "hello") == ["echo: hello"]
        seen.failing.update({"tiny", "mid"})  # the router escalates through both fallbacks
        assert route_client(isolated / "litellm.yaml", "again") == ["echo: again"]
    received = [(r["body"]["model"], authorization(r)) for r in seen.requests]
    assert received == [
        ("tiny", "Bearer sk-route-test"),
        ("tiny", "Bearer sk-route-test"),
        ("mid", "Bearer none"),
        ("big", "Bearer sk-no-key-required"),
    ]
    assert all(OPENAI_SENTINEL not in str(r["headers"]) for r in seen.requests)
    written = {
        item["litellm_params"]["model"]: item["litellm_params"].get("api_key")
        for item in yaml.safe_load(result.stdout)["model_list"]
        if item["model_name"].startswith("kb/extraction")
    }
    assert written == {
        "openai/tiny": "os.environ/KB_ROUTE_TEST_KEY",
        "openai/mid": "none",
        "openai/big": "sk-no-key-required",
    }


def test_a_literal_secret_key_refuses_the_rung(runner: CliRunner, isolated: Path) -> None:
    Path("ladders.toml").write_text(LADDERS)
    claims(("openai:mid", "extraction", "strength"))
    keyed_spec(
        "http://127.0.0.1:9/v1",
        {
            "tiny": ', api_key_env = "KB_ROUTE_TEST_KEY"',
            "mid": ', api_key = "sk-literal-secret-123"',
            "big": ', api_key = "EMPTY"',
        },
    )
    before = Path(STORE).read_bytes()
    result = kb(runner, "--as-of", AT, "route", "ladders.toml", "--spec", "sweep.toml")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "Error: --spec sweep.toml: rung openai:mid: a literal api_key is never written to a "
        "routing config; name the environment variable holding it with api_key_env (written "
        "as os.environ/VAR)"
    ]
    assert "sk-literal-secret-123" not in result.stdout + result.stderr
    assert Path(STORE).read_bytes() == before


def test_an_endpoint_without_a_key_is_refused_naming_both_ways_to_give_one(
    runner: CliRunner, isolated: Path
) -> None:
    Path("ladders.toml").write_text(LADDERS)
    claims(("openai:mid", "extraction", "strength"))
    keys = {"tiny": ', api_key = "none"', "mid": "", "big": ', api_key = "none"'}
    keyed_spec("http://127.0.0.1:9/v1", keys)
    result = kb(runner, "--as-of", AT, "route", "ladders.toml", "--spec", "sweep.toml")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "Error: --spec sweep.toml: rung openai:mid: has an api_base and no key, so LiteLLM "
        "would send it the provider's own key (OPENAI_API_KEY); give api_key_env, "
        'or api_key = "none" for a server that takes no key'
    ]


def test_a_rung_not_in_the_spec_is_refused(runner: CliRunner, isolated: Path) -> None:
    Path("ladders.toml").write_text(LADDERS)
    claims(("openai:mid", "extraction", "strength"))
    keyed_spec("http://127.0.0.1:9/v1", {"mid": ', api_key = "none"'})
    result = kb(runner, "--as-of", AT, "route", "ladders.toml", "--spec", "sweep.toml")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "Error: --spec sweep.toml: rungs not among the spec's [[models]]: openai:tiny (ladder "
        "'openai'), openai:big (ladder 'openai') (a deployment would go to the provider's "
        "public endpoint; add each with its api_base and key, or take it off its ladder)"
    ]


def test_a_task_class_nothing_has_is_a_warning(runner: CliRunner, isolated: Path) -> None:
    Path("ladders.toml").write_text(
        LADDERS.replace("planning", "plannig")
        + '\n[[ladders]]\nname = "typo"\ntask_class = "extractoin"\nstart_tier = 0\n'
        'rungs = [{ model = "openai:mid" }]\n'
    )
    claims(("openai:tiny", "extraction", "strength"))
    result = kb(runner, "--as-of", AT, "route", "ladders.toml")
    assert result.exit_code == 0
    assert result.stderr.splitlines() == [
        "warning: ladder 'typo': task class 'extractoin' has no claim in the store; did you "
        "mean 'extraction'?",
        "warning: floors: task class 'plannig' has no claim in the store (a typo?)",
    ]
    keyed_spec("http://127.0.0.1:9/v1", {n: ', api_key = "none"' for n in ("tiny", "mid", "big")})
    with_cases = kb(runner, "--as-of", AT, "route", "ladders.toml", "--spec", "sweep.toml")
    assert with_cases.exit_code == 0
    assert "'extractoin' has no claim in the store and no case in the spec" in with_cases.stderr


def test_every_ladder_problem_is_reported_at_once(runner: CliRunner, isolated: Path) -> None:
    KnowledgeStore(Path(STORE)).initialize(CommitContext("init", "t"))
    Path("ladders.toml").write_text(
        'floors = { planning = ["openai:mid", "openai:big"] }\n'
        '[[ladders]]\nname = "a"\nstart_tier = 5\nrungs = [{ model = "openai:tiny" }]\n'
        '[[ladders]]\nname = "a"\nstart_tier = 0\nrungs = [{ model = "openai:tiny" }]\n'
        '[[ladders]]\nname = "plan"\ntask_class = "planning"\nstart_tier = 1\n'
        'rungs = [{ model = "openai:tiny" }, { model = "openai:mid" }, { model = "openai:big" }]\n'
    )
    result = kb(runner, "route", "ladders.toml")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "Error: ladders.toml: 3 issues: ladders[0]: start_tier 5 is off the ladder (1 rungs); "
        "duplicate ladder names: a; ladders[2] ('plan'): every rung from its start tier (1) up "
        "is floored for 'planning' (floors.planning); no route could be written for it"
    ]


def test_a_bad_ladders_file_is_refused(runner: CliRunner, isolated: Path) -> None:
    KnowledgeStore(Path(STORE)).initialize(CommitContext("init", "t"))
    Path("ladders.toml").write_text("[[ladders]]\nname = 'x'\nstart_tier = 3\nrungs = []\n")
    result = kb(runner, "route", "ladders.toml")
    assert result.exit_code == 2 and "ladders" in result.stderr
    assert kb(runner, "route", "missing.toml").exit_code == 2


def test_a_ladder_for_the_task_class_wins_over_a_general_one(
    runner: CliRunner, isolated: Path
) -> None:
    Path("ladders.toml").write_text(
        LADDERS
        + """
[[ladders]]
name = "extraction-only"
task_class = "extraction"
start_tier = 0
rungs = [{ model = "openai:other" }, { model = "openai:big" }]

[[ladders]]
name = "again"
task_class = "extraction"
start_tier = 0
rungs = [{ model = "openai:mid" }, { model = "openai:mid" }]
"""
    )
    claims(("openai:tiny", "extraction", "strength"))
    result = kb(runner, "--as-of", AT, "route", "ladders.toml", "--format", "json")
    assert result.exit_code == 0
    found = {r["taskClass"]: r for r in json.loads(result.stdout)["routes"]}
    assert found["extraction"]["ladder"] == "extraction-only"  # declared after the general one
    assert found["extraction"]["litellmParams"] == {"model": "openai/other"}
    assert "ladder 'again': task class 'extraction' is routed by an earlier ladder" in (
        result.stderr
    )
    assert "ladder 'again': rung 1 repeats openai:mid" in result.stderr


def test_a_route_to_a_model_with_only_retired_claims_warns(
    runner: CliRunner, isolated: Path
) -> None:
    from kb.store.ops import ArchiveClaim

    Path("ladders.toml").write_text(LADDERS)
    # big's weakness sits above the start: no vote, so summaries starts on mid, whose one
    # claim was falsified
    claims(("openai:mid", "summaries", "strength"), ("openai:big", "summaries", "weakness"))
    store = KnowledgeStore(Path(STORE))
    store.commit([ArchiveClaim("c0", "falsified")], 1, CommitContext("t", "t"))
    result = kb(runner, "--as-of", AT, "route", "ladders.toml")
    assert result.exit_code == 0
    assert "kb/summaries goes to openai:mid, whose every claim on 'summaries' was retired" in (
        result.stderr
    )


def test_a_ladders_file_nested_too_deep_is_one_line(runner: CliRunner, isolated: Path) -> None:
    KnowledgeStore(Path(STORE)).initialize(CommitContext("init", "t"))
    Path("ladders.toml").write_text("x = " + "[" * 3000 + "]" * 3000 + "\n")
    result = kb(runner, "route", "ladders.toml")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "Error: ladders.toml: not valid TOML: nested too deep to read"
    ]


@given(st.text(min_size=1, max_size=24) | st.sampled_from(["none", "EMPTY", "sk-no-key-required"]))
def test_a_literal_key_is_written_only_when_it_is_no_secret(literal: str) -> None:
    from kb.card import parse_ladders
    from kb.engine.requests import ModelSpec
    from kb.route import Route, router_config, spec_issues

    ladders = parse_ladders(
        {"ladders": [{"name": "l", "start_tier": 0, "rungs": [{"model": "openai:m"}]}]}, "t"
    )
    model = ModelSpec("openai:m", params={"api_base": "http://127.0.0.1:9/v1", "api_key": literal})
    issues = spec_issues(ladders, {"openai:m": model})
    placeholder = literal in ("none", "EMPTY", "sk-no-key-required") or len(literal) < 8
    if placeholder:
        route = Route("t", "l", "kb/t", 0, 0, tuple(ladders.ladders[0].rungs), False)
        config = router_config([route], {"openai:m": model})
        assert issues == [] and config["model_list"][0]["litellm_params"]["api_key"] == literal
    else:  # refused, naming the way to give it, and never quoting it
        assert len(issues) == 1 and "api_key_env" in issues[0] and literal not in issues[0]


def test_a_rung_that_looks_like_a_typo_of_a_known_model_is_a_warning(
    runner: CliRunner, isolated: Path
) -> None:
    Path("ladders.toml").write_text(LADDERS.replace('"openai:mid"', '"openai:mdi"'))
    claims(("openai:tiny", "extraction", "strength"), ("openai:mid", "planning", "weakness"))
    result = kb(runner, "--as-of", AT, "route", "ladders.toml")
    assert result.exit_code == 0
    assert (
        "warning: ladder 'openai' rung 1: openai:mdi has no claim in the store; did you mean "
        "'openai:mid'?"
    ) in result.stderr.splitlines()
    # a rung nobody measured yet is normal: openai:big gets no warning
    assert "openai:big" not in result.stderr
    card = kb(runner, "--as-of", AT, "card", "ladders.toml")
    assert "openai:mdi has no claim in the store; did you mean 'openai:mid'?" in card.stderr


def test_a_route_to_a_rung_holding_a_live_weakness_on_its_class_warns(
    runner: CliRunner, isolated: Path
) -> None:
    Path("ladders.toml").write_text(LADDERS)
    # the votes tie (a strength below the start, a weakness on it): the class stays on
    # mid, which the store says is weak at it
    claims(("openai:tiny", "extraction", "strength"), ("openai:mid", "extraction", "weakness"))
    result = kb(runner, "--as-of", AT, "route", "ladders.toml")
    assert result.exit_code == 0, result.stderr
    said = " ".join(result.stderr.split())
    assert "kb/extraction goes to openai:mid, which holds a live weakness on 'extraction'" in said
    assert "(passRate 0.20): c1" in said
