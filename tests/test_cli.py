"""The ``normrank`` command line from a user's side: version, help, errors as one line and exit 2."""

from __future__ import annotations

from typer.testing import CliRunner

import normrank
from normrank.cli import app

runner = CliRunner()


def test_version_prints_the_package_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"normrank {normrank.__version__}"


def test_every_command_is_registered() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("index", "sweep", "probe"):
        assert command in result.output


def test_probe_on_a_missing_folder_is_one_error_line(tmp_path) -> None:
    result = runner.invoke(app, ["probe", str(tmp_path / "nope"), "--model", "x", "--quiet"])
    assert result.exit_code == 2
    assert "error" in result.output and "not found" in result.output
    assert "Traceback" not in result.output
