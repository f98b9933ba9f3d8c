"""The store commands through the CLI: output, exit codes, and bad input that loses nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kb.cli import cli
from kb.errors import ConfigError, KnowledgeCasError
from kb.store.filestore import CommitContext, KnowledgeStore
from kb.store.ops import SupersedeClaim
from kb.store.snapshot import EMPTY_HASH
from tests.cli_helpers import unwrapped
from tests.conftest import git
from tests.factories import GATE, add, eval_claim

STORE = "rulvar.models.json"


def kb(runner: CliRunner, *args: str, **env: str) -> Result:
    return runner.invoke(cli, list(args), catch_exceptions=False, env=env or None)


def seed(path: Path = Path(STORE)) -> KnowledgeStore:
    store = KnowledgeStore(path)
    store.commit(
        [
            add(
                eval_claim(
                    "s1",
                    metrics={"passRate": 0.95, "n": 20, "graderId": "eval-suite", "cost": 0.0123},
                )
            ),
            add(
                eval_claim(
                    "w1",
                    polarity="weakness",
                    taskClass="planning",
                    subject={"model": "anthropic:claude-haiku-4-5", "effort": "low"},
                    observedAt="2026-11-01T00:00:00.000Z",
                    metrics={"passRate": 0.25, "n": 8, "graderId": "eval-suite"},
                    confidence="medium",
                )
            ),
        ],
        0,
        CommitContext("sweep", "ci", label="r1", report_id="r1"),
    )
    store.commit([SupersedeClaim("s1", eval_claim("s2"), GATE)], 1, CommitContext("sweep", "ci"))
    return store


def test_init_creates_and_commits_an_empty_store(runner: CliRunner, repo: Path) -> None:
    result = kb(runner, "init")
    assert result.exit_code == 0
    assert "store v0, committed to git" in result.stdout
    assert "merge driver installed" in result.stdout
    assert all(len(line) <= 80 for line in result.stdout.splitlines()[1:])  # the path may be long
    assert json.loads((repo / STORE).read_text())["version"] == 0
    assert git(repo, "log", "-1", "--format=%s") == "kb: init: empty store (store v0)\n"
    again = kb(runner, "init")
    assert again.exit_code == 2
    assert "a store already exists here" in again.stderr


def test_list_shows_everything_a_reader_needs(runner: CliRunner, isolated: Path) -> None:
    seed()
    out = kb(runner, "--as-of", "2026-11-15", "list", "--all").stdout
    assert "w1\n  active · ttl holds · observed 2026-11-01T00:00:00.000Z" in out
    assert "anthropic:claude-haiku-4-5@low · weakness · planning · eval-measured" in out
    assert "confidence medium" in out
    assert "statement: sweep passRate 0.95 over 20 extraction cases" in out
    assert "author eval-pipeline:ci (gate eval-committer, report r1)" in out
    assert "evidence eval r1: 2 cases: a, b" in out
    assert (
        "metrics passRate 0.95 (19/20) wilson95 [0.76, 0.99] grader eval-suite cost $0.0123"
        in unwrapped(out)
    )
    assert all(len(line) <= 80 for line in out.splitlines())
    assert "metrics passRate 0.25 (2/8) wilson95 [0.07, 0.59]" in out
    assert "supersedes s1" in out
    assert "s1\n  superseded · ttl expired" in out
    assert out.rstrip().endswith("3 of 3 claims shown")


def test_list_is_one_line_per_active_claim_newest_first(runner: CliRunner, isolated: Path) -> None:
    seed()
    lines = kb(runner, "--as-of", "2026-11-15", "list").stdout.splitlines()
    # a model id of 30 characters would push a flat row past 80 columns: grouped under it
    assert lines[0].split() == ["model", "/", "task", "class", "claim", "rate", "95%"] + [
        "interval",
        "n",
        "expires",
    ]
    assert lines[1] == "anthropic:claude-haiku-4-5@low"
    # s2 (observed 2026-07-01) is expired on 2026-11-15: only w1 steers
    assert lines[2].split() == [
        "planning",
        "weakness",
        "0.25",
        "[0.07,",
        "0.59]",
        "8",
        "2026-12-01",
        "(16d)",
    ]
    assert lines[3:] == [
        "1 claim shown (3 in the store; 1 active but expired: kb queue);",
        "--ids for claim ids; --long for the full view; --all for every status",
    ]
    assert all(len(line) <= 80 for line in lines)
    # on 2026-09-01 both steer: w1 (observed 2026-11-01) before s2 (2026-07-01)
    early = kb(runner, "--as-of", "2026-09-01", "list").stdout.splitlines()
    rows = [line.split()[1] for line in early if line.startswith("  ")]
    assert rows == ["weakness", "strength"]
    long = kb(runner, "--as-of", "2026-09-01", "list", "--long").stdout
    assert long.index("w1\n") < long.index("s2\n") and "\ns1\n" not in long
    superseded = kb(runner, "--as-of", "2026-09-01", "list", "--status", "superseded").stdout
    assert superseded.splitlines()[0].endswith("status")
    assert superseded.splitlines()[2].endswith("superseded")


def test_list_filters(runner: CliRunner, isolated: Path) -> None:
    seed()

    def ids(*args: str) -> list[str]:
        result = kb(runner, "--as-of", "2026-11-15", "list", "--json", *args)
        return [claim["id"] for claim in json.loads(result.stdout)]

    assert ids() == ["s1", "w1", "s2"]
    assert ids("--model", "anthropic:claude-haiku-4-5") == ["w1"]
    assert ids("--model", "anthropic:claude-haiku-4-5@high") == []
    assert ids("--model", "anthropic:claude-haiku-4-5@low") == ["w1"]
    assert ids("--task-class", "extraction") == ["s1", "s2"]
    assert ids("--status", "active") == ["w1", "s2"]
    assert ids("--status", "superseded", "--status", "archived") == ["s1"]
    assert ids("--expired") == ["s1", "s2"]
    assert ids("--unexpired") == ["w1"]


def test_list_json_is_the_stored_claims_plus_ttl(runner: CliRunner, isolated: Path) -> None:
    seed()
    stored = json.loads(Path(STORE).read_text())["claims"]
    listed = json.loads(kb(runner, "list", "--json", KB_AS_OF="2026-07-02").stdout)
    added = ("ttl", "wilson95")
    assert [{k: v for k, v in c.items() if k not in added} for c in listed] == stored
    assert [list(c)[:-2] for c in listed] == [list(c) for c in stored]  # key order kept
    assert [c["ttl"] for c in listed] == ["holds", "holds", "holds"]
    low, high = listed[1]["wilson95"]  # the interval the gate used: 2 of 8
    assert round(low, 2) == 0.07 and round(high, 2) == 0.59


def test_list_json_prints_numbers_as_javascript_does(runner: CliRunner, isolated: Path) -> None:
    KnowledgeStore(STORE).commit(
        [add(eval_claim("x", metrics={"passRate": 1.0, "n": 3, "graderId": "g", "cost": 1.5e-7}))],
        0,
        CommitContext("sweep", "ci"),
    )
    out = kb(runner, "list", "--json").stdout
    assert '"passRate": 1,' in out and '"cost": 1.5e-7' in out


def test_store_path_from_env_and_flag(runner: CliRunner, isolated: Path) -> None:
    (isolated / "sub").mkdir()
    seed(isolated / "sub" / "k.json")
    assert "(3 in the store" in kb(runner, "--store", "sub/k.json", "list").stdout
    assert "(3 in the store" in kb(runner, "list", KB_STORE="sub/k.json").stdout
    missing = kb(runner, "list")  # no store here: refused, never created
    assert missing.exit_code == 2 and "no store at" in missing.stderr
    assert not (isolated / STORE).exists()


def test_show_prints_the_claim_and_its_git_history(runner: CliRunner, repo: Path) -> None:
    seed()
    out = kb(runner, "show", "s1").stdout
    assert out.startswith("s1\n  superseded")
    history = out.split("history:\n")[1].split("\ncases")[0].splitlines()
    assert len(history) == 2
    assert history[0].endswith("added — kb: sweep r1: +2 claims (store v1)")
    # one line per event within 80 columns: the commit subject cut, the change whole
    assert " 2026-11-01 00:00 status active → superseded — kb: sweep: +1 clai…" in history[1]
    assert len(history[1]) == 80
    missing = kb(runner, "show", "nope")
    assert missing.exit_code == 2 and "no claim with id 'nope'" in missing.stderr


def test_show_outside_git_says_so(runner: CliRunner, isolated: Path) -> None:
    seed()
    assert "history: the store is not in a git work tree" in kb(runner, "show", "w1").stdout


def test_verify_checks_every_version_in_git(runner: CliRunner, repo: Path) -> None:
    seed()
    result = kb(runner, "verify")
    assert result.exit_code == 0
    assert result.stdout == "ok: store v2, 3 claims, 2 versions in git checked\n"
    # A hand-made commit that skips a version is caught, even once the work tree is fine.
    text = (repo / STORE).read_text().replace('"version": 2', '"version": 9', 1)
    (repo / STORE).write_text(text)
    git(repo, "commit", "-qam", "hand edit")
    bad = kb(runner, "verify")
    assert bad.exit_code == 2
    assert "version 9 follows version 2 (must rise by exactly 1)" in bad.stderr


def test_verify_reports_a_corrupt_historical_version(runner: CliRunner, repo: Path) -> None:
    (repo / STORE).write_text('{"version": 0, "hash": "nope", "claims": []}\n')
    git(repo, "add", STORE)
    git(repo, "commit", "-qm", "broken store")
    (repo / STORE).write_text(json.dumps({"version": 1, "hash": EMPTY_HASH, "claims": []}))
    git(repo, "commit", "-qam", "fixed")
    bad = kb(runner, "verify")
    assert bad.exit_code == 2
    assert "hash: must be 64 lowercase hex characters" in bad.stderr


def test_queue_lists_expired_active_eval_claims(runner: CliRunner, isolated: Path) -> None:
    seed()
    out = kb(runner, "--as-of", "2026-11-15", "queue").stdout
    assert out.splitlines() == [
        "openai:gpt-4o-mini\textraction\ts2\texpired 2026-09-29T00:00:00.000Z",
        "1 claim due for remeasurement",
    ]


NOTE = [
    "note",
    "--model",
    "openai:gpt-4o-mini",
    "--task-class",
    "extraction",
    "--polarity",
    "weakness",
    "--statement",
    "drops nested fields",
    "--approver",
    "alice",
    "--ruled-out",
    "prompt",
    "--ruled-out",
    "tools",
    "--evidence",
    "journal:run-42:7",
]


def test_note_adds_a_human_claim_through_the_human_gate(runner: CliRunner, repo: Path) -> None:
    assert kb(runner, "init").exit_code == 0
    result = kb(runner, "--as-of", "2026-07-01T00:00:00Z", *NOTE)
    assert result.exit_code == 0
    claim = KnowledgeStore(STORE).read().claims[0]
    assert claim.id == "note/openai:gpt-4o-mini/extraction/2026-07-01T00:00:00.000Z"
    assert claim.claim_class == "human-editorial" and claim.metrics is None
    assert claim.expires_at == "2026-08-15T00:00:00.000Z"  # 45 days
    assert claim.author["id"] == "alice"
    body = git(repo, "log", "-1", "--format=%B")
    assert "Kb-Committer: alice" in body and "Kb-Gate: human; ruled out prompt, tools" in body


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--statement", "x" * 201], "limit is 200"),
        (["--evidence", "slack:thread"], "--evidence: 'slack:thread' must be"),
        (["--model", "gpt-4o"], "must be 'provider:model'"),
        (["--ruled-out", "vibes"], "Invalid value for '--ruled-out'"),
        (["--attempts", "0"], "attempts: must be a positive integer"),
    ],
)
def test_note_bad_input_exits_2_and_writes_nothing(
    runner: CliRunner, repo: Path, args: list[str], message: str
) -> None:
    seed()
    before = (repo / STORE).read_bytes()
    head = git(repo, "rev-parse", "HEAD")
    result = kb(runner, *NOTE, *args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert (repo / STORE).read_bytes() == before and git(repo, "rev-parse", "HEAD") == head


def test_note_requires_ruled_out(runner: CliRunner, isolated: Path) -> None:
    args = [a for a in NOTE if a not in ("--ruled-out", "prompt", "tools")]
    result = kb(runner, *args)
    assert result.exit_code == 2 and "Missing option '--ruled-out'" in result.stderr


def test_archive_and_deprecate(runner: CliRunner, repo: Path) -> None:
    seed()
    result = kb(runner, "archive", "w1", "--reason", "rejected", "--by", "bob")
    assert (
        result.exit_code == 0 and "kb: archive w1: 1 archived rejected (store v3)" in result.stdout
    )
    assert KnowledgeStore(STORE).read().get("w1").status == "archived"  # type: ignore[union-attr]
    assert kb(runner, "archive", "w1", "--reason", "stale").exit_code == 2
    assert kb(runner, "archive", "nope", "--reason", "stale").exit_code == 2
    dep = kb(runner, "deprecate", "openai:gpt-4o-mini")
    assert "1 archived deprecated (store v4)" in dep.stdout
    assert KnowledgeStore(STORE).read().get("s2").status == "archived"  # type: ignore[union-attr]
    again = kb(runner, "deprecate", "openai:gpt-4o-mini")
    assert again.exit_code == 0 and "nothing committed" in again.stdout
    assert "warning" not in result.stderr + dep.stderr  # in git the commit keeps the reason


def test_archive_outside_git_warns_that_the_reason_is_kept_nowhere(
    runner: CliRunner, isolated: Path
) -> None:
    seed()
    result = kb(runner, "archive", "w1", "--reason", "rejected")
    assert result.exit_code == 0 and "1 archived rejected" in result.stdout
    assert result.stderr.strip() == (
        "warning: not in git: the reason (rejected) is kept nowhere (git keeps it in the commit)"
    )
    dep = kb(runner, "deprecate", "openai:gpt-4o-mini")
    assert dep.exit_code == 0 and "the reason (deprecated) is kept nowhere" in dep.stderr


# -- bad input: one line on stderr, the documented exit code, the store byte-identical --------


MALFORMED = {
    "not-json": "{ nope",
    "bad-version": '{"version": -1, "hash": "' + "0" * 64 + '", "claims": []}',
    "bad-hash-format": '{"version": 1, "hash": "XYZ", "claims": []}',
    "bad-claim": '{"version": 1, "hash": "' + "0" * 64 + '", "claims": [{"id": "x"}]}',
    "hash-mismatch": '{"version": 1, "hash": "' + "0" * 64 + '", "claims": []}',
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
@pytest.mark.parametrize(
    "command",
    [
        ["list"],
        ["list", "--json"],
        ["show", "x"],
        ["queue"],
        ["verify"],
        NOTE,
        ["archive", "x", "--reason", "stale"],
        ["deprecate", "a:b"],
        ["init"],
    ],
    ids=lambda c: c[0] if c[0] != "list" or len(c) == 1 else "list-json",
)
def test_malformed_store_is_refused_by_every_command(
    runner: CliRunner, isolated: Path, kind: str, command: list[str]
) -> None:
    path = isolated / STORE
    path.write_text(MALFORMED[kind])
    before = path.read_bytes()
    result = kb(runner, *command)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("Error: ")
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--as-of", "yesterday", "list"], "--as-of: 'yesterday' is not an ISO date"),
        (["--as-of", "2026-07-01T10:00", "list"], "no UTC offset"),
        (["list", "--status", "bogus"], "Invalid value for '--status'"),
        (["list", "--frobnicate"], "No such option '--frobnicate'"),
        (["archive", "x", "--reason", "bored"], "Invalid value for '--reason'"),
        (["archive", "x", "--reason", "stale", "--attempts", "-2"], "attempts: must be a positive"),
        (["nonsense"], "No such command 'nonsense'"),
    ],
)
def test_bad_flags_exit_2(runner: CliRunner, isolated: Path, args: list[str], message: str) -> None:
    seed()
    before = Path(STORE).read_bytes()
    result = kb(runner, *args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert Path(STORE).read_bytes() == before


def test_local_edits_in_git_exit_2_and_are_kept(runner: CliRunner, repo: Path) -> None:
    seed()
    path = repo / STORE
    path.write_text(path.read_text() + " ")
    before = path.read_bytes()
    result = kb(runner, *NOTE)
    assert result.exit_code == 2
    assert "unstaged changes git has not committed" in result.stderr
    assert path.read_bytes() == before


def test_cas_exhausted_exits_3(
    runner: CliRunner, isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed()

    def conflict(*args: object, **kwargs: object) -> None:
        raise KnowledgeCasError("simulated concurrent writer")

    monkeypatch.setattr(KnowledgeStore, "_commit_locked", conflict)
    result = kb(runner, *NOTE)
    assert result.exit_code == 3
    assert "gave up after 3 attempts" in result.stderr


def test_kb_debug_shows_the_real_exception(runner: CliRunner, isolated: Path) -> None:
    Path(STORE).write_text("{ nope")
    with pytest.raises(ConfigError):
        runner.invoke(cli, ["list"], env={"KB_DEBUG": "1"}, catch_exceptions=False)


def test_errors_are_one_line_without_traceback_in_a_real_process(isolated: Path) -> None:
    Path(STORE).write_text("{ nope")
    proc = subprocess.run([sys.executable, "-m", "kb", "list"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith("Error: ") and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_store_commands_do_not_import_litellm(isolated: Path) -> None:
    seed()
    code = (
        "import sys\nfrom kb.cli import cli\n"
        "for args in (['--help'], ['list'], ['list', '--json'], ['queue'], ['verify']):\n"
        "    try:\n        cli.main(args=args, prog_name='kb')\n"
        "    except SystemExit:\n        pass\n"
        "print('litellm imported:', 'litellm' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip().splitlines()[-1] == "litellm imported: False"


@pytest.mark.parametrize("instant", ["0000-01-01", "9999-12-01", "9999-12-31T23:59:59Z"])
def test_instants_beyond_what_a_claim_can_live_through_exit_2(
    runner: CliRunner, isolated: Path, instant: str
) -> None:
    assert kb(runner, "init").exit_code == 0
    before = Path(STORE).read_bytes()
    for args in (["list"], NOTE):
        result = kb(runner, "--as-of", instant, *args)
        assert result.exit_code == 2 and result.stderr.startswith("Error: --as-of")
    assert Path(STORE).read_bytes() == before
