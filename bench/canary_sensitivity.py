"""Does the canary see a provider's silent change? Both tiers, on the bundled real model.

    python bench/canary_sensitivity.py --trials 20
    python bench/canary_sensitivity.py --drill "chat template"   # the README's drill

SmolLM2-135M runs as llama.cpp's OpenAI-compatible server on loopback
(``python -m kb.engine.providers.local``), and a small proxy sits between kb
and it. kb reaches the model through litellm as ``openai:smollm2`` at the
proxy. Calibration (``kb canary --calibrate``) and the exact baseline (one
committing ``kb canary``) are made with the proxy passing everything through.
Then, per condition, the proxy applies one silent change and each trial is
one model-night of the canary (``kb canary --no-commit --json`` at a new
instant, so new seeds):

* ``none`` — nothing changed, and the server is restarted before every trial;
* ``system prompt`` — a system message added to every request;
* ``temperature 0.6`` — the client's temperature overridden (every request);
* ``top_p 0.5`` — the client's top_p overridden (greedy answers cannot change);
* ``chat template`` — the proxy forwards to a second server started with
  llama.cpp's ``llama2`` template instead of the model's own;
* ``shorter context`` — each message cut to its last 96 characters.

``--drill CHANGE`` runs the README's drill instead: calibrate, one unchanged
``kb canary``, then the same with CHANGE applied, printing what kb prints.

Printed per condition: first-night detection by the exact tier alone and by
either tier (with a 95 % Wilson interval over the trials), and the pass-rate
shift the change causes on the demo's SmolLM2 cells (one full ``kb sweep``
of ``sweeps/cases/smollm2-cases.toml`` through the proxy, against the same
sweep unchanged). Then the sensitive tier's false alarms over ``--null``
simulated no-change model-nights: for each calibrated probe, the answers of
the real model (its baseline and every unchanged trial's) are the true
distribution; a fresh baseline of 64 and a night of 16 are drawn from it and
judged by kb's own ``judge_member`` — the test's level on the real model's
answer distributions, with its 95 % upper bound.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kb.stats import wilson_interval  # noqa: E402
from kb.sweep.sensitive import SensitiveSettings, judge_member, probe_id  # noqa: E402

PYTHON = sys.executable
KB = str(Path(PYTHON).with_name("kb"))
INJECTED = "You are a helpful assistant. Keep every answer short and friendly."
CONDITIONS = [
    "none",
    "system prompt",
    "temperature 0.6",
    "top_p 0.5",
    "chat template",
    "shorter context",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """llama.cpp's server for the bundled model, as a separate process."""

    def __init__(self, template: str | None = None) -> None:
        self.template = template
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = [PYTHON, "-m", "kb.engine.providers.local", "--port", str(self.port)]
        if self.template:
            args += ["--chat-template", self.template]
        self.process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2)
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.3)
        raise RuntimeError("the llama.cpp server did not start")

    def stop(self) -> None:
        if self.process is not None:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=30)
            self.process = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Proxy:
    """Forwards chat completions to a server, changing each request as ``change`` says."""

    def __init__(self, servers: dict[str, Server]) -> None:
        self.change = "none"
        self.servers = servers
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                target = proxy.rewrite(body)
                request = urllib.request.Request(
                    f"{target}/v1/chat/completions",
                    data=json.dumps(body).encode(),
                    headers={"Content-Type": "application/json"},
                )
                try:
                    with urllib.request.urlopen(request, timeout=300) as reply:
                        status, data = reply.status, reply.read()
                except urllib.error.HTTPError as error:
                    status, data = error.code, error.read()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def rewrite(self, body: dict[str, Any]) -> str:
        change = self.change
        messages = body.get("messages", [])
        if change == "system prompt":
            if messages and messages[0].get("role") == "system":
                messages[0]["content"] = INJECTED + "\n" + messages[0]["content"]
            else:
                messages.insert(0, {"role": "system", "content": INJECTED})
        elif change == "temperature 0.6":
            body["temperature"] = 0.6
        elif change == "top_p 0.5":
            body["top_p"] = 0.5
        elif change == "shorter context":
            for message in messages:
                message["content"] = str(message.get("content", ""))[-96:]
        key = "template" if change == "chat template" else "main"
        return self.servers[key].base

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def kb(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KB, "--store", str(workspace / "rulvar.models.json"), *args],
        cwd=workspace,
        capture_output=True,
        text=True,
        check=False,
    )


def write_workspace(workspace: Path, base: str, probes: Path, max_tokens: int) -> tuple[Path, Path]:
    """The canary spec (no cases to speak of) and the demo cells' sweep spec."""
    model = (
        '[[models]]\nmodel = "openai:smollm2"\n'
        f'params = {{ api_base = "{base}", api_key = "none", max_tokens = 48, '
        "price = { input_per_mtok = 0, output_per_mtok = 0 } }\n"
    )
    budgets = "[budgets]\ntarget_usd = 0.001\ncanary_usd = 0.001\nmax_total_usd = 100.0\n"
    canary = (
        "[canary]\nprompts = [\n"
        + "".join(f"  {json.dumps(p)},\n" for p in _default_canary())
        + f"]\n\n[canary.sensitive]\nprobes = {json.dumps(str(probes))}\n"
        + f"max_tokens = {max_tokens}\n"
    )
    cases = ROOT / "sweeps" / "cases" / "smollm2-cases.toml"
    spec = workspace / "canary.toml"
    spec.write_text(
        f'include = ["{cases}"]\n\n[sweep]\ncommitter = "bench"\nconcurrency = 1\n'
        'sampling = "full"\n\n' + budgets + "\n" + model + "\n" + canary
    )
    return spec, cases


def _default_canary() -> list[str]:
    import tomllib

    data = tomllib.loads((ROOT / "canaries" / "default.toml").read_text())
    return list(data["prompts"])


@contextmanager
def servers() -> Iterator[dict[str, Server]]:
    found = {"main": Server(), "template": Server("llama2")}
    try:
        for server in found.values():
            server.start()
        yield found
    finally:
        for server in found.values():
            server.stop()


def instant(i: int) -> str:
    """The ``i``-th hour from 2026-09-01: in the past (kb refuses a sweep observed later
    than now), a new instant per trial (new seeds)."""
    day, hour = divmod(i, 24)
    return f"2026-{9 + day // 28:02d}-{1 + day % 28:02d}T{hour:02d}:00:00Z"


def parsed(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """A ``--json`` report, or a clear stop with kb's own error line."""
    if not done.stdout.strip():
        raise SystemExit(f"kb said: {done.stderr.strip().splitlines()[-1:]}")
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def swept_rates(workspace: Path, spec: Path, at: str) -> dict[str, float]:
    """Each task class's pass rate in one full, uncommitted ``kb sweep`` observed ``at``."""
    swept = kb(
        workspace, "sweep", str(spec), "--no-commit", "--json", "--quiet", "--observed-at", at
    )
    return cell_rates(parsed(swept))


def cell_rates(report: dict[str, Any]) -> dict[str, float]:
    return {cell["taskClass"]: cell["passRate"] for cell in report["cells"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--null", type=int, default=1000, help="simulated no-change nights")
    parser.add_argument("--conditions", default=",".join(CONDITIONS))
    parser.add_argument("--no-cells", action="store_true", help="skip the pass-rate shifts")
    parser.add_argument("--keep", type=Path, default=None, help="keep the workspace here")
    parser.add_argument("--max-tokens", type=int, default=4, help="of each sensitive sample")
    parser.add_argument("--drill", choices=CONDITIONS[1:], help="the README's drill, one change")
    args = parser.parse_args()
    if args.drill:
        drill(args.drill, args.max_tokens)
        return
    conditions = [c.strip() for c in args.conditions.split(",") if c.strip()]
    workspace = args.keep or Path(tempfile.mkdtemp(prefix="kb-canary-bench-"))
    workspace.mkdir(parents=True, exist_ok=True)
    started = time.time()
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    probes = workspace.parent / f"{workspace.name}-private-probes.json"
    results: dict[str, dict[str, Any]] = {}
    samples: dict[str, Counter[str]] = {}
    with servers() as found:
        proxy = Proxy(found)
        try:
            spec, _ = write_workspace(workspace, proxy.base, probes, args.max_tokens)
            assert kb(workspace, "init").returncode == 0
            calibrated = kb(workspace, "--as-of", instant(0), "canary", "--calibrate", str(spec))
            print(calibrated.stdout.strip() or calibrated.stderr.strip(), file=sys.stderr)
            assert calibrated.returncode == 0, calibrated.stderr
            first = kb(workspace, "--as-of", instant(1), "canary", str(spec))  # exact baseline
            assert first.returncode == 0, first.stderr
            baselines = json.loads((workspace / "rulvar.models.canary.json").read_text())
            kept = json.loads(probes.read_text())["models"]["openai:smollm2"]
            base_counts = baselines["subjects"]["openai:smollm2"]["sensitive"]
            base_readings = baselines["subjects"]["openai:smollm2"].get("sensitiveLogprobs", {})
            for prompt in kept:
                samples[prompt] = Counter(base_counts[probe_id(prompt)])
            reference = None
            if not args.no_cells:
                reference = swept_rates(workspace, spec, instant(2))
            tick = 10
            for condition in conditions:
                proxy.change = condition
                exact = either = sensitive_only = by_answers = by_logprobs = 0
                p_values = []
                for _trial in range(args.trials):
                    if condition == "none":
                        found["main"].stop()
                        found["main"].start()
                    tick += 1
                    ran = kb(
                        workspace,
                        "--as-of",
                        instant(tick),
                        "canary",
                        str(spec),
                        "--no-commit",
                        "--json",
                    )
                    record = json.loads(ran.stdout)[0]
                    drift = record["status"] == "drift"
                    tier = record.get("sensitive") or {}
                    shift = tier.get("status") == "shift"
                    exact += drift
                    either += drift or shift
                    sensitive_only += shift and not drift
                    by_logprobs += shift and "logprobs moved" in tier.get("line", "")
                    by_answers += shift and "answers moved" in tier.get("line", "")
                    p_values.append(
                        min(
                            (
                                p[key]
                                for p in tier.get("probes", [])
                                for key in ("pValue", "logprobPValue")
                                if p.get(key) is not None
                            ),
                            default=1.0,
                        )
                    )
                    if condition == "none" and tier.get("probes"):
                        for prompt, probe in zip(kept, tier["probes"], strict=False):
                            samples[prompt].update(probe["counts"])
                shift_pts = None
                if reference is not None:
                    tick += 1
                    rates = swept_rates(workspace, spec, instant(tick))
                    shift_pts = max(abs(rates[c] - reference.get(c, 0.0)) for c in rates) * 100
                results[condition] = {
                    "exact": exact,
                    "either": either,
                    "sensitive_only": sensitive_only,
                    "by_answers": by_answers,
                    "by_logprobs": by_logprobs,
                    "trials": args.trials,
                    "shift_pts": shift_pts,
                    "median_p": sorted(p_values)[len(p_values) // 2] if p_values else None,
                }
                print(f"{condition}: {results[condition]}", file=sys.stderr, flush=True)
        finally:
            proxy.close()
    readings = {prompt: base_readings.get(probe_id(prompt), []) for prompt in kept}
    alarms = null_alarms(samples, readings, args.null) if args.null else 0
    report(results, alarms, args, kept, time.time() - started)
    if args.keep is None:
        shutil.rmtree(workspace, ignore_errors=True)
        probes.unlink(missing_ok=True)


def drill(change: str, max_tokens: int) -> None:
    """Calibrate, a night unchanged, a night with ``change``: what kb prints, as a user sees it."""
    workspace = Path(tempfile.mkdtemp(prefix="kb-canary-drill-"))
    probes = workspace.parent / f"{workspace.name}-private-probes.json"
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)

    def show(title: str, done: subprocess.CompletedProcess[str]) -> None:
        print(f"$ {title}   # exit {done.returncode}")
        for line in (done.stdout + done.stderr).strip().splitlines():
            print(f"  {line}")
        print()

    with servers() as found:
        proxy = Proxy(found)
        try:
            spec, _ = write_workspace(workspace, proxy.base, probes, max_tokens)
            assert kb(workspace, "init").returncode == 0
            show(
                "kb canary --calibrate canary.toml",
                kb(workspace, "--as-of", instant(0), "canary", "--calibrate", str(spec)),
            )
            show("kb canary canary.toml", kb(workspace, "--as-of", instant(1), "canary", str(spec)))
            print(f"# the proxy now applies: {change} (kb is not told)\n")
            proxy.change = change
            show(
                "kb canary canary.toml --no-commit",
                kb(workspace, "--as-of", instant(2), "canary", str(spec), "--no-commit"),
            )
        finally:
            proxy.close()
    shutil.rmtree(workspace, ignore_errors=True)
    probes.unlink(missing_ok=True)


def null_alarms(
    truth: dict[str, Counter[str]], readings: dict[str, list[dict[str, float]]], nights: int
) -> int:
    """No-change model-nights judged by kb's judge_member: fresh baseline 64, night 16.

    The logprob readings are the real model's baseline readings, four of them a night:
    llama.cpp on one machine reads the same logprobs every time (the ``none`` trials,
    server restarted, check that on the real server), so they add their tests to the
    Bonferroni family and no alarm of their own.
    """
    prompts = list(truth)
    settings = SensitiveSettings(Path("unused"), samples=16, alpha=0.01)
    rng = random.Random(20261202)
    from kb.engine.runs import RunResult

    alarms = 0
    for _ in range(nights):
        baselines = {}
        runs = []
        for prompt in prompts:
            answers, weights = zip(*sorted(truth[prompt].items()), strict=True)
            baselines[probe_id(prompt)] = Counter(rng.choices(answers, weights, k=64))
            runs += [
                RunResult(
                    label="null", kind="canary", model="openai:smollm2", status="ok", output=a
                )
                for a in rng.choices(answers, weights, k=16)
            ]
        reads = []
        for prompt in prompts:
            found = readings.get(prompt) or []
            reads += [
                RunResult(
                    label=f"null@lp#{k}",
                    kind="canary",
                    model="openai:smollm2",
                    status="ok",
                    output="",
                    logprobs=(found[k % len(found)],) if found else None,
                )
                for k in range(4 if found else 0)
            ]
        if reads and len(reads) != 4 * len(prompts):
            reads = []  # a probe without readings: judge the answers alone
        base_readings = {probe_id(p): readings[p] for p in prompts if readings.get(p)}
        judged = judge_member(
            prompts, runs + reads, baselines, settings, reading_baselines=base_readings
        )
        alarms += judged.status == "shift"
    return alarms


def rate(k: int, n: int) -> str:
    """``k/n (share, 95% [low, high])`` with the Wilson interval."""
    low, high = wilson_interval(k, n)
    return f"{k}/{n} ({k / n:.0%}, 95% [{low:.0%}, {high:.0%}])"


def report(
    results: dict[str, dict[str, Any]],
    alarms: int,
    args: argparse.Namespace,
    kept: list[str],
    seconds: float,
) -> None:
    print("## The canary against silent provider changes (bundled SmolLM2, real llama.cpp)\n")
    print(
        f"`python bench/canary_sensitivity.py --trials {args.trials} --null {args.null}` "
        f"({seconds / 60:.0f} min). Calibration kept {len(kept)} border probes.\n"
    )
    print(
        "| change | cells moved (max, points) | exact tier alone | both tiers | "
        "sensitive only | by answers | by logprobs | median smallest p |"
    )
    print("|---|---:|---|---|---:|---:|---:|---:|")
    for condition, found in results.items():
        n = found["trials"]
        cells = f"{found['shift_pts']:.1f}" if found["shift_pts"] is not None else "—"

        median = f"{found['median_p']:.2g}" if found["median_p"] is not None else "—"
        print(
            f"| {condition} | {cells} | {rate(found['exact'], n)} | {rate(found['either'], n)} | "
            f"{found['sensitive_only']} | {found['by_answers']} | {found['by_logprobs']} | "
            f"{median} |"
        )
    if not args.null:
        return
    low, high = wilson_interval(alarms, args.null)
    print(
        f"\nSensitive-tier false alarms over {args.null} simulated no-change model-nights "
        f"(the real model's answer distributions): {alarms} ({alarms / args.null:.2%}), "
        f"95% upper bound {high:.2%}. Goal: ≤ 1 %, upper bound ≤ 1.5 %."
    )


if __name__ == "__main__":
    main()
