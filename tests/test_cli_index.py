"""``normrank index build|search``: every user error exits 2 with one line (issue #12, item 7)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import normrank.cli.index  # noqa: F401  (registers `normrank index`)
from normrank.cli import app


def _run(*args: str):
    res = CliRunner().invoke(app, list(args))
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise AssertionError(f"traceback: {res.exception!r}") from res.exception
    return res


def _assert_user_error(res) -> None:
    assert res.exit_code == 2, (res.exit_code, res.output)
    lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output


@pytest.fixture
def emb(tmp_path):
    x = np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32)
    np.save(tmp_path / "emb.npy", x)
    np.save(tmp_path / "q.npy", x[:3])
    return tmp_path


def test_build_and_search(emb):
    res = _run("index", "build", str(emb / "emb.npy"), "--out", str(emb / "ix"))
    assert res.exit_code == 0, res.output
    res = _run("index", "search", str(emb / "ix"), str(emb / "q.npy"), "-k", "2")
    assert res.exit_code == 0
    rows = [json.loads(line) for line in res.stdout.strip().splitlines()]
    assert [r["ids"][0] for r in rows] == [0, 1, 2]


def test_npz_empty_file_bad_out_and_float32_overflow_exit_2(emb):
    np.savez(emb / "arch.npz", a=np.ones((3, 4)))
    (emb / "empty.npy").write_bytes(b"")
    (emb / "afile.txt").write_text("x")
    np.save(emb / "huge.npy", np.array([[3e38, 3e38, 0, 0]], np.float32))
    build = ["index", "build"]
    for args in (
        [*build, str(emb / "arch.npz"), "--out", str(emb / "o1")],  # once: AttributeError traceback
        [*build, str(emb / "empty.npy"), "--out", str(emb / "o2")],  # once: "Aborted." exit 1
        [*build, str(emb / "emb.npy"), "--out", str(emb / "o3"), "--ids", str(emb / "empty.npy")],
        [*build, str(emb / "emb.npy"), "--out", str(emb / "afile.txt" / "sub")],  # once: traceback
        [*build, str(emb / "huge.npy"), "--out", str(emb / "o4")],  # once: exit 0, search failed
        [*build, str(emb / "missing.npy"), "--out", str(emb / "o5")],
    ):
        _assert_user_error(_run(*args))
    assert _run(*build, str(emb / "emb.npy"), "--out", str(emb / "ix")).exit_code == 0
    for q in ("empty.npy", "arch.npz"):
        _assert_user_error(_run("index", "search", str(emb / "ix"), str(emb / q)))
    _assert_user_error(_run("index", "search", str(emb / "ix"), str(emb / "q.npy"), "-k", str(1 << 30)))


def test_a_text_or_object_file_is_named_without_advising_allow_pickle(emb):
    """numpy's message for these suggests allow_pickle=, i.e. unpickling the user's file."""
    (emb / "notes.npy").write_text("0.1, 0.2\n")
    np.save(emb / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    for name, said in (("notes.npy", "not a .npy file"), ("objects.npy", "holds Python objects")):
        res = _run("index", "build", str(emb / name), "--out", str(emb / "o"))
        _assert_user_error(res)
        assert said in res.output and "allow_pickle" not in res.output


def test_nprobe_and_ef_search_flags(emb):
    x = np.random.default_rng(1).normal(size=(400, 4)).astype(np.float32)
    np.save(emb / "big.npy", x)
    res = _run(
        "index",
        "build",
        str(emb / "big.npy"),
        "--out",
        str(emb / "ivf"),
        "--factory",
        "IVF4,Flat",
        "--nprobe",
        "4",
    )
    assert res.exit_code == 0 and "nprobe=4" in res.output, res.output
    from normrank import NormIndex

    assert NormIndex.load(emb / "ivf").search_params["nprobe"] == 4
    res = _run("index", "search", str(emb / "ivf"), str(emb / "q.npy"), "--nprobe", "2")
    assert res.exit_code == 0
    _assert_user_error(_run("index", "search", str(emb / "ivf"), str(emb / "q.npy"), "--ef-search", "8"))
    _assert_user_error(_run("index", "build", str(emb / "big.npy"), "--out", str(emb / "f"), "--nprobe", "3"))
    res = _run(
        "index",
        "build",
        str(emb / "big.npy"),
        "--out",
        str(emb / "h"),
        "--factory",
        "HNSW8",
        "--ef-search",
        "32",
    )
    assert res.exit_code == 0 and "efSearch=32" in res.output
