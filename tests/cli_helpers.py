"""Running kb's CLI in tests: one invocation, and a human note."""

from __future__ import annotations

from click.testing import CliRunner, Result

from kb.cli import cli


def kb(runner: CliRunner, *args: str) -> Result:
    """``kb ARGS`` in-process (exceptions propagate, so a traceback fails the test)."""
    return runner.invoke(cli, list(args), catch_exceptions=False)


def note(runner: CliRunner, task_class: str, as_of: str, *evidence: str) -> str:
    """``kb note`` a weakness of openai:gpt-4o-mini at ``as_of``; returns the claim id."""
    result = kb(
        runner,
        "--as-of",
        as_of,
        "note",
        "--model",
        "openai:gpt-4o-mini",
        "--task-class",
        task_class,
        "--polarity",
        "weakness",
        "--statement",
        f"weak at {task_class}",
        "--approver",
        "alice",
        "--ruled-out",
        "prompt",
        *[arg for ev in (evidence or ("journal:run-1:1",)) for arg in ("--evidence", ev)],
    )
    assert result.exit_code == 0, result.output
    return f"note/openai:gpt-4o-mini/{task_class}/{as_of.replace('Z', '.000Z')}"


def unwrapped(text: str) -> str:
    """``text`` with its line wrapping undone (prose wraps at 80 columns; tests read words)."""
    return " ".join(text.split())
