"""The console script as a user runs it: a misspelt option, a missing argument or an unknown
command is one line on stderr with exit code 2 (typer's default is a multi-line panel)."""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = "import sys; sys.argv[0] = 'normrank'; from normrank.cli import main; main()"


def normrank(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("sweep", "adi", "--modle", "x"), "No such option: --modle"),
        (("frob",), "No such command 'frob'"),
        (("index", "search", "some-dir"), "Missing argument 'queries'"),
    ],
)
def test_usage_error_is_one_line_exit_2(args: tuple[str, ...], said: str) -> None:
    res = normrank(*args)
    assert res.returncode == 2
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and said in lines[0], res.stderr
    assert "\x1b" not in res.stderr and "Traceback" not in res.stderr


def test_version_and_help_still_exit_0() -> None:
    version = normrank("--version")
    assert version.returncode == 0 and version.stdout.startswith("normrank ")
    assert normrank("index", "--help").returncode == 0
    assert normrank().returncode == 2  # no command: typer's help, as before
