"""A separate process that commits claims through the rebase loop (for the process tests).

usage: commit_worker.py STORE WORKER_ID COUNT ATTEMPTS
COUNT 0 means: commit until killed. Prints "ready" once imported, then one
line per committed claim id.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kb.store.filestore import CommitContext, KnowledgeStore  # noqa: E402
from tests.factories import add, eval_claim  # noqa: E402


def main() -> None:
    store_path, worker, count_text, attempts_text = sys.argv[1:5]
    count, attempts = int(count_text), int(attempts_text)
    store = KnowledgeStore(store_path)
    context = CommitContext("sweep", f"worker-{worker}", label=f"w{worker}")
    print("ready", flush=True)
    numbers = range(count) if count else itertools.count()
    for number in numbers:
        claim_id = f"w{worker}-{number}"
        subject = {"model": f"w{worker}:m{number}"}  # one pair each: never near the cap
        store.commit_with_rebase(
            lambda _snapshot, cid=claim_id, subj=subject: [add(eval_claim(cid, subject=subj))],
            context,
            attempts=attempts,
        )
        print(claim_id, flush=True)


if __name__ == "__main__":
    main()
