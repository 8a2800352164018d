"""Tests write only under the system temp folder or the tree's ignored ``.cache/`` (issue 49):
with HOME and XDG_CACHE_HOME pointing at an empty folder, a test that writes through normrank's
default cache leaves that folder empty."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


class CountingEncoder:
    name, kind, dim = "counting", "fake", 3

    def encode(self, texts, batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
        return np.array([[len(t), 1.0, 2.0] for t in texts], np.float32)


def test_the_default_cache_is_the_tests_own() -> None:
    """normrank's default cache, as any test that does not pass one reaches it: under the tree's
    ignored .cache/ (or $NORMRANK_TEST_CACHE), never in HOME; and written there."""
    from normrank.corpus.embedding_cache import EmbeddingCache
    from normrank.settings import cache_root

    root = cache_root().resolve()
    wanted = Path(os.environ.get("NORMRANK_TEST_CACHE") or REPO / ".cache" / "tests").resolve()
    assert root.is_relative_to(wanted), f"normrank's cache is {root}, not under {wanted}"
    cache = EmbeddingCache()
    texts = ["heat", "is energy"]
    emb, _ = cache.get_or_encode(
        "counting", "isolation-check", "docs", ["a", "b"], texts, CountingEncoder(),
        show_progress=False, model_identity={"name": "counting"},
    )  # fmt: skip
    assert emb.shape == (2, 3)
    assert any(cache.root.rglob("*")), "nothing was written to the test cache"


def test_a_test_run_with_an_empty_home_writes_nothing_there(tmp_path: Path) -> None:
    """The test above, run by pytest as the suite runs it but with HOME and XDG_CACHE_HOME an
    empty folder and no $NORMRANK_CACHE (a clean environment): the folder stays empty."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("NORMRANK_CACHE", "NORMRANK_TEST_CACHE")}
    env.update(
        HOME=str(home),
        XDG_CACHE_HOME=str(home / ".cache"),
        NORMRANK_TEST_CACHE=str(tmp_path / "test-cache"),  # the tree's .cache/ left as it was
        PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]),
    )
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         f"{Path(__file__).name}::test_the_default_cache_is_the_tests_own"],
        cwd=Path(__file__).parent, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    written = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    assert written == [], f"written into HOME: {written[:10]}"
    assert any((tmp_path / "test-cache" / "normrank" / "embeddings").rglob("*")), "written elsewhere"
