"""``langchain_postgres.PGVector`` as the peer of ``NormRankVectorStore.from_postgres``, both on
a real server (the root conftest's ``pg_uri``): a PGVector user's filter dictionaries, with every
operator PGVector supports (read from ``langchain_postgres`` now), return the same documents in
the same order, and the scores convert as docs/langchain.md says (``s = 1 - d`` at alpha = 0).
Where PGVector's SQL decides otherwise on unusual data (a missing key, ``True == 1``, a list
value, ``$in`` on the text form...), the difference must be a row of the table in
docs/langchain.md (between the ``pgvector-filters`` markers): an unlisted difference fails, and
so does a row that no longer differs. Skipped where langchain-postgres or the server is missing.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_normrank import NormRankVectorStore

from normrank.errors import NormrankError

pytest.importorskip("psycopg", reason="needs psycopg: pip install 'normrank[postgres]'")
pytest.importorskip("sqlalchemy", reason="PGVector needs sqlalchemy")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pgv = pytest.importorskip("langchain_postgres.vectorstores", reason="needs langchain-postgres")
PGVector = pgv.PGVector

DOCS_PAGE = Path(__file__).resolve().parents[3] / "docs" / "langchain.md"
DIM = 16
_names = iter(range(1_000_000))


@pytest.fixture(scope="module")
def uri(pg_uri) -> str:
    return pg_uri


def sqlalchemy_url(uri: str) -> str:
    """PGVector's connection: SQLAlchemy's spelling of the same server."""
    return "postgresql+psycopg://" + uri.split("://", 1)[1]


def both(uri: str, docs: list[Document]) -> tuple[Any, NormRankVectorStore]:
    """The same documents (and ids) in a PGVector collection and a from_postgres table. The ids
    get the collection's name in front: PGVector keeps every collection's rows in one table, keyed
    by id alone (re-adding an id of another collection updates that row where it is)."""
    name = f"peer{next(_names)}"
    docs = [Document(id=f"{name}.{d.id}", page_content=d.page_content, metadata=d.metadata) for d in docs]
    emb = DeterministicFakeEmbedding(size=DIM)  # raw vectors: norms vary, cosine ranks both
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = PGVector(emb, connection=sqlalchemy_url(uri), collection_name=name, use_jsonb=True)
        theirs.add_documents(docs, ids=[d.id for d in docs])
    ours = NormRankVectorStore.from_postgres(sqlalchemy_url(uri), name, emb, dim=DIM, exact=True)
    ours.add_documents(docs, ids=[d.id for d in docs])
    return theirs, ours


def corpus(n: int = 60) -> list[Document]:
    """Metadata as a PGVector user keeps it: every document has each field, of one kind, except
    ``note`` (on some documents only)."""
    rng = np.random.default_rng(5)
    docs = []
    for i in range(n):
        topic = ["rome", "pasta", "trains", "opera"][i % 4]
        meta: dict[str, Any] = {
            "src": "abc"[i % 3],
            "year": 1995 + i % 20,
            "score": round(float(rng.uniform(0.01, 0.99)), 3),
            "title": [f"Intro to {topic}", f"intro: {topic}", f"{topic} in Rome", f"ROME {topic}"][i % 4],
        }
        if i % 5 == 0:
            meta["note"] = f"n{i}"
        docs.append(Document(id=f"d{i}", page_content=f"document {i} about {topic}", metadata=meta))
    return docs


#: A PGVector user's filters: PGVector's syntax (one operator per field), every operator.
USER_FILTERS = [
    {"src": "a"},
    {"src": ["a", "c"]},
    {"src": {"$eq": "b"}},
    {"src": {"$ne": "b"}},
    {"year": {"$eq": 2001}},
    {"year": {"$ne": 2001}},
    {"year": {"$gt": 2005}},
    {"year": {"$gte": 2005}},
    {"year": {"$lt": 2000}},
    {"year": {"$lte": 2000}},
    {"score": {"$gt": 0.5}},
    {"score": {"$lte": 0.25}},
    {"src": {"$gt": "a"}},
    {"title": {"$lt": "ROME"}},
    {"year": {"$between": [2000, 2009]}},
    {"score": {"$between": [0.2, 0.6]}},
    {"src": {"$in": ["a", "b"]}},
    {"year": {"$in": [1999, 2003, 2010]}},
    {"src": {"$nin": ["a"]}},
    {"year": {"$nin": [1999, 2003]}},
    {"title": {"$like": "Intro%"}},
    {"title": {"$like": "%in Rome"}},
    {"title": {"$like": "intro: _%"}},
    {"title": {"$ilike": "%rome%"}},
    {"note": {"$exists": True}},
    {"note": {"$exists": False}},
    {"src": "a", "year": {"$gte": 2005}},
    {"$and": [{"src": {"$ne": "c"}}, {"score": {"$gt": 0.3}}]},
    {"$or": [{"src": "a"}, {"year": {"$lt": 1998}}]},
    {"$not": {"src": "a"}},
    {"$not": [{"src": "a"}, {"year": {"$gt": 2010}}]},
    {
        "$and": [
            {"$or": [{"title": {"$ilike": "intro%"}}, {"note": {"$exists": True}}]},
            {"$not": {"year": {"$between": [2000, 2004]}}},
        ]
    },
]


def operators(f: Any) -> set[str]:
    if isinstance(f, dict):
        return {k for k in f if k.startswith("$")} | {o for v in f.values() for o in operators(v)}
    if isinstance(f, list):
        return {o for v in f for o in operators(v)}
    return set()


def test_the_user_filters_use_every_pgvector_operator():
    assert set(pgv.SUPPORTED_OPERATORS) <= {o for f in USER_FILTERS for o in operators(f)}


def test_every_pgvector_operator_returns_the_same_documents_in_the_same_order(uri):
    theirs, ours = both(uri, corpus())
    q = "trains to Rome"
    matched = 0
    for f in USER_FILTERS:
        want = theirs.similarity_search_with_score(q, k=100, filter=f)
        got = ours.similarity_search_with_score(q, k=100, filter=f)
        assert [d.id for d, _ in got] == [d.id for d, _ in want], f
        assert [d.metadata for d, _ in got] == [d.metadata for d, _ in want], f
        # PGVector's score is the cosine distance d, this store's the similarity s = 1 - d
        np.testing.assert_allclose([s for _, s in got], [1 - d for _, d in want], atol=1e-5)
        assert [d.id for d in ours.similarity_search(q, k=3, filter=f)] == [
            d.id for d in theirs.similarity_search(q, k=3, filter=f)
        ], f
        matched += len(want)
    assert matched > 0


def test_relevance_scores_mean_the_same_as_pgvector(uri):
    """PGVector's relevance at cosine distance is 1 - d, the cosine; this store's is the cosine
    clipped to [0, 1] (documented): equal wherever the cosine is not negative."""
    theirs, ours = both(uri, corpus())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LangChain warns on PGVector's negative relevances
        want = theirs.similarity_search_with_relevance_scores("opera", k=60)
        got = ours.similarity_search_with_relevance_scores("opera", k=60)
    assert [d.id for d, _ in got] == [d.id for d, _ in want]
    np.testing.assert_allclose([r for _, r in got], [min(1.0, max(0.0, r)) for _, r in want], atol=1e-5)
    assert any(r < 0 for _, r in want)  # the clipped ones were checked too
    kept = [d.id for d, _ in ours.similarity_search_with_relevance_scores("opera", k=60, score_threshold=0.2)]
    assert kept == [d.id for d, r in want if r >= 0.2]


# ---------------------------------------------------------------------- unusual data: the table
EDGE_DOCS = [
    {"s": "a", "n": 1, "y": 2001, "f": 3.0},
    {"s": "b", "n": 2.5, "y": "2001"},
    {"n": True, "y": 1990},
    {"s": None, "tags": ["x", "y"]},
    {"s": "A%b", "n": 0},
    {},
]
#: Filters on data a PGVector user may meet: each is the same on both stores, or a table row.
EDGE_FILTERS = [
    {"s": {"$ne": "a"}},
    {"s": {"$nin": ["a"]}},
    {"s": None},
    {"n": 1},
    {"n": {"$gt": 0}},
    {"tags": "x"},
    {"y": {"$in": [2001]}},
    {"f": {"$in": [3]}},
    {"y": {"$gt": 2000}},
    {"s": {"$gt": 1}},
    {"y": {"$like": "20%"}},
    {"s": {"$in": [None]}},
    {"n": {"$gt": 0, "$lt": 3}},
    {"$and": []},
    {"s": {"$exists": True}},
    {"s": {"$exists": False}},
    {"s": {"$ilike": "a%"}},
    {"s": {"$like": "A\\%%"}},
    {"$not": [{"s": "a"}, {"s": "b"}]},
    {"s": ["a", "b"]},
]


def outcome(store: Any, f: Any) -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return sorted(d.id.split(".")[1] for d in store.similarity_search("q", k=10, filter=f))
    except NormrankError as e:
        return f"refused: {type(e).__name__}"
    except Exception as e:  # PGVector's own refusals are untyped
        return f"raises {type(e).__name__}"


def documented_filters() -> dict[str, str]:
    """filter (as compact JSON) -> why, from the table between the pgvector-filters markers."""
    text = DOCS_PAGE.read_text()
    block = text.split("<!-- pgvector-filters:start -->")[1].split("<!-- pgvector-filters:end -->")[0]
    rows = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].startswith("`"):
            rows[json.dumps(json.loads(cells[0].strip("`")))] = cells[-1]
    return rows


def test_pgvector_filter_differences_are_the_documented_ones(uri, record_property):
    docs = [Document(id=f"d{i}", page_content=f"edge {i}", metadata=m) for i, m in enumerate(EDGE_DOCS)]
    theirs, ours = both(uri, docs)
    rows = documented_filters()
    problems, differ = [], 0
    for f in EDGE_FILTERS:
        key, a, b = json.dumps(f), outcome(theirs, f), outcome(ours, f)
        if isinstance(b, str) and b.startswith("raises"):
            problems.append(f"{key}: untyped error here: {b}")
        if a == b and key in rows:
            problems.append(f"{key}: the same on both ({a}), but documented as a difference")
        if a != b:
            differ += 1
            if key not in rows:
                problems.append(f"{key}: undocumented difference: PGVector {a}, here {b}")
    stale = [k for k in rows if k not in {json.dumps(f) for f in EDGE_FILTERS}]
    assert not problems and not stale, "\n".join(problems + [f"no such edge filter: {k}" for k in stale])
    record_property("edge_filters", len(EDGE_FILTERS))
    record_property("documented_differences", differ)


def test_the_connection_string_of_pgvector_opens_the_same_database(uri):
    """from_postgres takes PGVector's SQLAlchemy URL (postgresql+psycopg://) as it is."""
    emb = DeterministicFakeEmbedding(size=DIM)
    table = f"peer{next(_names)}"
    a = NormRankVectorStore.from_postgres(sqlalchemy_url(uri), table, emb, dim=DIM)
    a.add_texts(["x"], ids=["x"])
    assert [d.id for d in NormRankVectorStore.from_postgres(uri, table, emb).get_by_ids(["x"])] == ["x"]
    assert re.match(r"postgresql\+psycopg://", sqlalchemy_url(uri))


def test_pgvector_distance_strategy_is_taken_when_cosine(uri):
    from normrank.errors import InvalidParameterError

    emb, table = DeterministicFakeEmbedding(size=DIM), f"peer{next(_names)}"
    kinds = pgv.DistanceStrategy
    store = NormRankVectorStore.from_postgres(uri, table, emb, dim=DIM, distance_strategy=kinds.COSINE)
    assert len(store) == 0
    for other in (kinds.EUCLIDEAN, kinds.MAX_INNER_PRODUCT):
        with pytest.raises(InvalidParameterError, match=r"alpha=1\.0"):
            NormRankVectorStore.from_postgres(uri, table, emb, distance_strategy=other)


def test_pgvector_constructor_keywords_are_taken_or_refused_saying_why(uri):
    """from_texts(connection=, collection_name=) opens a store kept in PostgreSQL, as PGVector's;
    PGVector options this store would not honour are refused, typed."""
    from normrank.errors import InvalidParameterError
    from normrank.store.checks import UnknownArgumentError

    emb, name = DeterministicFakeEmbedding(size=DIM), f"peer{next(_names)}"
    url = sqlalchemy_url(uri)
    store = NormRankVectorStore.from_texts(
        ["a", "b"], emb, ids=["a", "b"], connection=url, collection_name=name
    )
    again = NormRankVectorStore.from_existing_index(emb, collection_name=name, connection=url)
    assert (
        sorted(d.id for d in again.similarity_search("a", k=5))
        == ["a", "b"]
        == sorted(store.index_to_docstore_id.values())
    )
    with pytest.raises(InvalidParameterError, match="pre_delete_collection"):
        NormRankVectorStore.from_texts(
            ["c"], emb, connection=url, collection_name=name, pre_delete_collection=True
        )
    with pytest.raises(InvalidParameterError, match="use_jsonb"):
        NormRankVectorStore.from_texts(["c"], emb, connection=url, collection_name=name, use_jsonb=False)
    with pytest.raises(UnknownArgumentError, match="engine_args"):
        NormRankVectorStore.from_texts(["c"], emb, connection=url, collection_name=name, engine_args={})
    with pytest.raises(InvalidParameterError, match="connection="):
        NormRankVectorStore.from_existing_index(emb, collection_name=name)
