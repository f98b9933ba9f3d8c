"""The HTML report renders in a real headless Chromium, self-contained."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from kb.cli import cli
from tests.sweep_helpers import scripted_model, write_spec

pytestmark = pytest.mark.usefixtures("initialized_store")

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


def chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    assert binary, "chromium is not installed (make test installs Debian's chromium)"
    return subprocess.run(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_report_renders_the_heatmap_in_chromium(runner: CliRunner, isolated: Path) -> None:
    spec = write_spec(
        isolated / "s.toml",
        [
            scripted_model("strong", 10),
            scripted_model("weak", 2),
            scripted_model("flaky", 10, errors=["Question 4?"]),
        ],
        extra_sweep="max_retries = 0",
    )
    html_path = isolated / "report.html"
    result = runner.invoke(
        cli,
        [
            "sweep",
            str(spec),
            "--quiet",
            "--observed-at",
            "2026-11-29T02:00:00Z",
            "--html",
            str(html_path),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 1  # the flaky cell is incomplete; the report is still written
    page = html_path.read_text()
    # Self-contained: no script, no stylesheet or image fetched from anywhere.
    assert not re.search(r"<script|<link|<img|src=|url\(|https?://", page)

    dom = chromium(isolated / "profile-dom", "--dump-dom", html_path.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    rows = re.findall(r"<tr>(.*?)</tr>", dom.stdout.split("<tbody>")[1], re.S)
    assert len(rows) == 3
    outcomes = re.findall(r'data-outcome="(\w+)"', dom.stdout)
    assert outcomes == ["strength", "weakness", "incomplete"]
    assert "1 target run failed at the provider" in dom.stdout

    shot = isolated / "report.png"
    render = chromium(
        isolated / "profile-shot",
        "--window-size=1200,800",
        f"--screenshot={shot}",
        html_path.as_uri(),
    )
    assert render.returncode == 0, render.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1200, 800)
    assert len(data) > 20_000  # a blank page compresses to a few hundred bytes
