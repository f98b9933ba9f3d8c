"""Do two llama.cpp runtimes give the bundled model the same answers on the demo's prompts?

    python bench/runtime_parity.py --other /work/main/.venv/bin/python

The prompts are the demo sweep's (``sweeps/demo.toml``: every case and canary prompt
as kb sends them to ``local:smollm2``, with its params). Each interpreter answers
them all in order, in its own process, with the ``local`` provider of the kb it
imports (this checkout's runtime for ``--this``, e.g. xllamacpp; another checkout's
for ``--other``, e.g. llama-cpp-python); the answers are compared by sha256.
Completion-token counts are compared too: xllamacpp counts one more on answers
that end at the end-of-sequence token.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def demo_requests(spec_path: Path) -> list[dict[str, Any]]:
    """The demo's distinct requests to ``local:smollm2``: messages and params."""
    sys.path.insert(0, str(ROOT))
    from kb.engine.requests import build_request
    from kb.sweep.spec import load_spec

    spec = load_spec(spec_path)
    (model,) = [m for m in spec.models if m.ref == "local:smollm2"]
    prompts = [(case.prompt, case.system) for case in spec.cases]
    if spec.canary is not None:
        prompts += [(prompt, None) for prompt in spec.canary.prompts]
    seen: dict[str, dict[str, Any]] = {}
    for prompt, system in prompts:
        request = build_request(model, prompt, system=system)
        entry = {"messages": [dict(m) for m in request.messages], "params": request.call_params}
        seen.setdefault(json.dumps(entry, sort_keys=True), entry)
    return list(seen.values())


def answer_all(requests: list[dict[str, Any]]) -> dict[str, Any]:
    """Every request answered in order by the importable kb's local provider (child side)."""
    import kb.engine.providers.local as local

    started = time.process_time()
    model = local.LocalModel.shared("smollm2", {})
    answers = []
    for request in requests:
        reply = model.complete(request["messages"], request["params"])
        answers.append(
            {
                "sha256": hashlib.sha256(reply.text.encode()).hexdigest(),
                "completion_tokens": reply.completion_tokens,
                "text": reply.text,
            }
        )
    runtime = "xllamacpp" if hasattr(local, "RUNTIME") else "llama-cpp-python"
    version = _version(runtime)
    return {
        "kb": str(Path(local.__file__).resolve()),
        "runtime": f"{runtime} {version}",
        "cpu_s": round(time.process_time() - started, 1),
        "answers": answers,
    }


def _version(distribution: str) -> str:
    from importlib.metadata import version

    return version(distribution)


def run_child(python: str, requests_file: Path, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [python, __file__, "--answer", str(requests_file), "--out", str(out)],
        cwd="/",  # the interpreter's own kb, never this checkout's by accident
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=ROOT / "sweeps" / "demo.toml")
    parser.add_argument("--this", default=sys.executable, help="interpreter A (default: this)")
    parser.add_argument("--other", required=False, help="interpreter B")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/kb-runtime-parity"))
    parser.add_argument("--answer", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.answer is not None:
        result = answer_all(json.loads(args.answer.read_text()))
        args.out.write_text(json.dumps(result, indent=1))
        return
    if args.other is None:
        parser.error("--other is required")
    args.workdir.mkdir(parents=True, exist_ok=True)
    requests_file = args.workdir / "requests.json"
    requests = demo_requests(args.spec)
    requests_file.write_text(json.dumps(requests))
    outs = [args.workdir / "a.json", args.workdir / "b.json"]
    children = [
        run_child(p, requests_file, o) for p, o in zip([args.this, args.other], outs, strict=True)
    ]
    if any(child.wait() != 0 for child in children):
        sys.exit("an interpreter failed")
    a, b = (json.loads(out.read_text()) for out in outs)
    pairs = list(zip(a["answers"], b["answers"], strict=True))
    same = [x["sha256"] == y["sha256"] for x, y in pairs]
    tokens = [x["completion_tokens"] - y["completion_tokens"] for x, y in pairs]
    print(f"prompts: {len(requests)} distinct requests of {args.spec}")
    for label, side, python in (("A", a, args.this), ("B", b, args.other)):
        print(f"{label}: {side['runtime']} ({python}; kb at {side['kb']}), {side['cpu_s']} CPU-s")
    print(f"byte-identical answers (sha256): {sum(same)}/{len(same)}")
    for i, ((x, y), equal) in enumerate(zip(pairs, same, strict=True)):
        if not equal:
            print(f"  differs #{i}: A {x['text']!r} | B {y['text']!r}")
    counts = {d: tokens.count(d) for d in sorted(set(tokens))}
    print(f"completion tokens, A minus B: {counts} (answer: count)")
    print(f"answers: {outs[0]} and {outs[1]}")


if __name__ == "__main__":
    main()
