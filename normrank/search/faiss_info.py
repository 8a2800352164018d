"""What a FAISS index is and holds, asked in one place: the index, persistence and the ANN search
all read FAISS's structure through these functions (id maps, IVF lists, HNSW storage, search
breadth), so a new FAISS type is taught to normrank once.

A refine stage (``IndexRefine`` / ``IndexRefineFlat``, factory suffix ``,RFlat`` or
``,Refine(Flat)``) is seen through: its base index ranks the candidates and holds the breadth
(:func:`ann_base`), its refine index holds the rows (:func:`refine_of`), in the order added.
"""

from __future__ import annotations

from collections.abc import Callable

import faiss
import numpy as np

from normrank.errors import InvalidParameterError, UnsupportedIndexError
from normrank.validation import OPTION_BOUNDS

__all__ = [
    "MAX_EF_SEARCH",
    "ann_base",
    "ann_params",
    "breadth_knobs",
    "breadth_reader",
    "can_remove",
    "flat_storage",
    "hashed_if_hidden",
    "holds_float_rows",
    "index_bytes",
    "inner_index",
    "is_gpu",
    "is_idmap",
    "ivf_of",
    "keeps_removed",
    "levels",
    "lossy_codes",
    "raw_vectors",
    "refine_of",
    "search_raw",
    "set_breadth",
    "stored_ids",
    "with_ids",
]

# An HNSW beam wider than this is a mistake (or a hostile file): FAISS allocates it per query.
# The bound of every backend's beam (Qdrant's hnsw_ef, pgvector's ef_search): one table.
MAX_EF_SEARCH = OPTION_BOUNDS["ef_search"][1]


def is_idmap(index: faiss.Index) -> bool:
    return isinstance(index, faiss.IndexIDMap2 | faiss.IndexIDMap)


def is_gpu(index: faiss.Index) -> bool:
    return "Gpu" in type(index).__name__


def ivf_of(index: faiss.Index) -> faiss.IndexIVF | None:
    """The IVF index inside ``index`` (possibly wrapped), or None."""
    try:
        return faiss.extract_index_ivf(index)
    except RuntimeError:
        return None


def inner_index(index: faiss.Index) -> faiss.Index:
    """The index beneath an id map, downcast (each downcast costs microseconds: do it once)."""
    return faiss.downcast_index(index.index) if is_idmap(index) else index


def refine_of(index: faiss.Index) -> faiss.IndexRefine | None:
    """The refine stage of ``index`` (itself or beneath an id map): candidates from its base
    index re-ranked on its refine index (``IndexRefineFlat``: the raw vectors); else None."""
    inner = inner_index(index)
    return inner if isinstance(inner, faiss.IndexRefine) else None


def ann_base(inner: faiss.Index) -> faiss.Index:
    """The index that ranks the candidates and holds the search breadth: a refine stage's base
    index (downcast), else ``inner`` (the index beneath an id map) itself."""
    if isinstance(inner, faiss.IndexRefine):
        return faiss.downcast_index(inner.base_index)
    return inner


def with_ids(index: faiss.Index) -> faiss.Index:
    """An index that takes ``add_with_ids``: IVF and IDMap do natively, the rest get an
    ``IndexIDMap`` (not IDMap2: its ``rev_map`` hash, ~40 bytes a document, is never read;
    normrank finds rows by storage position), a refine stage too whatever its base (IndexRefine
    adds without ids only). No direct map is set on an IVF: rows are read from its lists by
    position (:class:`normrank.search.rows.ListRows`)."""
    if is_idmap(index):
        return index
    if isinstance(index, faiss.IndexRefine):
        return faiss.IndexIDMap(index)
    if ivf_of(index) is not None:
        hashed_if_hidden(index)
        return index
    return faiss.IndexIDMap(index)


def hashed_if_hidden(index: faiss.Index) -> None:
    """An IVF beneath another index (a pre-transform) is read back by id through FAISS's
    ``reconstruct_batch``, which needs a direct map there: give it the hash table if it has none.
    An IVF that is the index itself (or directly beneath an id map) needs none."""
    ivf = ivf_of(index)
    if ivf is None or isinstance(faiss.downcast_index(inner_index(index)), faiss.IndexIVF):
        return
    if ivf.direct_map.type == faiss.DirectMap.NoMap:
        ivf.set_direct_map_type(faiss.DirectMap.Hashtable)


def levels(index: faiss.Index) -> list[faiss.Index]:
    """Every index inside ``index``, downcast, outermost first: id maps, pre-transforms, refine
    stages, an IVF's quantizer, an HNSW's storage."""
    out: list[faiss.Index] = []
    todo = [index]
    while todo and len(out) < 64:  # a hostile file cannot make this loop forever
        ix = faiss.downcast_index(todo.pop(0))
        out.append(ix)
        for attr in ("index", "base_index", "refine_index", "quantizer", "storage"):
            child = getattr(ix, attr, None)
            if isinstance(child, faiss.Index):
                todo.append(child)
    return out


def index_bytes(index: faiss.Index) -> int:
    """The bytes FAISS itself holds for ``index`` and everything inside it (what the search
    caches are sized against, :func:`normrank.search.cache.cache_budget`): stored codes (flat,
    SQ, PQ storage, IVF lists), ids (id maps: 8 a document; IVF lists: 8 an entry), HNSW links
    and levels, coarse quantizers and PQ / SQ tables, read from FAISS's array sizes (no
    serialization, a few microseconds). Left out: pre-transform matrices, an IDMap2's reverse
    hash, IVF lists' unused capacity; within a few percent of ``faiss.serialize_index``'s
    length on the kinds of tests/test_cache_budget.py::test_index_bytes_near_serialized_size."""
    total = 0
    for ix in levels(index):
        if is_idmap(ix):
            total += 8 * ix.id_map.size()
        codes = getattr(ix, "codes", None)  # IndexFlatCodes: flat, SQ, PQ storage
        if codes is not None and hasattr(codes, "size"):
            total += codes.size()
        if isinstance(ix, faiss.IndexHNSW):
            hnsw = ix.hnsw
            total += 4 * hnsw.neighbors.size() + 4 * hnsw.levels.size() + 8 * hnsw.offsets.size()
        if isinstance(ix, faiss.IndexIVF):
            total += ix.ntotal * (ix.code_size + 8)
        pq = getattr(ix, "pq", None)
        if isinstance(pq, faiss.ProductQuantizer):
            total += 4 * pq.centroids.size()
        sq = getattr(ix, "sq", None)
        if isinstance(sq, faiss.ScalarQuantizer):
            total += 4 * sq.trained.size()
    return int(total)


def holds_float_rows(inner: faiss.Index) -> bool:
    """Whether FAISS keeps ``inner``'s vectors as float32 rows a scan reads as they are: an HNSW
    over flat storage, or an IVF-Flat (not SQ / PQ codes, not flat storage searched whole)."""
    if isinstance(inner, faiss.IndexHNSW):
        return isinstance(faiss.downcast_index(inner.storage), faiss.IndexFlat)
    return isinstance(faiss.downcast_index(inner), faiss.IndexIVFFlat)


_LOSSY_CODES = tuple(
    getattr(faiss, name)
    for name in (
        "IndexPQ", "IndexPQFastScan", "IndexAdditiveQuantizer", "IndexAdditiveQuantizerFastScan",
        "IndexIVFPQ", "IndexIVFPQFastScan", "IndexIVFAdditiveQuantizer",
        "IndexIVFAdditiveQuantizerFastScan",
        "GpuIndexIVFPQ",  # (faiss-gpu builds only)
    )
    if hasattr(faiss, name)
)  # fmt: skip


def lossy_codes(inner: faiss.Index) -> bool:
    """Whether ``inner`` (the index beneath an id map) ranks by product or additive quantizer
    codes (PQ, RQ, LSQ; IVF or not, under a pre-transform or as an HNSW's storage): codes that
    cap the cosine recall of every method reading them. Not SQ, not a refine stage (it ranks on
    its refine index), not an IVF's coarse quantizer."""
    if isinstance(inner, faiss.IndexRefine):
        return False
    todo, seen = [inner], 0
    while todo and seen < 16:
        ix = faiss.downcast_index(todo.pop())
        seen += 1
        if isinstance(ix, _LOSSY_CODES):
            return True
        for attr in ("index", "storage"):  # a pre-transform's index, a graph's storage
            child = getattr(ix, attr, None)
            if isinstance(child, faiss.Index):
                todo.append(child)
    return False


def can_remove(index: faiss.Index) -> bool:
    """Whether FAISS deletes from ``index`` (HNSW cannot); asked by removing nothing."""
    try:
        index.remove_ids(faiss.IDSelectorBatch(np.empty(0, dtype=np.int64)))
    except RuntimeError:
        return False
    return True


def keeps_removed(index: faiss.Index) -> bool:
    """Whether a removal FAISS refuses is kept as a tombstone (the vector stays, searches skip
    it): graphs and refine stages, which FAISS cannot delete from. An IVF that ranks deletes,
    so its refusal is an error to report, not a tombstone to keep."""
    return refine_of(index) is not None or ivf_of(index) is None


def flat_storage(flat: faiss.IndexFlat) -> np.ndarray:
    """A read-only view of a flat index's ``(ntotal, d)`` float32 rows (no copy)."""
    n = flat.ntotal
    return faiss.rev_swig_ptr(flat.get_xb(), n * flat.d).reshape(n, flat.d)


def _ivf_list_ids(ivf: faiss.IndexIVF) -> np.ndarray:
    lists = ivf.invlists
    parts = [
        faiss.rev_swig_ptr(lists.get_ids(i), lists.list_size(i)).copy()
        for i in range(ivf.nlist)
        if lists.list_size(i)
    ]
    return (np.concatenate(parts) if parts else np.empty(0, np.int64)).astype(np.int64)


def stored_ids(index: faiss.Index) -> np.ndarray | None:
    """The ids inside a filled index in storage order (id map or IVF lists), or None where the
    index keeps no ids (they are then ``0 .. ntotal - 1``; a refine stage's, whose rows are in
    the order added whatever its base)."""
    if is_idmap(index):
        return faiss.vector_to_array(index.id_map).astype(np.int64)
    if isinstance(index, faiss.IndexRefine):
        return None
    ivf = ivf_of(index)
    return None if ivf is None else _ivf_list_ids(ivf)


def raw_vectors(index: faiss.Index) -> np.ndarray:
    """The stored float32 vectors, in the order of :func:`stored_ids`, where FAISS keeps them raw
    (flat storage, IVF-Flat lists, an HNSW's flat storage, a refine stage's flat refine
    index); raises UnsupportedIndexError else."""
    inner = inner_index(index)
    if is_gpu(inner):
        raise UnsupportedIndexError(
            "a GPU index: move it to the CPU (faiss.index_gpu_to_cpu) or pass norms=... to from_faiss"
        )
    if isinstance(inner, faiss.IndexRefine):  # IndexRefineFlat keeps the raw vectors, in order added
        inner = faiss.downcast_index(inner.refine_index)
    if isinstance(inner, faiss.IndexHNSW):  # IndexHNSWFlat keeps the raw vectors in its storage
        storage = faiss.downcast_index(inner.storage)
        if isinstance(storage, faiss.IndexFlat):
            return flat_storage(storage).copy()
    if isinstance(inner, faiss.IndexFlat):
        return flat_storage(inner).copy()
    ivf = ivf_of(inner)
    if ivf is not None and isinstance(faiss.downcast_index(ivf), faiss.IndexIVFFlat):
        lists = ivf.invlists
        parts = []
        for i in range(ivf.nlist):
            size = lists.list_size(i)
            if size:
                codes = faiss.rev_swig_ptr(lists.get_codes(i), size * lists.code_size)
                parts.append(codes.view(np.float32).reshape(size, ivf.d).copy())
        return np.concatenate(parts) if parts else np.empty((0, ivf.d), np.float32)
    raise UnsupportedIndexError(
        f"{type(inner).__name__} does not keep raw vectors (compressed codes), so the norms "
        "cannot be recovered: pass norms=... to NormIndex.from_faiss"
    )


def ann_params(index: faiss.Index) -> dict[str, int]:
    """The search-breadth parameters of a (possibly wrapped) IVF or HNSW index (a refine
    stage's: its base index's)."""
    inner = ann_base(inner_index(index))
    out: dict[str, int] = {}
    if isinstance(inner, faiss.IndexHNSW):
        out["efSearch"] = int(inner.hnsw.efSearch)
        return out  # (asking FAISS for an IVF inside raises, which costs ~10 us a query)
    ivf = ivf_of(inner)
    if ivf is not None:
        out["nprobe"] = int(ivf.nprobe)
        out["nlist"] = int(ivf.nlist)
    return out


def breadth_reader(inner: faiss.Index) -> Callable[[], dict[str, int]]:
    """A function returning :func:`ann_params` of ``inner`` (the index beneath an id map, kept
    alive by the caller) as it is at each call, with FAISS's structures looked up once: ~0.3 us
    a read instead of ~1.2 (the breadth is read on every search, since it can be changed on the
    FAISS index directly)."""
    inner = ann_base(inner)
    if isinstance(inner, faiss.IndexHNSW):
        hnsw = inner.hnsw
        return lambda: {"efSearch": int(hnsw.efSearch)}
    ivf = ivf_of(inner)
    if ivf is not None:
        nlist = int(ivf.nlist)
        return lambda: {"nprobe": int(ivf.nprobe), "nlist": nlist}
    return dict


def breadth_knobs(
    inner: faiss.Index, nprobe: object = None, ef_search: object = None, params: object = None
) -> dict[str, int]:
    """FAISS's own search-breadth knobs for ``inner`` (the index beneath an id map), checked:
    ``nprobe`` (IVF, 1..nlist), ``ef_search`` (HNSW, 1..MAX_EF_SEARCH), or the same given as
    ``faiss.SearchParametersIVF`` / ``faiss.SearchParametersHNSW``. Returns ``{"nprobe": n}`` or
    ``{"efSearch": n}`` (empty when none is given); a knob the index does not have is refused."""
    if params is not None:
        if isinstance(params, faiss.SearchParametersIVF) and nprobe is None:
            nprobe = int(params.nprobe)
        elif isinstance(params, faiss.SearchParametersHNSW) and ef_search is None:
            ef_search = int(params.efSearch)
        else:
            raise InvalidParameterError(
                "params must be a faiss.SearchParametersIVF (nprobe) or faiss.SearchParametersHNSW "
                f"(efSearch), not given together with the same keyword; got {type(params).__name__}"
            )
        if getattr(params, "sel", None) is not None:
            raise InvalidParameterError("params.sel (an IDSelector) is not supported: filter the results")
    out: dict[str, int] = {}
    for name, value, key in (("nprobe", nprobe, "nprobe"), ("ef_search", ef_search, "efSearch")):
        if value is None:
            continue
        have = ann_params(inner)
        if key not in have:
            kind = "IVF" if key == "nprobe" else "HNSW"
            raise InvalidParameterError(
                f"{name} applies to {kind} indexes; this one is {type(inner).__name__}"
            )
        top = have.get("nlist", MAX_EF_SEARCH)
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 1 <= value <= top:
            raise InvalidParameterError(f"{name} must be an integer in [1, {top}], got {value!r}")
        out[key] = int(value)
    return out


def set_breadth(inner: faiss.Index, knobs: dict[str, int]) -> dict[str, int]:
    """Set ``knobs`` (from :func:`breadth_knobs`) on ``inner``; returns the previous values."""
    old = {key: ann_params(inner)[key] for key in knobs}
    if "efSearch" in knobs:
        ann_base(inner).hnsw.efSearch = knobs["efSearch"]
    if "nprobe" in knobs:
        ivf_of(inner).nprobe = knobs["nprobe"]
    return old


def search_raw(
    index: faiss.Index, q: np.ndarray, k: int, params: faiss.SearchParameters | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``index.search(q, k, params=params)`` without the Python wrapper's copies and checks
    (``q`` is float32 ``(nq, index.d)`` here already): ~4 us of a single query's ~35 on 8k
    documents. ``params`` of the base index reach a refine stage's base inside FAISS's refine
    parameters (its ``k_factor`` kept): a refine stage refuses any other."""
    base_params = params  # (kept alive while FAISS holds a pointer to it)
    if params is not None and (refine := refine_of(index)) is not None:
        params = faiss.IndexRefineSearchParameters(k_factor=refine.k_factor, base_index_params=base_params)
    q = np.ascontiguousarray(q, dtype=np.float32)
    nq = q.shape[0]
    dist = np.empty((nq, k), dtype=np.float32)
    labels = np.empty((nq, k), dtype=np.int64)
    index.search_c(nq, faiss.swig_ptr(q), k, faiss.swig_ptr(dist), faiss.swig_ptr(labels), params)
    return dist, labels
