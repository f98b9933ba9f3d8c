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


def route_client(config: Path, *prompts: str) -> list[str]:
    """A real litellm.Router in its own process (its event loops and sockets die with it)."""
    env = {**os.environ, "KB_ROUTE_TEST_KEY": "sk-route-test"}
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


def test_a_literal_api_key_is_never_written(runner: CliRunner, isolated: Path) -> None:
    Path("ladders.toml").write_text(LADDERS)
    claims(("openai:mid", "extraction", "strength"))
    Path("sweep.toml").write_text(
        '[sweep]\ncommitter = "ci"\nallow_unbounded = true\n'
        '[[models]]\nmodel = "openai:mid"\nparams = { api_key = "sk-literal-secret-123" }\n'
        '[[cases]]\nname = "a"\ntask_class = "t"\nprompt = "p"\n'
        'graders = [{ kind = "golden", expected = "x" }]\n'
    )
    result = kb(runner, "--as-of", AT, "route", "ladders.toml", "--spec", "sweep.toml")
    assert result.exit_code == 0
    assert "sk-literal-secret-123" not in result.stdout + result.stderr
    assert "literal api_key is not written" in result.stderr


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
