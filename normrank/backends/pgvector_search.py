"""The searches of :class:`normrank.backends.pgvector.PgVectorNormIndex` (a mixin): exact, plain
cosine (alpha = 0), and the band + bound search of the other alphas, with the HNSW settings each
one sends.

pgvector's HNSW scan returns at most ``hnsw.ef_search`` rows and drops the dead ones among them
(deleted or overwritten rows stay in the graph until a VACUUM), so a plain ``ORDER BY ... LIMIT
k`` can come back short. Each search therefore sends, in its own transaction (``set_config(...,
true)``: the pipeline's implicit transaction, or the REPEATABLE READ one), ``hnsw.ef_search``
capped at pgvector's limit (:data:`EF_CAP`) and, on pgvector >= 0.8, ``hnsw.iterative_scan =
strict_order`` (the scan goes on past the dead rows, in exact distance order, up to
``hnsw.max_scan_tuples``). A query that still gets fewer than ``k`` rows is answered by an exact
scan: ``k`` rows come back whenever ``k`` rows exist. Nothing is remembered between searches: a
setting that a rolled-back transaction undid cannot leak into the next search.

The depths are the plan's (:func:`normrank.search.plan.plan_search` at ``efSearch = ef_search``,
NormIndex's rule for an HNSW at the same breadth); ``hnsw.ef_search`` is then widened to the
plan's depth as FAISS's beam is, within :data:`EF_CAP`. The band scored in SQL asks the plan to
trust its whole depth (``trust_whole_depth``: every widening there is a second round in SQL).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from normrank.backends import pgvector_band as B
from normrank.backends import pgvector_sql as S
from normrank.search.norm_band import hnsw_params, start_search
from normrank.search.plan import ANY_WEIGHTED_ALPHA, SearchOptions, SearchPlan, SearchStats, plan_search
from normrank.validation import as_positive_int

__all__ = ["EF_CAP", "Searches", "breadth"]

#: pgvector's largest ``hnsw.ef_search`` (its GUC's range is 1 .. 1000). A wider breadth asked
#: for (normrank's own bound is 65,536) scans at this one, the iterative scan and the exact
#: fallback filling whatever more rows a search needs.
EF_CAP = 1000


def breadth(conn: Any, ef: int, iterative: bool) -> None:
    """Set ``hnsw.ef_search`` (capped) and the iterative scan for the current transaction only."""
    q = "SELECT set_config('hnsw.ef_search', %s, true)"
    if iterative:
        q += ", set_config('hnsw.iterative_scan', 'strict_order', true)"
    conn.execute(q, (str(max(1, min(int(ef), EF_CAP))),))


class Searches:
    """``search`` and its paths; mixed into PgVectorNormIndex, whose state they read (``_run``,
    ``_t``, ``_copy``, ``_n``, ``_iterative``, the search options)."""

    def search(
        self,
        q: ArrayLike,
        k: int,
        *,
        alpha: float | ArrayLike | None = None,
        ef_search: int | None = None,
        return_stats: bool = False,
    ) -> tuple[np.ndarray, np.ndarray] | tuple[np.ndarray, np.ndarray, SearchStats]:
        """Top-``k`` by ``cos(q, d) * ||d||**alpha`` (``alpha`` scalar or one per query).

        Returns ``(scores, ids)``: float32 / int64 ``(nq, k)``, best first, padded with
        ``-inf`` / ``-1`` only when fewer than ``k`` rows exist; equal scores in id order.
        ``ef_search`` beyond pgvector's 1,000 scans at 1,000 (:data:`EF_CAP`). With
        ``return_stats``, ``(scores, ids, stats)``: a :class:`~normrank.search.plan.SearchStats`
        of what the search did (path, cosine depth fetched, rows scanned, queries widened, bytes
        of the client's copy), as ``NormIndex.search`` returns; its ``certified`` stays empty
        (not all False): only NormIndex certifies queries."""
        unit_q, alphas, scores, ids = start_search(q, k, self.dim, self.alpha if alpha is None else alpha)
        nq, k = scores.shape
        ef = self.ef_search if ef_search is None else as_positive_int(ef_search, "ef_search")
        stats = SearchStats()
        self.last_widened = 0
        if nq and self.exact:  # one statement: every query sees the same committed state
            got = self._run(lambda c: S.exact_rows(c, self._t, unit_q, alphas, k), single=True)
            S.fill(scores, ids, np.arange(nq), got)
            stats.path, stats.rounds = "flat", 1
        elif nq:
            plain = np.flatnonzero(alphas == 0)
            if plain.size:
                got = self._run(
                    lambda c: S.plain_rows(c, self._t, unit_q[plain], k), single=True, ef=max(ef, k)
                )
                S.fill(scores, ids, plain, got)
                cosine = SearchStats(path="cosine", depth=k, rounds=1)
                short = plain[[len(g[0]) < k for g in got]]
                if short.size:
                    self._fill_short(unit_q, short, k, scores, ids)
                    cosine.rounds += 1
                stats.include(cosine)
            rest = np.flatnonzero(alphas != 0)
            if rest.size:
                weighted = SearchStats()
                self._ann(
                    B.QueryBlock(unit_q, alphas, k), rest, ef=ef, scores=scores, ids=ids, stats=weighted
                )
                cache_bytes, budget = weighted.cache_bytes, weighted.cache_budget_bytes
                stats.include(weighted)  # ("mixed" when some queries were plain cosine)
                stats.cache_bytes, stats.cache_budget_bytes = cache_bytes, budget
        return (scores, ids, stats) if return_stats else (scores, ids)

    def _plan(self, n: int | None, k: int, ef: int, *, sql_band: bool = False) -> SearchPlan:
        """The plan of a search for ``k`` results over ``n`` rows (None: as many as last
        counted) at ``hnsw.ef_search = ef``: NormIndex's for an HNSW at ``efSearch = ef``; the
        band scored in SQL trusts the whole depth (:func:`~normrank.search.plan.plan_search`)."""
        n = max(self._n if n is None else n, 1)
        options = SearchOptions(
            k, ANY_WEIGHTED_ALPHA, self.k_factor, n_tail=self.n_tail, breadth=hnsw_params(ef)
        )
        return plan_search(options, n, trust_whole_depth=sql_band)

    def _fill_short(self, unit_q, short: np.ndarray, k: int, scores, ids) -> None:
        """The plain queries whose index scan returned fewer than ``k`` rows (dead rows past
        ``hnsw.max_scan_tuples``, no iterative scan, or a table of fewer rows): their top-``k``
        by an exact scan, one statement (one committed state for each query's whole result)."""
        if not short.size:
            return
        zero = np.zeros(short.size)
        got = self._run(lambda c: S.exact_rows(c, self._t, unit_q[short], zero, k), single=True)
        scores[short], ids[short] = -np.inf, -1
        S.fill(scores, ids, short, got)

    def _ann(
        self,
        queries: B.QueryBlock,
        rest: np.ndarray,
        *,
        ef: int,
        scores: np.ndarray,
        ids: np.ndarray,
        stats: SearchStats,
    ) -> None:
        """The band + bound search of the queries ``rest`` (alpha != 0), into ``scores`` / ``ids``:
        the band scanned in the client (:mod:`normrank.backends.pgvector_band`), or in SQL when
        ``client_band`` is False or the table's generation trigger is missing or disabled.

        A search is one statement, or, when it reads more (the copy, vectors, the SQL band), one
        REPEATABLE READ transaction (pipelined: BEGIN goes out with the first statement), so
        that each result is that of one snapshot. Both paths return ``k`` rows when the graph
        returns fewer (they trust the last cosine it returned, and score the band beyond it).

        Both take their depths from the plan (:meth:`_plan`). The client scan trusts the plan's
        rank (an eighth of ef_search, as FAISS's): a client scan is cheap enough (26,953 real
        MiniLM, ef_search 400, 100 single queries, alpha 0.5 / 1: recall@10 0.986 / 0.991 against
        0.978 / 0.986 trusting the depth, CPU ratio to plain 1.36 / 1.46 against 1.54 / 1.30 on a
        loaded machine)."""

        k = queries.k

        def plan_of(n: int | None) -> SearchPlan:
            return self._plan(n, k, ef)

        def client(conn: Any, in_transaction: bool) -> int | None:
            sub_s, sub_i = scores[rest], ids[rest]
            got = B.client_search(
                conn, self._t, self._copy, queries.rows(rest), table=self.table, plan_of=plan_of,
                scores=sub_s, ids=sub_i, stats=stats, in_transaction=in_transaction,
            )  # fmt: skip
            if got is not None and got != B.NEEDS_SNAPSHOT:
                scores[rest], ids[rest] = sub_s, sub_i
            return got

        # (a table last counted too large for the client's budget: straight to the SQL band)
        if self.client_band and self._copy.may_fit(self._n):  # one statement when the copy is current
            plan = plan_of(self._copy.n if self._copy.key else None)
            ef_c = max(ef, plan.depth)  # the beam widened to the depth, as FAISS's (within EF_CAP)
            got = self._run(lambda c: client(c, False), single=True, ef=ef_c)
            if got == B.NEEDS_SNAPSHOT:
                got = self._run(lambda c: client(c, True), read_only=True, ef=ef_c)
            if got is not None:
                self.last_widened = got
                self._n = self._copy.n
                return
        plan = self._plan(None, k, ef, sql_band=True)  # n cached: it only sizes the band and depth

        def rounds(conn: Any) -> None:
            self.last_widened = B.sql_band(conn, self._t, queries, rest, plan, scores=scores, ids=ids)

        self._run(rounds, read_only=True, ef=max(ef, plan.depth))
        stats.path, stats.depth, stats.scanned = "sql_band", plan.depth, plan.band
        stats.widened, stats.rounds = self.last_widened, 1 + (self.last_widened > 0)
        stats.cache_bytes, stats.cache_budget_bytes = self._copy.nbytes, self._copy.budget
