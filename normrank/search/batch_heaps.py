"""The k best per query of a batch, kept across a weight-order scan's blocks: FAISS's own heaps
(``float_minheap_array_t``), offered only the scores that can enter them."""

from __future__ import annotations

import faiss
import numpy as np

__all__ = ["BatchHeaps"]


class BatchHeaps:
    """One FAISS min-heap of the ``k`` best per query of a batch, kept across the scan's blocks;
    ``cand_pos``: each query's re-scored candidates (positions), skipped when met again."""

    def __init__(self, top_s: np.ndarray, top_p: np.ndarray, cand_pos: np.ndarray) -> None:
        nq, k = top_s.shape
        self.vals = np.empty((nq, k), dtype=np.float32)
        self.ids = np.empty((nq, k), dtype=np.int64)
        heap = self._heap(self.vals, self.ids)
        heap.heapify()
        top_s = np.ascontiguousarray(top_s, dtype=np.float32)
        heap.addn_with_ids(k, faiss.swig_ptr(top_s), faiss.swig_ptr(np.ascontiguousarray(top_p)), k, 0, nq)
        # (query, candidate position) pairs as sorted keys: a scanned document met again is
        # found by one binary search.
        self._span = int(cand_pos.max(initial=-1)) + 1
        keys = np.arange(nq, dtype=np.int64)[:, None] * self._span + cand_pos
        self._cand_keys = np.sort(keys[cand_pos >= 0])

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

    def add(self, rows: np.ndarray, cos: np.ndarray, w: np.ndarray, doc_pos: np.ndarray) -> None:
        """Add scanned documents (cosines ``cos``, one row per query of ``rows``, overwritten;
        weights ``w``, positions ``doc_pos``), except each query's own candidates (already in
        its heap). Only scores above a heap's k-th can enter it, a few in a thousand on real
        embeddings: those are gathered and offered to the heaps of their queries alone, in the
        order a heap over the whole block would meet them (so the same heaps)."""
        block = np.multiply(cos, w, out=cos)
        hits = np.flatnonzero(block > self.kth(rows)[:, None])
        if not hits.size:
            return
        r, c = np.divmod(hits, block.shape[1])
        pos = doc_pos[c].astype(np.int64)
        if self._cand_keys.size:
            keys = rows[r] * self._span + np.minimum(pos, self._span - 1)
            at = np.minimum(np.searchsorted(self._cand_keys, keys), self._cand_keys.size - 1)
            fresh = (self._cand_keys[at] != keys) | (pos >= self._span)
            r, pos, hits = r[fresh], pos[fresh], hits[fresh]
            if not r.size:
                return
        # One padded row per query with hits (r is ascending: row-major order of the block).
        first = np.flatnonzero(np.concatenate(([True], r[1:] != r[:-1])))
        queries, counts = r[first], np.diff(np.append(first, r.size))
        slot = np.arange(r.size) - np.repeat(first, counts)
        vals = np.full((queries.size, int(counts.max())), -np.inf, dtype=np.float32)
        ids = np.full(vals.shape, -1, dtype=np.int64)
        row = np.repeat(np.arange(queries.size), counts)
        vals[row, slot] = block.ravel()[hits]
        ids[row, slot] = pos
        which = rows[queries]
        heap_vals, heap_ids = self.vals[which], self.ids[which]  # contiguous copies of those heaps
        self._heap(heap_vals, heap_ids).addn_with_ids(
            vals.shape[1], faiss.swig_ptr(vals), faiss.swig_ptr(ids), vals.shape[1], 0, queries.size
        )
        self.vals[which], self.ids[which] = heap_vals, heap_ids

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, positions)`` best first; slots never filled are ``-inf`` / ``-1``."""
        self._heap(self.vals, self.ids).reorder()
        self.vals[self.ids < 0] = -np.inf
        return self.vals, self.ids
