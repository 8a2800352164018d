"""FAISS id -> storage position, vectorised: how a search turns the ids an index returns into
the positions its weights and ids are stored by (:class:`IdLookup`, one per index state)."""

from __future__ import annotations

import numpy as np

from normrank.search.doc_ids import DocIds

__all__ = ["IdLookup"]


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

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        if self.identity:
            return np.where((ids >= 0) & (ids < self.n), ids, -1)
        if self._dense is not None:
            return self._dense.take(ids + 1, mode="clip").astype(np.int64)
        out = np.full(ids.shape, -1, dtype=np.int64)
        if not self.n:
            return out
        at = np.minimum(np.searchsorted(self._sorted, ids), self.n - 1)
        hit = (self._sorted[at] == ids) & (ids >= 0)
        out[hit] = self._order[at[hit]]
        return out

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self._dense, self._sorted, self._order) if a is not None)
