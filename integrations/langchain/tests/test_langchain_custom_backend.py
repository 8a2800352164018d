"""A user's own index behind NormRankVectorStore: the numpy backend of docs/backends.md handed over
with ``from_index``, used as any store (add, filtered search, MMR, overwrite, delete, save and
load), ranking as numpy brute force and as the FAISS-backed store; what does not conform is
refused naming what is missing."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from langchain_normrank import NormRankVectorStore

from normrank import IndexBackend, NonConformingIndexError, NormIndex
from normrank.errors import CorruptIndexError, InvalidParameterError, UnsupportedIndexError
from normrank.store.keyed_store import StoreNotFoundError

REPO = Path(__file__).resolve().parents[3]
DIM, N = 16, 60


def docs_backend() -> type:
    """``BruteForceIndex`` as docs/backends.md defines it (its first python block, run)."""
    text = (REPO / "docs" / "backends.md").read_text(encoding="utf-8")
    code = re.search(r"^```python\n(.*?)^```", text, re.S | re.M).group(1)
    namespace: dict[str, Any] = {"__name__": "docs_backends"}
    exec(compile(code, "docs/backends.md", "exec"), namespace)
    return namespace["BruteForceIndex"]


BruteForceIndex = docs_backend()


class Table(Embeddings):
    """Each text maps to a fixed raw vector (norms vary)."""

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.table[t].tolist() for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.table[text].tolist()


@pytest.fixture(scope="module")
def table() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    vecs = rng.normal(size=(N + 5, DIM)) * rng.lognormal(0.0, 0.5, size=(N + 5, 1))
    return {f"t{i}": v.astype(np.float32) for i, v in enumerate(vecs)}


def texts_and_metadata() -> tuple[list[str], list[dict], list[str]]:
    texts = [f"t{i}" for i in range(N)]
    return texts, [{"group": i % 3, "i": i} for i in range(N)], [f"id{i}" for i in range(N)]


def filled(table: dict, index: Any, alpha: float = -0.5) -> NormRankVectorStore:
    store = NormRankVectorStore.from_index(index, Table(table), alpha=alpha)
    texts, metas, ids = texts_and_metadata()
    assert store.add_texts(texts, metas, ids=ids) == ids
    return store


def numpy_top(table: dict, query: str, alive: list[int], alpha: float, k: int) -> list[tuple[str, float]]:
    x = np.stack([table[f"t{i}"] for i in alive]).astype(np.float64)
    q = table[query].astype(np.float64)
    norms = np.linalg.norm(x, axis=1)
    s = (x @ q) / norms / np.linalg.norm(q) * norms**alpha
    order = np.argsort(-s, kind="stable")[:k]
    return [(f"id{alive[j]}", float(s[j])) for j in order]


@pytest.mark.parametrize("alpha", [-1.0, 0.0, 1.0])
def test_the_docs_backend_ranks_as_numpy_and_as_the_faiss_store_with_filters(table, alpha):
    store = filled(table, BruteForceIndex(DIM), alpha)
    texts, metas, ids = texts_and_metadata()
    faiss_store = NormRankVectorStore.from_texts(texts, Table(table), metas, ids=ids, alpha=alpha)
    assert isinstance(store.index, IndexBackend) and isinstance(store.index, BruteForceIndex)
    for query in ("t60", "t61", "t62"):  # not stored: at alpha = 0 a stored one ties every MMR value
        got = store.similarity_search_with_score(query, k=5, filter={"group": 1})
        alive = [i for i in range(N) if i % 3 == 1]
        want = numpy_top(table, query, alive, alpha, 5)
        assert [d.id for d, _ in got] == [i for i, _ in want]
        np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=1e-5)
        peer = faiss_store.similarity_search_with_score(query, k=5, filter={"group": 1})
        assert [d.id for d, _ in got] == [d.id for d, _ in peer]
        everything = store.similarity_search(query, k=N + 10)  # k above the count: every document
        assert len(everything) == N
        mmr = store.max_marginal_relevance_search(query, k=4, fetch_k=12)
        assert [d.id for d in mmr] == [
            d.id for d in faiss_store.max_marginal_relevance_search(query, k=4, fetch_k=12)
        ]


def test_overwrite_delete_and_get_through_the_docs_backend(table):
    store = filled(table, BruteForceIndex(DIM))
    store.add_texts(["t60"], [{"group": 9}], ids=["id0"])  # overwrite: new text, vector, metadata
    assert store.get_by_ids(["id0"])[0].page_content == "t60" and len(store) == N == len(store.index)
    assert store.similarity_search("t60", k=1, alpha=0.0)[0].id == "id0"
    store.delete(["id1", "id2", "missing"])
    alive = [60 if i == 0 else i for i in range(N) if i not in (1, 2)]
    got = store.similarity_search_with_score("t61", k=8)
    want = numpy_top(table, "t61", alive, -0.5, 8)
    assert [d.id for d, _ in got] == [("id0" if i == "id60" else i) for i, _ in want]
    assert len(store.index) == N - 2
    store.delete()
    assert len(store) == 0 == len(store.index)


def test_save_writes_the_documents_and_load_takes_the_index_back(table, tmp_path):
    store = filled(table, BruteForceIndex(DIM))
    store.delete(["id5"])
    store.save_local(tmp_path / "s")
    with pytest.raises(StoreNotFoundError, match=r"BruteForceIndex.*load_local\(\.\.\., index=\)"):
        NormRankVectorStore.load_local(tmp_path / "s", Table(table))
    with pytest.raises(CorruptIndexError, match="different ids"):  # an empty one: a restart lost them
        NormRankVectorStore.load_local(tmp_path / "s", Table(table), index=BruteForceIndex(DIM))
    again = NormRankVectorStore.load_local(tmp_path / "s", Table(table), index=store.index)
    assert again.alpha == -0.5 and again.index is store.index and len(again) == N - 1
    got = again.similarity_search_with_score("t62", k=6, filter={"group": 2})
    assert got == store.similarity_search_with_score("t62", k=6, filter={"group": 2})


def test_from_index_takes_the_index_alpha_and_any_shipped_backend(table):
    assert NormRankVectorStore.from_index(BruteForceIndex(DIM, alpha=-0.25), Table(table)).alpha == -0.25
    assert NormRankVectorStore.from_index(BruteForceIndex(DIM), Table(table)).alpha == 0.0
    store = filled(table, NormIndex(DIM, factory="HNSW16"))
    assert store.index.factory == "HNSW16"
    assert store.similarity_search("t61", k=3)


class HalfDone:
    dim = DIM

    def __len__(self) -> int:
        return 0

    def add(self, x, ids):
        pass


def test_an_index_that_does_not_conform_is_refused_naming_what_is_missing(table):
    with pytest.raises(NonConformingIndexError, match="missing ids, remove, search, norm_of, reconstruct"):
        NormRankVectorStore.from_index(HalfDone(), Table(table))
    full = BruteForceIndex(DIM)
    full.add(np.ones((1, DIM)), ids=[0])
    with pytest.raises(InvalidParameterError, match="must be empty"):
        NormRankVectorStore.from_index(full, Table(table))
    with pytest.raises(UnsupportedIndexError, match=r"from_index\(index, embedding\)"):
        NormRankVectorStore(Table(table), BruteForceIndex(DIM))  # FAISS's positional index=


def test_an_ids_method_is_refused_by_load_local_with_a_typed_error(table, tmp_path):
    """Issue 46, defect 9: check_backend took an ``ids`` method, and load_local then failed with
    ``TypeError: 'method' object is not iterable``."""
    store = filled(table, BruteForceIndex(DIM))
    store.save_local(tmp_path / "s")

    class IdsMethod(BruteForceIndex):
        def ids(self):  # the contract reads ids as a value
            return self._ids.copy()

    odd = IdsMethod(DIM)
    odd.add(np.stack([table[t] for t in texts_and_metadata()[0]]), ids=np.arange(N))
    with pytest.raises(NonConformingIndexError, match="ids is a method"):
        NormRankVectorStore.load_local(tmp_path / "s", Table(table), index=odd)


@pytest.mark.parametrize("factory", ["IVF4,Flat", "IVF4,PQ4", "PQ4", "SQ8"])
def test_a_factory_that_needs_training_is_refused_when_the_store_is_made(table, factory):
    """Issue 46, defect 10: from_texts(..., factory="IVF4,Flat") failed at its add saying
    "call train(x) first", which no store user can do; refused now, naming from_index."""
    texts, metas, ids = texts_and_metadata()
    for make in (
        lambda: NormRankVectorStore.from_texts(texts, Table(table), metas, ids=ids, factory=factory),
        lambda: NormRankVectorStore(Table(table), factory=factory),
    ):
        with pytest.raises(InvalidParameterError) as e:
            make()
        said = str(e.value)
        assert "NormRankVectorStore.from_index(index, embedding)" in said and "index.train(sample)" in said


def test_a_trained_norm_index_through_from_index_is_the_way(table, tmp_path):
    """The way the refusal names: a NormIndex trained on a sample, handed to from_index; it is
    saved in the store's folder and loaded back without index=."""
    sample = np.stack(list(table.values()))
    index = NormIndex(DIM, factory="IVF4,Flat", nprobe=4)  # every list: exact
    index.train(sample)
    store = filled(table, index)
    store.save_local(tmp_path / "s")
    again = NormRankVectorStore.load_local(tmp_path / "s", Table(table))
    assert isinstance(again.index, NormIndex) and again.index.faiss_index.ntotal == N
    got = again.similarity_search_with_score("t60", k=5)
    want = numpy_top(table, "t60", list(range(N)), -0.5, 5)
    assert [d.id for d, _ in got] == [i for i, _ in want]
    np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=1e-5)
