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
  After ``t`` of them, a document seen neither way has cosine ``<= trusted_cosine`` (the cosine
  at the trusted rank) and weight ``<= w_(t)``, so it scores at most ``trusted_cosine * w_(t)``
  (``trusted_cosine * w_min`` when it is < 0), up to float rounding. Once
  :func:`normrank.search.bound.unseen_can_beat` says nothing unseen can beat the k-th score the
  query stops; at worst every document is scanned (exact).
* A single query reads the first rows of the scan as int8 scan codes
  (:mod:`normrank.search.scan_codes`): a quarter of the bytes, and the rows of only the few
  documents whose codes, with their error bound, could beat the k-th score; the same results.
* How far to scan is read off the bound (:meth:`normrank.search.weight_order.WeightOrder.need`, a binary search). A single
  query scans the first chunk (``band``), then jumps to what its new k-th score needs. A batch
  grows its chunks by doubling, and within a chunk each query stops at the segment its bound
  needs (one BLAS product per segment for the queries still scanning, FAISS's heaps).

"Exact" is relative to the ANN index: the bound trusts that it returns the true cosine top-``T``,
as any re-ranking of ANN output must. On FAISS codes (PQ, SQ) every cosine is the codes'
own estimate (FAISS's search ranks by the same), so the result is exact with respect to those.

A short answer is not an exhausted index: an IVF whose probed lists hold fewer documents than
asked for returns those and pads the rest (ids ``-1``). Where it leaves the trusted rank empty
and live documents unseen, the last cosine it returned bounds them (as a full trusted rank
would) if it returned ``k`` live documents; if fewer, only
:data:`~normrank.search.bound.ROW_LENGTH_MAX` does (any row's), so the scan reads on until the
top-k is proven over the whole collection; ``"cosine"`` / ``"overfetch"`` answers left with fewer than
``k`` results are completed by the same scan (:func:`_fill_short`). Counted in
``SearchStats.filled``; never certified.
"""

from __future__ import annotations

from collections.abc import Callable

import faiss
import numpy as np

from normrank.errors import InvalidParameterError
from normrank.search.batch_heaps import BatchHeaps
from normrank.search.bound import ROW_LENGTH_MAX, unseen_can_beat
from normrank.search.faiss_info import search_raw
from normrank.search.flat import SMALL_NQ, inner_products, inner_products_small
from normrank.search.id_lookup import IdLookup
from normrank.search.plan import SearchPlan, SearchStats
from normrank.search.scan_codes import MIN_ROWS
from normrank.search.weight_order import WeightOrder

__all__ = ["adaptive_search", "rerank"]


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
    weight_range: tuple[float, float] | None = None,
    fill_order: Callable[[], WeightOrder] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``plan.k`` of ``cos * weights`` through the ANN ``index``, by ``plan.method``
    (the scan in the module docstring; ``"cosine"``: the index's own ranking; ``"overfetch"``:
    ``plan.depth`` candidates re-scored). A ``"cosine"`` / ``"overfetch"`` answer the index left
    short of ``k`` live documents while ``k`` exist is completed by :func:`_fill_short`.

    Args:
        index: FAISS inner-product index over unit vectors; returns ids that ``lookup`` maps.
        unit_q: ``(nq, d)`` float32 unit queries.
        plan: what runs and its depths (:func:`normrank.search.plan.plan_search`).
        weights: ``(n,)`` float32 weights by storage position (None for ``"cosine"``).
        lookup: FAISS id -> storage position.
        order: the documents in decreasing weight order (read by ``"scan"`` only).
        stats: filled with what the search did when given.
        weight_range: ``(smallest, largest)`` of ``weights`` where the caller knows it (the
            certificate of a search that reads no weight order; else found by a pass).
        fill_order: builds a weight order (either sign at alpha = 0) for :func:`_fill_short`,
            called only when an answer is short; None: a short answer raises
            :class:`~normrank.errors.InvalidParameterError`.

    Returns:
        ``(scores, positions)`` float32 / int64 ``(nq, k)``, padded with ``-inf`` / ``-1``.
    """
    stats = stats if stats is not None else SearchStats()
    if plan.method == "cosine":
        s, p = _cosine(index, unit_q, plan, lookup, stats)
    else:
        cos, cand_ids = _search(index, unit_q, plan.depth, plan.ef)
        s, p = rerank(cos, cand_ids, unit_q, plan, weights=weights, lookup=lookup, order=order, stats=stats,
                      weight_range=weight_range)  # fmt: skip
    if plan.method != "scan" and p.size and p[:, -1].min() < 0 and lookup.n >= plan.k:
        return _fill_short(unit_q, (s, p), plan, weights=weights, lookup=lookup, fill_order=fill_order,
                           stats=stats)  # fmt: skip
    return s, p


def _fill_short(unit_q, top, plan: SearchPlan, *, weights, lookup: IdLookup, fill_order, stats: SearchStats):
    """The queries of ``top = (scores, positions)`` left with fewer than ``k`` results by a
    ``"cosine"`` / ``"overfetch"`` search while ``k`` live documents exist (an IVF whose probed
    lists hold fewer), completed: the weight-order scan (:func:`_scan_one`, :func:`_scan_batch`;
    alpha = 0: weights 1) from what the index returned, every unseen document's cosine bounded only by
    :data:`~normrank.search.bound.ROW_LENGTH_MAX` (at alpha = 0 a full scan). Exact over the whole
    collection; counted in ``stats.filled``, never certified."""
    s, p = top
    short = np.flatnonzero(p[:, -1] < 0)
    if fill_order is None:
        raise InvalidParameterError(
            f"{short.size} queries got fewer than k = {plan.k} results from the index while "
            f"{lookup.n} documents exist, and no weight order was given to complete them"
        )
    w = weights if weights is not None else np.ones(lookup.n, dtype=np.float32)
    order, part = fill_order(), SearchStats()
    if short.size == 1:  # one query: its scan in bounded blocks, as rerank's
        one = short[0]
        got_s, got_p = _scan_one(unit_q[one], (s[one], p[one]), p[one][p[one] >= 0], ROW_LENGTH_MAX,
                                 weights=w, order=order, band=plan.band, stats=part)  # fmt: skip
    else:
        got_s, got_p = _scan_batch(unit_q[short], (s[short], p[short], p[short]),
                                   np.full(short.size, ROW_LENGTH_MAX), np.zeros(short.size, dtype=bool),
                                   weights=w, order=order, band=plan.band, stats=part)  # fmt: skip
    s, p = s.copy(), p.copy()
    s[short], p[short] = got_s, got_p
    stats.certified = stats.certified.copy()
    stats.certified[short] = False
    stats.filled += int(short.size)
    stats.scanned, stats.rounds = max(stats.scanned, part.scanned), stats.rounds + part.rounds
    stats.widened += part.widened
    return s, p


def _cosine(index, unit_q, plan: SearchPlan, lookup: IdLookup, stats: SearchStats):
    """FAISS's own ranking, already sorted: the top ``plan.depth``, fetched deeper (doubling)
    only while removed documents (HNSW tombstones) take places among them."""
    k, fetch = plan.k, plan.depth
    stats.path = plan.method
    stats.certified = np.ones(unit_q.shape[0], dtype=bool)  # the index's own ranking of its candidates
    while True:
        stats.rounds, stats.depth = stats.rounds + 1, max(stats.depth, fetch)
        cos, cand_ids = _search(index, unit_q, fetch, plan.ef)
        pos = lookup(cand_ids)
        if (pos >= 0).all():
            return cos[:, :k], pos[:, :k]
        if not ((pos < 0) & (cand_ids >= 0)).any():
            return np.where(pos >= 0, cos, -np.inf).astype(np.float32)[:, :k], pos[:, :k]
        # Removed documents took places: drop them, fetch deeper to refill.
        s, p = _select(np.where(pos >= 0, cos, -np.inf).astype(np.float32), pos, k)
        if (p[:, -1] >= 0).all() or (cand_ids[:, -1] < 0).any() or fetch >= index.ntotal:
            return s, p
        fetch = min(2 * fetch, index.ntotal)


def rerank(
    cos: np.ndarray,
    cand_ids: np.ndarray,
    unit_q: np.ndarray,
    plan: SearchPlan,
    *,
    weights: np.ndarray,
    lookup: IdLookup,
    order: WeightOrder | None = None,
    stats: SearchStats | None = None,
    weight_range: tuple[float, float] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The stage of :func:`adaptive_search` after the index search, for any source of cosine
    candidates (the FAISS index, or PostgreSQL's HNSW index): ``cos`` / ``cand_ids`` ``(nq,
    depth)`` are the best cosines per query and their ids (padded with ids ``-1``), re-scored;
    ``plan.method == "scan"`` then scans ``order`` from the plan's first chunk, trusting the
    plan's rank (the depth is ``cos.shape[1]``: fewer where the source returned fewer, and the
    trusted rank never past it). A query whose trusted rank the source left empty, with live
    documents it did not return, is scanned with their cosines bounded by the last cosine
    returned, or by ``ROW_LENGTH_MAX`` where fewer than ``k`` came back (module docstring); only
    one that got every live document skips the scan."""
    stats = stats if stats is not None else SearchStats()
    k = plan.k
    depth = cos.shape[1]
    stats.rounds, stats.depth, stats.path = 1, max(stats.depth, depth), plan.method
    scan = order if plan.method == "scan" else None

    def bound_held(kth, n_seen, w_range):  # the certificate of a search that scans nothing
        return _bound_held(kth, cos, cand_ids, plan, weights=weights, w_range=w_range, n_seen=n_seen,
                           dim=unit_q.shape[1])  # fmt: skip

    if unit_q.shape[0] == 1 and depth >= k:
        got = _rerank_one(
            cos[0], cand_ids[0], unit_q[0], plan, weights=weights, lookup=lookup, order=scan, stats=stats
        )
        if got is not None:
            if scan is None:  # (a scan records its own certificate)
                stats.certified = bound_held(got[0][None, -1], depth, weight_range)
            return got[0][None], got[1][None]
    pos = lookup(cand_ids)
    valid = pos >= 0
    safe = np.maximum(pos, 0)
    # FAISS pads with -FLT_MAX: zero those before multiplying so nothing overflows.
    rescored = np.where(valid, np.where(valid, cos, 0) * weights[safe], -np.inf).astype(np.float32)
    top_s, top_p = _select(rescored, pos, k)
    n_seen = valid.sum(axis=1)
    if scan is None or not depth:
        stats.certified = bound_held(top_s[:, -1], n_seen, weight_range)
        return top_s, top_p
    trust = min(depth, max(k, plan.trust))
    trusted_cosine = cos[:, trust - 1].astype(np.float64)
    all_seen = n_seen >= weights.size
    exhausted = (cand_ids[:, -1] < 0) & all_seen  # the index gave fewer than `depth`: all it holds
    # A trusted rank the index left empty bounds nothing, unless every document was returned.
    provable = (cand_ids[:, trust - 1] >= 0) | all_seen
    if not provable.all():  # (an IVF whose probed lists hold fewer documents than the trusted rank)
        # At least k returned: the last cosine returned bounds the unseen, as a trusted rank the
        # index fills does (a document in an unprobed list is missing at any depth; FAISS's
        # default nprobe 1 would otherwise read every row). Fewer than k: only a row's length
        # bounds them, and the scan completes the top-k over the whole collection.
        blind = ~provable
        returned = (cand_ids >= 0).sum(axis=1)
        few = blind & (n_seen < k)
        last = np.flatnonzero(blind & ~few)
        trusted_cosine[last] = cos[last, returned[last] - 1]
        trusted_cosine[few] = ROW_LENGTH_MAX  # the unseen: any cosine a row can have
        stats.filled += int(few.sum())
    if unit_q.shape[0] == 1:
        if exhausted[0]:  # nothing scanned: the bound on the candidates alone
            stats.certified = bound_held(top_s[:, -1], n_seen, (scan.w_min(weights), scan.w_max(weights)))
            return top_s, top_p
        s, p = _scan_one(unit_q[0], (top_s[0], top_p[0]), pos[0][valid[0]], float(trusted_cosine[0]),
                         weights=weights, order=scan, band=plan.band, stats=stats)  # fmt: skip
        stats.certified = stats.certified & provable
        return s[None], p[None]
    got = _scan_batch(unit_q, (top_s, top_p, pos), trusted_cosine, exhausted,
                      weights=weights, order=scan, band=plan.band, stats=stats)  # fmt: skip
    stats.certified = stats.certified & provable
    return got


def _bound_held(kth, cos, cand_ids, plan: SearchPlan, *, weights, w_range, n_seen, dim: int) -> np.ndarray:
    """Per query, whether the bound (:func:`~normrank.search.bound.unseen_can_beat`) held on the
    candidates alone: no unseen document, of cosine at most the trusted one and weight within
    the weights' range, can beat ``kth``; at a trusted rank the index left empty, only when it
    returned every document (``n_seen`` live candidates). ``w_range``: ``(smallest, largest)``
    weight, None: one pass over ``weights``."""
    depth = cos.shape[1]
    if not depth or not weights.size:
        return np.asarray(n_seen) >= weights.size
    trust = min(depth, max(plan.k, plan.trust))
    trusted_cosine = cos[:, trust - 1].astype(np.float64)
    w_min, w_max = w_range if w_range is not None else (float(weights.min()), float(weights.max()))
    held = ~unseen_can_beat(np.asarray(kth, dtype=np.float64), trusted_cosine, w_max, w_min, dim)
    return (held & (cand_ids[:, trust - 1] >= 0)) | (np.asarray(n_seen) >= weights.size)


def _rerank_one(cos, cand_ids, q, plan: SearchPlan, *, weights, lookup, order, stats):
    """:func:`rerank` of one query whose candidates are all live documents, on 1-D arrays and
    scalars (numpy's fixed cost per call is most of what a single query adds); None for
    anything else (pads, tombstones, non-finite scores): the general path decides."""
    pos = lookup(cand_ids)
    if pos.min() < 0:
        return None
    rescored = cos * weights[pos]
    top = np.argsort(-rescored, kind="stable")[: plan.k]
    s, p = rescored[top], pos[top]
    if not (np.isfinite(s[0]) and np.isfinite(s[-1])):
        return None
    if order is None:
        return s, p
    trusted_cosine = float(cos[min(cos.size, max(plan.k, plan.trust)) - 1])
    return _scan_one(
        q, (s, p), pos, trusted_cosine, weights=weights, order=order, band=plan.band, stats=stats
    )


def _scan_one(q, top, seen_pos, trusted_cosine, *, weights, order, band, stats):
    """One query's weight-order scan (the latency case): blocks of documents whose scores beat
    the k-th (:meth:`WeightOrder.above`: through the scan codes, or FAISS's inner products
    straight from the rows), merged into ``top = (scores, positions)`` (best first)."""
    q = np.ascontiguousarray(q, dtype=np.float32)
    seen_pos = np.sort(seen_pos)  # re-scored candidates: met again in the scan, they count once
    query_codes = [None]  # the query's scan codes, made at its first block (many scans read none)
    try:
        return _scan_one_loop(q, top, seen_pos, trusted_cosine, weights=weights, order=order, band=band,
                              stats=stats, query_codes=query_codes)  # fmt: skip
    finally:
        if query_codes[0] is not None:
            query_codes[0].close()


def _scan_one_loop(q, top, seen_pos, trusted_cosine, *, weights, order, band, stats, query_codes):
    s, p = top
    k = s.size
    n = order.positions.size
    scanned = 0
    while True:
        kth = float(s[-1])
        need = order.need_one(weights, kth, trusted_cosine, q.size)
        if not scanned:  # the certificate: the bound held before any row was read
            stats.certified = np.array([need <= 0])
        if need <= scanned:
            return s, p
        stop = int(min(n, need, max(band if scanned == 0 else n, k, scanned + 1)))
        lo = scanned
        while lo < stop:
            hi = min(stop, lo + _ONE_BLOCK)
            if query_codes[0] is None and hi - lo >= MIN_ROWS:
                query_codes[0] = order.query_codes(q)
            query = query_codes[0] if hi - lo >= MIN_ROWS else None
            ranks, beat = order.above(q, query, (lo, hi), weights=weights, kth=kth)
            at = order.positions[ranks]
            if at.size and seen_pos.size:
                hit = np.minimum(seen_pos.searchsorted(at), seen_pos.size - 1)
                fresh = seen_pos[hit] != at
                at, beat = at[fresh], beat[fresh]
            if at.size:
                merged_s = np.concatenate([s, beat])
                merged_p = np.concatenate([p, at.astype(np.int64)])
                top = np.argsort(-merged_s, kind="stable")[:k]
                s, p = merged_s[top], merged_p[top]
                kth = float(s[-1])
                # A higher k-th score needs a shorter scan: stop where the bound now holds
                # rather than where it held before this block (at 1M, HNSW32: 100x fewer rows).
                stop = min(stop, max(hi, order.need_one(weights, kth, trusted_cosine, q.size)))
            lo = hi
        scanned = stop
        stats.rounds += 1
        stats.scanned = max(stats.scanned, scanned)


def _scan_batch(unit_q, top, trusted_cosine, exhausted, *, weights, order, band, stats):
    """A batch's weight-order scan: chunks doubling, one BLAS product per segment. ``top``:
    ``(scores, positions, candidate positions)`` of the re-scored candidates."""
    top_s, top_p, pos = top
    k = top_s.shape[1]
    n = order.positions.size
    heaps = BatchHeaps(top_s, top_p, pos)
    active = np.arange(unit_q.shape[0])
    scanned = 0
    while True:
        need = order.need(weights, heaps.kth(active), trusted_cosine[active], unit_q.shape[1])
        if not scanned:  # the certificates: the bound held before any row was read
            stats.certified = need <= 0
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
            at = order.positions[lo:hi]
            vecs = np.ascontiguousarray(order.block(lo, int(hi)), dtype=np.float32)
            # A few queries: FAISS's SIMD row kernel beats a BLAS matrix-vector product.
            cos_block = inner_products_small(q[:m], vecs) if m < SMALL_NQ else inner_products(q[:m], vecs)
            heaps.add(active[:m], cos_block, order.weights_at(weights, lo, int(hi)), at)
            stats.rounds += 1
            lo = int(hi)
        active = active[ends == stop]
        scanned = stop
        stats.scanned = max(stats.scanned, scanned)
