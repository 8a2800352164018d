"""The PGVector surface test: every public method of ``langchain_postgres.PGVector`` (enumerated
now), called on PGVector and on ``NormRankVectorStore.from_postgres`` with the same documents on a
real server (the root conftest's ``pg_uri``), with ordinary and edge arguments (no texts, no ids,
duplicate ids, ``k`` <= 0, a ``None`` metadata, a document without id). Each call gives the same
result, or is a difference or refusal listed in the adapter README's table (between the
``pgvector-table`` markers); an untyped error fails, and so does a row no call produces. The
async twins are left out: PGVector answers them only when built with ``async_mode=True``.

Scores are compared as each store defines them (PGVector: cosine distance, here: similarity),
so the score-returning calls are documented differences; the ids, order and documents are
checked the same by ``test_langchain_pgvector_peer.py``.
"""

from __future__ import annotations

import fnmatch
import json
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

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

README = Path(__file__).resolve().parents[1] / "README.md"
N, DIM = 12, 16
EMB = DeterministicFakeEmbedding(size=DIM)
_names = iter(range(1_000_000))
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


class Pair:
    """One store of each kind, named alike; ids carry the name (PGVector keys rows by id alone,
    across collections) and come back without it."""

    def __init__(self, uri: str) -> None:
        self.name = f"surf{next(_names)}"
        self.url = "postgresql+psycopg://" + uri.split("://", 1)[1]

    def id(self, i: Any) -> str:
        return f"{self.name}.{i}"

    def pgvector(self, fill: bool = True) -> Any:
        store = PGVector(EMB, connection=self.url, collection_name=self.name, use_jsonb=True)
        return self._fill(store) if fill else store

    def ours(self, fill: bool = True) -> NormRankVectorStore:
        store = NormRankVectorStore.from_postgres(self.url, self.name, EMB, dim=DIM, exact=True)
        return self._fill(store) if fill else store

    def _fill(self, store: Any) -> Any:
        store.add_texts(
            [f"doc {i}" for i in range(N)],
            [{"group": i % 3, "i": i} for i in range(N)],
            ids=[self.id(i) for i in range(N)],
        )
        return store


def summary(x: Any, name: str) -> Any:
    """A comparable form: the collection's name off the ids, fresh uuid4 ids as one placeholder,
    floats to 4 decimals, a store by what it holds."""
    if isinstance(x, str):
        x = x.removeprefix(f"{name}.")
        return "<uuid4>" if UUID.match(x) else x
    if isinstance(x, Document):
        return ("doc", summary(str(x.id), name), x.page_content, json.dumps(x.metadata, sort_keys=True))
    if isinstance(x, (list, tuple)):
        return type(x)(summary(v, name) for v in x)
    if isinstance(x, float):
        return round(x, 4)
    if isinstance(x, (PGVector, NormRankVectorStore)):
        return ("store", state(x, name))
    return x


def state(store: Any, name: str) -> Any:
    """What a user sees of a store: every id it finds, and the top 4 of a query in order."""
    found = store.similarity_search("query 0", k=100)
    return sorted(summary(d.id, name) for d in found), [summary(d.id, name) for d in found[:4]]


Step = Callable[[Any, Pair, type], Any]


def _search(method: str, **kw: Any) -> Step:
    return lambda s, p, cls: getattr(s, method)("query 0", **kw)


def _by_vector(method: str, **kw: Any) -> Step:
    return lambda s, p, cls: getattr(s, method)(EMB.embed_query("query 0"), **kw)


def _retriever(search_type: str, **kw: Any) -> Step:
    return lambda s, p, cls: s.as_retriever(search_type=search_type, search_kwargs=kw).invoke("query 0")


def _class_level(method: str) -> Step:
    def step(s: Any, p: Pair, cls: type) -> Any:
        texts = ["new a", "new b"]
        kw = {"connection": p.url, "collection_name": p.name + "n", "ids": [p.id("na"), p.id("nb")]}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if method == "from_texts":
                return cls.from_texts(texts, EMB, [{"g": 1}, {"g": 2}], **kw)
            if method == "from_documents":
                docs = [Document(page_content=t) for t in texts]
                return cls.from_documents(docs, EMB, **kw)
            if method == "from_embeddings":
                return cls.from_embeddings(
                    list(zip(texts, EMB.embed_documents(texts), strict=True)), EMB, **kw
                )
            if method == "from_existing_index":
                return cls.from_existing_index(EMB, collection_name=p.name, connection=p.url)
        raise AssertionError(method)

    return step


F = {"filter": {"group": 1}}
#: The calls a PGVector user makes, by PGVector method: ordinary arguments and edge ones.
CALLS: dict[str, dict[str, Step]] = {
    "similarity_search": {
        "": _search("similarity_search", k=3),
        "filter=": _search("similarity_search", k=3, **F),
        "k=0": _search("similarity_search", k=0),
        "k=-1": _search("similarity_search", k=-1),
        "k > len": _search("similarity_search", k=N + 5),
        "an empty filter": _search("similarity_search", k=3, filter={}),
    },
    "similarity_search_with_score": {
        "": _search("similarity_search_with_score", k=3),
        "filter=": _search("similarity_search_with_score", k=3, **F),
    },
    "similarity_search_with_relevance_scores": {
        "": _search("similarity_search_with_relevance_scores", k=3),
        "score_threshold=": _search("similarity_search_with_relevance_scores", k=3, score_threshold=0.1),
    },
    "similarity_search_by_vector": {
        "": _by_vector("similarity_search_by_vector", k=3),
        "filter=": _by_vector("similarity_search_by_vector", k=3, **F),
    },
    "similarity_search_with_score_by_vector": {
        "": _by_vector("similarity_search_with_score_by_vector", k=3, **F),
    },
    "max_marginal_relevance_search": {
        "": _search("max_marginal_relevance_search", k=3, fetch_k=6, **F),
        "k=0": _search("max_marginal_relevance_search", k=0),
        "fetch_k < k": _search("max_marginal_relevance_search", k=5, fetch_k=2),
    },
    "max_marginal_relevance_search_with_score": {
        "": _search("max_marginal_relevance_search_with_score", k=3, fetch_k=6),
    },
    "max_marginal_relevance_search_by_vector": {
        "": _by_vector("max_marginal_relevance_search_by_vector", k=3, fetch_k=6, **F),
    },
    "max_marginal_relevance_search_with_score_by_vector": {
        "": _by_vector("max_marginal_relevance_search_with_score_by_vector", k=3, fetch_k=6),
    },
    "search": {
        "similarity": lambda s, p, cls: s.search("query 0", "similarity", k=3, **F),
        "mmr": lambda s, p, cls: s.search("query 0", "mmr", k=3, fetch_k=6),
    },
    "as_retriever": {
        "similarity": _retriever("similarity", k=3, **F),
        "mmr": _retriever("mmr", k=3, fetch_k=6),
        "similarity_score_threshold": _retriever("similarity_score_threshold", k=3, score_threshold=0.1),
    },
    "add_texts": {
        "": lambda s, p, cls: s.add_texts(
            ["new a", "new b"], [{"g": 1}, {"g": 2}], ids=[p.id("na"), p.id("nb")]
        ),
        "no ids": lambda s, p, cls: s.add_texts(["new a"]),
        "an existing id": lambda s, p, cls: s.add_texts(["new a"], ids=[p.id(0)]),
        "no texts": lambda s, p, cls: s.add_texts([]),
        "duplicate ids": lambda s, p, cls: s.add_texts(["new a", "new b"], ids=[p.id("x"), p.id("x")]),
        "a None metadata": lambda s, p, cls: s.add_texts(["new a"], [None], ids=[p.id("na")]),
        "fewer metadatas": lambda s, p, cls: s.add_texts(
            ["new a", "new b"], [{}], ids=[p.id("na"), p.id("nb")]
        ),
    },
    "add_documents": {
        "": lambda s, p, cls: s.add_documents([Document(id=p.id("na"), page_content="new a")]),
        "no documents": lambda s, p, cls: s.add_documents([]),
        "a Document without id": lambda s, p, cls: s.add_documents(
            [Document(id=p.id("with"), page_content="new a"), Document(page_content="new b")]
        ),
    },
    "add_embeddings": {
        "": lambda s, p, cls: s.add_embeddings(
            texts=["new a"], embeddings=[EMB.embed_query("new a")], ids=[p.id("na")]
        ),
    },
    "delete": {
        "": lambda s, p, cls: s.delete([p.id(0), p.id(1)]),
        "an unknown id": lambda s, p, cls: s.delete([p.id(0), p.id("missing")]),
        "no ids": lambda s, p, cls: s.delete([]),
        "duplicate ids": lambda s, p, cls: s.delete([p.id(0), p.id(0)]),
        "ids=None": lambda s, p, cls: s.delete(),
    },
    "get_by_ids": {
        "": lambda s, p, cls: s.get_by_ids([p.id(1), p.id("missing"), p.id(0)]),
        "no ids": lambda s, p, cls: s.get_by_ids([]),
        "duplicate ids": lambda s, p, cls: s.get_by_ids([p.id(1), p.id(1)]),
    },
    "from_texts": {"connection=": _class_level("from_texts")},
    "from_documents": {"connection=": _class_level("from_documents")},
    "from_embeddings": {"connection=": _class_level("from_embeddings")},
    "from_existing_index": {"": _class_level("from_existing_index")},
}
#: PGVector's own administration of its shared tables and collections: no counterpart here (a
#: store is one table, created by from_postgres); each is a README row, checked to be absent.
ADMIN = {
    "create_vector_extension", "create_tables_if_not_exists", "drop_tables", "create_collection",
    "delete_collection", "get_collection", "connection_string_from_db_params", "get_connection_string",
}  # fmt: skip
SKIP = {"acreate", "embeddings", "distance_strategy"}  # async factory; properties: attribute rows


def pgvector_methods() -> list[str]:
    names = [n for n in dir(PGVector) if not n.startswith("_") and callable(getattr(PGVector, n, None))]
    return sorted(n for n in names if not n.startswith("a") or n in ("add_texts", "add_documents", "add_embeddings", "as_retriever"))  # fmt: skip


def run(step: Step, make: Callable[[], Any], pair: Pair, cls: type) -> tuple[str, Any]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            store = make()
            out = step(store, pair, cls)
            return "ok", (summary(out, pair.name), state(store, pair.name))
    except Exception as e:  # classified below
        return "raised", e


def classify(theirs: tuple[str, Any], ours: tuple[str, Any]) -> str:
    if ours[0] == "raised":
        err = ours[1]
        if not isinstance(err, NormrankError):
            return f"untyped: {type(err).__name__}: {err}"
        if theirs[0] == "raised" and isinstance(err, type(theirs[1])):
            return "same"
        return f"refusal: {type(err).__name__}"
    if theirs[0] == "raised":
        return "difference"
    return "same" if theirs[1] == ours[1] else "difference"


def readme_table() -> list[tuple[str, str, str]]:
    block = (
        README.read_text().split("<!-- pgvector-table:start -->")[1].split("<!-- pgvector-table:end -->")[0]
    )
    rows = []
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows.append((cells[0].strip("`"), cells[1], cells[2]))
    return rows


@pytest.fixture(scope="module")
def outcomes(pg_uri) -> dict[str, str]:
    out: dict[str, str] = {}
    for method in pgvector_methods():
        if method in SKIP:
            continue
        if method in ADMIN:
            out[method] = "same" if hasattr(NormRankVectorStore, method) else "absent"
            continue
        for arg, step in CALLS[method].items():  # a KeyError: a new PGVector method, add its calls
            label = f"{method}({arg})"
            pair = Pair(pg_uri)
            theirs = run(step, pair.pgvector, pair, PGVector)
            pair = Pair(pg_uri)
            ours = run(step, pair.ours, pair, NormRankVectorStore)
            out[label] = classify(theirs, ours)
    return out


def test_every_pgvector_method_has_calls_here():
    missing = [m for m in pgvector_methods() if m not in CALLS and m not in ADMIN and m not in SKIP]
    assert not missing, f"PGVector methods without calls here: {missing}"


def test_pgvector_surface_is_same_or_documented(outcomes):
    rows, problems = readme_table(), []
    for label, kind in outcomes.items():
        row = next((r for r in rows if fnmatch.fnmatchcase(label, r[0])), None)
        if kind.startswith("untyped"):
            problems.append(f"{label}: {kind}")
        elif kind == "same":
            if row is not None:
                problems.append(f"{label}: same as PGVector, but the README lists it as {row[1]!r}")
        elif row is None:
            problems.append(f"{label}: undocumented {kind}")
        elif row[1] != kind:
            problems.append(f"{label}: {kind}, the README says {row[1]!r} ({row[0]})")
    stale = [r[0] for r in rows if not any(fnmatch.fnmatchcase(lab, r[0]) for lab in outcomes)]
    assert not problems and not stale, "\n".join(problems + [f"stale row: {s}" for s in stale])


def test_pgvector_counts(outcomes, record_property):
    kinds = [k.split(":")[0] for k in outcomes.values()]
    counts = {k: kinds.count(k) for k in ("same", "difference", "refusal", "absent", "untyped")}
    record_property("calls", len(outcomes))
    record_property("counts", counts)
    said = re.search(
        r"PGVector count: (\d+) calls, (\d+) the same, (\d+)\s+documented differences, (\d+)\s+documented "
        r"refusals, (\d+) methods absent",
        README.read_text(),
    )
    assert said, "the README's PGVector count sentence is missing"
    have = (len(outcomes), counts["same"], counts["difference"], counts["refusal"], counts["absent"])
    assert tuple(int(x) for x in said.groups()) == have, f"the README's PGVector counts are stale: now {have}"
