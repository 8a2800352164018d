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
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from normrank.backends import pgvector_band as B
from normrank.backends import pgvector_sql as S
from normrank.search.norm_band import first_band, hnsw_params, search_depths, start_search
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
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` by ``cos(q, d) * ||d||**alpha`` (``alpha`` scalar or one per query).

        Returns ``(scores, ids)``: float32 / int64 ``(nq, k)``, best first, padded with
        ``-inf`` / ``-1`` only when fewer than ``k`` rows exist; equal scores in id order.
        ``ef_search`` beyond pgvector's 1,000 scans at 1,000 (:data:`EF_CAP`)."""
        unit_q, alphas, scores, ids = start_search(q, k, self.dim, self.alpha if alpha is None else alpha)
        nq, k = scores.shape
        ef = self.ef_search if ef_search is None else as_positive_int(ef_search, "ef_search")
        self.last_widened = 0
        if nq == 0:
            return scores, ids

        if self.exact:  # one statement: every query sees the same committed state
            got = self._run(lambda c: S.exact_rows(c, self._t, unit_q, alphas, k), single=True)
            S.fill(scores, ids, np.arange(nq), got)
            return scores, ids
        plain = np.flatnonzero(alphas == 0)
        if plain.size:
            got = self._run(lambda c: S.plain_rows(c, self._t, unit_q[plain], k), single=True, ef=max(ef, k))
            S.fill(scores, ids, plain, got)
            self._fill_short(unit_q, plain[[len(g[0]) < k for g in got]], k, scores, ids)
        rest = np.flatnonzero(alphas != 0)
        if rest.size:
            self._ann(unit_q, alphas, rest, k, ef, scores, ids)
        return scores, ids

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

    def _ann(self, unit_q, alphas, rest, k, ef, scores, ids) -> None:
        """The band + bound search of the queries ``rest`` (alpha != 0), into ``scores`` / ``ids``:
        the band scanned in the client (:mod:`normrank.backends.pgvector_band`), or in SQL when
        ``client_band`` is False or the table's generation trigger is missing or disabled.

        A search is one statement, or, when it reads more (the copy, vectors, the SQL band), one
        REPEATABLE READ transaction (pipelined: BEGIN goes out with the first statement), so
        that each result is that of one snapshot. Both paths return ``k`` rows when the graph
        returns fewer (they trust the last cosine it returned, and score the band beyond it)."""
        params = hnsw_params(ef)

        def depth_of(n_copy: int | None) -> tuple[int, int]:
            # FAISS's trusted rank (an eighth of ef_search), not the whole depth as the SQL band
            # below: a client scan is cheap enough (26,953 real MiniLM, ef_search 400, 100 single
            # queries, alpha 0.5 / 1: recall@10 0.986 / 0.991 against 0.978 / 0.986 trusting the
            # depth, CPU ratio to plain 1.36 / 1.46 against 1.54 / 1.30 on a loaded machine).
            return search_depths(max(self._n if n_copy is None else n_copy, 1), k, self.k_factor, params)

        def client(conn: Any, in_transaction: bool) -> int | None:
            sub_s, sub_i = scores[rest], ids[rest]
            got = B.client_search(
                conn, self._t, self.table, self._copy, unit_q[rest], alphas[rest], k, depth_of,
                lambda n: first_band(n, params, self.n_tail), sub_s, sub_i, in_transaction=in_transaction,
            )  # fmt: skip
            if got is not None and got != B.NEEDS_SNAPSHOT:
                scores[rest], ids[rest] = sub_s, sub_i
            return got

        if self.client_band:  # one statement when the copy is current, else one transaction
            ef_c = max(ef, depth_of(self._copy.n if self._copy.key else None)[0])
            got = self._run(lambda c: client(c, False), single=True, ef=ef_c)
            if got == B.NEEDS_SNAPSHOT:
                got = self._run(lambda c: client(c, True), read_only=True, ef=ef_c)
            if got is not None:
                self.last_widened = got
                self._n = self._copy.n
                return
        n = max(self._n, 1)  # cached: it only sizes the first band and the depth
        depth, _ = search_depths(n, k, self.k_factor, params)
        # The whole cosine depth is trusted, as QdrantNormIndex does: trusting an eighth of
        # ef_search (FAISS's rule, ``_``) widened every query to a second round on real MiniLM
        # embeddings (5,719 docs, ef_search 64, 60 queries, alpha -1: recall 1.000, 13.7x plain
        # latency; trusting the depth: 2% widened, recall 0.995, 4.7x; loaded 2-core machine).
        trust = depth
        band0 = first_band(n, params, self.n_tail)

        def rounds(conn: Any) -> None:
            self.last_widened = B.sql_band(
                conn, self._t, unit_q, alphas, rest, k, depth, trust, band0, scores, ids
            )

        self._run(rounds, read_only=True, ef=max(ef, depth))
