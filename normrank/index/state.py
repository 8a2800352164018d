"""The whole state of a :class:`~normrank.NormIndex` as one value: what the index hands
persistence to save, and what persistence (or :func:`normrank.index.wrap.state_from_faiss`) hands back
to build an index from. Nothing else crosses between them."""

from __future__ import annotations

from dataclasses import dataclass, field

import faiss
import numpy as np

from normrank.errors import InvalidInputError, InvalidParameterError, UnsupportedIndexError
from normrank.index.idmap_ivf import check_positions
from normrank.search.faiss_info import (
    MAX_EF_SEARCH,
    ann_params,
    can_remove,
    inner_index,
    is_idmap,
    ivf_of,
    levels,
    stored_ids,
)
from normrank.validation import MAX_ID, as_alpha, as_ann, as_count, as_ids, as_k_factor, as_weights

__all__ = ["IndexState", "check_state"]


@dataclass(frozen=True)
class IndexState:
    """Everything a NormIndex is, besides its lock and search caches.

    Attributes:
        faiss_index: the FAISS inner-product index over unit vectors, taking ``add_with_ids``
            (an ``IndexIDMap``, or an IVF, whose lists keep the ids; no direct map: rows are read
            by storage position). Indexes saved before issue 36 (``IndexIDMap2``, an IVF with a
            hash-table direct map) load and search as they are.
        ids: int64 ``(n,)`` live ids in storage order.
        norms: float32 ``(n,)`` raw norms aligned with ``ids``.
        weights: float32 ``(n,)`` custom bases (``NormIndex.set_bases``; saved as ``weights.npy``), or
            None to score by norms.
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


# FAISS's read_index accepts a refine stage's k_factor in [1, 1000] only (NaN fails too).
_MAX_REFINE_FACTOR = 1000.0


def check_state(state: IndexState) -> None:
    """Refuse a state no NormIndex can be in, however consistent it looks: the one check behind
    ``NormIndex.from_state``, ``save`` (before anything is written) and ``load`` (where a refusal
    becomes :class:`CorruptIndexError`; checksums are not signatures, so a re-signed directory
    is judged by what it claims).

    Raises ``InvalidInputError`` (options, ids, norms, weights) or ``UnsupportedIndexError``
    (the FAISS index: metric or dimension at any level, counts, IVF lists, tombstones where the
    index can delete)."""
    as_alpha(state.alpha, 1)
    as_k_factor(state.k_factor)
    as_ann(state.ann)
    as_count(state.n_tail, "n_tail")
    as_count(state.max_depth, "max_depth")
    if state.factory is not None and not isinstance(state.factory, str):
        raise InvalidParameterError(f"factory must be a string or None, got {type(state.factory).__name__}")
    if isinstance(state.next_id, bool) or not isinstance(state.next_id, int | np.integer):
        raise InvalidParameterError(f"next_id must be an integer, got {state.next_id!r}")
    if not 0 <= state.next_id <= MAX_ID + 1:
        raise InvalidParameterError(f"next_id must lie in [0, 2**63 - 1], got {state.next_id}")
    ids = as_ids(state.ids, np.shape(state.ids)[0] if np.ndim(state.ids) == 1 else -1)
    n = ids.size
    as_weights(state.norms, n, what="norms")
    if state.weights is not None:
        as_weights(state.weights, n, what="weights")
    tombstones = as_ids(state.tombstones, np.size(state.tombstones)) if np.size(state.tombstones) else ids[:0]
    if np.isin(tombstones, ids).any():
        raise InvalidInputError("a tombstone names a live id")
    _check_faiss(state.faiss_index, ids, tombstones)


def _check_faiss(index: faiss.Index, ids: np.ndarray, tombstones: np.ndarray) -> None:
    if not isinstance(index, faiss.Index):
        raise UnsupportedIndexError(f"faiss_index must be a faiss.Index, got {type(index).__name__}")
    d, total = index.d, ids.size + tombstones.size
    if index.ntotal != total:
        raise UnsupportedIndexError(f"the FAISS index holds {index.ntotal} vectors for {total} ids")
    transformed = False
    for level in levels(index):
        # Every level ranks by inner product over unit vectors, or scores are not cosines.
        if level.metric_type != faiss.METRIC_INNER_PRODUCT:
            raise UnsupportedIndexError(
                f"{type(level).__name__} inside the index does not use inner product "
                f"(metric {level.metric_type}): NormIndex needs METRIC_INNER_PRODUCT at every level"
            )
        transformed |= isinstance(level, faiss.IndexPreTransform)
        if not transformed and level.d != d:
            raise UnsupportedIndexError(
                f"{type(level).__name__} inside the index has dimension {level.d}, not {d}"
            )
        if isinstance(level, faiss.IndexIDMap | faiss.IndexIDMap2) and (
            level.index.ntotal != total or level.id_map.size() != total
        ):
            raise UnsupportedIndexError("the id map and the index inside it disagree on the count")
        if isinstance(level, faiss.IndexHNSW) and (
            level.storage.ntotal != total or level.hnsw.levels.size() != total
        ):
            raise UnsupportedIndexError("the HNSW graph and its storage disagree on the count")
        if isinstance(level, faiss.IndexRefine) and (
            level.base_index.ntotal != total or level.refine_index.ntotal != total
        ):
            raise UnsupportedIndexError("the refine stage's base and refine indexes disagree on the count")
        if isinstance(level, faiss.IndexRefine) and not 1.0 <= level.k_factor <= _MAX_REFINE_FACTOR:
            raise UnsupportedIndexError(  # (FAISS's read_index refuses any other: a file never read back)
                f"the refine stage's k_factor must lie in [1, {_MAX_REFINE_FACTOR:g}] (FAISS reads no "
                f"other back), got {level.k_factor}"
            )
    breadth = ann_params(inner_index(index))  # a hostile file may claim any nprobe / efSearch
    if (
        not 1 <= breadth.get("nprobe", 1) <= breadth.get("nlist", 1)
        or not 1 <= breadth.get("efSearch", 1) <= MAX_EF_SEARCH
    ):
        raise UnsupportedIndexError(
            f"search breadth out of range: {breadth} (IVF: 1 <= nprobe <= nlist; HNSW: 1 <= efSearch "
            f"<= {MAX_EF_SEARCH})"
        )
    ivf = ivf_of(inner_index(index))
    if ivf is not None:
        sizes = [ivf.invlists.list_size(i) for i in range(ivf.nlist)]
        centroids = ivf.quantizer.ntotal == (ivf.nlist if ivf.is_trained else 0)
        if not centroids or sum(sizes) != total or (total and not ivf.is_trained):
            raise UnsupportedIndexError("the IVF lists, centroids and count disagree")
    stored = stored_ids(index)
    if stored is None:
        if tombstones.size or not np.array_equal(ids, np.arange(ids.size)):
            raise UnsupportedIndexError("this FAISS index keeps no ids: wrap it in faiss.IndexIDMap")
        return
    check_positions(index)  # (an IVF beneath an id map: positions FAISS left stale)
    if stored.size != total or np.unique(stored).size != total or (stored < 0).any():
        raise UnsupportedIndexError("the ids inside the FAISS index are repeated, negative or miscounted")
    live = stored[~np.isin(stored, tombstones)] if tombstones.size else stored
    same = np.array_equal(live, ids) if is_idmap(index) else np.array_equal(np.sort(live), np.sort(ids))
    if not same or live.size != ids.size:
        raise UnsupportedIndexError("the ids do not match the ids inside the FAISS index")
    if tombstones.size and can_remove(index):
        # Only an index that cannot delete (HNSW) keeps removed vectors; elsewhere a tombstone
        # would leave a vector in storage that no id describes.
        raise UnsupportedIndexError(f"{type(inner_index(index)).__name__} deletes: it cannot hold tombstones")
