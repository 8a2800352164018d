"""The whole state of a :class:`~normrank.NormIndex` as one value: what the index hands
persistence to save, and what persistence (or :func:`normrank.wrap.state_from_faiss`) hands back
to build an index from. Nothing else crosses between them."""

from __future__ import annotations

from dataclasses import dataclass, field

import faiss
import numpy as np

__all__ = ["IndexState"]


@dataclass(frozen=True)
class IndexState:
    """Everything a NormIndex is, besides its lock and search caches.

    Attributes:
        faiss_index: the FAISS inner-product index over unit vectors, taking ``add_with_ids``
            (an id map, or IVF with a hash-table direct map).
        ids: int64 ``(n,)`` live ids in storage order.
        norms: float32 ``(n,)`` raw norms aligned with ``ids``.
        weights: float32 ``(n,)`` custom weights (``set_weights``), or None to score by norms.
        tombstones: int64 ids removed from an index that cannot delete (HNSW): their vectors
            stay in ``faiss_index`` and searches skip them.
        next_id: the first default id of the next ``add`` (never a removed id).
        alpha, k_factor, ann, n_tail, max_depth: search options (see ``NormIndex``).
        factory: the ``faiss.index_factory`` string the index was built from, if known.
    """

    faiss_index: faiss.Index
    ids: np.ndarray
    norms: np.ndarray
    weights: np.ndarray | None = None
    tombstones: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    next_id: int = 0
    alpha: float = 0.0
    k_factor: int = 10
    factory: str | None = None
    ann: str = "adaptive"
    n_tail: int | None = None
    max_depth: int | None = None

    @classmethod
    def empty(cls, faiss_index: faiss.Index, **options: object) -> IndexState:
        """The state of an index holding no vectors."""
        ids = np.empty(0, dtype=np.int64)
        return cls(faiss_index, ids, np.empty(0, dtype=np.float32), **options)  # type: ignore[arg-type]
