"""The ``kb`` command line: thin commands over the public core.

Every command parses its options, calls one or two core functions and
prints. The group, the error boundary and the context object live in
:mod:`kb.cli.app`; options shared by several commands are declared once in
:mod:`kb.cli.options`; the commands themselves in :mod:`kb.cli.store_commands`
(the store), :mod:`kb.cli.job_commands` (jobs that call models) and
:mod:`kb.cli.judge_commands` (people's labels and judge agreement).
"""

from __future__ import annotations

import io
import sys
from typing import NoReturn

from kb.cli import job_commands, judge_commands, store_commands
from kb.cli.app import EXIT_CODES, App, cli, exit_code_for, install_signal_handlers

__all__ = [
    "EXIT_CODES",
    "App",
    "cli",
    "exit_code_for",
    "job_commands",
    "judge_commands",
    "main",
    "store_commands",
]


def main(argv: list[str] | None = None) -> NoReturn:
    """Console entry point."""
    install_signal_handlers()
    for stream in (sys.stdout, sys.stderr):
        # A lone surrogate (JSON allows one; rulvar reads it) prints as \ud800, not a crash.
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    cli.main(args=argv, prog_name="kb")
    sys.exit(0)  # pragma: no cover - click exits itself
