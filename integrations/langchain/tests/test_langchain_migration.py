"""Migration on real text: a LangChain FAISS store built with langchain_community over 300 BEIR
scifact abstracts with the offline all-MiniLM-L6-v2, saved, migrated to NormRankVectorStore.

References: FAISS's own top-10 (inner product at alpha = 1, cosine at alpha = 0 for a
``normalize_L2`` store) and numpy's cos·‖d‖^α at other alphas. Also the relevance threshold on
the same data: at every alpha it keeps exactly the documents whose cosine reaches it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings

from normrank.errors import InvalidParameterError

pytestmark = pytest.mark.models

FAISS = pytest.importorskip(
    "langchain_community.vectorstores", reason="pip install langchain-community"
).FAISS
DistanceStrategy = pytest.importorskip("langchain_community.vectorstores.utils").DistanceStrategy
encoders = pytest.importorskip("normrank.encoders", reason="normrank.encoders not available")

DATA = Path(
    os.environ.get("NORMRANK_DATA", Path(__file__).resolve().parents[3].parent / "shared" / "data" / "beir")
)
SCIFACT = DATA / "scifact"
if not (SCIFACT / "corpus.jsonl").is_file():
    pytest.skip(f"BEIR scifact not found under {DATA}", allow_module_level=True)

N_DOCS, N_QUERIES, K = 300, 10, 10


def _read(path: Path, n: int) -> list[dict]:
    out = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                out.append(json.loads(line))
            if len(out) == n:
                break
    return out


class Recorded(Embeddings):
    """The MiniLM vectors, encoded once per text; counts what a store asks to embed."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table
        self.embedded = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.embedded += len(texts)
        return [self.table[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.table[text]


@pytest.fixture(scope="module")
def real():
    try:
        enc = encoders.load_encoder("all-MiniLM-L6-v2")
    except Exception as e:  # no offline copy of the model here
        pytest.skip(f"all-MiniLM-L6-v2 not loadable offline: {e}")
    corpus = _read(SCIFACT / "corpus.jsonl", N_DOCS)
    texts = [(d.get("title", "") + ". " + d["text"]).strip() for d in corpus]
    queries = [q["text"] for q in _read(SCIFACT / "queries.jsonl", N_QUERIES)]
    x = np.asarray(enc.encode(texts + queries, batch_size=64), dtype=np.float32)
    table = dict(zip(texts + queries, x.tolist(), strict=True))
    return {
        "ids": [d["_id"] for d in corpus],
        "texts": texts,
        "metas": [{"title": d.get("title", "")} for d in corpus],
        "queries": queries,
        "x": x[:N_DOCS].astype(np.float64),
        "q": x[N_DOCS:].astype(np.float64),
        "table": table,
    }


def numpy_scores(real, j: int, alpha: float) -> np.ndarray:
    x, q = real["x"], real["q"][j]
    norms = np.linalg.norm(x, axis=1)
    return (x @ q) / (norms * np.linalg.norm(q)) * norms**alpha


def assert_top(real, got_ids: list[str], want_ids: list[str], scores: np.ndarray) -> None:
    """Equal top-k; near-ties (scores within 1e-5) may swap, so then compare the scores."""
    assert len(got_ids) == len(want_ids) == K
    if got_ids != want_ids:
        pos = {d: i for i, d in enumerate(real["ids"])}
        np.testing.assert_allclose(
            [scores[pos[d]] for d in got_ids], [scores[pos[d]] for d in want_ids], atol=1e-5
        )


def test_saved_raw_faiss_folder_migrates_without_reembedding(real, tmp_path):
    from langchain_normrank import NormRankVectorStore

    emb = Recorded(real["table"])
    old = FAISS.from_texts(
        real["texts"],
        emb,
        real["metas"],
        ids=real["ids"],
        distance_strategy=DistanceStrategy.MAX_INNER_PRODUCT,
    )
    old.save_local(str(tmp_path))
    emb.embedded = 0
    # the user reads FAISS's pickle in their own code; normrank only converts the loaded store
    new = NormRankVectorStore.from_faiss(
        FAISS.load_local(str(tmp_path), emb, allow_dangerous_deserialization=True)
    )
    assert emb.embedded == 0 and len(new) == N_DOCS
    for j, query in enumerate(real["queries"]):
        # alpha = 1 is the inner product FAISS ranked by
        want = [d.id for d in old.similarity_search(query, k=K)]
        got = [d.id for d in new.similarity_search(query, k=K, alpha=1.0)]
        assert_top(real, got, want, numpy_scores(real, j, 1.0))
        for alpha in (0.0, -0.5, -1.0):
            s = numpy_scores(real, j, alpha)
            want = [real["ids"][i] for i in np.argsort(-s, kind="stable")[:K]]
            got = [d.id for d in new.similarity_search(query, k=K, alpha=alpha)]
            assert_top(real, got, want, s)
    assert new.get_by_ids([real["ids"][3]])[0].page_content == real["texts"][3]


def test_unit_vector_faiss_store_reembeds_and_keeps_its_cosine_top10(real):
    from langchain_normrank import MigrationWarning, NormRankVectorStore

    emb = Recorded(real["table"])
    old = FAISS.from_texts(real["texts"], emb, real["metas"], ids=real["ids"], normalize_L2=True)
    with pytest.raises(InvalidParameterError):
        NormRankVectorStore.from_faiss(old, embedding="not an Embeddings")  # type: ignore[arg-type]
    emb.embedded = 0
    with pytest.warns(MigrationWarning, match="norms are gone"):
        new = NormRankVectorStore.from_faiss(old, embedding=emb)
    assert emb.embedded == N_DOCS  # the norms had to come back from the texts
    for j, query in enumerate(real["queries"]):
        want = [d.id for d in old.similarity_search(query, k=K)]  # FAISS's cosine order
        got = [d.id for d in new.similarity_search(query, k=K)]  # alpha = 0
        assert_top(real, got, want, numpy_scores(real, j, 0.0))
        s = numpy_scores(real, j, -0.5)
        got = [d.id for d in new.similarity_search(query, k=K, alpha=-0.5)]
        assert_top(real, got, [real["ids"][i] for i in np.argsort(-s, kind="stable")[:K]], s)


def test_relevance_threshold_means_cosine_at_every_alpha(real):
    from langchain_normrank import NormRankVectorStore

    emb = Recorded(real["table"])
    threshold = 0.3
    for alpha in (-1.0, 0.0, 0.5):
        store = NormRankVectorStore.from_texts(real["texts"], emb, ids=real["ids"], alpha=alpha)
        for j, query in enumerate(real["queries"][:5]):
            cos = numpy_scores(real, j, 0.0)
            kept = store.similarity_search_with_relevance_scores(query, k=N_DOCS, score_threshold=threshold)
            want = {real["ids"][i] for i in np.flatnonzero(cos >= threshold + 1e-6)}
            near = {real["ids"][i] for i in np.flatnonzero(np.abs(cos - threshold) <= 1e-6)}
            assert want <= {d.id for d, _ in kept} <= want | near
            pos = {d: i for i, d in enumerate(real["ids"])}
            np.testing.assert_allclose([r for _, r in kept], [cos[pos[d.id]] for d, _ in kept], atol=1e-5)
            assert len(kept) < N_DOCS  # the threshold really cuts
