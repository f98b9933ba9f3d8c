"""Make the format-1 evidence fixtures: what kb v2 wrote, so later kb can be held to reading it.

Run it with kb v2 installed (commit c749011, the last v2 commit on main):

    git worktree add /tmp/kb-v2 c749011 && cd /tmp/kb-v2 && make install
    /tmp/kb-v2/.venv/bin/python tests/data/format1/make_format1.py tests/data/format1

It sweeps two nights of scripted models in a scratch git repository through
the real ``kb`` command (a canary, a judge grader, repeats, an incomplete
cell, a drift on the second night) and copies the evidence directory here.
The files are committed as they came out; nothing edits them afterwards.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CASES = [(f"case-{i:02d}", f"Question {i}?", f"answer-{i}") for i in range(6)]
CANARY = ["Name the three primary colors.", "Sort these numbers: 3, 1, 2."]


def replies(correct: int) -> dict[str, str]:
    return {p: (a if i < correct else "wrong") for i, (_, p, a) in enumerate(CASES)}


def toml(value: object) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


def spec(night: int) -> str:
    canary_answer = "red, yellow, blue" if night == 1 else "Red, Yellow and Blue."
    models = [
        {"model": "scripted:strong", "params": {"responses": replies(6), "cost_usd": 0.001}},
        {
            "model": "scripted:weak",
            "effort": "low",
            "params": {
                "responses": replies(1) | {CANARY[0]: canary_answer},
                "cost_usd": 0.0005,
            },
        },
        {
            "model": "scripted:broken",
            "params": {"responses": replies(6), "errors": ["Question 2?"], "cost_usd": 0.001},
        },
    ]
    judge = {"default": '{"passed": true, "reason": "fine"}', "cost_usd": 0.0001}
    lines = [
        "[sweep]",
        'committer = "fixture-maker"',
        'gate = "point"',
        "repeats = 2" if night == 2 else "",
        "max_retries = 0",
        "",
        "[budgets]",
        "target_usd = 0.01",
        "judge_usd = 0.01",
        "canary_usd = 0.01",
        "max_total_usd = 5",
        "",
        "[canary]",
        f"prompts = {json.dumps(CANARY)}",
    ]
    for model in models:
        lines += ["", "[[models]]"] + [f"{k} = {toml(v)}" for k, v in model.items()]
    for index, (name, prompt, answer) in enumerate(CASES):
        graders = f'{{ kind = "golden", expected = {json.dumps(answer)} }}'
        if index == 0:
            graders += (
                ', { kind = "judge", model = "scripted:judge", instructions = "Is it right?", '
                f"params = {toml(judge)} }}"
            )
        lines += [
            "",
            "[[cases]]",
            f'name = "{name}"',
            'task_class = "extraction"',
            f"prompt = {json.dumps(prompt)}",
            f"graders = [{graders}]",
        ]
    return "\n".join(lines) + "\n"


def main(out: Path) -> None:
    kb = [sys.executable, "-m", "kb"]
    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch)
        env = {"GIT_CONFIG_NOSYSTEM": "1", "HOME": scratch, "PATH": "/usr/bin:/bin"}
        env |= {"GIT_AUTHOR_NAME": "f", "GIT_AUTHOR_EMAIL": "f@x", "GIT_COMMITTER_NAME": "f"}
        env |= {"GIT_COMMITTER_EMAIL": "f@x", "GIT_COMMITTER_DATE": "2026-11-28T12:00:00Z"}
        subprocess.run(["git", "init", "-q"], cwd=repo, check=True, env=env)
        subprocess.run([*kb, "init"], cwd=repo, check=True, env=env, capture_output=True)
        for night in (1, 2):
            (repo / "s.toml").write_text(spec(night))
            at = f"2026-11-{28 + night}T02:00:00Z"
            done = subprocess.run(
                [*kb, "sweep", "s.toml", "--quiet", "--observed-at", at],
                cwd=repo,
                env=env,
                capture_output=True,
                text=True,
            )
            assert done.returncode == 1, done.stderr  # the broken cell is incomplete
        out.mkdir(parents=True, exist_ok=True)
        for path in sorted((repo / "kb-evidence").iterdir()):
            shutil.copy(path, out / path.name)
        shutil.copy(repo / "rulvar.models.json", out / "rulvar.models.json")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
