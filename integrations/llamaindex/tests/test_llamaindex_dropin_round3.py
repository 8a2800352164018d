"""Issue 38 (drop-in, round three), LlamaIndex side, from the user's side: a filter across kinds
raises a typed error naming the field and both kinds, in memory and on PostgreSQL (the reference:
SimpleVectorStore raises TypeError); the documented switch from PGVectorStore (docs/llamaindex.md)
runs as written against PGVectorStore on a real server and returns the same nodes and scores."""

from __future__ import annotations

import re
from itertools import count
from pathlib import Path

import numpy as np
import pytest
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters, VectorStoreQuery
from llama_index.vector_stores.normrank import FilterTypeError, NormRankVectorStore

from normrank.errors import InvalidParameterError

pytestmark = pytest.mark.filterwarnings("ignore")
DOCS = Path(__file__).resolve().parents[3] / "docs" / "llamaindex.md"
N, DIM = 60, 8
_tables = count()


def corpus(dim: int = DIM) -> list[TextNode]:
    rng = np.random.default_rng(38)
    x = rng.normal(size=(N, dim)) * rng.lognormal(0, 0.5, size=(N, 1))
    return [
        TextNode(
            id_=f"n{i}",
            text=f"doc {i}",
            metadata={"year": 2000 + i % 30, "title": f"t{i}", "tags": ["a", "b"][: i % 3]},
            embedding=x[i].tolist(),
        )
        for i in range(N)
    ]


ACROSS = [  # (key, operator, value, kind of the value, kind the field holds)
    ("title", ">", 1, "number", "string"),
    ("year", "<=", "2010", "string", "number"),
    ("year", "contains", "1", "string", "number"),
    ("tags", "text_match", "a", "string", "list"),
]


def _query(key: str, op: str, value) -> VectorStoreQuery:
    filters = MetadataFilters(filters=[MetadataFilter(key=key, operator=op, value=value)])
    return VectorStoreQuery(query_embedding=[1.0] * DIM, similarity_top_k=5, filters=filters)


def _raises_typed(store, key, op, value, want, held) -> None:
    message = rf"filter on '{key}': \w+ compares a {want} with a {held} value"
    q = _query(key, op, value)
    with pytest.raises(FilterTypeError, match=message):
        store.query(q)
    with pytest.raises(FilterTypeError, match=message):
        store.get_nodes(filters=q.filters)
    with pytest.raises(FilterTypeError, match=message):
        store.delete_nodes(filters=q.filters)
    assert len(store.get_nodes(node_ids=[f"n{i}" for i in range(N)])) == N  # nothing deleted


@pytest.mark.parametrize("key, op, value, want, held", ACROSS)
def test_a_filter_across_kinds_raises_in_memory_as_simple_vector_store_does(key, op, value, want, held):
    simple, ours = SimpleVectorStore(), NormRankVectorStore(dim=DIM)
    simple.add(corpus())
    ours.add(corpus())
    with pytest.raises(TypeError):  # the reference: LlamaIndex's own store raises, too
        simple.query(_query(key, op, value))
    _raises_typed(ours, key, op, value, want, held)
    assert issubclass(FilterTypeError, TypeError) and issubclass(FilterTypeError, InvalidParameterError)
    # the same field compared with its own kind still filters
    got = ours.query(_query("year", ">", 2025)).ids
    assert got == simple.query(_query("year", ">", 2025)).ids and got


def test_a_filter_across_kinds_raises_on_postgres(pg_uri):
    pytest.importorskip("pgvector", reason="needs pgvector: pip install 'normrank[postgres]'")
    store = NormRankVectorStore.from_postgres(pg_uri, f"kinds{next(_tables)}", embed_dim=DIM, exact=True)
    try:
        store.add(corpus())
        for key, op, value, want, held in ACROSS:
            _raises_typed(store, key, op, value, want, held)
        memory = NormRankVectorStore(dim=DIM)
        memory.add(corpus())
        assert store.query(_query("year", ">", 2025)).ids == memory.query(_query("year", ">", 2025)).ids
    finally:
        store.client.close()


def _switch_block() -> str:
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## Switch from PGVectorStore")[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_switch_from_pgvectorstore_as_documented(pg_uri):
    peer = pytest.importorskip("llama_index.vector_stores.postgres", reason="needs PGVectorStore")
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.postprocessor import SimilarityPostprocessor
    from sqlalchemy.engine import make_url

    nodes = corpus(384)

    class Fixed(BaseEmbedding):  # "query" embeds near nodes of the years the filter keeps
        def _get_query_embedding(self, query: str) -> list[float]:
            return np.sum([nodes[i].embedding for i in range(21, 27)], axis=0).tolist()

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_query_embedding(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            raise AssertionError("the nodes come with their embeddings")

    url = make_url(pg_uri).set(drivername="postgresql+psycopg2")  # PGVectorStore's form, as users hold it
    pg_store = peer.PGVectorStore.from_params(
        connection_string=url,
        async_connection_string=url.set(drivername="postgresql+asyncpg"),
        table_name="docs",
        embed_dim=384,
    )
    pg_store.add(nodes)
    embed_model = Fixed(model_name="fixed")
    before = VectorStoreIndex.from_vector_store(pg_store, embed_model=embed_model)
    filters = MetadataFilters(filters=[MetadataFilter(key="year", operator=">", value=2020)])
    cutoff = SimilarityPostprocessor(similarity_cutoff=0.1)
    want = cutoff.postprocess_nodes(
        before.as_retriever(similarity_top_k=5, filters=filters).retrieve("query")
    )

    space = {
        "url": url,
        "pg_store": pg_store,
        "node_ids": [n.node_id for n in nodes],
        "embed_model": embed_model,
    }
    exec(compile(_switch_block(), str(DOCS), "exec"), space)
    got = space["hits"]
    assert [h.node.node_id for h in got] == [h.node.node_id for h in want] and got
    assert [round(h.score, 4) for h in got] == [round(h.score, 4) for h in want]
    assert all(h.node.metadata["year"] > 2020 and h.score >= 0.1 for h in got)
    space["vector_store"].client.close()
    pg_store._engine.dispose()


def test_one_filter_type_error_class_for_both_frameworks():
    """LangChain's and LlamaIndex's stores raise the same class, so one ``except`` serves both."""
    from langchain_normrank.filters import FilterTypeError as LangChainFilterTypeError

    import normrank.errors

    assert FilterTypeError is LangChainFilterTypeError is normrank.errors.FilterTypeError
    assert issubclass(FilterTypeError, TypeError) and issubclass(FilterTypeError, ValueError)
