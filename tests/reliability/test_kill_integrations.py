"""Crash safety of the integrations: SIGKILL a process at random moments while LangChain's
``save_local`` / LlamaIndex's ``persist`` write over an earlier save; the folder must always load
and hold the complete old or the complete new store (texts, ids and index agree).

Profile (env NORMRANK_TEST_PROFILE): small (default) 3 kills per integration, full 50.
Skipped where an integration is not importable.
"""

from __future__ import annotations

import importlib.util
import os
import random
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from kill_child import run_and_kill

FULL = os.environ.get("NORMRANK_TEST_PROFILE", "small") == "full"
KILLS = 50 if FULL else 2
N = 60_000 if FULL else 15_000
DIM = 16
REPO = Path(__file__).resolve().parents[2]
PATHS = [str(REPO), str(REPO / "integrations" / "langchain"), str(REPO / "integrations" / "llamaindex")]

_CHILD = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    kind, folder, version, n, dim, marker = sys.argv[1:7]
    version, n, dim = int(version), int(n), int(dim)
    count = n + 100 * version  # each version has its own size and text prefix
    rng = np.random.default_rng(version)
    vecs = rng.standard_normal((count, dim)) * rng.lognormal(size=(count, 1))
    texts = [f"v{version}-{i}" for i in range(count)]
    if kind == "langchain":
        from langchain_core.embeddings import Embeddings
        from langchain_normrank import NormRankVectorStore

        class Fixed(Embeddings):
            def embed_documents(self, t):
                return [vecs[int(s.split("-")[1])].tolist() for s in t]

            def embed_query(self, t):
                return vecs[0].tolist()

        store = NormRankVectorStore(Fixed(), alpha=version / 10)
        store.add_texts(texts, ids=texts)
        save = lambda: store.save_local(folder)
    else:
        from llama_index.core.schema import TextNode
        from llama_index.vector_stores.normrank import NormRankVectorStore

        store = NormRankVectorStore(dim=dim, norm_alpha=version / 10)
        store.add([TextNode(id_=s, text=s, embedding=v.tolist()) for s, v in zip(texts, vecs)])
        save = lambda: store.persist(folder + "/default__vector_store.json")
    print("saving", flush=True)
    t = time.perf_counter()
    save()
    open(marker + ".tmp", "w").write(str(time.perf_counter() - t))  # whole or not at all
    os.replace(marker + ".tmp", marker)
    """
)


def _importable(kind: str) -> bool:
    sys.path[:0] = PATHS[1:]
    try:
        mod = "langchain_normrank" if kind == "langchain" else "llama_index.vector_stores.normrank"
        return importlib.util.find_spec(mod) is not None
    except ImportError:
        return False
    finally:
        del sys.path[:2]


def _load(kind: str, folder: Path) -> tuple[set[str], float]:
    """(texts, alpha) of the saved store, loaded through the integration's own loader."""
    if kind == "langchain":
        from langchain_core.embeddings import FakeEmbeddings
        from langchain_normrank import NormRankVectorStore

        store = NormRankVectorStore.load_local(folder, FakeEmbeddings(size=DIM))
        texts = {d.page_content for d in store.get_by_ids(list(store._store.records))}
        assert len(store.index) == len(store), "index and docstore disagree"
        return texts, store.alpha
    from llama_index.vector_stores.normrank import NormRankVectorStore

    store = NormRankVectorStore.from_persist_dir(str(folder))
    texts = {n.node_id for n in store.get_nodes()}  # node ids are the texts
    assert len(store.client) == len(store), "index and node table disagree"
    return texts, store.norm_alpha


def _run(kind: str, folder: Path, version: int, marker: Path, delay: float | None) -> bool:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(PATHS), OMP_NUM_THREADS="1")
    args = [sys.executable, "-c", _CHILD, kind, str(folder), str(version), str(N), str(DIM), str(marker)]
    return run_and_kill(args, env, marker, delay, timeout=300)


@pytest.mark.parametrize("kind", ["langchain", "llamaindex"])
def test_kill_during_integration_save(kind, tmp_path, monkeypatch, record_property):
    if not _importable(kind):
        pytest.skip(f"the {kind} integration is not importable")
    for p in reversed(PATHS[1:]):
        monkeypatch.syspath_prepend(p)
    folder, marker = tmp_path / "store", tmp_path / "done"
    folder.mkdir()
    rng = random.Random(777)
    _run(kind, folder, 1, marker, None)
    save_s = [float(marker.read_text())]
    current, mid, found_new, kills = 1, 0, 0, 0
    while kills < KILLS or (not mid and kills < 10 * KILLS):  # until a save was interrupted
        target = 2 if current == 1 else 1
        # a busy machine may let every random kill land after the commit: then kill at once
        delay = rng.uniform(0, 1.3 * max(save_s)) if kills < KILLS else 0.0
        killed_mid = _run(kind, folder, target, marker, delay)
        kills += 1
        mid += killed_mid
        if not killed_mid:
            save_s.append(float(marker.read_text()))
        texts, alpha = _load(kind, folder)
        prefixes = {t.split("-")[0] for t in texts}
        assert len(prefixes) == 1, f"a mix of saves: {prefixes}"
        version = int(prefixes.pop()[1:])
        assert version in (current, target)
        assert len(texts) == N + 100 * version, "an incomplete save"
        assert alpha == pytest.approx(version / 10)
        found_new += version == target
        current = version
    record_property("kills", kills)
    record_property("mid_save", mid)
    record_property("found_new", found_new)
    record_property("save_seconds_median", float(np.median(save_s)) if save_s else None)
    assert mid >= 1
