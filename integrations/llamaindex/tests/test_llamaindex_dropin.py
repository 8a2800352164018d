"""LlamaIndex users' code, as their docs write it, against NormRankVectorStore: alpha reaches the
search from every place LlamaIndex passes options, the standard reload works or fails loudly with
the line that works, nothing is silently ignored, and a tampered store file is refused."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import numpy as np
import pytest
from llama_index.core import StorageContext, VectorStoreIndex, load_index_from_storage
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import TextNode
from llama_index.vector_stores.normrank import (
    NormRankRetriever,
    NormRankVectorStore,
    UnknownArgumentError,
    UnstorableMetadataError,
)

from normrank.errors import CorruptIndexError, InvalidParameterError

N, DIM = 150, 10


class Table(BaseEmbedding):
    """Raw vectors by text (the last line of what LlamaIndex embeds)."""

    _table: dict = PrivateAttr()

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        super().__init__(model_name="table")
        self._table = table

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._table[query].tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._table[text.splitlines()[-1]].tolist()  # the text after the metadata lines


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(21)
    x = (rng.normal(size=(N, DIM)) * np.exp(rng.normal(0, 0.7, size=(N, 1)))).astype(np.float32)
    qs = rng.normal(size=(4, DIM)).astype(np.float32)
    table = {f"doc {i}": v for i, v in enumerate(x)} | {f"query {j}": v for j, v in enumerate(qs)}
    return x, qs, Table(table)


def brute(data, j: int, alpha: float, k: int) -> list[str]:
    x, qs, _ = data
    d, q = x.astype(np.float64), qs[j].astype(np.float64)
    norms = np.linalg.norm(d, axis=1)
    s = (d @ q) / (norms * np.linalg.norm(q)) * norms**alpha
    return [f"n{i}" for i in np.argsort(-s, kind="stable")[:k]]


def build(data, norm_alpha: float = -0.5) -> tuple[NormRankVectorStore, VectorStoreIndex]:
    store = NormRankVectorStore(dim=DIM, norm_alpha=norm_alpha)
    nodes = [TextNode(id_=f"n{i}", text=f"doc {i}", metadata={"i": i}) for i in range(N)]
    index = VectorStoreIndex(
        nodes, storage_context=StorageContext.from_defaults(vector_store=store), embed_model=data[2]
    )
    return store, index


def ids(nodes) -> list[str]:
    return [n.node.node_id for n in nodes]


def test_issue_snippets_alpha_and_typos_raise_type_error():
    with pytest.raises(TypeError, match="norm_alpha"):
        NormRankVectorStore(dim=384, alpha=-0.5)  # LlamaIndex's alpha is hybrid weighting
    with pytest.raises(UnknownArgumentError, match="'norm_alpha'"):
        NormRankVectorStore(dim=384, nrom_alpha=-1)
    with pytest.raises(InvalidParameterError):
        NormRankVectorStore(dim=384, norm_alpha=17)  # the index's range, +-16
    assert NormRankVectorStore(dim=384, norm_alpha=-0.5).norm_alpha == -0.5


def test_norm_alpha_reaches_the_search_from_a_retriever(data):
    _, index = build(data, norm_alpha=-0.5)
    for j in range(4):
        q = f"query {j}"
        assert ids(index.as_retriever(similarity_top_k=2).retrieve(q)) == brute(data, j, -0.5, 2)
        assert ids(NormRankRetriever(index, similarity_top_k=2, norm_alpha=0).retrieve(q)) == brute(
            data, j, 0.0, 2
        )
        r = index.as_retriever(similarity_top_k=3, vector_store_kwargs={"norm_alpha": 0.5})
        assert ids(r.retrieve(q)) == brute(data, j, 0.5, 3)
    assert brute(data, 0, -0.5, 2) != brute(data, 0, 0.0, 2) or brute(data, 1, -0.5, 2) != brute(
        data, 1, 0.0, 2
    )
    with pytest.raises(TypeError):
        NormRankRetriever(index, norm_alpha=0, vector_store_kwargs={"norm_alpha": 1})
    with pytest.raises(InvalidParameterError, match="hybrid"):
        index.as_retriever(alpha=0.3).retrieve("query 0")  # LlamaIndex's hybrid weight: refused
    with pytest.raises(TypeError, match="'norm_alpha'"):
        index.as_retriever(vector_store_kwargs={"norm_alpa": 0}).retrieve("query 0")
    # the query engine path: as_query_engine passes vector_store_kwargs to as_retriever, and
    # RetrieverQueryEngine takes a NormRankRetriever
    engine = index.as_query_engine(similarity_top_k=2, vector_store_kwargs={"norm_alpha": 0}, llm=_mock_llm())
    assert ids(engine.retrieve(_bundle("query 1"))) == brute(data, 1, 0.0, 2)
    from llama_index.core.query_engine import RetrieverQueryEngine

    retriever = NormRankRetriever(index, similarity_top_k=2, norm_alpha=0)
    engine = RetrieverQueryEngine.from_args(retriever, llm=_mock_llm())
    assert ids(engine.retrieve(_bundle("query 2"))) == brute(data, 2, 0.0, 2)


def _mock_llm():
    from llama_index.core.llms import MockLLM

    return MockLLM()


def _bundle(q: str):
    from llama_index.core.schema import QueryBundle

    return QueryBundle(q)


def test_standard_reload_fails_loudly_with_the_line_that_works(data, tmp_path):
    _, index = build(data, norm_alpha=-1.0)
    d = str(tmp_path / "storage")
    index.storage_context.persist(d)
    with pytest.raises(ValueError, match=r"NormRankVectorStore\.from_persist_dir"):
        load_index_from_storage(StorageContext.from_defaults(persist_dir=d), embed_model=data[2])
    # the line the error gives
    ctx = StorageContext.from_defaults(persist_dir=d, vector_store=NormRankVectorStore.from_persist_dir(d))
    again = load_index_from_storage(ctx, embed_model=data[2])
    for j in range(4):
        assert ids(again.as_retriever(similarity_top_k=3).retrieve(f"query {j}")) == brute(data, j, -1.0, 3)


def test_metadata_json_cannot_hold_is_refused_at_add(data):
    store, _ = build(data)
    for bad in (datetime.date(2024, 1, 1), (1, 2)):
        node = TextNode(id_="x", text="doc 0", metadata={"when": bad}, embedding=data[0][0].tolist())
        with pytest.raises(UnstorableMetadataError):
            store.add([node])
    assert len(store) == N and not store.get_nodes(["x"])
    with pytest.raises(TypeError):
        store.add([], bogus=1)
    with pytest.raises(TypeError):
        store.delete("n1", bogus=1)


# ---------------------------------------------------------------------- tampered store files
def _persisted(data, tmp_path: Path) -> Path:
    store, _ = build(data)
    path = tmp_path / "default__vector_store.json"
    store.persist(str(path))
    return tmp_path / "default__normrank_store.json"


def _edit(path: Path, edit) -> None:
    payload = json.loads(path.read_text())
    edit(payload)
    path.write_text(json.dumps(payload))


def _deep(levels: int) -> dict:
    out: dict = {}
    cur = out
    for _ in range(levels):
        cur["x"] = {}
        cur = cur["x"]
    return out


TAMPERS = {
    "alpha 1e308": lambda p: p.update(alpha=1e308),
    "alpha -17": lambda p: p.update(alpha=-17),
    "next_key 0": lambda p: p.update(next_key=0),
    "next_key 2**70": lambda p: p.update(next_key=2**70),
    "index_dir missing": lambda p: p.pop("index_dir"),
    "node data replaced": lambda p: p["records"][0]["record"].update(data={"x": 1}),
    "node content garbage": lambda p: p["records"][0]["record"]["data"].update(_node_content="{not json"),
    "node metadata 700 deep": lambda p: p["records"][0]["record"]["data"].update(m=_deep(700)),
    "ref_doc_id a number": lambda p: p["records"][0]["record"].update(ref_doc_id=3),
}


@pytest.mark.parametrize("case", sorted(TAMPERS))
def test_tampered_store_file_is_refused_at_load(data, tmp_path, case):
    real = _persisted(data, tmp_path)
    _edit(real, TAMPERS[case])
    with pytest.raises(CorruptIndexError):
        NormRankVectorStore.from_persist_dir(str(tmp_path))


def test_missing_store_is_also_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        NormRankVectorStore.from_persist_dir(str(tmp_path / "nothing"))


def test_a_failed_persist_leaves_the_folder_as_it_was(data, tmp_path, monkeypatch):
    from normrank import NormIndex

    store, _ = build(data)

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(NormIndex, "save", disk_full)
    with pytest.raises(OSError, match="No space"):
        store.persist(str(tmp_path / "new" / "default__vector_store.json"))
    assert not (tmp_path / "new").exists()
    monkeypatch.undo()
    store.persist(str(tmp_path / "ok" / "default__vector_store.json"))
    before = sorted(p.name for p in (tmp_path / "ok").iterdir())
    monkeypatch.setattr(NormIndex, "save", disk_full)
    with pytest.raises(OSError, match="No space"):
        store.persist(str(tmp_path / "ok" / "default__vector_store.json"))
    monkeypatch.undo()
    assert sorted(p.name for p in (tmp_path / "ok").iterdir()) == before
    assert len(NormRankVectorStore.from_persist_dir(str(tmp_path / "ok"))) == N


def test_components_refuse_misspelt_fields():
    from llama_index.vector_stores.normrank import (
        NormMetadataTransform,
        NormRankEmbedding,
        NormReweightPostprocessor,
    )

    with pytest.raises(TypeError, match="'embed_batch_size'"):
        NormRankEmbedding(model_name="x", embed_batch_sise=8)
    with pytest.raises(TypeError, match="'key'"):
        NormMetadataTransform(kee="n")
    with pytest.raises(TypeError, match="'top_n'"):
        NormReweightPostprocessor(norm_alpha=-1.0, topn=3)
    with pytest.raises(TypeError, match="norm_alpha"):
        NormReweightPostprocessor(alpha=-1.0)
