"""Writes tests/data/kb_manifest_store.json: the store kb writes after four nights of one epoch.

Run from the repository's top, then let rulvar read it (tests/js/RULVAR.md):

    .venv/bin/python tests/js/make_kb_store.py
    RULVAR_DIR=/tmp/rulvar node tests/js/read_kb_store.mjs
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

TOP = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(TOP))

from click.testing import CliRunner  # noqa: E402

from tests.cli_helpers import kb  # noqa: E402
from tests.test_manifests import four_nights  # noqa: E402


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        os.chdir(root)
        subprocess.run(["git", "init", "-q"], check=True)
        runner = CliRunner()
        assert kb(runner, "init").exit_code == 0
        data = four_nights(runner, root)
    (TOP / "tests" / "data" / "kb_manifest_store.json").write_bytes(data)
    print(f"wrote tests/data/kb_manifest_store.json ({len(data)} bytes)")


if __name__ == "__main__":
    main()
