"""``NormIndex``: any FAISS inner-product index over unit vectors, plus the raw norms beside it,
searched by ``cos(q, d) * ||d||**alpha`` (paper: "Optimization Dynamics Imprint Semantic
Specificity in Contrastive Embedding Norms", §4.3, §5.3)."""

from __future__ import annotations

import os
import threading

import faiss
import numpy as np
from numpy.typing import ArrayLike

from normrank.errors import (
    CorruptIndexError,
    DuplicateIdError,
    IndexStateError,
    InvalidInputError,
    InvalidParameterError,
    NormrankError,
    UnknownIdError,
    UnsupportedIndexError,
)
from normrank.faiss_info import inner_index, with_ids
from normrank.index_state import IndexState, check_state
from normrank.persistence import load_state, save_state
from normrank.search_cache import SearchCache
from normrank.searcher import search_into
from normrank.validation import (
    as_alpha,
    as_id_list,
    as_ids,
    as_k,
    as_k_factor,
    as_vectors,
    as_weights,
    split_norms,
)
from normrank.wrap import state_from_faiss

__all__ = ["NormIndex"]

# "adaptive": grow the cosine depth until a bound proves the top-k (normrank.ann);
# "overfetch": a fixed k * k_factor candidates (fast, recall not guaranteed).


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

    Exactness: with a flat index the ranking is exact (the same scores as numpy brute force).
    With an ANN index (IVF, HNSW) the default ``ann="adaptive"`` re-scores the index's cosine
    candidates and scans documents exactly in decreasing weight order until a bound proves that
    nothing unseen can beat the k-th score (:mod:`normrank.ann`); the ranking is then exact up
    to what the ANN index returns at its nprobe / efSearch. ``n_tail`` sets the first chunk of
    that scan (default ~3% of the documents, capped by the index's own work) and ``max_depth``
    caps the cosine depth fetched. The scanned documents' unit vectors are copied once, as far
    as searches have needed (at most one copy of the index per sign of alpha).
    ``ann="overfetch"`` re-scores a fixed ``k * k_factor`` candidates: faster, recall not
    guaranteed. Measured recall and latency: ``benchmarks/results/speed.md``.

    Results follow FAISS: ``(scores, ids)`` float32 and int64 of shape ``(nq, k)``, padded with
    score ``-inf`` and id ``-1`` when fewer than ``k`` documents exist. Equal scores may come in
    any order. Memory for a search is bounded (blocks of queries and documents).

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
        if isinstance(dim, faiss.Index):
            index = dim
            if index.metric_type != faiss.METRIC_INNER_PRODUCT:
                raise UnsupportedIndexError(
                    "NormIndex needs an inner-product index (faiss.METRIC_INNER_PRODUCT) so that "
                    "scores over unit vectors are cosines; use NormIndex.from_faiss for a filled L2 index"
                )
            if index.ntotal:
                raise UnsupportedIndexError(
                    f"the index already holds {index.ntotal} vectors: use NormIndex.from_faiss(index)"
                )
            factory = None
        else:
            if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 1:
                raise InvalidParameterError(f"dim must be a positive integer, got {dim!r}")
            try:
                index = faiss.index_factory(int(dim), str(factory), faiss.METRIC_INNER_PRODUCT)
            except RuntimeError as e:
                raise InvalidParameterError(f"faiss.index_factory rejected {factory!r}: {e}") from e
        if device is not None:
            from normrank.backends.torch_flat import resolve_device

            resolve_device(device)  # refuse cuda without CUDA now, not at the first search
        self.device = device
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
        out.device = None
        out._install(state)
        if device is not None:
            from normrank.backends.torch_flat import resolve_device

            resolve_device(device)
            out.device = device
        return out

    def to_state(self) -> IndexState:
        """A snapshot of this index's state (its arrays are not copied: treat them as read-only).

        The FAISS index is shared, not copied: hold no reference across a later ``add``."""
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
        arr = as_id_list(ids)
        with self._lock:
            arr = as_ids(arr, arr.shape[0])
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
            self._install(IndexState.empty(self._index, **self._options()))

    def set_weights(self, weights: ArrayLike, ids: ArrayLike | None = None) -> None:
        """Score by ``cos * w**alpha`` with your own per-document ``w`` (e.g. the probe's heat).

        ``weights`` align with ``ids`` (default: :attr:`ids` order) and must cover every document.
        """
        with self._lock:
            if ids is None:
                w = as_weights(weights, self.ntotal)
            else:
                arr = as_id_list(ids)
                arr = as_ids(arr, arr.shape[0])
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

    def _options(self) -> dict[str, object]:
        return {
            "alpha": self.alpha, "k_factor": self.k_factor, "factory": self.factory,
            "ann": self.ann, "n_tail": self.n_tail, "max_depth": self.max_depth,
        }  # fmt: skip

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
        queries = as_vectors(q, self.dim, what="queries", allow_1d=True)
        nq = queries.shape[0]
        k = as_k(k, nq)
        alphas = as_alpha(self.alpha if alpha is None else alpha, nq)
        factor = self.k_factor if k_factor is None else as_k_factor(k_factor)
        scores = np.full((nq, k), -np.inf, dtype=np.float32)
        ids = np.full((nq, k), -1, dtype=np.int64)
        if nq == 0:
            return scores, ids
        unit_q, _ = split_norms(queries, what="queries")
        with self._lock:
            if self.ntotal:
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
            one = as_id_list(id_, what="id")
            if one.shape != (1,):
                raise InvalidInputError(f"reconstruct takes one id, got {one.size}")
            pos = int(self._positions(one)[0])
            try:
                unit = self._index.reconstruct(int(one[0]))
            except RuntimeError as e:
                raise UnsupportedIndexError(f"this FAISS index cannot reconstruct vectors: {e}") from e
            return (unit * self._norms[pos]).astype(np.float32)

    # -- wrapping an existing index -----------------------------------------------------------

    @classmethod
    def from_faiss(
        cls, index: faiss.Index, *, norms: ArrayLike | None = None, alpha: float = 0.0, k_factor: int = 10
    ) -> NormIndex:
        """Wrap an index that already holds vectors.

        Without ``norms``, the raw vectors are read back (IndexFlatL2/IP, IndexIDMap/IDMap2 over a
        flat index, IndexIVFFlat), their norms kept and the vectors replaced by unit vectors in a
        new inner-product index of the same kind; ``index`` itself is left untouched.

        With ``norms`` (one per stored vector, in the index's id order), ``index`` must already
        hold unit vectors under inner product (a cosine index, PQ or HNSW included); it is wrapped
        as is.
        """
        return cls.from_state(state_from_faiss(index, norms=norms, alpha=alpha, k_factor=k_factor))

    # -- persistence --------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> None:
        """Save to directory ``path`` atomically: a crash leaves the previous save loadable.

        Layout: ``manifest.json`` (format version, dim, alpha, count, factory, SHA-256 and size
        of every file) naming one generation folder with ``index.faiss`` (FAISS's own format),
        ``ids.npy`` and ``norms.npy`` (and ``weights.npy``). No pickle.
        """
        with self._lock:
            save_state(self.to_state(), path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> NormIndex:
        """Load a directory written by :meth:`save`, verifying sizes and checksums first.

        Raises :class:`normrank.errors.CorruptIndexError` for a corrupt, truncated, tampered or
        unknown-format directory.
        """
        state = load_state(path)
        try:
            return cls.from_state(state)
        except NormrankError as e:  # options out of range, repeated ids: the file is wrong
            raise CorruptIndexError(f"{path}: inconsistent saved state: {e}") from e
