"""The default search of :class:`normrank.backends.pgvector.PgVectorNormIndex`: the HNSW cosine
candidates from PostgreSQL, the weight band scanned in the client, as the FAISS ANN path does.

PostgreSQL returns only the ``depth`` best cosines per query (its HNSW index, one statement for
all queries of a call). The weight-order scan then runs in the client, on
:mod:`normrank.search.ann`'s own machinery (:func:`normrank.search.ann.rerank` with the plan of
:func:`normrank.search.plan.plan_search`: the same depth, trusted rank, first chunk and bound as
NormIndex at the same ``efSearch``) over a copy of the table that the client holds: every row's
id and weight (``coalesce(weight, norm)``), read whole, and the unit vectors in weight order,
read lazily, only as far as searches have needed to scan (one
:class:`normrank.search.rows.PrefixCopy` per weight order, whose rows :meth:`ClientCopy.fetch`
reads by id from the table).

Memory: all of it within :data:`normrank.settings.PG_CLIENT_CACHE_BYTES` whatever the table
size (:meth:`ClientCopy.fits`): the per-row arrays first (:func:`client_reserve`), what is left
a quarter to the weights of further alphas, three quarters to the vectors (split between the
signs of alpha by their norm tails, :meth:`~normrank.search.cache.SearchCache.sign_share`);
vectors past that are read from the server by each search that scans them. A table whose
per-row arrays alone exceed the budget is not copied: its band is scored in SQL
(``SearchStats.path == "sql_band"``).

Coherence: every write to the table, by normrank or by plain SQL, bumps a generation counter
in the registry row of the table (``normrank_tables.generation``), by a statement-level trigger
``AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE`` that commits with the write. A search reads
the generation in the same REPEATABLE READ transaction (the same snapshot) as its cosine
candidates; the copy records the (table oid, generation) it was read at, also read in one
snapshot with its rows. When they differ the copy is dropped and re-read in the search's own
transaction, so the candidates, the weights and every vector scanned are those of one snapshot.
The vectors fetched later, by a later search, are read in that search's transaction, after it
has found the same generation: the same table state. Where the trigger is missing or disabled
(``ALTER TABLE ... DISABLE TRIGGER``) the search says so (:func:`client_search` returns None)
and the caller scores the band in SQL instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from normrank import settings
from normrank.backends import pgvector_sql as S
from normrank.errors import IndexStateError
from normrank.scoring import WEIGHT_CAP
from normrank.search.ann import rerank
from normrank.search.bound import unseen_can_beat
from normrank.search.cache import CacheBudget, SearchCache
from normrank.search.norm_band import band_edge
from normrank.search.plan import SearchPlan, SearchStats
from normrank.search.rows import PrefixCopy

__all__ = [
    "NEEDS_SNAPSHOT",
    "ClientCopy",
    "QueryBlock",
    "client_reserve",
    "client_search",
    "generation_trigger",
    "has_generation_trigger",
    "sql_band",
    "sql_edges",
    "weight_of",
]

_FN = "normrank_bump_generation"
# w**alpha in SQL as exp(alpha * ln w), clamped as normrank.scoring.norm_weight saturates
# (PostgreSQL raises on float8 overflow and underflow instead of returning inf / 0).
_LN_CAP = math.log(WEIGHT_CAP)
_LN_FLOOR = -700.0


def weight_of(base: np.ndarray | float, alpha: float) -> np.ndarray:
    """``base ** alpha`` as the SQL side computes it (float64, clamped like norm_weight)."""
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        return np.exp(np.clip(alpha * np.log(np.asarray(base, dtype=np.float64)), _LN_FLOOR, _LN_CAP))


def _trigger_name(table: str) -> str:
    return f"{table}_nr_generation"  # at most 48 + 14 characters: within PostgreSQL's 63


def generation_trigger(conn: Any, t: Any, table: str, reg_schema: str, registry: str) -> None:
    """The registry's ``generation`` column (added where an older registry lacks it), the shared
    trigger function in the registry's schema (created once), and the statement-level trigger
    on table ``t`` that bumps the table's generation on every write, whoever writes."""
    from psycopg import sql

    has_col = conn.execute(
        "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = 'generation' "
        "AND NOT attisdropped",
        (sql.Identifier(reg_schema, registry).as_string(conn),),
    ).fetchone()
    if not has_col:
        conn.execute(
            sql.SQL("ALTER TABLE {} ADD COLUMN generation bigint NOT NULL DEFAULT 0").format(
                sql.Identifier(reg_schema, registry)
            )
        )
    fn = sql.Identifier(reg_schema, _FN)
    if conn.execute("SELECT to_regprocedure(%s)", (fn.as_string(conn) + "()",)).fetchone()[0] is None:
        body = (
            sql.SQL(
                "BEGIN UPDATE {reg} SET generation = generation + 1 WHERE table_oid = TG_RELID; "
                "RETURN NULL; END"
            )
            .format(reg=sql.Identifier(reg_schema, registry))
            .as_string(conn)
        )
        conn.execute(
            sql.SQL("CREATE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS {}").format(
                fn, sql.Literal(body)
            )
        )
    if not has_generation_trigger(conn, t, table):
        conn.execute(
            sql.SQL(
                "CREATE TRIGGER {} AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {} "
                "FOR EACH STATEMENT EXECUTE FUNCTION {}()"
            ).format(sql.Identifier(_trigger_name(table)), t, fn)
        )


def has_generation_trigger(conn: Any, t: Any, table: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass(%s) AND tgname = %s",
        (t.as_string(conn), _trigger_name(table)),
    ).fetchone()
    return row is not None


def client_reserve(n: int) -> int:
    """The most bytes a copy of ``n`` rows holds whatever it scans: ids (8 a row), weight bases
    (4), the weight order (4), one alpha's weights (4), the id lookup (a dense table of
    up to 4 x max(n, 1024) int32) and each weight order's 1/64 weight samples and weight heads
    (up to 8 weightings per order, 2 orders: :mod:`normrank.search.weight_order`)."""
    lookup = 4 * (4 * max(n, 1024) + 2)
    samples = 2 * 8 * (8 * -(-n // 64) + 4 * min(8192, n // 4))
    return 20 * n + lookup + samples


class ClientCopy:
    """What one index object holds of its table for the client-side band: the (oid, generation)
    it was read at, every row's id and weight base, and a :class:`~normrank.search.cache.SearchCache`
    (weights per alpha, id lookup, the lazily copied weight orders) built on them; all within
    ``budget`` bytes (:data:`~normrank.settings.PG_CLIENT_CACHE_BYTES` at the last (re-)read)."""

    def __init__(self) -> None:
        self.key: tuple[int, int] | None = None
        self.ids = np.empty(0, dtype=np.int64)
        self.base = np.empty(0, dtype=np.float32)
        self.cache = SearchCache()
        self.conn: Any = None  # the connection of the search in progress (fetch reads through it)
        self.t: Any = None  # and its table
        self.reads = 0  # times the copy was (re-)read: for tests and benchmarks
        self.budget = int(settings.PG_CLIENT_CACHE_BYTES)
        self.fits = True  # False: the table at ``key`` is too large for the budget (SQL band)

    @property
    def n(self) -> int:
        return int(self.ids.size)

    @staticmethod
    def may_fit(n: int) -> bool:
        """Whether ``n`` rows' per-row arrays fit the budget as it is set now."""
        return client_reserve(max(int(n), 0)) <= int(settings.PG_CLIENT_CACHE_BYTES)

    def load(self, conn: Any, t: Any, key: tuple[int, int]) -> None:
        from psycopg import sql

        self.budget = budget = int(settings.PG_CLIENT_CACHE_BYTES)
        # Counted first (the same snapshot): a table too large is not read into the client.
        count = int(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(t)).fetchone()[0])
        self.fits = client_reserve(count) <= budget
        rows = (
            conn.execute(sql.SQL(f"SELECT id, {S.BASE} FROM {{}}").format(t)).fetchall() if self.fits else []
        )
        self.ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        self.base = np.fromiter((r[1] for r in rows), dtype=np.float32, count=len(rows))
        rest = max(budget - client_reserve(self.n), 0)
        # (one alpha's weights are in the reserve; further alphas' get a quarter of the rest)
        self.cache = SearchCache(lambda: CacheBudget(4 * self.n + rest // 4, rest - rest // 4, 0))
        self.key = key
        self.reads += 1

    def fetch(self, pos: np.ndarray) -> np.ndarray:
        """Unit vectors of storage positions ``pos``, read in the search's transaction."""
        if self.conn is None:
            raise _NoSnapshot
        want = self.ids[pos]
        got = S.vectors_of(self.conn, self.t, want)
        if got.shape[0] != want.size:
            raise IndexStateError(
                f"the table changed under a search ({got.shape[0]} of {want.size} rows found): "
                "is the generation trigger disabled?"
            )
        return got

    @property
    def nbytes(self) -> int:
        """Bytes the client holds of the table: ids, weight bases, and the search cache (weights
        per alpha, the weight orders and the vectors kept so far, both signs of alpha): at most
        ``budget``."""
        return self.ids.nbytes + self.base.nbytes + self.cache.nbytes


#: :func:`client_search`'s answer when the search needs a transaction (the copy to re-read, or
#: vectors to fetch) that the caller did not open: run it again in one.
NEEDS_SNAPSHOT = -1


class _NoSnapshot(Exception):
    """A fetch of vectors outside a transaction (the fast path): the search is run again in one."""


@dataclass(frozen=True)
class QueryBlock:
    """The queries of one search call, as the band paths take them: unit vectors ``(nq, dim)``,
    one alpha per query, and the ``k`` asked for."""

    unit_q: np.ndarray
    alphas: np.ndarray
    k: int

    def rows(self, which: np.ndarray) -> QueryBlock:
        """The queries ``which`` only (indices into this block)."""
        return QueryBlock(self.unit_q[which], self.alphas[which], self.k)


def client_search(
    conn: Any,
    t: Any,
    copy: ClientCopy,
    queries: QueryBlock,
    *,
    table: str,
    plan_of: Callable[[int | None], SearchPlan],
    scores: np.ndarray,
    ids: np.ndarray,
    stats: SearchStats,
    in_transaction: bool,
) -> int | None:
    """The band + bound search of ``queries`` (alphas != 0) into ``scores`` / ``ids`` rows, and
    what it did into ``stats``. ``plan_of(n)`` is the search's plan over ``n`` rows (None: as
    many as the table was last seen to hold): the copy's count once it is read.

    The generation and the candidates come from one statement (one snapshot). Without a
    transaction (``in_transaction=False``, one statement, the common case) the search finishes
    only if the copy is of that generation and holds every vector the scan needs; otherwise it
    returns :data:`NEEDS_SNAPSHOT` (nothing filled) and the caller runs it again inside a
    REPEATABLE READ transaction, where the copy is re-read and grown in the candidates'
    snapshot. Returns the number of queries that scanned past the first chunk, or None when the
    table has no working generation trigger or is too large for the client's budget
    (:attr:`ClientCopy.fits`; nothing filled: score the band in SQL)."""
    depth = plan_of(copy.n if copy.key is not None else None).depth
    gen, cands = S.candidates(conn, t, queries.unit_q, trigger=_trigger_name(table), depth=depth)
    if gen is None:
        raise IndexStateError(f"table {table!r} is no longer registered")
    oid, generation, enabled = gen
    if enabled not in ("O", "A"):  # missing, disabled, or replica-only: the copy cannot be trusted
        return None
    if copy.key != (oid, generation):
        if not in_transaction:
            return NEEDS_SNAPSHOT
        copy.load(conn, t, (oid, generation))
    if not copy.fits:
        return None
    n = copy.n
    if n == 0:
        return 0
    copy.conn, copy.t = (conn if in_transaction else None), t
    out_s, out_i, did = scores.copy(), ids.copy(), SearchStats(path="scan")
    # The plan over the rows the copy holds, at the depth fetched (the copy may have been re-read),
    # for k within those rows.
    plan = replace(plan_of(n), depth=depth, k=min(queries.k, n))
    try:
        widened = _rerank_all(copy, queries, cands, plan, scores=out_s, ids=out_i, did=did)
    except _NoSnapshot:
        return NEEDS_SNAPSHOT
    finally:
        copy.conn = copy.t = None
    scores[...], ids[...] = out_s, out_i
    did.widened, did.cache_bytes, did.cache_budget_bytes = widened, copy.nbytes, copy.budget
    vars(stats).update(vars(did))
    return widened


def _rerank_all(
    copy: ClientCopy,
    queries: QueryBlock,
    cands: list,
    plan: SearchPlan,
    *,
    scores: np.ndarray,
    ids: np.ndarray,
    did: SearchStats,
) -> int:
    """Every query re-scored and scanned (:func:`normrank.search.ann.rerank`, one call per alpha
    for the queries that got the whole depth, one per query for the others) by ``plan``, whose
    ``k`` is within the rows the copy holds; what the calls did is summed into ``did``. Returns
    the queries that scanned past the first chunk."""
    unit_q, alphas, k = queries.unit_q, queries.alphas, plan.k
    nq = unit_q.shape[0]
    counts = np.array([len(c[0]) for c in cands], dtype=np.int64)
    width = int(counts.max()) if nq else 0
    cos = np.full((nq, max(width, 1)), -np.finfo(np.float32).max, dtype=np.float32)
    cand = np.full((nq, max(width, 1)), -1, dtype=np.int64)
    for j, (ci, cs) in enumerate(cands):
        cand[j, : len(ci)] = ci
        cos[j, : len(cs)] = cs
    cache, widened = copy.cache, 0
    lookup = cache.id_lookup(copy.ids)
    expect = min(plan.depth, copy.n)  # what the graph returns when it returns all it was asked
    did.depth = plan.depth

    def run(rows: np.ndarray, c: int) -> int:
        """:func:`rerank` of the queries ``rows`` over their first ``c`` cosines (the trusted
        rank never past ``c``: rerank's own clamp); 1 per query that scanned past the band."""
        one = SearchStats()
        s, pos = rerank(cos[rows, :c], cand[rows, :c], unit_q[rows], plan, weights=weights, lookup=lookup,
                        order=order, stats=one)  # fmt: skip
        _fill(scores, ids, rows, (s, pos), doc_ids=copy.ids)
        did.scanned, did.rounds = max(did.scanned, one.scanned), did.rounds + one.rounds
        return one.widened if rows.size > 1 else int(one.scanned > plan.band)

    for a in np.unique(alphas):
        alpha = float(a)
        rows = np.flatnonzero(alphas == a)
        weights = cache.power(copy.base, alpha)
        # (the row source is used only when the order for this sign is first built; each sign its
        # share of the vectors' budget by its norm tail, as NormIndex's scan prefix and codes)
        share = cache.sign_share(copy.base, 1 if alpha > 0 else -1) if alpha else 0.0
        order = cache.order(copy.base, alpha, PrefixCopy(copy.fetch, int(cache.budget.prefix * share)))
        batch = rows[counts[rows] == expect]
        if batch.size:  # every query here got the whole depth: one scan (BLAS segments for a batch)
            widened += run(batch, expect)
        for i in np.setdiff1d(rows, batch):  # the graph gave fewer: trust its last cosine
            c = int(counts[i])
            if c == 0:
                s, pos = _brute(order, weights, unit_q[i], k)
                _fill(scores, ids, np.array([i]), (s, pos), doc_ids=copy.ids)
                did.scanned, did.rounds = copy.n, did.rounds + 1
                widened += 1
            else:
                widened += run(np.array([i]), c)
    return widened


def _brute(order, weights: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Every row scored (a query the graph returned nothing for)."""
    n = order.positions.size
    w_sorted = order.sorted_weights(weights)[0]
    s = (order.vectors(n) @ q.astype(np.float32)) * w_sorted
    top = np.argsort(-s, kind="stable")[:k]
    return s[top][None].astype(np.float32), order.positions[top][None]


def _fill(
    scores: np.ndarray,
    ids: np.ndarray,
    rows: np.ndarray,
    found: tuple[np.ndarray, np.ndarray],
    *,
    doc_ids: np.ndarray,
) -> None:
    """Rows ``rows`` of ``scores`` / ``ids`` from ``found``: (scores, storage positions, -1 for
    none) as the scans return them, positions turned into the documents' ids."""
    s, pos = found
    k = s.shape[1]
    ids[rows, :k] = np.where(pos >= 0, doc_ids[np.maximum(pos, 0)], -1)
    scores[rows, :k] = np.where(pos >= 0, s, -np.inf)


def sql_band(
    conn: Any,
    t: Any,
    queries: QueryBlock,
    rest: np.ndarray,
    plan: SearchPlan,
    *,
    scores: np.ndarray,
    ids: np.ndarray,
) -> int:
    """The band scored in SQL (``client_band = False``, or no working generation trigger), for
    the queries ``rest``, at the plan's depth, trusted rank and first band: the first round
    (cosines and the first band, :func:`S.first_rows`), then every row beyond the band edge the
    bound asks for (:func:`S.band_rows`). Returns the number of queries that needed the second
    round."""
    unit_q, alphas, k, band0 = queries.unit_q, queries.alphas, queries.k, plan.band
    rows = S.first_rows(
        conn, t, unit_q[rest], alphas[rest], k=k, depth=plan.depth, trust=plan.trust, band=band0
    )
    for j, i in enumerate(rest):
        S.fill_one(scores, ids, i, rows[j][0], rows[j][1])
    edges = sql_edges(rows, alphas[rest], k, band0, unit_q.shape[1])
    wide = ~np.isnan(edges)
    if wide.any():
        wq = rest[wide]
        more = S.band_rows(conn, t, unit_q[wq], alphas[wq], edges[wide], k=k)
        for j, i in enumerate(wq):
            more_ids, more_s = more[j]
            S.merge_one(scores, ids, i, more_ids, more_s)
    return int(wide.sum())


def sql_edges(rows: list, alphas: np.ndarray, k: int, band0: int, dim: int) -> np.ndarray:
    """Per query of a first round, NaN where nothing unseen can enter the top-k
    (:func:`normrank.search.bound.unseen_can_beat` of vectors of length ``dim``, or every row
    fetched), else the band edge the second round must score beyond."""
    out = np.full(len(rows), np.nan)
    for j, (_, top_s, trusted_cosine, n_band, first_edge, b_lo, b_hi) in enumerate(rows):
        a = float(alphas[j])
        if trusted_cosine is None or (band0 and n_band < band0):  # an empty table, or every row in the band
            continue
        w_edge = float(weight_of(first_edge if band0 else (b_hi if a > 0 else b_lo), a))
        w_lo = float(min(weight_of(b_lo, a), weight_of(b_hi, a)))
        kth = float(top_s[k - 1]) if len(top_s) >= k else -np.inf
        if unseen_can_beat(kth, trusted_cosine, w_edge, w_lo, dim):
            out[j] = _band_edge(kth, trusted_cosine, a, dim)
    return out


def _band_edge(kth: float, trusted_cosine: float, alpha: float, dim: int) -> float:
    """The shared band edge (:func:`normrank.search.norm_band.band_edge`); every row when the
    bound cannot shrink, as the Qdrant backend's."""
    edge = band_edge(kth, trusted_cosine, alpha, dim)
    if edge is None:
        return 0.0 if alpha > 0 else math.inf
    return edge
