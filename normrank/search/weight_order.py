"""The weight order: the documents by decreasing weight for one sign of alpha, with what a
weight-order scan reads of it and keeps (a 1/64 sample and the head of each weighting's
weights, a contiguous copy of the first rows, their int8 scan codes), and how far a scan must
read before the bound holds (:func:`scan_needed`, :meth:`WeightOrder.need`; the bound itself is
:mod:`normrank.search.bound`'s)."""

from __future__ import annotations

import weakref

import faiss
import numpy as np

from normrank.search.bound import cosine_slack, unseen_can_beat, weight_limit
from normrank.search.scan_codes import CHUNK, BytePool, QueryCodes, ScanCodes
from normrank.validation import mapped_empty

__all__ = ["WeightOrder", "scan_needed"]

# Every this many weight ranks one weight is kept per weighting (a 1/64 sample: what the
# binary search of the bound needs besides one block of 64 weights computed at a time).
_STRIDE = 64
# The weights of this many first ranks (at most a quarter of the documents) are kept in order per
# weighting (<= 32 KB): the rows every scan reads first get their weights by a slice, not a
# gather (~3-9 us per 2.4k rows).
_HEAD = 8192
_NO_RANKS = np.empty(0, dtype=np.int64)


def scan_needed(kth: np.ndarray, trusted_cosine: np.ndarray, neg_w: np.ndarray, dim: int) -> np.ndarray:
    """How many documents, in decreasing weight order, a query must scan before no unseen one
    can beat its k-th score ``kth`` (:func:`normrank.search.bound.unseen_can_beat`, the
    ``trusted_cosine``, vectors of length ``dim``): a binary search of
    :func:`~normrank.search.bound.weight_limit` in ``neg_w``, the negated sorted weights; where
    the trusted cosine plus its margin is not positive the bound does not shrink as the scan
    goes, so it is 0 or all ``n``."""
    n = neg_w.size
    kth = np.asarray(kth, dtype=np.float64)
    trusted_cosine = np.asarray(trusted_cosine, dtype=np.float64)
    if n == 0:
        return np.zeros(kth.shape, dtype=np.int64)
    need = np.where(unseen_can_beat(kth, trusted_cosine, -neg_w[0], -neg_w[-1], dim), n, 0)
    up = trusted_cosine + cosine_slack(dim) > 0
    if up.any():
        need[up] = np.searchsorted(neg_w, -weight_limit(kth[up], trusted_cosine[up], dim), side="left")
    return need


class WeightOrder:
    """The documents in decreasing order of one weighting's sign (``positions``: their storage
    positions, by decreasing weight), with
    their rows read through ``rows`` (:mod:`normrank.search.rows`, or anything with
    ``gather(positions) -> (m, d) float32``). ``ascending``: positions by ascending base (shared
    by both signs: ``sign > 0`` reads it backwards, a view). ``scan_codes_bytes``: the budget of the
    first rows' int8 scan codes single queries read (:mod:`normrank.search.scan_codes`; 0: none),
    ``prefix_bytes`` that of their float32 copy: bytes, or a :class:`~normrank.search.scan_codes.BytePool`
    the other sign's order draws from too."""

    def __init__(
        self,
        ascending: np.ndarray,
        sign: int,
        rows,
        prefix_bytes: int | BytePool = 0,
        scan_codes_bytes: int | BytePool = 0,
    ) -> None:
        self.positions = ascending if sign < 0 else ascending[::-1]
        self.rows = rows
        self._codes_pool = (
            scan_codes_bytes if isinstance(scan_codes_bytes, BytePool) else BytePool(scan_codes_bytes)
        )
        self._scan_codes: ScanCodes | None = None
        self._by_weights: dict[int, tuple[weakref.ref, np.ndarray, np.ndarray]] = {}
        # A contiguous float32 copy of the first rows in this order, grown (doubling) as far as
        # scans read, never past ``prefix_bytes``: the scan's hot rows in one sequential run
        # (random rows straight from FAISS's storage cost ~4x more a row with the caches the
        # index search leaves). 0: none.
        self._prefix_pool = prefix_bytes if isinstance(prefix_bytes, BytePool) else BytePool(prefix_bytes)
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
        got = self._by_weights.get(id(weights))
        if got is None or got[0]() is not weights:  # the id of a freed array can be reused
            if len(self._by_weights) >= 8:
                self._by_weights.pop(next(iter(self._by_weights)))
            sample = -weights[self.positions[::_STRIDE]].astype(np.float64)
            head = weights.take(self.positions[: min(_HEAD, self.positions.size // 4)])
            got = self._by_weights[id(weights)] = (weakref.ref(weights), sample, head)
        return got[1], got[2]

    def weights_at(self, weights: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """The weights of the documents at ranks ``lo .. hi - 1`` in this order."""
        head = self._derived(weights)[1]
        if hi <= head.size:
            return head[lo:hi]
        return weights.take(self.positions[lo:hi])

    def w_min(self, weights: np.ndarray) -> float:
        return float(weights[self.positions[-1]]) if self.positions.size else 0.0

    def w_max(self, weights: np.ndarray) -> float:
        return float(weights[self.positions[0]]) if self.positions.size else 0.0

    def need(self, weights: np.ndarray, kth: np.ndarray, trusted_cosine: np.ndarray, dim: int) -> np.ndarray:
        """:func:`scan_needed` of each query (arrays), with the weights in this order computed
        only where the binary search looks: a 1/64 sample, then one block of 64 per query."""
        n = self.positions.size
        kth = np.asarray(kth, dtype=np.float64)
        trusted_cosine = np.asarray(trusted_cosine, dtype=np.float64)
        need = np.where(
            unseen_can_beat(kth, trusted_cosine, self.w_max(weights), self.w_min(weights), dim), n, 0
        )
        up = np.flatnonzero(trusted_cosine + cosine_slack(dim) > 0)
        if up.size:
            x = weight_limit(kth[up], trusted_cosine[up], dim)  # first rank whose weight is <= x
            i = np.searchsorted(self._sample(weights), -x, side="left")
            lo = np.maximum(i - 1, 0) * _STRIDE
            at = lo[:, None] + np.arange(_STRIDE)
            w = weights[self.positions[np.minimum(at, n - 1)]].astype(np.float64)
            above = (w > x[:, None]) & (at < n)
            need[up] = np.where(i == 0, 0, np.minimum(lo + above.sum(axis=1), n))
        return need

    def _cached(self, hi: int) -> int:
        """Grow the prefix copy towards ``hi`` rows (within its budget); how many it holds."""
        have = 0 if self._prefix is None else self._prefix.shape[0]
        if hi <= have or not self._prefix_pool.left or not self.positions.size:
            return have
        probe = self._prefix if self._prefix is not None else self._gather(0, 1)
        row_bytes = max(probe[0].nbytes, 1)
        cap = min(self.positions.size, self._prefix_pool.total // row_bytes)
        grow = min(cap, max(hi, 2 * have, 256), have + self._prefix_pool.left // row_bytes)
        if grow > have:
            if self._buffer is None:
                # Reserved whole in its own mapping, written (so resident) only as far as scans
                # read: growing it never copies, and leaves no freed blocks behind in the heap.
                self._buffer = mapped_empty((cap, probe.shape[1]), min_bytes=1 << 16)
            self._prefix_pool.take((grow - have) * row_bytes)
            self._buffer[have:grow] = self._gather(have, grow)
            self._prefix = self._buffer[:grow]
        return self._prefix.shape[0] if self._prefix is not None else 0

    def _gather(self, lo: int, hi: int) -> np.ndarray:
        if hasattr(self.rows, "ranks"):  # a source that keeps a prefix copy itself (by rank)
            return self.rows.ranks(self.positions, lo, hi)
        return self.rows.gather(self.positions[lo:hi])

    def need_one(self, weights: np.ndarray, kth: float, trusted_cosine: float, dim: int) -> int:
        """:meth:`need` of one query, on scalars (the latency case: a handful of numpy calls)."""
        n = self.positions.size
        if trusted_cosine + cosine_slack(dim) <= 0:
            return (
                n
                if unseen_can_beat(kth, trusted_cosine, self.w_max(weights), self.w_min(weights), dim)
                else 0
            )
        x = weight_limit(kth, trusted_cosine, dim)
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
                out[start - lo :] = self.rows.inner(q, self.positions[start:hi])
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
        """What :meth:`above` needs of a query to use the scan codes (None: this order has none)."""
        return QueryCodes(q) if self._codes_pool.total and self.positions.size else None

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
        int8 scan codes where they exist and ``kth`` > 0 (only the contenders' rows are read), else
        from the rows. The same ranks and the same float32 scores either way."""
        lo, hi = span
        ranks, scores = [], []
        start = lo
        if query is not None and 0 < kth < np.inf:
            if self._scan_codes is None:
                self._scan_codes = ScanCodes(q.size, self.positions.size, self._codes_pool)
            top = min(hi, self._scan_codes.grow(hi, self._rows_for_codes))
            a = lo
            found: list[np.ndarray] = []  # contenders not yet scored, in rank order
            while a < top:  # one piece per chunk of scan codes (its own scale)
                b = min(top, (a // CHUNK + 1) * CHUNK)
                w_a = float(weights[self.positions[a]])  # the piece's largest weight
                # (weights 0 from here on: nothing scores above kth > 0)
                got = self._scan_codes.contenders(query, a, b, kth / w_a) if w_a > 0 else _NO_RANKS
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
        rows = self._prefix[ranks] if ranks[-1] < have else self.rows.gather(self.positions[ranks])
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        out = np.empty(ranks.size, dtype=np.float32)
        faiss.fvec_inner_products_ny(
            faiss.swig_ptr(out), faiss.swig_ptr(q), faiss.swig_ptr(rows), q.size, ranks.size
        )
        out *= weights.take(self.positions[ranks])
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
        w = weights[self.positions]
        return w, -w.astype(np.float64), self.w_min(weights)

    @property
    def nbytes(self) -> int:
        prefix = 0 if self._prefix is None else self._prefix.nbytes
        codes = 0 if self._scan_codes is None else self._scan_codes.nbytes
        return sum(s.nbytes + h.nbytes for _, s, h in self._by_weights.values()) + prefix + codes
