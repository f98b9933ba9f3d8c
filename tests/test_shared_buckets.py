"""Rate-limit buckets shared by processes on one key (SPEC 14.4): file, Redis, a lost share.

The property that matters: processes sharing a bucket see what one process
sending all of their calls would see (the mirrors, the hold, the calls in
flight, the learned cost), whichever process sends or hears each call.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from kb.engine.budget import SpendEnvelope
from kb.engine.pacing import BucketPace, RateReading, read_rate_headers
from kb.engine.requests import ModelSpec
from kb.engine.scheduler import Engine, EngineConfig
from kb.engine.shared_buckets import (
    BucketShare,
    FileShare,
    RateLimitSetting,
    RedisShare,
    SharedBucketPace,
    SharedBuckets,
    default_folder,
    open_share,
    rate_limit_setting,
)
from kb.errors import ConfigError
from tests.engine_helpers import plan
from tests.fake_ratelimit import rate_limited_server
from tests.redis_server import free_port, redis_server

KEY = ("openai", "http://127.0.0.1:9/v1", "OPENAI_API_KEY", "gpt-4o-mini")
WALL = 1_780_000_000.0


def reading(remaining: int, tokens: int = 100_000, retry: float | None = None) -> RateReading:
    headers = {
        "x-ratelimit-limit-requests": "600",
        "x-ratelimit-remaining-requests": str(remaining),
        "x-ratelimit-reset-requests": "100ms",
        "x-ratelimit-limit-tokens": "200000",
        "x-ratelimit-remaining-tokens": str(tokens),
    }
    if retry is not None:
        headers["retry-after"] = str(retry)
    found = read_rate_headers(headers, WALL)
    assert found is not None
    return found


def process(share: Any, tag: str) -> SharedBucketPace:
    sharing = SharedBuckets(share, f"{os.uname().nodename}/{os.getpid()}/{tag}", 0.0)
    made = sharing(KEY, 8)
    assert isinstance(made, SharedBucketPace)
    return made


# -- where: the setting ---------------------------------------------------------------------


def test_the_setting_comes_from_the_environment_then_the_spec_then_the_default() -> None:
    env = {"XDG_RUNTIME_DIR": "/run/user/1000"}
    assert rate_limit_setting(None, env, 1000) == RateLimitSetting("file", "/run/user/1000/kb")
    assert default_folder({}, 1000).endswith("/kb-1000")
    spec = "redis://ci-redis:6379/2"
    assert rate_limit_setting(spec, env, 1000) == RateLimitSetting("redis", spec)
    assert rate_limit_setting(spec, {**env, "KB_RATE_LIMITS": "process"}, 1).kind == "process"
    assert rate_limit_setting("file:/srv/kb", {}, 1) == RateLimitSetting("file", "/srv/kb")
    # a CI secret that is not set expands to an empty value: unset, not an error
    assert rate_limit_setting(None, {**env, "KB_RATE_LIMITS": " "}, 1).where == "/run/user/1000/kb"


@pytest.mark.parametrize(
    "bad",
    ["memcached://x:1", "file:", "redis://", "redis://h:notaport/0", "redis://h:1/x", "on"],
)
def test_a_bad_setting_is_refused_with_what_is_allowed(bad: str) -> None:
    with pytest.raises(ConfigError) as refused:
        rate_limit_setting(bad, {}, 0)
    assert str(refused.value).startswith("rate_limits: ")


def test_a_redis_password_is_never_shown() -> None:
    setting = rate_limit_setting("redis://:hunter2@ci-redis:6379/0", {}, 0)
    assert "hunter2" not in setting.shown and setting.shown == "redis://ci-redis:6379/0"
    with pytest.raises(ConfigError) as refused:
        rate_limit_setting("redis://:hunter2@ci-redis:port/0", {}, 0)
    assert "hunter2" not in str(refused.value)


def test_calls_that_never_leave_the_machine_are_not_shared(tmp_path: Path) -> None:
    sharing = SharedBuckets(FileShare(RateLimitSetting("file", str(tmp_path))), "h/1/a", 0.0)
    assert sharing(("scripted", "", "", "m"), 8) is None
    assert sharing(("local", "", "", "smollm2"), 8) is None
    assert isinstance(sharing(KEY, 8), SharedBucketPace)


# -- two processes sharing = one process sending all their calls ------------------------------

STEPS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),
        st.sampled_from(["send", "answer", "limited", "unsent"]),
        st.integers(0, 600),
    ),
    max_size=40,
)


@settings(max_examples=60)
@given(steps=STEPS)
def test_two_processes_sharing_a_bucket_see_what_one_process_sees(
    steps: list[tuple[str, str, int]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    from kb.engine import shared_buckets

    # one clock for both (the offset is never re-read): the sharing is compared exactly,
    # apart from how two processes read the wall clock
    moved, shared_buckets.OFFSET_MOVED_S = shared_buckets.OFFSET_MOVED_S, math.inf
    try:
        _two_processes_against_one(steps, tmp_path_factory)
    finally:
        shared_buckets.OFFSET_MOVED_S = moved


def _two_processes_against_one(
    steps: list[tuple[str, str, int]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    share = FileShare(RateLimitSetting("file", str(tmp_path_factory.mktemp("share"))))
    sharers = {"a": process(share, "a"), "b": process(share, "b")}
    alone = BucketPace(1_000)  # one process with every call (a window that never binds)
    for sharer in sharers.values():
        sharer.ceiling = sharer.window = 1_000
    mine: dict[str, list[int]] = {"a": [], "b": []}
    now = 0.0
    for who, step, value in steps:
        now += 0.05
        pace = sharers[who]
        if step == "send":
            shared, expected = pace.try_send(20, now), alone.try_send(20, now)
            assert shared[0] == expected[0]
            if shared[0] is not None:
                mine[who].append(shared[0])
        elif mine[who]:
            seq = mine[who].pop(value % len(mine[who]))
            if step == "unsent":
                pace.unsent(seq)
                alone.unsent(seq)
            else:
                limited = step == "limited"
                said = reading(value, 1000 * value, retry=2.0 if limited else None)
                assert pace.answered(seq, said, limited, now) == alone.answered(
                    seq, said, limited, now
                )
    probe = sharers["a"]
    probe.try_send(10**9, now)  # loads the shared state (too large a call: nothing sent)
    alone.try_send(10**9, now)
    assert probe.sent == alone.sent
    assert probe.in_flight == alone.in_flight
    assert probe.hold_until == alone.hold_until
    assert (probe.requests, probe.tokens) == (alone.requests, alone.tokens)
    assert probe.tokens_per_call == alone.tokens_per_call


class RetriedShare(BucketShare):
    """A share on which every update loses one race first (Redis's WATCH retries)."""

    def __init__(self) -> None:
        self.setting = RateLimitSetting("redis", "redis://retried:6379/0")
        self.document: dict[str, Any] | None = None

    def update(self, bucket: str, change: Any) -> None:
        change(self.document)  # computed, then a concurrent writer won: thrown away
        self.document = change(self.document)


def test_a_step_retried_after_a_concurrent_write_leaves_no_phantom_call() -> None:
    share = RetriedShare()
    pace = process(share, "a")
    sent = [pace.try_send(1, 0.0)[0] for _ in range(3)]
    assert sent == [1, 2, 3]
    for seq in sent:
        pace.answered(seq or 0, reading(500), False, 0.1)
    assert share.document is not None
    assert share.document["in_flight"] == [] and share.document["sent"] == 3


def test_a_429_one_process_met_holds_the_others(tmp_path: Path) -> None:
    share = FileShare(RateLimitSetting("file", str(tmp_path)))
    first, second = process(share, "a"), process(share, "b")
    seq, _ = first.try_send(20, 0.0)
    assert seq is not None
    first.answered(seq, reading(0, retry=30.0), True, 0.3)
    sent, wait = second.try_send(20, 0.4)
    assert sent is None and wait is not None and wait > 0  # held, looked at again soon
    assert second.hold_until == pytest.approx(30.3)


def test_each_process_keeps_its_own_window(tmp_path: Path) -> None:
    share = FileShare(RateLimitSetting("file", str(tmp_path)))
    first, second = process(share, "a"), process(share, "b")
    first.window = second.window = 2
    assert [first.try_send(1, 0.0)[0] for _ in range(3)] == [1, 2, None]
    assert [second.try_send(1, 0.0)[0] for _ in range(2)] == [3, 4]  # its own two


def test_a_dead_processes_calls_in_flight_are_dropped(tmp_path: Path) -> None:
    share = FileShare(RateLimitSetting("file", str(tmp_path)))
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    killed = SharedBuckets(share, f"{os.uname().nodename}/{dead.stdout.strip()}/x", 0.0)
    ghost = killed(KEY, 8)
    assert ghost is not None
    ghost.window = 1
    assert ghost.try_send(1, 0.0)[0] == 1  # sent, then its process died
    survivor = process(share, "s")
    survivor.try_send(1, 0.1)
    assert set(survivor.in_flight) == {2}  # the dead process's call is gone


def test_an_idle_torn_or_foreign_document_is_forgotten(tmp_path: Path) -> None:
    share = FileShare(RateLimitSetting("file", str(tmp_path)))
    first = process(share, "a")
    first.answered(first.try_send(1, 0.0)[0] or 0, reading(0, retry=60.0), True, 0.1)
    (document,) = tmp_path.glob("*.json")
    later = process(share, "b")
    assert later.try_send(1, 0.2)[0] is None  # held by the first one's 429
    later_still = process(share, "c")
    assert later_still.try_send(1, 0.2 + 901.0)[0] is not None  # 15 min idle: forgotten
    document.write_text('{"format": 1, "bucket"')  # torn by a killed writer
    assert process(share, "d").try_send(1, 1000.0)[0] is not None
    document.write_text(json.dumps({"format": 1, "bucket": "other", "sent": 99}))
    assert process(share, "e").try_send(1, 1000.0)[0] == 1


# -- Redis ---------------------------------------------------------------------------------


def test_processes_on_many_machines_share_a_bucket_through_redis() -> None:
    with redis_server() as url:
        setting = rate_limit_setting(url, {}, 0)
        shares = RedisShare(setting), RedisShare(setting)
        first, second = process(shares[0], "a"), process(shares[1], "b")
        seq, _ = first.try_send(20, 0.0)
        assert seq == 1
        first.answered(seq, reading(0, retry=30.0), True, 0.3)
        assert second.try_send(20, 0.4)[0] is None  # held, as the first process was told
        assert second.try_send(20, 31.0)[0] == 2  # the send numbers are the bucket's
        client = redis.Redis.from_url(url)
        (key,) = client.keys("kb:rate-limits:*")
        assert b"OPENAI_API_KEY" in key  # the variable's name, never a value
        assert 0 < client.pttl(key) <= 900_000  # forgotten when idle
        assert json.loads(client.get(key) or b"{}")["sent"] == 2
        client.close()
        for share in shares:
            share.close()


def test_a_redis_that_is_down_is_one_warning_and_the_job_goes_on() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    config = EngineConfig(
        concurrency=4, per_provider=4, timeout_s=30.0, rate_limits=rate_limit_setting(url, {}, 0)
    )
    with rate_limited_server(600, 10**9) as (base, _):
        engine = Engine.build(config)
        spec = ModelSpec(
            "openai:gpt-4o-mini", params={"api_base": f"{base}/v1", "api_key": "sk-test"}
        )
        results = engine.run(plan(spec, [f"q{i}" for i in range(6)]), SpendEnvelope(cap=None))
    assert [r.status for r in results] == ["ok"] * 6
    (line,) = engine.warnings
    assert line.startswith(f"rate limits shared through {url}: ")
    assert line.endswith("; pacing per process from now on")
    assert engine.sharing is not None and engine.sharing.share is None


def test_a_folder_that_cannot_be_written_is_one_warning_too(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the folder should be")
    sharing = SharedBuckets(open_share(RateLimitSetting("file", str(blocked / "kb"))), "h/1/a", 0.0)
    said: list[str] = []
    sharing.on_lost = said.append
    pace = sharing(KEY, 8)
    assert pace is not None
    assert pace.try_send(1, 0.0)[0] == 1 and pace.try_send(1, 0.0)[0] == 2
    assert len(said) == 1 and "pacing per process from now on" in said[0]


# -- through the command line -----------------------------------------------------------------


def _store_and_spec(where: Path, rate_limits: str | None, base: str | None = None) -> Path:
    subprocess.run(["git", "init", "-q"], cwd=where, check=True)
    assert (
        subprocess.run(
            [sys.executable, "-m", "kb", "init"], cwd=where, capture_output=True
        ).returncode
        == 0
    )
    if base is None:
        model = 'model = "scripted:a"\nparams = { responses = { "q" = "a" } }'
    else:
        model = (
            f'model = "openai:gpt-4o-mini"\nparams = {{ api_base = "{base}/v1", api_key = "sk-x" }}'
        )
    setting = f'rate_limits = "{rate_limits}"\n' if rate_limits is not None else ""
    (where / "s.toml").write_text(
        f'[sweep]\ncommitter = "me"\nallow_unbounded = true\n{setting}\n[[models]]\n{model}\n\n'
        '[[cases]]\nname = "c"\ntask_class = "t"\nprompt = "q"\n'
        'graders = [{ kind = "golden", expected = "a" }]\n'
    )
    return where / "rulvar.models.json"


def _sweep(where: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kb", "sweep", "s.toml", "--observed-at", "2026-11-29T02:00:00Z"],
        cwd=where,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )


@pytest.mark.parametrize(
    ("in_spec", "in_env", "said"),
    [
        ("memcached://x", None, "Error: s.toml: sweep.rate_limits: must be file:DIR, "),
        (None, "bogus", "Error: KB_RATE_LIMITS: must be file:DIR, redis://HOST:PORT/DB or "),
    ],
)
def test_a_bad_setting_is_one_line_exit_2_and_the_store_untouched(
    in_spec: str | None, in_env: str | None, said: str, tmp_path: Path
) -> None:
    store = _store_and_spec(tmp_path, in_spec)
    before = store.read_bytes()
    done = _sweep(tmp_path, **({"KB_RATE_LIMITS": in_env} if in_env else {}))
    assert done.returncode == 2
    assert (
        [line for line in done.stderr.splitlines() if line.startswith("Error")]
        == [line for line in done.stderr.splitlines() if line.startswith(said)]
        != []
    )
    assert store.read_bytes() == before


def test_a_night_with_redis_down_says_so_once_and_commits(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    with rate_limited_server(600, 10**9) as (base, _):
        _store_and_spec(tmp_path, url, base)
        done = _sweep(tmp_path)
    assert done.returncode == 0, done.stderr
    lost = [line for line in done.stderr.splitlines() if "pacing per process" in line]
    assert lost == [f"warning: rate limits shared through {url}: " + lost[0].split(": ", 2)[2]]
    assert "Connection refused; pacing" in lost[0] and "committed: store v0" in done.stdout


# -- a hostile machine, a hostile document (found by an attack on this change) ----------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("sent", 1e999),
        ("sent", -1),
        ("sent", True),
        ("limited_seqs", [float("inf")]),
        ("in_flight", [[10**400, 1.0, WALL, "h/1/x"]]),
        ("in_flight", [[5, float("nan"), WALL, "h/1/x"]]),
        ("in_flight", [[5, 1.0, WALL, f"{os.uname().nodename}/{10**20}/x"]]),
        ("hold_until", "soon"),
        ("requests", [1, 2]),
        ("doubted", "yes"),
    ],
)
def test_a_hostile_document_is_forgotten_whole_never_a_failed_step(
    field: str, value: Any, tmp_path: Path
) -> None:
    share = FileShare(RateLimitSetting("file", str(tmp_path)))
    first = process(share, "a")
    first.answered(first.try_send(1, 0.0)[0] or 0, reading(500), False, 0.1)
    (document,) = tmp_path.glob("*.json")
    found = json.loads(document.read_text())
    found[field] = value
    document.write_text(json.dumps(found))  # (Python writes NaN and Infinity as JSON does not)
    later = process(share, "b")
    sent, _ = later.try_send(1, 0.2)
    assert sent is not None and later.hold_until < 0.2  # a step, and no hold out of nothing


def test_a_document_nested_past_the_recursion_limit_is_forgotten(tmp_path: Path) -> None:
    share = FileShare(RateLimitSetting("file", str(tmp_path)))
    process(share, "a").try_send(1, 0.0)
    (document,) = tmp_path.glob("*.json")
    document.write_text("[" * 100_000)
    assert process(share, "b").try_send(1, 0.1)[0] == 1


def test_a_folder_other_users_can_write_is_refused_never_written(tmp_path: Path) -> None:
    folder = tmp_path / "kb-1000"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)  # made first by someone else, open to all (the default's /tmp path)
    sharing = SharedBuckets(FileShare(RateLimitSetting("file", str(folder))), "h/1/a", 0.0)
    said: list[str] = []
    sharing.on_lost = said.append
    pace = sharing(KEY, 8)
    assert pace is not None and pace.try_send(1, 0.0)[0] == 1
    assert said == [
        f"rate limits shared through file:{folder}: open to other users (mode 777; chmod 700 "
        "it); pacing per process from now on"
    ]
    assert list(folder.iterdir()) == []


def test_a_planted_link_is_never_followed(tmp_path: Path) -> None:
    import hashlib

    folder = tmp_path / "kb"
    folder.mkdir(mode=0o700)
    victim = tmp_path / "important.txt"
    victim.write_text("the user's file")
    name = hashlib.sha256(process(None, "x").bucket.encode()).hexdigest()[:32]
    (folder / f"{name}.json.{os.getpid()}").symlink_to(victim)
    (folder / f"{name}.json").symlink_to(victim)
    pace = process(FileShare(RateLimitSetting("file", str(folder))), "a")
    pace.try_send(1, 0.0)
    assert victim.read_text() == "the user's file"


def test_a_lock_held_by_a_stopped_process_is_given_up_not_waited_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fcntl

    from kb.engine import shared_buckets

    monkeypatch.setattr(shared_buckets, "LOCK_WAIT_S", 0.05)
    share = FileShare(RateLimitSetting("file", str(tmp_path)))
    pace = process(share, "a")
    pace.try_send(1, 0.0)
    (lock,) = tmp_path.glob("*.lock")
    holder = os.open(lock, os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)  # a process stopped (Ctrl-Z) inside its step
    said: list[str] = []
    assert pace.sharing is not None
    pace.sharing.on_lost = said.append
    try:
        assert pace.try_send(1, 0.1)[0] == 2
    finally:
        os.close(holder)
    assert len(said) == 1 and "its lock was held for 0 s" in said[0]


def test_a_share_too_slow_to_pace_by_is_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    from kb.engine import shared_buckets

    monkeypatch.setattr(shared_buckets, "SLOW_STEP_S", 0.0)  # every step is "too slow"
    share = RetriedShare()
    pace = process(share, "a")
    said: list[str] = []
    assert pace.sharing is not None
    pace.sharing.on_lost = said.append
    for _ in range(shared_buckets.SLOW_STEPS + 5):
        pace.try_send(1, 0.0)
    assert len(said) == 1 and "on average (more than 0 ms: too far to pace by)" in said[0]


def test_credentials_in_an_endpoint_never_reach_the_shared_state(tmp_path: Path) -> None:
    key = ("openai", "https://kbuser:gw-SECRET@gateway.example:8443/v1?api-key=S2", "K", "m")
    sharing = SharedBuckets(FileShare(RateLimitSetting("file", str(tmp_path))), "h/1/a", 0.0)
    pace = sharing(key, 8)
    assert pace is not None and pace.try_send(1, 0.0)[0] == 1
    (document,) = tmp_path.glob("*.json")
    text = document.read_text()
    assert "SECRET" not in text and "S2" not in text
    assert "https://gateway.example:8443/v1" in text
    assert document.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize(
    "url", ["redis://:hunter2@ci-redis:port/0", "rediss://hunter2@ci-redis:port/0"]
)
def test_a_token_in_a_bad_redis_url_is_never_echoed(url: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        rate_limit_setting(url, {}, 0)
    assert "hunter2" not in str(refused.value)
    store = _store_and_spec(tmp_path, url)
    before = store.read_bytes()
    done = _sweep(tmp_path)
    assert done.returncode == 2 and "hunter2" not in done.stderr + done.stdout
    assert "://***@ci-redis:port/0: the port is not a number from 1 to 65535" in (done.stderr)
    assert store.read_bytes() == before


def test_a_redis_url_whose_query_redis_cannot_read_is_refused() -> None:
    with pytest.raises(ConfigError) as refused:
        rate_limit_setting("redis://:pw@host:6379/0?db=x", {}, 0)
    assert str(refused.value).startswith("rate_limits: redis://***@host:6379/0?…: Invalid value")


def test_a_429_for_an_account_that_cannot_pay_spends_its_retries() -> None:
    from kb.engine.transports.mock import MockTransport
    from kb.errors import ProviderFailure

    def provider(run: Any, occurrence: int) -> object:
        raise ProviderFailure(
            "RateLimitError: You exceeded your current quota (insufficient_quota)",
            retryable=True,
            status_code=429,
        )

    engine = Engine(EngineConfig(concurrency=1, max_retries=2, backoff_base_s=0.0))
    engine.transport = MockTransport(provider)
    (result,) = engine.run(plan(ModelSpec("openai:m"), ["a"]), SpendEnvelope.from_usd(None))
    assert (result.status, result.attempts) == ("error", 3)


def test_a_429_with_no_real_hold_backs_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from kb.engine import scheduler
    from kb.engine.transports.base import Reply
    from kb.engine.transports.mock import MockTransport
    from kb.errors import ProviderFailure

    waits: list[int] = []
    real = scheduler.backoff_s

    def recorded(config: EngineConfig, attempt: int, retry_after: float | None) -> float:
        waits.append(attempt)
        return real(config, attempt, retry_after) * 0  # counted, not slept

    monkeypatch.setattr(scheduler, "backoff_s", recorded)
    refusals = [0]

    def provider(run: Any, occurrence: int) -> Reply:
        if refusals[0] < 4:
            refusals[0] += 1
            raise ProviderFailure(
                "429", retryable=True, status_code=429, headers={"retry-after": "0"}
            )
        return Reply("ok")

    engine = Engine(EngineConfig(concurrency=1, max_retries=0, backoff_base_s=0.01))
    engine.transport = MockTransport(provider)
    (result,) = engine.run(plan(ModelSpec("openai:m"), ["a"]), SpendEnvelope.from_usd(None))
    assert result.status == "ok" and waits == [1, 2, 3, 4]  # growing back-off, no attempt spent


def test_a_redis_that_refuses_the_setting_is_exit_2_before_any_call(tmp_path: Path) -> None:
    with redis_server() as url:
        client = redis.Redis.from_url(url)
        client.config_set("requirepass", "s3cret")  # the server wants a password
        client.close()
        port = url.rsplit(":", 1)[1].split("/")[0]
        with rate_limited_server(600, 10**9) as (base, limits):
            store = _store_and_spec(tmp_path, None, base)
            before = store.read_bytes()
            for wrong, said in (
                (f"redis://127.0.0.1:{port}/0", "it needs a password"),
                (f"redis://:wrong@127.0.0.1:{port}/0", "invalid username-password"),
                (f"redis://:s3cret@127.0.0.1:{port}/99", "DB index is out of range"),
            ):
                done = _sweep(tmp_path, KB_RATE_LIMITS=wrong)
                assert done.returncode == 2, done.stderr
                (line,) = [x for x in done.stderr.splitlines() if x.startswith("Error")]
                assert line.startswith("Error: rate_limits: redis://127.0.0.1:"), line
                assert said in line and "s3cret" not in done.stderr + done.stdout
            assert limits.served == 0 and store.read_bytes() == before
            good = _sweep(tmp_path, KB_RATE_LIMITS=f"redis://:s3cret@127.0.0.1:{port}/0")
            assert good.returncode == 0 and "pacing per process" not in good.stderr


def test_a_relative_folder_in_the_spec_is_the_specs_own() -> None:
    spec_folder = Path("/srv/ci/sweeps")
    assert rate_limit_setting("file:rl", {}, 0, spec_folder).where == "/srv/ci/sweeps/rl"
    env = {"KB_RATE_LIMITS": "file:rl"}  # the environment's: the current folder's, as given
    assert rate_limit_setting(None, env, 0, spec_folder).where == "rl"


def test_a_port_out_of_range_says_so() -> None:
    with pytest.raises(ConfigError) as refused:
        rate_limit_setting("redis://127.0.0.1:99999/0", {}, 0)
    assert "the port is not a number from 1 to 65535" in str(refused.value)


# -- found by a review of this change ---------------------------------------------------------


def test_a_password_in_a_redis_urls_query_is_never_echoed() -> None:
    for url in ("redis://h:99999/0?password=s3cret", "redis://h:6379/x?password=s3cret"):
        with pytest.raises(ConfigError) as refused:
            rate_limit_setting(url, {}, 0)
        assert "s3cret" not in str(refused.value) and "?…" in str(refused.value)


def test_a_night_of_429s_never_overflows_its_back_off() -> None:
    from kb.engine.scheduler import backoff_s

    assert backoff_s(EngineConfig(), 5000, None) <= EngineConfig().backoff_max_s


def test_a_per_minute_429_that_mentions_billing_is_still_a_rate_limit() -> None:
    from kb.engine.scheduler import rate_limited
    from kb.errors import ProviderFailure

    gemini = (
        "RESOURCE_EXHAUSTED: You exceeded your current quota, please check your plan and "
        "billing details"
    )
    openai = "RateLimitError: {'code': 'insufficient_quota', 'message': 'You exceeded ...'}"
    assert rate_limited(ProviderFailure(gemini, retryable=True, status_code=429))
    assert not rate_limited(ProviderFailure(openai, retryable=True, status_code=429))


def test_a_step_that_raises_anything_loses_the_share_never_the_night(tmp_path: Path) -> None:
    class Broken(BucketShare):
        setting = RateLimitSetting("file", str(tmp_path))

        def update(self, bucket: str, change: Any) -> None:
            raise ImportError("no fcntl here")  # (a Windows kb)

    pace = process(Broken(), "a")
    said: list[str] = []
    assert pace.sharing is not None
    pace.sharing.on_lost = said.append
    assert pace.try_send(1, 0.0)[0] == 1 and pace.try_send(1, 0.0)[0] == 2
    assert len(said) == 1 and "ImportError: no fcntl here" in said[0]


def test_a_judge_run_belongs_to_the_cell_it_judged() -> None:
    from kb.store.records import RunRecord
    from kb.sweep.shard_join import cell_of

    judge = RunRecord.model_validate(
        {
            "format": 2, "kind": "judge", "label": "judge:openai:a/c1/0", "model": "openai:judge",
            "case": "c1", "taskClass": "t", "repeat": 0, "status": "ok", "output": "{}",
            "costUsd": 0.0, "latencyMs": None, "attempts": 1,
        }
    )  # fmt: skip
    assert judge.subject_key == "openai:judge" and cell_of(judge) == "openai:a"
