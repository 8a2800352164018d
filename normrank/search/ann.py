"""Norm-weighted search on ANN indexes (IVF, HNSW) with query-time alpha.

The problem: an ANN index ranks by cosine, but a document far down the cosine ranking can be
lifted into the top-k by its weight ``w = ||d||**alpha``. A fixed over-fetch misses it: on real
MiniLM embeddings at alpha = 1 the exact top-10 holds documents at cosine rank 1,000-3,000 of
15,000 (benchmarks/results/speed_methods.md).

Method (chosen by measurement, see benchmarks/results/speed_methods.md): **ANN candidates plus an exact
scan in decreasing weight order, stopped by a bound** (norm ranging, Yan et al., NeurIPS 2018,
with the bands scanned exactly and their size chosen per query). The depths are the plan's
(:func:`normrank.search.plan.plan_search`).

* Fetch the top ``depth`` by cosine from the index and re-score ``cos * w`` exactly.
* Scan the documents in decreasing weight order (the lowest norms when ``alpha < 0``, the highest
  when ``alpha > 0``), reading their rows where FAISS keeps them (:mod:`normrank.search.rows`).
  After ``t`` of them, a document seen neither way has cosine ``<= c_T`` (the cosine at the
  trusted rank) and weight ``<= w_(t)``, so it scores at most ``c_T * w_(t)`` (``c_T * w_min``
  when ``c_T < 0``), up to float rounding. Once :func:`normrank.search.bound.unseen_can_beat`
  says nothing unseen can beat the k-th score the query stops; at worst every document is
  scanned (exact).
* A single query reads the first rows of the scan as int8 codes
  (:mod:`normrank.search.scan_codes`): a quarter of the bytes, and the rows of only the few
  documents whose codes, with their error bound, could beat the k-th score; the same results.
* How far to scan is read off the bound (:meth:`WeightOrder.need`, a binary search). A single
  query scans the first chunk (``band``), then jumps to what its new k-th score needs. A batch
  grows its chunks by doubling, and within a chunk each query stops at the segment its bound
  needs (one BLAS product per segment for the queries still scanning, FAISS's heaps).

"Exact" is relative to the ANN index: the bound trusts that it returns the true cosine top-``T``,
as any re-ranking of ANN output must. On compressed codes (PQ, SQ) every cosine is the codes'
own estimate (FAISS's search ranks by the same), so the result is exact with respect to those.
"""

from __future__ import annotations

import weakref

import faiss
import numpy as np

from normrank.search.batch_heaps import BatchHeaps
from normrank.search.bound import cosine_slack, unseen_can_beat, weight_limit
from normrank.search.doc_ids import DocIds
from normrank.search.faiss_info import search_raw
from normrank.search.flat import SMALL_NQ, inner_products, inner_products_small
from normrank.search.plan import SearchPlan, SearchStats
from normrank.search.scan_codes import CHUNK, MIN_ROWS, QueryCodes, ScanCodes
from normrank.validation import mapped_empty

__all__ = [
    "IdLookup",
    "WeightOrder",
    "adaptive_search",
    "rerank",
    "scan_needed",
]


# A batch's weight-order scan grows by this factor per round, and never past what its deepest
# open query needs: a batch scans at most twice what its bound needed.
_GROWTH = 2
# Within a chunk, a query whose bound is met early stops at the end of its segment of this many
# rows (27k real MiniLM embeddings, 100 queries, alpha = 1: 19% fewer rows scanned than when
# every query scans the whole chunk, in ~25 BLAS calls instead of 5).
_SEGMENT = 512
# A single query reads its scan in blocks of this many rows (bounded temporaries; the k-th
# score, raised by a block, prunes the next).
_ONE_BLOCK = 2048
# Every this many weight ranks one weight is kept per weighting (a 1/64 sample: what the
# binary search of the bound needs besides one block of 64 weights computed at a time).
_STRIDE = 64
# The weights of this many first ranks (at most a quarter of the documents) are kept in order per
# weighting (<= 32 KB): the rows every scan reads first get their weights by a slice, not a
# gather (~3-9 us per 2.4k rows).
_HEAD = 8192
_NO_RANKS = np.empty(0, dtype=np.int64)


class IdLookup:
    """Vectorised FAISS id -> storage position (``-1`` for ids not present, e.g. tombstones):
    nothing for ids ``0 .. n - 1`` in order, a dense int32 table for dense ids, else a sorted
    copy of the ids and their positions."""

    def __init__(self, ids: np.ndarray | DocIds) -> None:
        if not isinstance(ids, DocIds):
            ids = DocIds.of(ids)
        self.n = n = ids.size
        self._dense = self._sorted = self._order = None
        small = np.int32 if n < 2**31 - 1 else np.int64
        self.identity = bool(n and ids.identity)
        if self.identity or not n:
            return
        ids = ids.array()
        hi = int(ids.max()) + 1
        if hi <= 4 * max(n, 1024):
            # Shifted by one and fenced by -1 on both sides: a gather at ``id + 1`` clipped to the
            # table maps FAISS's -1 pads, and any id outside [0, hi), to -1.
            self._dense = np.full(hi + 2, -1, dtype=small)
            self._dense[ids + 1] = np.arange(n, dtype=small)
        else:
            self._order = np.argsort(ids, kind="stable").astype(small)
            self._sorted = ids[self._order]

    def __call__(self, cand: np.ndarray) -> np.ndarray:
        cand = np.asarray(cand, dtype=np.int64)
        if self.identity:
            return np.where((cand >= 0) & (cand < self.n), cand, -1)
        if self._dense is not None:
            return self._dense.take(cand + 1, mode="clip").astype(np.int64)
        out = np.full(cand.shape, -1, dtype=np.int64)
        if not self.n:
            return out
        at = np.minimum(np.searchsorted(self._sorted, cand), self.n - 1)
        hit = (self._sorted[at] == cand) & (cand >= 0)
        out[hit] = self._order[at[hit]]
        return out

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self._dense, self._sorted, self._order) if a is not None)


def scan_needed(kth: np.ndarray, c_last: np.ndarray, neg_w: np.ndarray, dim: int) -> np.ndarray:
    """How many documents, in decreasing weight order, a query must scan before no unseen one
    can beat its k-th score ``kth`` (:func:`normrank.search.bound.unseen_can_beat`, the trusted
    cosine ``c_last``, vectors of length ``dim``): a binary search of
    :func:`~normrank.search.bound.weight_limit` in ``neg_w``, the negated sorted weights; where
    the trusted cosine plus its margin is not positive the bound does not shrink as the scan
    goes, so it is 0 or all ``n``."""
    n = neg_w.size
    kth = np.asarray(kth, dtype=np.float64)
    c_last = np.asarray(c_last, dtype=np.float64)
    if n == 0:
        return np.zeros(kth.shape, dtype=np.int64)
    need = np.where(unseen_can_beat(kth, c_last, -neg_w[0], -neg_w[-1], dim), n, 0)
    up = c_last + cosine_slack(dim) > 0
    if up.any():
        need[up] = np.searchsorted(neg_w, -weight_limit(kth[up], c_last[up], dim), side="left")
    return need


class WeightOrder:
    """The documents in decreasing order of one weighting's sign (``order``: positions), with
    their rows read through ``rows`` (:mod:`normrank.search.rows`, or anything with
    ``gather(positions) -> (m, d) float32``). ``ascending``: positions by ascending base (shared
    by both signs: ``sign > 0`` reads it backwards, a view). ``codes_bytes``: the budget of the
    first rows' int8 codes single queries scan (:mod:`normrank.search.scan_codes`; 0: none)."""

    def __init__(
        self, ascending: np.ndarray, sign: int, rows, prefix_bytes: int = 0, codes_bytes: int = 0
    ) -> None:
        self.order = ascending if sign < 0 else ascending[::-1]
        self.rows = rows
        self._codes_bytes = int(codes_bytes)
        self._codes: ScanCodes | None = None
        self._coarse: dict[int, tuple[weakref.ref, np.ndarray, np.ndarray]] = {}
        # A contiguous float32 copy of the first rows in this order, grown (doubling) as far as
        # scans read, never past ``prefix_bytes``: the scan's hot rows in one sequential run
        # (random rows straight from FAISS's storage cost ~4x more a row with the caches the
        # index search leaves). 0: none.
        self._prefix_bytes = int(prefix_bytes)
        self._prefix: np.ndarray | None = None  # the rows written so far, a view of _buffer
        self._buffer: np.ndarray | None = None

    def _sample(self, weights: np.ndarray) -> np.ndarray:
        """Negated weights at every ``_STRIDE``-th rank (float64, ascending), per weights array
        (held weakly: an array the cache has dropped is not kept alive here)."""
        return self._derived(weights)[0]

    def _derived(self, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(sample, head)`` of one weights array: the 1/``_STRIDE`` sample, and the weights
        of the first ``_HEAD`` ranks in this order (a quarter of them at most) (a slice instead of a gather for the rows
        every scan reads first)."""
        got = self._coarse.get(id(weights))
        if got is None or got[0]() is not weights:  # the id of a freed array can be reused
            if len(self._coarse) >= 8:
                self._coarse.pop(next(iter(self._coarse)))
            sample = -weights[self.order[::_STRIDE]].astype(np.float64)
            head = weights.take(self.order[: min(_HEAD, self.order.size // 4)])
            got = self._coarse[id(weights)] = (weakref.ref(weights), sample, head)
        return got[1], got[2]

    def weights_at(self, weights: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """The weights of the documents at ranks ``lo .. hi - 1`` in this order."""
        head = self._derived(weights)[1]
        if hi <= head.size:
            return head[lo:hi]
        return weights.take(self.order[lo:hi])

    def w_min(self, weights: np.ndarray) -> float:
        return float(weights[self.order[-1]]) if self.order.size else 0.0

    def w_max(self, weights: np.ndarray) -> float:
        return float(weights[self.order[0]]) if self.order.size else 0.0

    def need(self, weights: np.ndarray, kth: np.ndarray, c_last: np.ndarray, dim: int) -> np.ndarray:
        """:func:`scan_needed` of each query (arrays), with the weights in this order computed
        only where the binary search looks: a 1/64 sample, then one block of 64 per query."""
        n = self.order.size
        kth = np.asarray(kth, dtype=np.float64)
        c_last = np.asarray(c_last, dtype=np.float64)
        need = np.where(unseen_can_beat(kth, c_last, self.w_max(weights), self.w_min(weights), dim), n, 0)
        up = np.flatnonzero(c_last + cosine_slack(dim) > 0)
        if up.size:
            x = weight_limit(kth[up], c_last[up], dim)  # first rank whose weight is <= x
            i = np.searchsorted(self._sample(weights), -x, side="left")
            lo = np.maximum(i - 1, 0) * _STRIDE
            at = lo[:, None] + np.arange(_STRIDE)
            w = weights[self.order[np.minimum(at, n - 1)]].astype(np.float64)
            above = (w > x[:, None]) & (at < n)
            need[up] = np.where(i == 0, 0, np.minimum(lo + above.sum(axis=1), n))
        return need

    def _cached(self, hi: int) -> int:
        """Grow the prefix copy towards ``hi`` rows (within its budget); how many it holds."""
        have = 0 if self._prefix is None else self._prefix.shape[0]
        if hi <= have or not self._prefix_bytes or not self.order.size:
            return have
        probe = self._prefix if self._prefix is not None else self._gather(0, 1)
        cap = min(self.order.size, self._prefix_bytes // max(probe[0].nbytes, 1))
        grow = min(cap, max(hi, 2 * have, 256))
        if grow > have:
            if self._buffer is None:
                # Reserved whole in its own mapping, written (so resident) only as far as scans
                # read: growing it never copies, and leaves no freed blocks behind in the heap.
                self._buffer = mapped_empty((cap, probe.shape[1]), min_bytes=1 << 16)
            self._buffer[have:grow] = self._gather(have, grow)
            self._prefix = self._buffer[:grow]
        return self._prefix.shape[0] if self._prefix is not None else 0

    def _gather(self, lo: int, hi: int) -> np.ndarray:
        if hasattr(self.rows, "ranks"):  # a source that keeps a prefix copy itself (by rank)
            return self.rows.ranks(self.order, lo, hi)
        return self.rows.gather(self.order[lo:hi])

    def need_one(self, weights: np.ndarray, kth: float, c_last: float, dim: int) -> int:
        """:meth:`need` of one query, on scalars (the latency case: a handful of numpy calls)."""
        n = self.order.size
        if c_last + cosine_slack(dim) <= 0:
            return n if unseen_can_beat(kth, c_last, self.w_max(weights), self.w_min(weights), dim) else 0
        x = weight_limit(kth, c_last, dim)
        i = int(self._sample(weights).searchsorted(-x))
        if i == 0:
            return 0
        lo = (i - 1) * _STRIDE
        return lo + int(np.count_nonzero(self.weights_at(weights, lo, min(n, lo + _STRIDE)) > x))

    def block(self, lo: int, hi: int) -> np.ndarray:
        """Rows of the documents at weight ranks ``lo .. hi - 1`` (float32 ``(m, d)``)."""
        have = self._cached(hi)
        if hi <= have:
            return self._prefix[lo:hi]
        if lo >= have:
            return self._gather(lo, hi)
        return np.concatenate([self._prefix[lo:have], self._gather(have, hi)])

    def inner(self, q: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """``q . x`` of the documents at weight ranks ``lo .. hi - 1`` (float32 ``q``): the
        prefix copy's rows where it holds them, the rest where FAISS keeps them (no copy)."""
        have = min(self._cached(hi), hi)
        out = np.empty(hi - lo, dtype=np.float32)
        if have > lo:
            rows = self._prefix[lo:have]
            faiss.fvec_inner_products_ny(
                faiss.swig_ptr(out), faiss.swig_ptr(q), faiss.swig_ptr(rows), q.size, have - lo
            )
        start = max(lo, have)
        if start < hi:
            if hasattr(self.rows, "inner"):
                out[start - lo :] = self.rows.inner(q, self.order[start:hi])
            else:
                rows = np.ascontiguousarray(self._gather(start, hi), dtype=np.float32)
                faiss.fvec_inner_products_ny(
                    faiss.swig_ptr(out[start - lo :]),
                    faiss.swig_ptr(q),
                    faiss.swig_ptr(rows),
                    q.size,
                    hi - start,
                )
        return out

    def query_codes(self, q: np.ndarray) -> QueryCodes | None:
        """What :meth:`above` needs of a query to use the codes (None: this order has none)."""
        return QueryCodes(q) if self._codes_bytes and self.order.size else None

    def above(
        self,
        q: np.ndarray,
        query: QueryCodes | None,
        span: tuple[int, int],
        *,
        weights: np.ndarray,
        kth: float,
    ):
        """``(ranks, scores)`` of the documents at weight ranks ``span = (lo, hi)`` (``hi``
        excluded) whose score ``(q . x) * w`` beats ``kth``, ranks ascending: read through the
        int8 codes where they exist and ``kth`` > 0 (only the contenders' rows are read), else
        from the rows. The same ranks and the same float32 scores either way."""
        lo, hi = span
        ranks, scores = [], []
        start = lo
        if query is not None and 0 < kth < np.inf:
            if self._codes is None:
                self._codes = ScanCodes(q.size, self.order.size, self._codes_bytes)
            top = min(hi, self._codes.grow(hi, self._rows_for_codes))
            a = lo
            found: list[np.ndarray] = []  # contenders not yet scored, in rank order
            while a < top:  # one piece per chunk of codes (its own scale)
                b = min(top, (a // CHUNK + 1) * CHUNK)
                w_a = float(weights[self.order[a]])  # the piece's largest weight
                # (weights 0 from here on: nothing scores above kth > 0)
                got = self._codes.contenders(query, a, b, kth / w_a) if w_a > 0 else _NO_RANKS
                if got is None:  # too many contenders: read the piece's rows (in rank order)
                    if found:
                        self._add(ranks, scores, *self._exact_at(q, np.concatenate(found), weights, kth))
                        found = []
                    self._add(ranks, scores, *self._exact(q, a, b, weights, kth))
                elif got.size:
                    found.append(got)
                a = b
            if found:
                self._add(ranks, scores, *self._exact_at(q, np.concatenate(found), weights, kth))
            start = max(lo, top)
        if start < hi:
            self._add(ranks, scores, *self._exact(q, start, hi, weights, kth))
        if not ranks:
            return _NO_RANKS, np.empty(0, dtype=np.float32)
        if len(ranks) == 1:
            return ranks[0], scores[0]
        return np.concatenate(ranks), np.concatenate(scores)

    @staticmethod
    def _add(ranks: list, scores: list, r: np.ndarray, sc: np.ndarray) -> None:
        if r.size:
            ranks.append(r)
            scores.append(sc)

    def _exact(self, q, lo, hi, weights, kth):
        chunk = self.inner(q, lo, hi)
        chunk *= self.weights_at(weights, lo, hi)
        keep = np.flatnonzero(chunk > kth)
        return lo + keep, chunk[keep]

    def _exact_at(self, q, ranks, weights, kth):
        if not ranks.size:
            return ranks, np.empty(0, dtype=np.float32)
        have = 0 if self._prefix is None else self._prefix.shape[0]
        rows = self._prefix[ranks] if ranks[-1] < have else self.rows.gather(self.order[ranks])
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        out = np.empty(ranks.size, dtype=np.float32)
        faiss.fvec_inner_products_ny(
            faiss.swig_ptr(out), faiss.swig_ptr(q), faiss.swig_ptr(rows), q.size, ranks.size
        )
        out *= weights.take(self.order[ranks])
        keep = out > kth
        return ranks[keep], out[keep]

    def _rows_for_codes(self, lo: int, hi: int) -> np.ndarray:
        have = 0 if self._prefix is None else self._prefix.shape[0]
        return self._prefix[lo:hi] if hi <= have else self._gather(lo, hi)

    def vectors(self, stop: int) -> np.ndarray:
        """Rows of the first ``stop`` documents in this order (float32 ``(stop, d)``)."""
        return self.block(0, stop)

    def sorted_weights(self, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """``(weights in this order, their negatives as float64, their minimum)`` (O(n): for
        whole-collection fallbacks, not per query)."""
        w = weights[self.order]
        return w, -w.astype(np.float64), self.w_min(weights)

    @property
    def nbytes(self) -> int:
        prefix = 0 if self._prefix is None else self._prefix.nbytes
        codes = 0 if self._codes is None else self._codes.nbytes
        return sum(s.nbytes + h.nbytes for _, s, h in self._coarse.values()) + prefix + codes


def _select(scores: np.ndarray, pos: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` of small candidate rows, in numpy (FAISS's heap helpers open an OpenMP region
    per call). Rows shorter than ``k`` and non-finite scores pad with ``-inf`` / ``-1``; equal
    scores keep candidate order."""
    nq, m = scores.shape
    out_s = np.full((nq, k), -np.inf, dtype=np.float32)
    out_p = np.full((nq, k), -1, dtype=np.int64)
    if m == 0 or nq == 0:
        return out_s, out_p
    kk = min(k, m)
    part = np.argsort(-scores, axis=1, kind="stable")[:, :kk]
    ps = np.take_along_axis(scores, part, 1)
    pp = np.take_along_axis(pos, part, 1)
    ok = np.isfinite(ps) & (pp >= 0)
    out_s[:, :kk] = np.where(ok, ps, -np.inf)
    out_p[:, :kk] = np.where(ok, pp, -1)
    return out_s, out_p


def _search(
    index: faiss.Index, q: np.ndarray, depth: int, ef: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``index.search`` at ``depth``; an HNSW beam (``ef``) is widened to ``depth``, never narrowed:
    with ``efSearch < depth`` FAISS 1.15 still returns ``depth`` results, but worse ones (5k random
    32-d vectors, depth 50: 14-29 of the true top 50 at efSearch 8, 39-49 at efSearch 50)."""
    wider = faiss.SearchParametersHNSW(efSearch=depth) if ef is not None and depth > ef else None
    return search_raw(index, q, depth, wider)


def adaptive_search(
    index: faiss.Index,
    unit_q: np.ndarray,
    plan: SearchPlan,
    *,
    weights: np.ndarray | None,
    lookup: IdLookup,
    order: WeightOrder | None = None,
    stats: SearchStats | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``plan.k`` of ``cos * weights`` through the ANN ``index``, by ``plan.method``
    (the scan in the module docstring; ``"cosine"``: the index's own ranking; ``"overfetch"``:
    ``plan.depth`` candidates re-scored).

    Args:
        index: FAISS inner-product index over unit vectors; returns ids that ``lookup`` maps.
        unit_q: ``(nq, d)`` float32 unit queries.
        plan: what runs and its depths (:func:`normrank.search.plan.plan_search`).
        weights: ``(n,)`` float32 weights by storage position (None for ``"cosine"``).
        lookup: FAISS id -> storage position.
        order: the documents in decreasing weight order (read by ``"scan"`` only).
        stats: filled with what the search did when given.

    Returns:
        ``(scores, positions)`` float32 / int64 ``(nq, k)``, padded with ``-inf`` / ``-1``.
    """
    stats = stats if stats is not None else SearchStats()
    if plan.method == "cosine":
        return _cosine(index, unit_q, plan, lookup, stats)
    cos, cand = _search(index, unit_q, plan.depth, plan.ef)
    return rerank(cos, cand, unit_q, plan, weights=weights, lookup=lookup, order=order, stats=stats)


def _cosine(index, unit_q, plan: SearchPlan, lookup: IdLookup, stats: SearchStats):
    """FAISS's own ranking, already sorted: the top ``plan.depth``, fetched deeper (doubling)
    only while removed documents (HNSW tombstones) take places among them."""
    k, fetch = plan.k, plan.depth
    stats.path = plan.method
    while True:
        stats.rounds, stats.depth = stats.rounds + 1, max(stats.depth, fetch)
        cos, cand = _search(index, unit_q, fetch, plan.ef)
        pos = lookup(cand)
        if (pos >= 0).all():
            return cos[:, :k], pos[:, :k]
        if not ((pos < 0) & (cand >= 0)).any():
            return np.where(pos >= 0, cos, -np.inf).astype(np.float32)[:, :k], pos[:, :k]
        # Removed documents took places: drop them, fetch deeper to refill.
        s, p = _select(np.where(pos >= 0, cos, -np.inf).astype(np.float32), pos, k)
        if (p[:, -1] >= 0).all() or (cand[:, -1] < 0).any() or fetch >= index.ntotal:
            return s, p
        fetch = min(2 * fetch, index.ntotal)


def rerank(
    cos: np.ndarray,
    cand: np.ndarray,
    unit_q: np.ndarray,
    plan: SearchPlan,
    *,
    weights: np.ndarray,
    lookup: IdLookup,
    order: WeightOrder | None = None,
    stats: SearchStats | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The stage of :func:`adaptive_search` after the index search, for any source of cosine
    candidates (the FAISS index, or PostgreSQL's HNSW index): ``cos`` / ``cand`` ``(nq,
    depth)`` are the best cosines per query and their ids (padded with ids ``-1``), re-scored;
    ``plan.method == "scan"`` then scans ``order`` from the plan's first chunk, trusting the
    plan's rank (the depth is ``cos.shape[1]``: fewer where the source returned fewer, and the
    trusted rank never past it)."""
    stats = stats if stats is not None else SearchStats()
    k = plan.k
    depth = cos.shape[1]
    stats.rounds, stats.depth, stats.path = 1, max(stats.depth, depth), plan.method
    scan = order if plan.method == "scan" else None
    if unit_q.shape[0] == 1 and depth >= k:
        got = _rerank_one(
            cos[0], cand[0], unit_q[0], plan, weights=weights, lookup=lookup, order=scan, stats=stats
        )
        if got is not None:
            return got[0][None], got[1][None]
    pos = lookup(cand)
    valid = pos >= 0
    safe = np.maximum(pos, 0)
    # FAISS pads with -FLT_MAX: zero those before multiplying so nothing overflows.
    rescored = np.where(valid, np.where(valid, cos, 0) * weights[safe], -np.inf).astype(np.float32)
    top_s, top_p = _select(rescored, pos, k)
    if scan is None or not depth:
        return top_s, top_p
    trust = min(depth, max(k, plan.trust))
    c_last = cos[:, trust - 1].astype(np.float64)
    exhausted = cand[:, -1] < 0  # the index had fewer than `depth` candidates to give
    if unit_q.shape[0] == 1:
        if exhausted[0]:
            return top_s, top_p
        s, p = _scan_one(unit_q[0], (top_s[0], top_p[0]), pos[0][valid[0]], float(c_last[0]),
                         weights=weights, order=scan, band=plan.band, stats=stats)  # fmt: skip
        return s[None], p[None]
    return _scan_batch(unit_q, (top_s, top_p, pos), c_last, exhausted,
                       weights=weights, order=scan, band=plan.band, stats=stats)  # fmt: skip


def _rerank_one(cos, cand, q, plan: SearchPlan, *, weights, lookup, order, stats):
    """:func:`rerank` of one query whose candidates are all live documents, on 1-D arrays and
    scalars (numpy's fixed cost per call is most of what a single query adds); None for
    anything else (pads, tombstones, non-finite scores): the general path decides."""
    pos = lookup(cand)
    if pos.min() < 0:
        return None
    rescored = cos * weights[pos]
    top = np.argsort(-rescored, kind="stable")[: plan.k]
    s, p = rescored[top], pos[top]
    if not (np.isfinite(s[0]) and np.isfinite(s[-1])):
        return None
    if order is None:
        return s, p
    c_last = float(cos[min(cos.size, max(plan.k, plan.trust)) - 1])
    return _scan_one(q, (s, p), pos, c_last, weights=weights, order=order, band=plan.band, stats=stats)


def _scan_one(q, top, seen, c_last, *, weights, order, band, stats):
    """One query's weight-order scan (the latency case): blocks of documents whose scores beat
    the k-th (:meth:`WeightOrder.above`: through the codes, or FAISS's inner products straight
    from the rows), merged into ``top = (scores, positions)`` (best first)."""
    q = np.ascontiguousarray(q, dtype=np.float32)
    seen = np.sort(seen)  # re-scored candidates: met again in the scan, they count once
    codes = [None]  # the query's codes, made at its first block (many scans read none)
    try:
        return _scan_one_loop(q, top, seen, c_last, weights=weights, order=order, band=band,
                              stats=stats, codes=codes)  # fmt: skip
    finally:
        if codes[0] is not None:
            codes[0].close()


def _scan_one_loop(q, top, seen, c_last, *, weights, order, band, stats, codes):
    s, p = top
    k = s.size
    n = order.order.size
    scanned = 0
    while True:
        kth = float(s[-1])
        need = order.need_one(weights, kth, c_last, q.size)
        if need <= scanned:
            return s, p
        stop = int(min(n, need, max(band if scanned == 0 else n, k, scanned + 1)))
        lo = scanned
        while lo < stop:
            hi = min(stop, lo + _ONE_BLOCK)
            if codes[0] is None and hi - lo >= MIN_ROWS:
                codes[0] = order.query_codes(q)
            query = codes[0] if hi - lo >= MIN_ROWS else None
            ranks, beat = order.above(q, query, (lo, hi), weights=weights, kth=kth)
            at = order.order[ranks]
            if at.size and seen.size:
                hit = np.minimum(seen.searchsorted(at), seen.size - 1)
                fresh = seen[hit] != at
                at, beat = at[fresh], beat[fresh]
            if at.size:
                merged_s = np.concatenate([s, beat])
                merged_p = np.concatenate([p, at.astype(np.int64)])
                top = np.argsort(-merged_s, kind="stable")[:k]
                s, p = merged_s[top], merged_p[top]
                kth = float(s[-1])
                # A higher k-th score needs a shorter scan: stop where the bound now holds
                # rather than where it held before this block (at 1M, HNSW32: 100x fewer rows).
                stop = min(stop, max(hi, order.need_one(weights, kth, c_last, q.size)))
            lo = hi
        scanned = stop
        stats.rounds += 1
        stats.scanned = max(stats.scanned, scanned)


def _scan_batch(unit_q, top, c_last, exhausted, *, weights, order, band, stats):
    """A batch's weight-order scan: chunks doubling, one BLAS product per segment. ``top``:
    ``(scores, positions, candidate positions)`` of the re-scored candidates."""
    top_s, top_p, pos = top
    k = top_s.shape[1]
    n = order.order.size
    heaps = BatchHeaps(top_s, top_p, pos)
    active = np.arange(unit_q.shape[0])
    scanned = 0
    while True:
        need = order.need(weights, heaps.kth(active), c_last[active], unit_q.shape[1])
        done = (need <= scanned) | exhausted[active]
        active, need = active[~done], need[~done]
        if not active.size:
            return heaps.result()
        if scanned and not stats.widened:  # past the first chunk: these queries scan on
            stats.widened = int(active.size)
        # One query jumps straight to what its bound needs after a first chunk; a batch grows
        # its chunks (x2) so that a few deep queries do not make every query scan deep.
        cap = band if scanned == 0 else (n if active.size == 1 else _GROWTH * scanned)
        stop = int(min(n, need.max(), max(cap, k, scanned + 1)))
        # A query whose bound falls inside the chunk scans only that far (rounded up to whole
        # segments) and is done. Deepest first, so each segment's queries are a prefix.
        ends = np.minimum(stop, -(-need // _SEGMENT) * _SEGMENT)
        by_depth = np.argsort(-ends, kind="stable")
        active, ends = active[by_depth], ends[by_depth]
        q = unit_q[active]
        lo = scanned
        for hi in np.unique(ends):
            m = int(np.searchsorted(-ends, -hi, side="right"))  # queries scanning to hi or past
            at = order.order[lo:hi]
            vecs = np.ascontiguousarray(order.block(lo, int(hi)), dtype=np.float32)
            # A few queries: FAISS's SIMD row kernel beats a BLAS matrix-vector product.
            cos_block = inner_products_small(q[:m], vecs) if m < SMALL_NQ else inner_products(q[:m], vecs)
            heaps.add(active[:m], cos_block, order.weights_at(weights, lo, int(hi)), at)
            stats.rounds += 1
            lo = int(hi)
        active = active[ends == stop]
        scanned = stop
        stats.scanned = max(stats.scanned, scanned)
