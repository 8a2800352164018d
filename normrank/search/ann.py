"""Norm-weighted search on ANN indexes (IVF, HNSW) with query-time alpha.

The problem: an ANN index ranks by cosine, but a document far down the cosine ranking can be
lifted into the top-k by its weight ``w = ||d||**alpha``. A fixed over-fetch misses it: on real
MiniLM embeddings at alpha = 1 the exact top-10 holds documents at cosine rank 1,000-3,000 of
15,000 (benchmarks/results/speed.md).

Method (chosen by measurement, see benchmarks/results/speed.md): **ANN candidates plus an exact
scan in decreasing weight order, stopped by a bound** (norm ranging, Yan et al., NeurIPS 2018,
with the bands scanned exactly and their size chosen per query).

* Fetch the top ``D`` by cosine from the index (HNSW: an eighth of its ``efSearch`` beam; IVF:
  a share of what it probes; at least ``k * k_factor``; :func:`default_start`) and re-score
  ``cos * w`` exactly.
* Scan the documents in decreasing weight order (the lowest norms when ``alpha < 0``, the highest
  when ``alpha > 0``) exactly. After ``t`` of them, a document seen neither way has cosine
  ``<= c_T`` (the cosine at a trusted rank ``T <= D``, :func:`default_trust_depth`) and weight
  ``<= w_(t)`` (the next in weight order), so it scores at most ``c_T * w_(t)`` (``c_T * w_min``
  when ``c_T < 0``). Once the k-th score reaches that bound the query stops; at worst every
  document is scanned (exact).
* How far to scan is read off the bound: the first ``t`` with ``c_T * w_(t) <= k-th score`` (a
  binary search in the sorted weights). A query scans a first chunk, which can raise its k-th
  score, then jumps to the ``t`` its new k-th score needs; it never scans past it. A batch grows
  its chunks by doubling instead, so that one deep query does not drag the others along, and
  within a chunk each query stops at the segment its bound needs (one BLAS product per
  segment, for the queries still scanning; the weight multiplied in and the candidates
  skipped as FAISS's heap takes the scores, :func:`normrank.search.kernels.heap_add_scanned`).

A single query (the latency case) reads the scanned prefix through an int8 copy first
(:mod:`normrank.search.quantized_scan`: per-row scale and an exact bound of the quantisation error,
the query coded in int16 with its own, so that each row's exact integer inner product plus the
bounds is a rigorous upper bound of the fp32 score) and scores exactly, by FAISS's own fp32 inner product, only the rows whose bound can beat
the current k-th score: the same top-k, scores and tie order as the fp32 scan, bit for bit, in
a quarter of the bytes read (27k real MiniLM embeddings, alpha = 1: ~4.9k rows scanned, 7.5 MB
fp32 -> 1.9 MB int8 a query). The whole post-search stage runs as one compiled numba call
(:func:`normrank.search._quantized_kernel.scan_one`); without numba the fp32 scan gives the same
results. The int8 copy costs ``d + 12`` bytes per scanned row, on top of the fp32 copy.

"Exact" is relative to the ANN index: the bound trusts that it returns the true cosine top-``T``,
as any re-ranking of ANN output must. Weighted documents are found however deep they sit in
the cosine ranking, which over-fetching cannot do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import faiss
import numpy as np

from normrank.search import quantized_scan
from normrank.search.faiss_info import ann_params, search_raw
from normrank.search.flat import SMALL_NQ, inner_products, inner_products_small
from normrank.search.kernels import heap_add_scanned
from normrank.search.quantized_scan import QuantizedRows
from normrank.settings import WEIGHT_CACHE_ENTRIES

__all__ = [
    "AnnStats",
    "IdLookup",
    "WeightOrder",
    "adaptive_search",
    "ann_params",
    "default_band_start",
    "default_start",
    "default_trust_depth",
    "rerank",
    "scan_needed",
    "unseen_bound",
]

# A batch's weight-order scan grows by this factor per round, and never past what its deepest
# open query needs: a batch scans at most twice what its bound needed.
_GROWTH = 2
# Within a chunk, a query whose bound is met early stops at the end of its segment of this many
# rows (27k real MiniLM embeddings, 100 queries, alpha = 1: 19% fewer rows scanned than when
# every query scans the whole chunk, in ~25 BLAS calls instead of 5).
_SEGMENT = 512


class IdLookup:
    """Vectorised FAISS id -> storage position (``-1`` for ids not present, e.g. tombstones)."""

    def __init__(self, ids: np.ndarray) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        self.n = ids.size
        hi = int(ids.max()) + 1 if ids.size else 0
        # A dense table is one gather per candidate; fall back to binary search for sparse ids.
        if hi <= 4 * max(ids.size, 1024):
            # Shifted by one and fenced by -1 on both sides: a gather at ``id + 1`` clipped to the
            # table maps FAISS's -1 pads, and any id outside [0, hi), to -1 (two numpy calls).
            self._dense = np.full(hi + 2, -1, dtype=np.int64)
            self._dense[ids + 1] = np.arange(ids.size, dtype=np.int64)
            self._sorted = self._order = None
        else:
            self._dense = None
            self._order = np.argsort(ids, kind="stable")
            self._sorted = ids[self._order]

    def __call__(self, cand: np.ndarray) -> np.ndarray:
        if self._dense is not None:
            return self._dense.take(cand + 1, mode="clip")
        out = np.full(cand.shape, -1, dtype=np.int64)
        if not self.n:
            return out
        at = np.minimum(np.searchsorted(self._sorted, cand), self.n - 1)
        hit = (self._sorted[at] == cand) & (cand >= 0)
        out[hit] = self._order[at[hit]]
        return out


def unseen_bound(c_last: np.ndarray, w_max: float, w_min: float) -> np.ndarray:
    """Largest score ``c * w`` any document with cosine ``c <= c_last`` and weight in
    ``[w_min, w_max]`` can reach: ``c_last * w_max`` if ``c_last >= 0``, else ``c_last * w_min``."""
    return np.where(c_last >= 0, c_last * w_max, c_last * w_min)


def scan_needed(kth: np.ndarray, c_last: np.ndarray, neg_w: np.ndarray, w_min: float) -> np.ndarray:
    """How many documents, in decreasing weight order, a query must scan before no unseen one
    can beat its k-th score ``kth``: the first ``t`` with ``c_last * w_(t) <= kth`` (a binary
    search in ``neg_w``, the negated sorted weights); with ``c_last <= 0`` the bound
    ``c_last * w_min`` does not shrink as the scan goes, so it is 0 or all ``n``."""
    n = neg_w.size
    kth = kth.astype(np.float64)
    need = np.where(kth >= c_last * w_min, 0, n)
    up = c_last > 0
    if up.any():
        need[up] = np.searchsorted(neg_w, -(kth[up] / c_last[up]), side="left")
    return need


def _select(scores: np.ndarray, pos: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` of small candidate rows, in numpy: FAISS's heap helpers open an OpenMP region per
    call, which costs milliseconds on a busy machine for a few microseconds of work. Rows shorter
    than ``k`` and non-finite scores pad with ``-inf`` / ``-1``."""
    nq, m = scores.shape
    out_s = np.full((nq, k), -np.inf, dtype=np.float32)
    out_p = np.full((nq, k), -1, dtype=np.int64)
    if m == 0 or nq == 0:
        return out_s, out_p
    kk = min(k, m)
    if nq == 1:  # one query (the latency case): 1-D calls skip numpy's along-axis machinery
        row = scores[0]
        part = np.argpartition(-row, kk - 1)[:kk] if m > kk else np.arange(m)
        part = part[np.argsort(-row[part], kind="stable")]
        ps, pp = row[part][None], pos[0][part][None]
    else:
        part = (
            np.argpartition(-scores, kk - 1, axis=1)[:, :kk]
            if m > kk
            else np.broadcast_to(np.arange(m), (nq, m))
        )
        ps = np.take_along_axis(scores, part, 1)
        order = np.argsort(-ps, axis=1, kind="stable")
        ps = np.take_along_axis(ps, order, 1)
        pp = np.take_along_axis(np.take_along_axis(pos, part, 1), order, 1)
    ok = np.isfinite(ps) & (pp >= 0)
    out_s[:, :kk] = np.where(ok, ps, -np.inf)
    out_p[:, :kk] = np.where(ok, pp, -1)
    return out_s, out_p


def _search(
    index: faiss.Index, q: np.ndarray, depth: int, params: dict[str, int] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``index.search`` at ``depth``; HNSW's beam is widened to ``depth`` (FAISS would return
    fewer than ``depth`` results when ``efSearch < depth``), never narrowed."""
    ef = (ann_params(index) if params is None else params).get("efSearch")
    wider = faiss.SearchParametersHNSW(efSearch=depth) if ef is not None and depth > ef else None
    return search_raw(index, q, depth, wider)


@dataclass
class AnnStats:
    """What one :func:`adaptive_search` call did (for benchmarks and tuning)."""

    rounds: int = 0
    max_depth: int = 0  # cosine depth fetched from the index
    max_scanned: int = 0  # documents scanned in weight order by the widest query
    widened: int = 0  # queries of a batch that scanned past the first chunk


def default_band_start(n: int, params: dict[str, int] | None = None) -> int:
    """First chunk of the weight-order scan: ~1/30 of the documents, capped so that it stays a
    fraction of the ANN's own work (IVF: a quarter of the probed share; HNSW: 8 x efSearch).
    Later chunks double while the bound does not hold."""
    params = params or {}
    cap = 2048
    if "efSearch" in params:
        cap = 8 * params["efSearch"]
    elif "nprobe" in params and params.get("nlist"):
        cap = int(n * params["nprobe"] / params["nlist"] / 4)
    return int(max(0, min(n, max(64, min(n // 30, cap)))))


def default_start(k: int, k_factor: int, params: dict[str, int], n: int = 0) -> int:
    """Cosine depth fetched: what the bound trusts (:func:`default_trust_depth`) and, for HNSW,
    a little more from the beam it explores anyway.

    * HNSW: the trusted eighth of the ``efSearch`` beam, or ``k * k_factor`` if more, but never
      past the beam itself (at least ``k``): a deeper fetch makes FAISS widen the beam, which
      costs more than everything else a query adds (8.4k real MiniLM embeddings, efSearch 16,
      one query: 12 us at depth 16, 53 us at depth 100). Candidates past the trusted rank only
      raise the k-th score early, and FAISS's result heap costs more the more it returns
      (100 queries, efSearch 512: +2.6% for 64 results over 10, +3.5% for 128).
    * IVF: only the trusted ranks, ``k * k_factor`` or 1/256 of the documents it probes if more.
      Candidates past the trusted rank add nothing an IVF index could miss (a document in an
      unprobed list is missing at every depth), and its result heap costs at depth (8.4k real
      MiniLM embeddings, nprobe 183 of 366, 100 single queries: 1.50 / 1.63x plain latency at
      alpha = -1.5 / 1 fetching 400 and trusting 100, 1.27 / 1.42x fetching and trusting 100,
      recall 1.000 both; on 100k MiniLM-like vectors trusting what it fetched, 781, cost recall
      0.997 -> 0.995, so the trusted share stays a quarter of what the old depth was)."""
    if "efSearch" in params:
        ef = params["efSearch"]
        return min(max(k * k_factor, ef // 8), max(ef, k))
    if "nprobe" in params:
        probed = n * params["nprobe"] // max(params.get("nlist", 1), 1)
        return max(k * k_factor, probed // 256)
    return k * k_factor


def default_trust_depth(depth: int, params: dict[str, int], k: int = 0) -> int:
    """Rank down to which the index's cosine ranking is trusted by the bound.

    An ANN index is least sure of its deepest candidates: the further a document is from the
    query, the likelier it sits in an unprobed IVF list or off a graph's beam, and norm
    weighting lifts exactly such documents. So the bound uses the cosine at a rank well inside
    what the index explored (IVF: 1/256 of the documents probed, at least ``k * k_factor``: all
    it fetches, :func:`default_start`; HNSW: an eighth of ``efSearch``, at least ``2 k``), and a
    document the index missed above it is caught by the weight-order scan if its weight put it
    there. The floor of ``2 k`` matters for a small beam: at ``efSearch`` 64 an eighth is rank 8,
    and a bound at the k-th cosine itself makes the scan read a quarter to 40% of the documents
    (8.4k real MiniLM embeddings, efSearch 64, 200 queries, alpha = -1.5 / 1: 2,038 / 3,397
    rows at recall 0.9985 / 0.9995 trusting rank 10; 1,388 / 2,706 at 0.9975 / 0.9990 trusting
    16; 660 / 2,008 at 0.9960 / 0.9980 trusting 32). Measured (benchmarks/results/speed.md),
    recall at alpha = 0.5:

    * IVF, 100k MiniLM-like vectors, nprobe = nlist/4, depth 400, 100 single queries: 0.989 /
      0.990 / 0.996 trusting rank 400 / 200 / 100, at 1.29x / 1.53x / 1.72x plain latency
      (plain cosine recall 0.997);
    * HNSW, 27k real MiniLM embeddings, efSearch 512, 300 single queries: 0.995 / 0.999
      trusting rank 128 / 64, at 1.60x / 1.64x (plain cosine recall 0.997).
    """
    if "efSearch" in params:
        return max(1, min(depth, max(2 * k, params["efSearch"] // 8)))
    return max(1, depth)


class WeightOrder:
    """Documents in decreasing order of one weighting (for one sign of alpha), with their unit
    vectors copied lazily, only as far as a search has needed to scan.

    Args:
        base: ``(n,)`` positive base weights (norms) by storage position; the order is that of
            ``base`` descending (``sign > 0``) or ascending (``sign < 0``).
        fetch: storage positions -> ``(m, d)`` float32 unit vectors.
    """

    def __init__(self, base: np.ndarray, sign: int, fetch, *, quantized: bool | None = None) -> None:
        key = -base if sign > 0 else base
        self.order = np.argsort(key, kind="stable").astype(np.int64)
        self.rank = np.empty_like(self.order)
        self.rank[self.order] = np.arange(self.order.size)
        self._fetch = fetch
        self._vectors: np.ndarray | None = None
        self._sorted: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, float]] = {}
        # Single-query scans bound each row with an int8 copy first (normrank.search.quantized_scan);
        # None: wherever that runs (numba present, d large enough). False: fp32 only.
        self.quantized = quantized
        self._codes: QuantizedRows | None = None

    def sorted_weights(self, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """``(weights in this order, their negatives as float64, their minimum)``, computed once
        per weights array (an O(n) pass per search would dominate single-query latency). The
        negated copy is ascending, for :func:`scan_needed`'s binary search."""
        got = self._sorted.get(id(weights))
        if got is None or got[0] is not weights:  # the id of a freed array can be reused
            if len(self._sorted) >= WEIGHT_CACHE_ENTRIES:
                self._sorted.pop(next(iter(self._sorted)))
            w_sorted = weights[self.order]
            got = self._sorted[id(weights)] = (
                weights,
                w_sorted,
                -w_sorted.astype(np.float64),
                float(weights.min()),
            )
        return got[1], got[2], got[3]

    def vectors(self, stop: int) -> np.ndarray:
        """Unit vectors of the first ``stop`` documents in weight order."""
        have = 0 if self._vectors is None else self._vectors.shape[0]
        if stop > have:
            grow = min(self.order.size, max(stop, 2 * have))
            new = np.ascontiguousarray(self._fetch(self.order[have:grow]), dtype=np.float32)
            self._vectors = new if self._vectors is None else np.concatenate([self._vectors, new])
            if self._codes is not None:
                self._codes.extend(new)
        return self._vectors[:stop]

    def codes(self, stop: int, d: int) -> QuantizedRows | None:
        """The int8 copy of (at least) the first ``stop`` vectors, kept alongside the fp32 one
        (a quarter of its bytes, plus 8 per row); None where it does not run (``quantized``)."""
        if self._codes is None:
            if self.quantized is False or not quantized_scan.available(d):
                self.quantized = False
                return None
            self.quantized = True
            self._codes = QuantizedRows(d)
            if self._vectors is not None:
                self._codes.extend(self._vectors)
        self.vectors(stop)
        return self._codes

    @property
    def nbytes(self) -> int:
        """Bytes held by the lazily copied vectors (fp32 and int8)."""
        fp32 = 0 if self._vectors is None else self._vectors.nbytes
        return fp32 + (0 if self._codes is None else self._codes.nbytes)


def adaptive_search(
    index: faiss.Index,
    unit_q: np.ndarray,
    k: int,
    weights: np.ndarray | None,
    lookup: IdLookup,
    *,
    depth: int,
    order: WeightOrder | None = None,
    band_start: int = 0,
    trust_depth: int | None = None,
    params: dict[str, int] | None = None,
    stats: AnnStats | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` of ``cos * weights`` through the ANN ``index`` (method in the module docstring).

    Args:
        index: FAISS inner-product index over unit vectors; returns ids that ``lookup`` maps.
        unit_q: ``(nq, d)`` float32 unit queries.
        k: results per query.
        weights: ``(n,)`` float32 weights by storage position, or None (cosine: depth ``k``).
        lookup: FAISS id -> storage position.
        depth: cosine depth fetched from the index.
        order: the documents in decreasing weight order; None re-scores the ``depth``
            candidates only (a fixed over-fetch, no bound).
        band_start: first chunk of the weight-order scan.
        trust_depth: the rank whose cosine bounds unseen documents (default ``depth``); see
            :func:`default_trust_depth`.
        params: :func:`ann_params` of ``index``, when the caller has them already.
        stats: filled with rounds / depth / scanned counts when given.

    Returns:
        ``(scores, positions)`` float32 / int64 ``(nq, k)``, padded with ``-inf`` / ``-1``.
    """
    stats = stats if stats is not None else AnnStats()
    params = ann_params(index) if params is None else params
    if weights is None:  # cosine: FAISS's own ranking is the answer, already sorted
        fetch = k
        while True:
            stats.rounds, stats.max_depth = stats.rounds + 1, fetch
            cos, cand = _search(index, unit_q, fetch, params)
            pos = lookup(cand)
            if (pos >= 0).all():
                return cos[:, :k], pos[:, :k]
            if not ((pos < 0) & (cand >= 0)).any():
                return np.where(pos >= 0, cos, -np.inf).astype(np.float32)[:, :k], pos[:, :k]
            # Removed documents (HNSW tombstones) took places: drop them, fetch deeper to refill.
            s, p = _select(np.where(pos >= 0, cos, -np.inf).astype(np.float32), pos, k)
            if (p[:, -1] >= 0).all() or (cand[:, -1] < 0).any() or fetch >= index.ntotal:
                return s, p
            fetch = min(2 * fetch, index.ntotal)
    cos, cand = _search(index, unit_q, depth, params)
    return rerank(cos, cand, unit_q, k, weights, lookup, depth=depth, order=order,
                  band_start=band_start, trust_depth=trust_depth, stats=stats)  # fmt: skip


def rerank(
    cos: np.ndarray,
    cand: np.ndarray,
    unit_q: np.ndarray,
    k: int,
    weights: np.ndarray,
    lookup: IdLookup,
    *,
    depth: int,
    order: WeightOrder | None = None,
    band_start: int = 0,
    trust_depth: int | None = None,
    stats: AnnStats | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The stage of :func:`adaptive_search` after the index search, for any source of cosine
    candidates (the FAISS index, or PostgreSQL's HNSW index in :mod:`normrank.backends.pgvector`):
    ``cos`` / ``cand`` ``(nq, depth)`` are the best cosines per query and their ids (padded with
    ids ``-1``); the other arguments are :func:`adaptive_search`'s. ``stats.widened`` counts the
    queries of a batch that scanned past the first chunk."""
    stats = stats if stats is not None else AnnStats()
    if unit_q.shape[0] == 1:
        return _search_one(
            cos, cand, unit_q, k, weights, lookup, depth, order, band_start, trust_depth, stats
        )
    stats.rounds, stats.max_depth = 1, depth
    pos = lookup(cand)
    valid = pos >= 0
    safe = np.maximum(pos, 0)
    # FAISS pads with -FLT_MAX: zero those before multiplying so nothing overflows.
    rescored = np.where(valid, np.where(valid, cos, 0) * weights[safe], -np.inf).astype(np.float32)
    top_s, top_p = _select(rescored, pos, k)
    if order is None:
        return top_s, top_p

    n = weights.size
    w_sorted, neg_w, w_min = order.sorted_weights(weights)
    c_last = cos[:, min(depth, max(k, trust_depth or depth)) - 1].astype(np.float64)
    exhausted = cand[:, -1] < 0  # the index had fewer than `depth` candidates to give
    # Weight rank of each candidate: a candidate met again in the scan must not count twice.
    cand_rank = np.where(valid, order.rank[safe], n)
    heaps = _BatchHeaps(top_s, top_p, cand_rank)
    active = np.arange(unit_q.shape[0])
    scanned = 0
    while True:
        need = scan_needed(heaps.kth(active), c_last[active], neg_w, w_min)
        done = (need <= scanned) | exhausted[active]
        active, need = active[~done], need[~done]
        if not active.size:
            return heaps.result()
        if scanned and not stats.widened:  # past the first chunk: these queries scan on
            stats.widened = int(active.size)
        # One query jumps straight to what its bound needs after a first chunk; a batch grows
        # its chunks (x2) so that a few deep queries do not make every query scan deep.
        cap = band_start if scanned == 0 else (n if active.size == 1 else _GROWTH * scanned)
        stop = int(min(n, need.max(), max(cap, k, scanned + 1)))
        # A query whose bound falls inside the chunk scans only that far (rounded up to whole
        # segments) and is done: its k-th score can only rise, its need only fall. Deepest
        # first, so that each segment's queries are a prefix (one BLAS call per segment).
        ends = np.minimum(stop, -(-need // _SEGMENT) * _SEGMENT)
        by_depth = np.argsort(-ends, kind="stable")
        active, ends = active[by_depth], ends[by_depth]
        q = unit_q[active]
        vecs = order.vectors(stop)
        lo = scanned
        for hi in np.unique(ends):
            m = int(np.searchsorted(-ends, -hi, side="right"))  # queries scanning to hi or past
            # A few queries: FAISS's SIMD row kernel beats a BLAS matrix-vector product; more:
            # the BLAS FAISS itself uses (topk.py).
            cos_block = (
                inner_products_small(q[:m], vecs[lo:hi])
                if m < SMALL_NQ
                else inner_products(q[:m], vecs[lo:hi])
            )
            heaps.add(active[:m], cos_block, w_sorted[lo:hi], order.order[lo:hi], lo)
            stats.rounds += 1
            lo = int(hi)
        active = active[ends == stop]
        scanned = stop
        stats.max_scanned = max(stats.max_scanned, scanned)


class _BatchHeaps:
    """One FAISS min-heap of the ``k`` best per query of a batch, kept across the scan's blocks,
    filled by the compiled kernel (:func:`normrank.search.kernels.heap_add_scanned`: weight multiplied
    in, candidates skipped) or, without numba, by a numpy multiply and FAISS's ``addn``."""

    def __init__(self, top_s: np.ndarray, top_p: np.ndarray, cand_rank: np.ndarray) -> None:
        nq, k = top_s.shape
        self.vals = np.empty((nq, k), dtype=np.float32)
        self.ids = np.empty((nq, k), dtype=np.int64)
        heap = self._heap(self.vals, self.ids)
        heap.heapify()
        top_s = np.ascontiguousarray(top_s, dtype=np.float32)
        heap.addn_with_ids(k, faiss.swig_ptr(top_s), faiss.swig_ptr(np.ascontiguousarray(top_p)), k, 0, nq)
        self.cand_rank = np.ascontiguousarray(cand_rank, dtype=np.int64)

    @staticmethod
    def _heap(vals: np.ndarray, ids: np.ndarray) -> faiss.float_minheap_array_t:
        heap = faiss.float_minheap_array_t()  # a min-heap keeps the k largest
        heap.nh, heap.k = vals.shape
        heap.val, heap.ids = faiss.swig_ptr(vals), faiss.swig_ptr(ids)
        return heap

    def kth(self, rows: np.ndarray) -> np.ndarray:
        """The k-th best score so far of each query in ``rows`` (``-inf`` while a heap has room)."""
        top = self.vals[rows, 0]
        return np.where(self.ids[rows, 0] < 0, -np.inf, top)

    def add(self, rows: np.ndarray, cos: np.ndarray, w: np.ndarray, doc_pos: np.ndarray, j0: int) -> None:
        """Add the scanned documents ``j0 ..`` in weight order (cosines ``cos``, one row per
        query of ``rows``; weights ``w``, storage positions ``doc_pos``)."""
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        w = np.ascontiguousarray(w, dtype=np.float32)
        doc_pos = np.ascontiguousarray(doc_pos, dtype=np.int64)
        if heap_add_scanned(self.vals, self.ids, rows, cos, w, doc_pos, j0, self.cand_rank):
            return  # numba present: done; else the numpy + FAISS path below
        block = (cos * w).astype(np.float32, copy=False)
        rank = self.cand_rank[rows]
        seen = (rank >= j0) & (rank < j0 + block.shape[1])
        r, c = np.nonzero(seen)
        block[r, rank[r, c] - j0] = -np.inf
        vals, ids = self.vals[rows], self.ids[rows]  # a contiguous copy of these heaps
        self._heap(vals, ids).addn_with_ids(
            block.shape[1], faiss.swig_ptr(block), faiss.swig_ptr(doc_pos), 0, 0, rows.size
        )
        self.vals[rows], self.ids[rows] = vals, ids

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, positions)`` best first; slots never filled are ``-inf`` / ``-1``."""
        self._heap(self.vals, self.ids).reorder()
        self.vals[self.ids < 0] = -np.inf
        return self.vals, self.ids


def _top_one(scores: np.ndarray, pos: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` of one query's candidates, best first (equal scores keep candidate order);
    padded to ``k`` with ``-inf`` / ``-1``, as are non-finite scores and unknown positions."""
    top = np.argsort(-scores, kind="stable")[:k]
    s, p = scores[top], pos[top]
    if s.size < k:
        s = np.concatenate([s, np.full(k - s.size, -np.inf, dtype=np.float32)])
        p = np.concatenate([p, np.full(k - p.size, -1, dtype=np.int64)])
    bad = ~np.isfinite(s) | (p < 0)
    if bad.any():
        s, p = np.where(bad, -np.inf, s).astype(np.float32), np.where(bad, -1, p)
    return s, p


def _search_one(
    cos: np.ndarray,
    cand: np.ndarray,
    unit_q: np.ndarray,
    k: int,
    weights: np.ndarray,
    lookup: IdLookup,
    depth: int,
    order: WeightOrder | None,
    band_start: int,
    trust_depth: int | None,
    stats: AnnStats,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`adaptive_search` for one query (the latency case), on 1-D arrays and scalars: the
    same candidates, bound, chunks and merge as the batch loop, in about a third of its numpy
    calls. numpy's fixed cost per call, paid with caches just emptied by the index search, is
    most of what a single query adds to the index's own time."""
    stats.rounds, stats.max_depth = 1, depth
    cos, cand = cos[0], cand[0]
    pos = lookup(cand)
    q = np.ascontiguousarray(unit_q[0], dtype=np.float32)
    if order is not None and order.quantized is not False and pos.size >= k:
        fused = quantized_scan.fused_scan(q.size)
        if fused is not None:  # the common case, all in one compiled call
            trust = min(depth, max(k, trust_depth or depth))
            scan = quantized_scan.FusedScan(fused, order, weights, k, trust, band_start)
            got = scan(q, cos, pos)
            if got is not None:
                stats.rounds = int(scan.out[0])
                stats.max_scanned = max(stats.max_scanned, int(scan.out[1]))
                return got[0][None], got[1][None]
    if pos.size >= k and pos.min() >= 0:  # every candidate a live document (no pads, no tombstones)
        rescored = cos * weights[pos]
        top = np.argsort(-rescored, kind="stable")[:k]
        s, p = rescored[top], pos[top]
        if not (math.isfinite(s[0]) and math.isfinite(s[-1])):  # overflow; NaN sorts last: pad as _top_one
            s, p = _top_one(rescored, pos, k)
        seen = order.rank[pos] if order is not None else None
    else:  # FAISS pads with -FLT_MAX: zero those before multiplying so nothing overflows
        valid = pos >= 0
        rescored = np.where(valid, np.where(valid, cos, 0) * weights[np.maximum(pos, 0)], -np.inf)
        rescored = rescored.astype(np.float32)
        seen = order.rank[pos[valid]] if order is not None else None
        s, p = _top_one(rescored, pos, k)
    if order is None or (cand.size and cand[-1] < 0):  # no scan, or the index gave all it had
        return s[None], p[None]

    c_last = float(cos[min(depth, max(k, trust_depth or depth)) - 1])
    w_sorted, neg_w, w_min = order.sorted_weights(weights)
    n = neg_w.size
    seen = np.sort(seen)  # weight ranks of the re-scored candidates: met again, they count once
    scanned = 0
    while True:
        kth = float(s[-1])
        if c_last > 0:  # scan_needed for one query
            need = int(neg_w.searchsorted(-(kth / c_last), side="left"))
        else:
            need = 0 if kth >= c_last * w_min else n
        if need <= scanned:
            return s[None], p[None]
        stop = int(min(n, need, max(band_start if scanned == 0 else n, k, scanned + 1)))
        codes = order.codes(stop, q.size) if order.quantized is not False else None
        if codes is not None:
            # Rows whose int8 upper bound beats the k-th score, then scored exactly as below by
            # the same FAISS call on the gathered rows: the fp32 branch's scores, bit for bit.
            # Candidates met again are skipped: they count once.
            rows = quantized_scan.candidates(q, codes, w_sorted[scanned:stop], scanned, stop, kth, seen)
            chunk = np.empty(rows.size, dtype=np.float32)
            if rows.size:
                vecs = order.vectors(stop).take(rows, axis=0)
                faiss.fvec_inner_products_ny(
                    faiss.swig_ptr(chunk), faiss.swig_ptr(q), faiss.swig_ptr(vecs), q.size, rows.size
                )
                chunk *= w_sorted[rows]
        else:
            rows = None
            vecs = order.vectors(stop)[scanned:stop]
            chunk = np.empty(stop - scanned, dtype=np.float32)
            faiss.fvec_inner_products_ny(
                faiss.swig_ptr(chunk), faiss.swig_ptr(q), faiss.swig_ptr(vecs), q.size, chunk.size
            )
            chunk *= w_sorted[scanned:stop]
            lo, hi = seen.searchsorted((scanned, stop))
            if hi > lo:
                chunk[seen[lo:hi] - scanned] = -np.inf
        keep = (chunk > kth).nonzero()[0]
        if keep.size:
            merged_s = np.concatenate([s, chunk[keep]])
            merged_p = np.concatenate([p, order.order[scanned + keep if rows is None else rows[keep]]])
            top = np.argsort(-merged_s, kind="stable")[:k]
            s, p = merged_s[top], merged_p[top]
        scanned = stop
        stats.rounds += 1
        stats.max_scanned = max(stats.max_scanned, scanned)
