"""PGVectorStore as a peer (issue 38): ``NormRankVectorStore.from_postgres`` and
``llama-index-vector-stores-postgres``'s ``PGVectorStore`` on the same real server, the same nodes
and the same calls: each store method with ordinary arguments, a query with each
``VectorStoreQuery`` field and each filter operator and condition, the async twins, and the edge
arguments of the in-memory surface test (``EDGE``). Each outcome must be the same (ids and
similarities to 4 decimals: PGVectorStore's similarity is ``1 - cosine distance``, this store's
at norm_alpha = 0 the cosine) or a row of the README's PGVectorStore table (between the
``pg-surface-table`` markers); an untyped error always fails, and so does a row no call produces.
Skipped, saying why, where the peer or the server is not at hand.
"""

from __future__ import annotations

import asyncio
import fnmatch
import re
import warnings
from itertools import count
from typing import Any

import pytest
from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters
from llama_index.vector_stores.normrank import NormRankVectorStore
from test_llamaindex_surface import (
    DIM,
    EDGE,
    FILTERS,
    README,
    _f,
    _q,
    classify,
    edge_nodes,
    make_nodes,
    store_state,
    summary,
)

pytestmark = pytest.mark.filterwarnings("ignore")
pytest.importorskip("psycopg", reason="needs psycopg: pip install 'normrank[postgres]'")
pytest.importorskip("pgvector", reason="needs pgvector: pip install 'normrank[postgres]'")
pg_peer = pytest.importorskip(
    "llama_index.vector_stores.postgres", reason="needs llama-index-vector-stores-postgres (the dev extra)"
)
pytest.importorskip("psycopg2", reason="PGVectorStore needs psycopg2")
pytest.importorskip("asyncpg", reason="PGVectorStore needs asyncpg")
PGVectorStore = pg_peer.PGVectorStore
N_ALL = 40  # more than every node: a filter's whole match set is compared


def _nested(condition: str) -> MetadataFilters:
    inner = MetadataFilters(filters=[_leaf("group", "==", 0), _leaf("name", "==", "x4")], condition="or")
    return MetadataFilters(filters=[inner, _leaf("group", "<=", 1)], condition=condition)


def _leaf(key: str, op: str, value: Any) -> MetadataFilter:
    return MetadataFilter(key=key, operator=op, value=value)


def _filters(condition: str) -> MetadataFilters:
    return MetadataFilters(
        filters=[_leaf("group", "==", 1), _leaf("tags", "contains", "a")], condition=condition
    )


OPS = {"EQ": ("group", "==", 1), "NE": ("group", "!=", 1), "GT": ("group", ">", 0), "GTE": ("group", ">=", 1)}
OPS |= {"LT": ("group", "<", 1), "LTE": ("group", "<=", 1), "IN": ("group", "in", [0, 2])}
OPS |= {
    "NIN": ("group", "nin", [0, 2]),
    "CONTAINS": ("tags", "contains", "a"),
    "ANY": ("tags", "any", ["a", "z"]),
}
OPS |= {"ALL": ("tags", "all", ["a", "b"]), "TEXT_MATCH": ("name", "text_match", "x")}
OPS |= {
    "TEXT_MATCH_INSENSITIVE": ("name", "text_match_insensitive", "X"),
    "IS_EMPTY": ("tags", "is_empty", None),
}

# What a PGVectorStore user calls, with ordinary arguments (the edge ones come from EDGE).
CALLS: dict[str, Any] = {
    "add(nodes)": lambda s: s.add(make_nodes(30, 2, embedded=True)),
    "delete(ref_doc_id)": lambda s: s.delete("d1"),
    "delete_nodes(node_ids)": lambda s: s.delete_nodes(["n1", "n2"]),
    "delete_nodes(filters)": lambda s: s.delete_nodes(filters=FILTERS),
    "get_nodes(node_ids)": lambda s: s.get_nodes(["n1", "n2"]),
    "get_nodes(filters)": lambda s: s.get_nodes(filters=FILTERS),
    "clear()": lambda s: s.clear(),
    "query()": lambda s: s.query(_q()),
    "query(node_ids=)": lambda s: s.query(_q(node_ids=["n1", "n4", "n7", "n9"])),
    "query(doc_ids=)": lambda s: s.query(_q(doc_ids=["d1", "d2"])),
    "query(filters=)": lambda s: s.query(_q(filters=FILTERS)),
    "query(mode=mmr)": lambda s: s.query(_q(mode="mmr")),
    "query(mode=mmr, mmr_threshold=)": lambda s: s.query(_q(mode="mmr", mmr_threshold=0.3)),
    "query(condition=and)": lambda s: s.query(_q(filters=_filters("and"))),
    "query(condition=or)": lambda s: s.query(_q(filters=_filters("or"))),
    "query(condition=not)": lambda s: s.query(_q(filters=_filters("not"))),
    "query(nested filters, and)": lambda s: s.query(_q(filters=_nested("and"))),
    "async_add(nodes)": lambda s: asyncio.run(s.async_add(make_nodes(30, 2, embedded=True))),
    "aquery()": lambda s: asyncio.run(s.aquery(_q())),
    "adelete(ref_doc_id)": lambda s: asyncio.run(s.adelete("d1")),
    "adelete_nodes(node_ids)": lambda s: asyncio.run(s.adelete_nodes(["n1", "n2"])),
    "aget_nodes(node_ids)": lambda s: asyncio.run(s.aget_nodes(["n1", "n2"])),
    "aclear()": lambda s: asyncio.run(s.aclear()),
}
CALLS |= {
    f"query(filter {op})": (lambda s, a=args: s.query(_q(N_ALL, filters=_f(*a)))) for op, args in OPS.items()
}


@pytest.fixture(scope="module")
def outcomes(pg_uri) -> dict[str, str]:
    return {label: classify(*pair) for label, pair in pg_pairs(pg_uri).items()}


def pg_pairs(pg_uri: str) -> dict[str, tuple]:
    """{label: (PGVectorStore's outcome, this store's)} of every call, on the server at ``pg_uri``."""
    from sqlalchemy.engine import make_url

    url = make_url(pg_uri)
    tables = count()

    def peer() -> Any:
        return PGVectorStore.from_params(
            connection_string=url.set(drivername="postgresql+psycopg2"),
            async_connection_string=url.set(drivername="postgresql+asyncpg"),
            table_name=f"peer{next(tables)}",
            embed_dim=DIM,
        )

    def ours() -> Any:
        return NormRankVectorStore.from_postgres(pg_uri, f"ours{next(tables)}", embed_dim=DIM, exact=True)

    try:
        probe = peer()
        probe.add(edge_nodes())
        _close(probe)
    except Exception as e:  # the peer's own connection (psycopg2 / asyncpg) could not be made here
        pytest.skip(f"PGVectorStore could not reach the test server: {type(e).__name__}: {e}")

    def run(fn: Any, make: Any) -> tuple[str, Any]:
        store = None
        try:
            store = make()
            store.add(edge_nodes())
            out = fn(store)
            return "ok", (summary(out), store_state(store))
        except Exception as e:
            return "raised", e
        finally:
            _close(store)

    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, fn in {**CALLS, **{f"edge {k}": v for k, v in EDGE.items()}}.items():
            if not hasattr(PGVectorStore, name.removeprefix("edge ").split("(")[0]):
                continue  # a SimpleVectorStore method PGVectorStore does not have (get)
            out[f"pg {name}"] = (run(fn, peer), run(fn, ours))
    return out


def _close(store: Any) -> None:
    if isinstance(store, NormRankVectorStore):
        store.client.close()
    elif store is not None and store._is_initialized:
        # PGVectorStore.close() awaits its async engine, whose connections belong to the event
        # loop of the call that made them (closed by now): drop that pool without closing them.
        store._engine.dispose()
        if store._async_engine is not None:
            store._async_engine.sync_engine.dispose(close=False)


def pg_table() -> list[tuple[str, str, str]]:
    text = README.read_text()
    block = text.split("<!-- pg-surface-table:start -->")[1].split("<!-- pg-surface-table:end -->")[0]
    rows = []
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows.append((cells[0].strip("`"), cells[1], cells[2]))
    return rows


def test_pgvectorstore_peer_is_same_or_documented(outcomes):
    rows = pg_table()
    problems = []
    for label, kind in outcomes.items():
        row = next((r for r in rows if fnmatch.fnmatchcase(label, r[0])), None)
        if kind.startswith("untyped"):
            problems.append(f"{label}: {kind}")
        elif kind == "same":
            if row is not None:
                problems.append(f"{label}: same as PGVectorStore, but the README lists it ({row[0]})")
        elif row is None:
            problems.append(f"{label}: undocumented {kind}")
        elif row[1] != kind:
            problems.append(f"{label}: {kind}, the README says {row[1]!r} ({row[0]})")
    assert not problems, "\n".join(problems)


def test_every_pg_row_still_happens(outcomes):
    stale = [r for r in pg_table() if not any(fnmatch.fnmatchcase(lab, r[0]) for lab in outcomes)]
    assert not stale, f"README rows no call produces: {stale}"


def test_pg_counts(outcomes, record_property):
    kinds = [k.split(":")[0] for k in outcomes.values()]
    counts = {k: kinds.count(k) for k in ("same", "difference", "refusal", "untyped")}
    record_property("calls", len(outcomes))
    record_property("counts", counts)
    said = re.search(
        r"PGVectorStore count: (\d+) calls, (\d+) the same, (\d+)\s+documented differences, (\d+) documented refusals",
        README.read_text(),
    )
    assert said, "the README's PGVectorStore count sentence is missing"
    have = (len(outcomes), counts["same"], counts["difference"], counts["refusal"])
    assert tuple(int(x) for x in said.groups()) == have, f"the README's counts are stale: now {have}"


if __name__ == "__main__":  # prints each outcome that is not the same, both sides, for the README table
    import sys

    for label, pair in pg_pairs(sys.argv[1]).items():
        if (kind := classify(*pair)) != "same":
            print(f"{label:60s} {kind}\n    PGVectorStore: {pair[0]}\n    normrank:      {pair[1]}")
