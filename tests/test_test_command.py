"""``scripts/test.sh``'s switches, on a copy of the script whose setup steps and environments are
stubs that log their calls (nothing is installed or tested): NORMRANK_SKIP_CLIP=1 leaves out the
open_clip environment and its test file; anything but 0 or 1 is refused before any setup."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def stubbed_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "test.sh", tree / "scripts" / "test.sh")
    log = tree / "calls.log"
    for name in ("setup.sh", "setup_clip.sh"):
        (tree / "scripts" / name).write_text(f'echo "{name}" >> "{log}"\n')
    for venv in (".venv", ".venv-clip"):
        (tree / venv / "bin").mkdir(parents=True)
        for tool in ("ruff", "python"):
            stub = tree / venv / "bin" / tool
            stub.write_text(f'#!/bin/sh\necho "{venv}/bin/{tool} $*" >> "{log}"\n')
            stub.chmod(0o755)
    return tree


def run_test_command(tree: Path, skip_clip: str | None) -> tuple[subprocess.CompletedProcess, list[str]]:
    env = {k: v for k, v in os.environ.items() if k != "NORMRANK_SKIP_CLIP"}
    env["NORMRANK_KERNEL_RUNS"] = ""  # the BLAS reruns: not what this checks
    if skip_clip is not None:
        env["NORMRANK_SKIP_CLIP"] = skip_clip
    r = subprocess.run(
        ["bash", str(tree / "scripts" / "test.sh")], env=env, capture_output=True, text=True, timeout=60
    )
    log = tree / "calls.log"
    return r, log.read_text().splitlines() if log.exists() else []


def test_the_full_command_sets_up_and_runs_the_clip_part(stubbed_tree: Path) -> None:
    r, calls = run_test_command(stubbed_tree, None)
    assert r.returncode == 0, r.stderr
    assert "setup_clip.sh" in calls
    assert any(c.startswith(".venv-clip/bin/python -m pytest") for c in calls), calls


def test_skip_clip_leaves_out_its_environment_and_its_tests(stubbed_tree: Path) -> None:
    r, calls = run_test_command(stubbed_tree, "1")
    assert r.returncode == 0, r.stderr
    assert "setup.sh" in calls and "setup_clip.sh" not in calls
    assert not any(c.startswith(".venv-clip/") for c in calls), calls
    assert any(c.startswith(".venv/bin/python -m pytest") for c in calls), calls  # the main suite runs
    assert "NORMRANK_SKIP_CLIP=1" in r.stderr  # said, not silent


def test_a_value_it_does_not_know_is_refused_before_any_setup(stubbed_tree: Path) -> None:
    r, calls = run_test_command(stubbed_tree, "yes")
    assert r.returncode == 2 and calls == []
    assert "NORMRANK_SKIP_CLIP must be 1" in r.stderr
