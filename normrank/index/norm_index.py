"""``NormIndex``: any FAISS inner-product index over unit vectors, plus the raw norms beside it,
searched by ``cos(q, d) * ||d||**alpha`` (paper: "Optimization Dynamics Imprint Semantic
Specificity in Contrastive Embedding Norms", §4.3, §5.3)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace

import faiss
import numpy as np
from numpy.typing import ArrayLike

import normrank.validation as check
from normrank import settings
from normrank.errors import IndexStateError, InvalidInputError, UnsupportedIndexError
from normrank.index.doc_table import DocTable
from normrank.index.fair_lock import FairLock
from normrank.index.idmap_ivf import remove_ids
from normrank.index.knobs import SearchKnobs
from normrank.index.persistence import load_state, save_state
from normrank.index.state import IndexState, check_state
from normrank.index.wrap import new_faiss_index, state_from_faiss
from normrank.search.cache import CacheBudget, SearchCache, cache_budget
from normrank.search.faiss_info import (
    breadth_knobs,
    holds_float_rows,
    index_bytes,
    inner_index,
    keeps_removed,
    set_breadth,
    with_ids,
)
from normrank.search.plan import SearchOptions, SearchStats
from normrank.search.rows import row_source
from normrank.search.searcher import OneQuery, SearchTarget, search_args, search_into

__all__ = ["NormIndex"]


class NormIndex(SearchKnobs):
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
    decreasing weight order until a bound proves the top-k (:mod:`normrank.search.ann`): exact up to
    what the index returns at its nprobe / efSearch; on PQ / additive-quantizer codes, at an alpha
    whose weights barely spread, it re-scores ``k * k_factor * 5`` candidates instead (the codes cap
    recall either way: docs/guarantees.md; ``SearchStats.path`` says which ran). ``ann="scan"``
    always scans; ``n_tail`` sets the scan's first chunk and ``max_depth`` caps the cosine depth
    of every method; ``ann="overfetch"`` re-scores a fixed ``k * k_factor`` candidates (no scan;
    recall not guaranteed: benchmarks/results/speed_methods.md).
    What runs is decided once per search (:func:`normrank.search.plan.plan_search`).

    Results follow FAISS: ``(scores, ids)`` float32 / int64 ``(nq, k)``, padded with ``-inf`` /
    ``-1`` when fewer than ``k`` documents exist; equal scores in any order; memory bounded.

    Thread safety: all methods may be called from several threads; a search sees the index
    either before or after a concurrent ``add`` / ``remove``, never in between.
    """

    # Search options, checked on every assignment (constructor, load and ``index.ann = ...``).
    ann = check.Checked(lambda v, _name: check.as_ann(v))
    n_tail = check.Checked(check.as_count)
    max_depth = check.Checked(check.as_count)

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
        nprobe: int | None = None,
        ef_search: int | None = None,
    ) -> None:
        index, factory = new_faiss_index(dim, factory)
        set_breadth(inner_index(index), breadth_knobs(inner_index(index), nprobe, ef_search))
        self.device = _checked_device(device)
        self._lock = FairLock()  # first come, first served: writers cannot starve searches
        options = {"ann": ann, "n_tail": n_tail, "max_depth": max_depth, "factory": factory}
        self._install(IndexState.empty(with_ids(index), alpha=alpha, k_factor=k_factor, **options))

    @classmethod
    def from_state(cls, state: IndexState, *, device: str | None = None) -> NormIndex:
        """An index holding ``state`` (from :meth:`to_state` or persistence), its FAISS index used
        as is; a state no index can be in raises (:func:`normrank.index.state.check_state`)."""
        out = cls.__new__(cls)
        out._lock = FairLock()
        out.device = _checked_device(device)
        out._install(state)
        return out

    def to_state(self) -> IndexState:
        """This index's state; arrays and the FAISS index are shared, not copied (read only)."""
        with self._lock:
            docs = self._docs
            return IndexState(
                self._index, docs.ids, docs.norms, docs.custom_bases, docs.tombstone_array(), docs.next_id,
                self.alpha, self.k_factor, self.factory, self.ann, self.n_tail, self.max_depth,
            )  # fmt: skip

    def _install(self, state: IndexState) -> None:
        """Take ``state`` as this index's (checked first, so nothing is half-set)."""
        check_state(state)
        self.alpha = state.alpha
        self.k_factor = state.k_factor
        self.ann, self.n_tail, self.max_depth = state.ann, state.n_tail, state.max_depth
        self._index = state.faiss_index
        # The index inside the id map, downcast once (each downcast costs microseconds a query).
        # An IndexFlat here is exact storage whose rows align with insertion order.
        self._inner = inner_index(state.faiss_index)
        self.factory = state.factory
        self._docs = DocTable(state.ids, state.norms, state.weights, state.tombstones, state.next_id)
        self._cache = SearchCache(self._cache_budget)

    # -- properties ---------------------------------------------------------------------------

    @property
    def alpha(self) -> float:
        """Default exponent, used when ``search`` is called without ``alpha``."""
        return self._alpha

    @alpha.setter
    def alpha(self, value: float) -> None:
        a = check.as_alpha(value, 1)
        self._alpha = float(a[0])

    @property
    def k_factor(self) -> int:
        """Sets the cosine candidates an ANN search fetches before exact re-scoring:
        ``k * k_factor`` (more when an IVF probes many documents), never past ``efSearch`` on
        HNSW (efSearch 16, k 10, k_factor 10 fetches 16), never past ``max_depth``;
        ``ann="overfetch"`` fetches ``k * k_factor`` (within ``max_depth`` too;
        :func:`normrank.search.plan.plan_search`)."""
        return self._k_factor

    @k_factor.setter
    def k_factor(self, value: int) -> None:
        self._k_factor = check.as_k_factor(value)

    @property
    def dim(self) -> int:
        return int(self._index.d)

    @property
    def d(self) -> int:
        """FAISS's name for :attr:`dim` (``index.d``), so that FAISS code reads it unchanged."""
        return self.dim

    @property
    def ntotal(self) -> int:
        return self._docs.count

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
            return self._docs.ids.copy()  # (a new array for the default ids)

    @property
    def norms(self) -> np.ndarray:
        """float32 raw norms ``||d||`` aligned with :attr:`ids` (a copy)."""
        with self._lock:
            return self._docs.norms.copy()

    @property
    def bases(self) -> np.ndarray:
        """The per-document **bases** that ``alpha`` exponentiates (a search's weight is
        ``base**alpha``): the norms unless set by :meth:`set_bases` (a copy)."""
        with self._lock:
            return self._docs.base.copy()

    @property
    def weights(self) -> np.ndarray:
        """Deprecated: :attr:`bases` (the values before the power, not the weights ``base**alpha``)."""
        check.deprecated("NormIndex.weights", "NormIndex.bases")
        return self.bases

    def norm_of(self, ids: ArrayLike) -> np.ndarray:
        """Raw norms of ``ids`` (float32); raises :class:`UnknownIdError` for an id not present."""
        arr = check.as_id_list(ids)
        with self._lock:
            return self._docs.norms[self._docs.positions(arr)]

    def __contains__(self, id_: object) -> bool:
        if not isinstance(id_, int | np.integer) or isinstance(id_, bool):
            return False
        with self._lock:  # the table a writer is replacing is never read half-way
            return self._docs.has(int(id_))

    # -- mutation -----------------------------------------------------------------------------

    def train(self, x: ArrayLike) -> None:
        """Train the FAISS index (IVF, PQ, ...) on the unit directions of raw vectors ``x``."""
        unit, _ = check.unit_and_norms(x, self.dim)
        with self._lock:
            if self.ntotal:
                raise IndexStateError("train before adding: the index already holds vectors")
            try:
                self._index.train(unit)
            except RuntimeError as e:
                raise IndexStateError(f"FAISS could not train the index: {e}") from e

    def add(
        self,
        x: ArrayLike,
        ids: ArrayLike | None = None,
        *,
        bases: ArrayLike | None = None,
        weights: ArrayLike | None = None,
    ) -> np.ndarray:
        """Add raw vectors ``x`` (n, dim); returns their int64 ids.

        ``ids`` default to consecutive integers after the largest id so far. An id already in
        the index raises :class:`DuplicateIdError` (remove it first). When custom bases were
        set with :meth:`set_bases`, ``bases`` for the new rows are required (``weights``: its
        deprecated name). Nothing is added unless the whole batch is valid.
        """
        bases = check.bases_argument(bases, weights, "NormIndex")
        unit, norms = check.unit_and_norms(x, self.dim)
        n = unit.shape[0]
        w = None if bases is None else check.as_weights(bases, n)
        with self._lock:
            new_ids = self._docs.default_ids(n) if ids is None else check.as_ids(ids, n)
            self._docs.check_new(new_ids, w)
            if n == 0:
                return new_ids
            if not self._index.is_trained:
                raise IndexStateError("the FAISS index is not trained: call train(x) first")
            rows, table = self._index.ntotal, self._docs.doc_ids
            try:
                try:
                    self._index.add_with_ids(unit, new_ids)
                except RuntimeError as e:
                    raise IndexStateError(f"FAISS refused the vectors: {e}") from e
                self._docs.append(new_ids, norms, w)
            except BaseException:
                # An interrupt (Ctrl-C, an async exception) after FAISS took the batch: record it
                # too, so FAISS and the table agree. The add then happened whole; it still raises.
                if self._index.ntotal != rows and self._docs.doc_ids is table:
                    self._docs.append(new_ids, norms, w)
                raise
            finally:
                self._changed()
            return new_ids

    def remove(self, ids: ArrayLike) -> int:
        """Remove ``ids``; returns how many were removed. Unknown ids raise and remove nothing."""
        arr = check.as_ids(ids)
        with self._lock:
            self._docs.positions(arr)  # raises UnknownIdError before anything changes
            if not arr.size:
                return 0
            tombstone, rows, table = False, self._index.ntotal, self._docs.doc_ids
            try:
                try:
                    removed = remove_ids(self._index, arr)  # (an IVF beneath a user's id map: see idmap_ivf)
                except RuntimeError as e:
                    if not keeps_removed(self._index):
                        raise UnsupportedIndexError(f"FAISS cannot remove from this index: {e}") from e
                    removed, tombstone = arr.size, True  # HNSW cannot delete: the vectors stay, skipped
                if removed != arr.size:
                    raise IndexStateError(
                        f"FAISS removed {removed} of {arr.size} ids; the index is inconsistent"
                    )
                self._docs.drop(arr, tombstone=tombstone)
            except BaseException:
                # as in add: FAISS dropped the rows before an interrupt, so the table drops them too
                if self._index.ntotal == rows - arr.size and self._docs.doc_ids is table:
                    self._docs.drop(arr, tombstone=False)
                raise
            finally:
                self._changed()
            return int(arr.size)

    def reset(self) -> None:
        """Remove everything (keeps training)."""
        with self._lock:
            self._index.reset()
            empty = IndexState.empty(self._index)
            self._install(replace(self.to_state(), ids=empty.ids, norms=empty.norms, weights=None,
                                  tombstones=empty.tombstones, next_id=0))  # fmt: skip

    def set_bases(self, bases: ArrayLike, ids: ArrayLike | None = None) -> None:
        """Score by ``cos * base**alpha`` with your own per-document ``base`` instead of the norm
        (e.g. the probe's heat).

        ``bases`` align with ``ids`` (default: :attr:`ids` order) and must cover every document.
        """
        with self._lock:
            if ids is None:
                b = check.as_weights(bases, self.ntotal)
            else:
                arr = check.as_ids(ids)
                if arr.size != self.ntotal:
                    raise InvalidInputError(f"bases must cover all {self.ntotal} documents, got {arr.size}")
                b = np.empty(self.ntotal, dtype=np.float32)
                b[self._docs.positions(arr)] = check.as_weights(bases, arr.size)
            self._docs.custom_bases = b
            self._changed()

    def clear_bases(self) -> None:
        """Score by the norms again."""
        with self._lock:
            self._docs.custom_bases = None
            self._changed()

    def set_weights(self, weights: ArrayLike, ids: ArrayLike | None = None) -> None:
        """Deprecated: :meth:`set_bases` (the values before the power, not the weights ``base**alpha``)."""
        check.deprecated("NormIndex.set_weights", "NormIndex.set_bases")
        self.set_bases(weights, ids)

    def clear_weights(self) -> None:
        """Deprecated: :meth:`clear_bases`."""
        check.deprecated("NormIndex.clear_weights", "NormIndex.clear_bases")
        self.clear_bases()

    def _changed(self) -> None:
        self._cache = SearchCache(self._cache_budget)

    def _cache_budget(self) -> CacheBudget:
        """The search caches' budget of this state (asked under the lock, at its first search):
        a fraction of what FAISS holds for the index (:func:`normrank.search.cache.cache_budget`)."""
        scans = not isinstance(self._inner, faiss.IndexFlat)
        floor = settings.FLOAT_ROWS_MIN_CACHE_BYTES if scans and holds_float_rows(self._inner) else 0
        return cache_budget(index_bytes(self._index), scans=scans, floor=floor)

    def _one_query(self) -> OneQuery | bool:
        """The latency case bound to this state, or False where :meth:`search` never takes it
        (flat storage has its own kernel, an empty index nothing to search)."""
        if isinstance(self._inner, faiss.IndexFlat) or not self.ntotal:
            return False
        return OneQuery(self._target())

    def _target(self) -> SearchTarget:
        """What a search reads of this state (under the lock)."""
        docs = self._docs
        self._cache.lookup = docs.lookup()  # one id -> position table: the doc table's
        return SearchTarget(
            index=self._index, inner=self._inner, doc_ids=docs.doc_ids, base=docs.base,
            n_removed=len(docs.tombstones), cache=self._cache,
        )  # fmt: skip

    # -- search -------------------------------------------------------------------------------

    def _weight_for(self, alpha: float) -> np.ndarray | None:  # (for tests: what search uses)
        return self._cache.power(self._docs.base, alpha)

    def search(
        self,
        q: ArrayLike,
        k: int,
        *,
        alpha: float | ArrayLike | None = None,
        k_factor: int | None = None,
        nprobe: int | None = None,
        ef_search: int | None = None,
        params: faiss.SearchParameters | None = None,
        return_stats: bool = False,
    ) -> tuple[np.ndarray, np.ndarray] | tuple[np.ndarray, np.ndarray, SearchStats]:
        """Top-``k`` documents by ``cos(q, d) * ||d||**alpha``.

        Args:
            q: queries ``(nq, dim)`` (or one ``(dim,)`` vector); their norms do not matter.
            k: results per query.
            alpha: exponent for this call (default :attr:`alpha`): a scalar or one per query,
                within [-16, 16].
            k_factor: ANN over-fetch for this call (default :attr:`k_factor`); ignored when exact.
            nprobe, ef_search, params: FAISS's own breadth for this call (IVF ``nprobe``, HNSW
                ``efSearch``, or a ``faiss.SearchParametersIVF`` / ``SearchParametersHNSW``);
                default :attr:`search_params`. Refused where the index has no such knob.
            return_stats: also return a :class:`~normrank.search.plan.SearchStats` (what the
                search did: cosine depth fetched, rows scanned, search-cache bytes).

        Returns:
            ``(scores, ids)``: float32 and int64 ``(nq, k)``, best first; ``-inf`` / ``-1`` pad
            rows when fewer than ``k`` documents exist. With ``return_stats``, ``(scores, ids,
            stats)``.
        """
        if return_stats is not False and return_stats is not True:
            check.as_flag(return_stats, "return_stats")  # ("no" would read as True)
        stats = SearchStats()
        # The call's options, else the index's (k, alpha and k_factor checked by the searcher).
        options = SearchOptions(
            k=k, alpha=self._alpha if alpha is None else alpha,
            k_factor=self._k_factor if k_factor is None else k_factor,
            method=self._ann, n_tail=self._n_tail, max_depth=self._max_depth,
        )  # fmt: skip
        if k_factor is None and nprobe is None and ef_search is None and params is None:
            with self._lock:  # the latency case first: one float32 query, an ANN index
                one = self._cache.one
                if one is None:
                    one = self._cache.one = self._one_query()
                got = one and one(q, options, stats)
                if got and return_stats:  # (counting the cache costs ~10 us: only when asked)
                    stats.cache_bytes = self._cache.nbytes
                    stats.cache_budget_bytes = self._cache.budget.total
            if got:
                return (*got, stats) if return_stats else got
        unit_q, alphas, options = search_args(q, options, self.dim)
        scores = np.full((unit_q.shape[0], options.k), -np.inf, dtype=np.float32)
        ids = np.full(scores.shape, -1, dtype=np.int64)
        given = nprobe is not None or ef_search is not None or params is not None
        knobs = breadth_knobs(self._inner, nprobe, ef_search, params) if given else None
        with self._lock:
            old = set_breadth(self._inner, knobs) if knobs else None  # under the lock: one search at a time
            try:
                if self.ntotal and unit_q.shape[0]:
                    search_into(scores, ids, unit_q, alphas, options, target=self._target(), device=self.device,
                                stats=stats)  # fmt: skip
                if return_stats:
                    stats.cache_bytes = self._cache.nbytes
                    stats.cache_budget_bytes = self._cache.budget.total
            finally:
                if old:
                    set_breadth(self._inner, old)
        return (scores, ids, stats) if return_stats else (scores, ids)

    # -- reconstruction -----------------------------------------------------------------------

    def reconstruct(self, id_: int) -> np.ndarray:
        """The raw vector of ``id_`` (unit direction times norm; float32 rounding ~1e-7)."""
        with self._lock:
            one = check.as_one_id(id_)
            pos = self._docs.positions(np.array([one]))
            docs = self._docs
            try:  # by storage position, through the search's row source (no id -> row hash)
                if self._cache.rows is None:
                    self._cache.rows = row_source(
                        self._index, self._inner, docs.doc_ids, len(docs.tombstones)
                    )
                unit = self._cache.rows.gather(pos)[0]
            except RuntimeError as e:
                raise UnsupportedIndexError(f"this FAISS index cannot reconstruct vectors: {e}") from e
            return (unit * docs.norms[pos[0]]).astype(np.float32)

    # -- wrapping an existing index -----------------------------------------------------------

    @classmethod
    def from_faiss(
        cls,
        index: faiss.Index,
        *,
        norms: ArrayLike | Mapping[int, float] | None = None,
        alpha: float = 0.0,
        k_factor: int = 10,
    ) -> NormIndex:
        """Wrap an index that already holds vectors (see :func:`normrank.index.wrap.state_from_faiss`).

        ``norms`` (for an index of unit vectors): one per vector in the order they were added,
        or ``{id: norm}``; an IVF index keeps no record of that order, so it takes the mapping only
        (after ``index.add(x)``: ``dict(enumerate(np.linalg.norm(x, axis=1)))``)."""
        return cls.from_state(state_from_faiss(index, norms=norms, alpha=alpha, k_factor=k_factor))

    # -- persistence --------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> None:
        """Save to directory ``path`` atomically, no pickle (layout: :mod:`normrank.index.persistence`).

        A crash or a failed write (disk full, read-only: :class:`~normrank.SaveError`) leaves the
        previous save loadable. ``path`` may be a symlink to a folder; nothing inside is followed."""
        with self._lock:
            save_state(self.to_state(), path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> NormIndex:
        """Load a directory written by :meth:`save`, verifying sizes, checksums and contents;
        :class:`~normrank.errors.CorruptIndexError` for a corrupt or tampered directory."""
        return cls.from_state(load_state(path))  # load_state ran check_state: nothing left to refuse


def _checked_device(device: str | None) -> str | None:
    if device is not None:
        from normrank.search.torch_flat import resolve_device

        resolve_device(device)  # refuse cuda without CUDA now, not at the first search
    return device
