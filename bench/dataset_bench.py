"""Dataset benchmark (not a test): loading 10,000 records through a sweep spec.

Prints, side by side in one run, the median wall time of `load_spec` on a spec
whose only cases come from one `[[datasets]]` file of 10,000 records (JSONL,
then CSV), with a prompt template and a templated golden grader, next to the
goal (1 s) and to the bare parse of the same file (`json.loads` per line /
`csv.reader`), which is the floor any loader pays.

Usage: python bench/dataset_bench.py [--records 10000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kb.sweep.spec import load_spec  # noqa: E402

GOAL_S = 1.0
SPEC = """[sweep]
committer = "bench"

[budgets]
target_usd = 0.01
max_total_usd = 1000.0

[[models]]
model = "scripted:m"

[[datasets]]
path = "{name}"
task_class = "extraction"
fields = {{ name = "id" }}
prompt_template = "Read the text and answer.\\nText: {{text}}\\nQuestion: {{question}}"
graders = [{{ kind = "golden", expected = "{{answer}}", match = "normalized" }}]
"""


def records(count: int) -> list[dict[str, str]]:
    return [
        {
            "id": f"case-{i:05d}",
            "text": f"Invoice {i} lists {i % 17} chairs at ${i % 89} each, shipped to Lisbon.",
            "question": f"Where was invoice {i} shipped?",
            "answer": "Lisbon",
        }
        for i in range(count)
    ]


def median_time(fn: object, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = records(args.records)
    lines = [
        "# Datasets: loading a spec's case set",
        "",
        f"`load_spec` on a spec whose cases come from one `[[datasets]]` file of "
        f"{args.records:,} records (prompt template + templated golden grader), median of "
        f"{args.repeats} runs; the bare parse of the same file is the floor.",
        "",
        "| format | kb load_spec | bare parse | kb / parse | goal | met |",
        "|---|---:|---:|---:|---:|:---:|",
    ]
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        (base / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        with (base / "d.csv").open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        for name, parse in (
            ("d.jsonl", lambda t: [json.loads(x) for x in t.splitlines()]),
            ("d.csv", lambda t: list(csv.reader(io.StringIO(t, newline="")))),
        ):
            spec = base / f"{name}.toml"
            spec.write_text(SPEC.format(name=name))
            loaded = load_spec(spec)
            assert len(loaded.cases) == args.records
            ours = median_time(lambda spec=spec: load_spec(spec), args.repeats)
            text = (base / name).read_text()
            floor = median_time(lambda parse=parse, text=text: parse(text), args.repeats)
            lines.append(
                f"| {name.split('.')[1]} | {ours * 1000:.0f} ms | {floor * 1000:.0f} ms | "
                f"{ours / floor:.1f}x | {GOAL_S * 1000:.0f} ms | "
                f"{'yes' if ours <= GOAL_S else 'NO'} |"
            )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
