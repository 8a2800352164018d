"""``NormIndex``: any FAISS inner-product index over unit vectors, plus the raw norms beside it,
searched by ``cos(q, d) * ||d||**alpha`` (paper: "Optimization Dynamics Imprint Semantic
Specificity in Contrastive Embedding Norms", §4.3, §5.3)."""

from __future__ import annotations

import os
import threading
from dataclasses import replace

import faiss
import numpy as np
from numpy.typing import ArrayLike

from normrank.errors import (
    DuplicateIdError,
    IndexStateError,
    InvalidInputError,
    UnknownIdError,
    UnsupportedIndexError,
)
from normrank.faiss_info import inner_index, with_ids
from normrank.index_state import IndexState, check_state
from normrank.persistence import load_state, save_state
from normrank.search_cache import SearchCache
from normrank.searcher import search_args, search_into
from normrank.validation import (
    as_alpha,
    as_id_list,
    as_ids,
    as_k_factor,
    as_one_id,
    as_vectors,
    as_weights,
    split_norms,
)
from normrank.wrap import new_faiss_index, state_from_faiss

__all__ = ["NormIndex"]


class NormIndex:
    """Exact norm-aware search over a FAISS index: ``score(q, d) = cos(q, d) * ||d||**alpha``.

    Vectors are added raw. Their unit directions go into an inner-product FAISS index and their
    norms into a float32 array beside it; ``alpha`` is applied at search time and may differ per
    query. ``alpha < 0`` discounts generic, high-norm documents, ``alpha = 0`` is cosine and
    ``alpha = 1`` the raw dot product.

    Construction:
        ``NormIndex(dim, alpha=0.0, factory="Flat")`` builds ``faiss.index_factory(dim, factory,
        METRIC_INNER_PRODUCT)`` ("Flat", "IVF1024,Flat", "HNSW32", ...);
        ``NormIndex(faiss_index, alpha=...)`` wraps an empty inner-product index you built;
        ``NormIndex.from_faiss(filled_index)`` wraps one that already holds vectors.

    Exactness: a flat index ranks exactly (numpy brute force's scores). On IVF / HNSW the
    default ``ann="adaptive"`` re-scores the index's cosine candidates and scans documents in
    decreasing weight order until a bound proves the top-k (:mod:`normrank.ann`): exact up to
    what the index returns at its nprobe / efSearch. ``n_tail`` sets the scan's first chunk and
    ``max_depth`` caps the cosine depth; ``ann="overfetch"`` re-scores a fixed
    ``k * k_factor`` candidates (faster, recall not guaranteed; benchmarks/results/speed.md).

    Results follow FAISS: ``(scores, ids)`` float32 / int64 ``(nq, k)``, padded with ``-inf`` /
    ``-1`` when fewer than ``k`` documents exist; equal scores in any order; memory bounded.

    Thread safety: all methods may be called from several threads; a search sees the index
    either before or after a concurrent ``add`` / ``remove``, never in between.
    """

    def __init__(
        self,
        dim: int | faiss.Index,
        alpha: float = 0.0,
        *,
        factory: str | None = "Flat",
        k_factor: int = 10,
        ann: str = "adaptive",
        n_tail: int | None = None,
        max_depth: int | None = None,
        device: str | None = None,
    ) -> None:
        index, factory = new_faiss_index(dim, factory)
        self.device = _checked_device(device)
        self._lock = threading.RLock()
        options = {"alpha": alpha, "k_factor": k_factor, "factory": factory}
        self._install(
            IndexState.empty(with_ids(index), ann=ann, n_tail=n_tail, max_depth=max_depth, **options)
        )

    @classmethod
    def from_state(cls, state: IndexState, *, device: str | None = None) -> NormIndex:
        """An index holding ``state`` (as :meth:`to_state` returns it and persistence reads it).

        The FAISS index is used as is, not copied. Raises an ``InvalidInputError`` for options
        out of range and ids that repeat.
        """
        out = cls.__new__(cls)
        out._lock = threading.RLock()
        out.device = _checked_device(device)
        out._install(state)
        return out

    def to_state(self) -> IndexState:
        """This index's state; arrays and the FAISS index are shared, not copied (read only)."""
        with self._lock:
            tombstones = np.array(sorted(self._tombstones), dtype=np.int64)
            return IndexState(
                self._index, self._ids, self._norms, self._weights, tombstones, self._next_id,
                self.alpha, self.k_factor, self.factory, self.ann, self.n_tail, self.max_depth,
            )  # fmt: skip

    def _install(self, state: IndexState) -> None:
        """Take ``state`` as this index's (checked first, so nothing is half-set)."""
        check_state(state)
        self.alpha = state.alpha
        self.k_factor = state.k_factor
        self.ann, self.n_tail, self.max_depth = state.ann, state.n_tail, state.max_depth
        ids = np.asarray(state.ids, dtype=np.int64)
        pos = dict(zip(ids.tolist(), range(ids.size), strict=True))
        self._index = state.faiss_index
        # The index inside the id map, downcast once (each downcast costs microseconds a query).
        # An IndexFlat here is exact storage whose rows align with insertion order.
        self._inner = inner_index(state.faiss_index)
        self.factory = state.factory
        self._ids, self._pos = ids, pos
        self._norms = np.asarray(state.norms, dtype=np.float32)
        self._weights = None if state.weights is None else np.asarray(state.weights, dtype=np.float32)
        self._tombstones: set[int] = set(np.asarray(state.tombstones).tolist())  # removed, kept (HNSW)
        derived = max([int(ids.max()) + 1 if ids.size else 0, *(t + 1 for t in self._tombstones)])
        self._next_id = max(int(state.next_id), derived)
        self._cache = SearchCache()

    # -- properties ---------------------------------------------------------------------------

    @property
    def alpha(self) -> float:
        """Default exponent, used when ``search`` is called without ``alpha``."""
        return self._alpha

    @alpha.setter
    def alpha(self, value: float) -> None:
        a = as_alpha(value, 1)
        self._alpha = float(a[0])

    @property
    def k_factor(self) -> int:
        """ANN indexes fetch ``k * k_factor`` cosine candidates before exact re-scoring."""
        return self._k_factor

    @k_factor.setter
    def k_factor(self, value: int) -> None:
        self._k_factor = as_k_factor(value)

    @property
    def dim(self) -> int:
        return int(self._index.d)

    @property
    def ntotal(self) -> int:
        return int(self._ids.shape[0])

    def __len__(self) -> int:
        return self.ntotal

    def __repr__(self) -> str:
        return (
            f"NormIndex(dim={self.dim}, ntotal={self.ntotal}, alpha={self.alpha}, "
            f"factory={self.factory!r}, exact={self.is_exact})"
        )

    @property
    def faiss_index(self) -> faiss.Index:
        """The wrapped FAISS index (unit vectors). Read it; changing it directly desynchronises."""
        return self._index

    @property
    def is_exact(self) -> bool:
        """True when search ranks exactly (flat storage); False for ANN indexes."""
        return isinstance(self._inner, faiss.IndexFlat)

    @property
    def is_trained(self) -> bool:
        return bool(self._index.is_trained)

    @property
    def ids(self) -> np.ndarray:
        """int64 ids in storage order (a copy)."""
        with self._lock:
            return self._ids.copy()

    @property
    def norms(self) -> np.ndarray:
        """float32 raw norms ``||d||`` aligned with :attr:`ids` (a copy)."""
        with self._lock:
            return self._norms.copy()

    @property
    def weights(self) -> np.ndarray:
        """The per-document values that ``alpha`` exponentiates: the norms unless set otherwise."""
        with self._lock:
            return (self._norms if self._weights is None else self._weights).copy()

    def _positions(self, ids: np.ndarray) -> np.ndarray:
        missing = [int(i) for i in ids if int(i) not in self._pos]
        if missing:
            raise UnknownIdError(f"unknown ids: {missing[:10]}" + (" ..." if len(missing) > 10 else ""))
        return np.fromiter((self._pos[int(i)] for i in ids), dtype=np.int64, count=len(ids))

    def norm_of(self, ids: ArrayLike) -> np.ndarray:
        """Raw norms of ``ids`` (float32); raises :class:`UnknownIdError` for an id not present."""
        arr = as_id_list(ids)
        with self._lock:
            return self._norms[self._positions(arr)]

    def __contains__(self, id_: object) -> bool:
        return isinstance(id_, int | np.integer) and int(id_) in self._pos

    # -- mutation -----------------------------------------------------------------------------

    def train(self, x: ArrayLike) -> None:
        """Train the FAISS index (IVF, PQ, ...) on the unit directions of raw vectors ``x``."""
        unit, _ = split_norms(as_vectors(x, self.dim))
        with self._lock:
            if self.ntotal:
                raise IndexStateError("train before adding: the index already holds vectors")
            try:
                self._index.train(unit)
            except RuntimeError as e:
                raise IndexStateError(f"FAISS could not train the index: {e}") from e

    def add(
        self, x: ArrayLike, ids: ArrayLike | None = None, *, weights: ArrayLike | None = None
    ) -> np.ndarray:
        """Add raw vectors ``x`` (n, dim); returns their int64 ids.

        ``ids`` default to consecutive integers after the largest id so far. An id already in
        the index raises :class:`DuplicateIdError` (remove it first). When custom weights were
        set with :meth:`set_weights`, ``weights`` for the new rows are required.
        Nothing is added unless the whole batch is valid.
        """
        vectors = as_vectors(x, self.dim)
        n = vectors.shape[0]
        unit, norms = split_norms(vectors)
        w = None if weights is None else as_weights(weights, n)
        with self._lock:
            new_ids = (
                np.arange(self._next_id, self._next_id + n, dtype=np.int64) if ids is None else as_ids(ids, n)
            )
            present = [int(i) for i in new_ids if int(i) in self._pos or int(i) in self._tombstones]
            if present:
                raise DuplicateIdError(f"ids already in the index: {present[:10]}")
            if self._weights is not None and w is None and n:
                raise InvalidInputError("this index has custom weights: pass weights= for the new rows")
            if n == 0:
                return new_ids
            if not self._index.is_trained:
                raise IndexStateError("the FAISS index is not trained: call train(x) first")
            try:
                self._index.add_with_ids(unit, new_ids)
            except RuntimeError as e:
                raise IndexStateError(f"FAISS refused the vectors: {e}") from e
            start = self.ntotal
            self._ids = np.concatenate([self._ids, new_ids])
            self._norms = np.concatenate([self._norms, norms])
            if self._weights is not None:
                self._weights = np.concatenate([self._weights, w if w is not None else norms])
            self._pos.update(zip(new_ids.tolist(), range(start, start + n), strict=True))
            self._next_id = max(self._next_id, int(new_ids.max()) + 1)
            self._changed()
            return new_ids

    def remove(self, ids: ArrayLike) -> int:
        """Remove ``ids``; returns how many were removed. Unknown ids raise and remove nothing."""
        arr = as_ids(ids)
        with self._lock:
            self._positions(arr)  # raises UnknownIdError before anything changes
            if not arr.size:
                return 0
            try:
                removed = self._index.remove_ids(faiss.IDSelectorBatch(arr))
            except RuntimeError:
                # HNSW cannot delete: leave the vectors in the graph and skip them in results.
                self._tombstones.update(arr.tolist())
                removed = arr.size
            if removed != arr.size:
                raise IndexStateError(f"FAISS removed {removed} of {arr.size} ids; the index is inconsistent")
            keep = ~np.isin(self._ids, arr)
            self._ids = self._ids[keep]
            self._norms = self._norms[keep]
            if self._weights is not None:
                self._weights = self._weights[keep]
            self._pos = dict(zip(self._ids.tolist(), range(self._ids.size), strict=True))
            self._changed()
            return int(arr.size)

    def reset(self) -> None:
        """Remove everything (keeps training)."""
        with self._lock:
            self._index.reset()
            empty = IndexState.empty(self._index)
            self._install(replace(self.to_state(), ids=empty.ids, norms=empty.norms, weights=None,
                                  tombstones=empty.tombstones, next_id=0))  # fmt: skip

    def set_weights(self, weights: ArrayLike, ids: ArrayLike | None = None) -> None:
        """Score by ``cos * w**alpha`` with your own per-document ``w`` (e.g. the probe's heat).

        ``weights`` align with ``ids`` (default: :attr:`ids` order) and must cover every document.
        """
        with self._lock:
            if ids is None:
                w = as_weights(weights, self.ntotal)
            else:
                arr = as_ids(ids)
                if arr.size != self.ntotal:
                    raise InvalidInputError(f"weights must cover all {self.ntotal} documents, got {arr.size}")
                w = np.empty(self.ntotal, dtype=np.float32)
                w[self._positions(arr)] = as_weights(weights, arr.size)
            self._weights = w
            self._changed()

    def clear_weights(self) -> None:
        """Score by the norms again."""
        with self._lock:
            self._weights = None
            self._changed()

    def _changed(self) -> None:
        self._cache = SearchCache()

    # -- search -------------------------------------------------------------------------------

    def _base(self) -> np.ndarray:
        return self._norms if self._weights is None else self._weights

    def _weight_for(self, alpha: float) -> np.ndarray | None:  # (for tests: what search uses)
        return self._cache.power(self._base(), alpha)

    def _weight_order(self, alpha: float):
        return self._cache.order(self._base(), alpha, lambda p: self._index.reconstruct_batch(self._ids[p]))

    def search(
        self,
        q: ArrayLike,
        k: int,
        *,
        alpha: float | ArrayLike | None = None,
        k_factor: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` documents by ``cos(q, d) * ||d||**alpha``.

        Args:
            q: queries ``(nq, dim)`` (or one ``(dim,)`` vector); their norms do not matter.
            k: results per query.
            alpha: exponent for this call (default :attr:`alpha`): a scalar or one per query,
                within [-16, 16].
            k_factor: ANN over-fetch for this call (default :attr:`k_factor`); ignored when exact.

        Returns:
            ``(scores, ids)``: float32 and int64 ``(nq, k)``, best first; ``-inf`` / ``-1`` pad
            rows when fewer than ``k`` documents exist.
        """
        unit_q, k, alphas, factor = search_args(q, k, alpha, k_factor, self.dim, self.alpha, self.k_factor)
        scores = np.full((unit_q.shape[0], k), -np.inf, dtype=np.float32)
        ids = np.full(scores.shape, -1, dtype=np.int64)
        with self._lock:
            if self.ntotal and unit_q.shape[0]:
                search_into(
                    scores, ids, unit_q, k, alphas, index=self._index, inner=self._inner,
                    doc_ids=self._ids, base=self._base(), n_removed=len(self._tombstones),
                    cache=self._cache, factor=factor, ann=self.ann, n_tail=self.n_tail,
                    max_depth=self.max_depth, device=self.device,
                )  # fmt: skip
        return scores, ids

    # -- reconstruction -----------------------------------------------------------------------

    def reconstruct(self, id_: int) -> np.ndarray:
        """The raw vector of ``id_`` (unit direction times norm; float32 rounding ~1e-7)."""
        with self._lock:
            one = as_one_id(id_)
            pos = int(self._positions(np.array([one]))[0])
            try:
                unit = self._index.reconstruct(one)
            except RuntimeError as e:
                raise UnsupportedIndexError(f"this FAISS index cannot reconstruct vectors: {e}") from e
            return (unit * self._norms[pos]).astype(np.float32)

    # -- wrapping an existing index -----------------------------------------------------------

    @classmethod
    def from_faiss(
        cls, index: faiss.Index, *, norms: ArrayLike | None = None, alpha: float = 0.0, k_factor: int = 10
    ) -> NormIndex:
        """Wrap an index that already holds vectors (see :func:`normrank.wrap.state_from_faiss`)."""
        return cls.from_state(state_from_faiss(index, norms=norms, alpha=alpha, k_factor=k_factor))

    # -- persistence --------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> None:
        """Save to directory ``path`` atomically, no pickle (layout: :mod:`normrank.persistence`).

        A crash or a failed write (disk full, read-only) leaves the previous save loadable."""
        with self._lock:
            save_state(self.to_state(), path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> NormIndex:
        """Load a directory written by :meth:`save`, verifying sizes, checksums and contents;
        :class:`~normrank.errors.CorruptIndexError` for a corrupt or tampered directory."""
        return cls.from_state(load_state(path))  # load_state ran check_state: nothing left to refuse


def _checked_device(device: str | None) -> str | None:
    if device is not None:
        from normrank.backends.torch_flat import resolve_device

        resolve_device(device)  # refuse cuda without CUDA now, not at the first search
    return device
