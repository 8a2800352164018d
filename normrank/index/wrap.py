"""Turning a FAISS index that already holds vectors into a NormIndex state
(:meth:`normrank.NormIndex.from_faiss`)."""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping

import faiss
import numpy as np
from numpy.typing import ArrayLike

from normrank.errors import InvalidInputError, InvalidParameterError, UnsupportedIndexError
from normrank.index.idmap_ivf import check_positions
from normrank.index.state import IndexState
from normrank.search.doc_ids import DocIds
from normrank.search.faiss_info import (
    ann_params,
    hashed_if_hidden,
    inner_index,
    is_gpu,
    is_idmap,
    ivf_of,
    raw_vectors,
    refine_of,
    set_breadth,
    stored_ids,
    with_ids,
)
from normrank.search.rows import row_source
from normrank.validation import as_ids, split_norms

__all__ = ["new_faiss_index", "state_from_faiss"]

_UNIT_TOLERANCE = 1e-4
# Unit vectors normalised in float32 (faiss.normalize_L2, numpy) are within ~1e-6 of length 1.
_NORMS_GIVEN_TOLERANCE = 1e-3


def new_faiss_index(dim: int | faiss.Index, factory: str | None) -> tuple[faiss.Index, str | None]:
    """The empty FAISS index a ``NormIndex(dim, factory=...)`` starts from (and its factory
    string): ``faiss.index_factory(dim, factory, METRIC_INNER_PRODUCT)``, or the user's own
    empty inner-product index."""
    if isinstance(dim, faiss.Index):
        if dim.metric_type != faiss.METRIC_INNER_PRODUCT:
            raise UnsupportedIndexError(
                "NormIndex needs an inner-product index (faiss.METRIC_INNER_PRODUCT) so that "
                "scores over unit vectors are cosines; use NormIndex.from_faiss for a filled L2 index"
            )
        if dim.ntotal:
            raise UnsupportedIndexError(
                f"the index already holds {dim.ntotal} vectors: use NormIndex.from_faiss(index)"
            )
        return dim, None
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 1:
        raise InvalidParameterError(f"dim must be a positive integer, got {dim!r}")
    try:
        index = faiss.index_factory(int(dim), str(factory), faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as e:
        # FAISS prefixes its message with the C++ function, file and line: keep the message
        why = re.sub(r"^Error in .* at \S+:\d+: ", "", str(e).strip())
        raise InvalidParameterError(
            f"faiss.index_factory rejected {factory!r}: {why} (examples: 'Flat', 'HNSW32', 'IVF1024,Flat')"
        ) from e
    if isinstance(faiss.downcast_index(index), faiss.IndexHNSWPQ):
        # The factory builds it over L2 whatever metric it is asked for; built over inner product
        # (its constructor allows it) the graph links by the PQ's L2 code-to-code table, and
        # FAISS's own search then misses its codes' best cosines (16-d, 600 vectors, efSearch
        # 1000: recall 0.85 of the codes' own top 8).
        raise UnsupportedIndexError(
            f"{factory!r}: FAISS builds HNSW over PQ codes for L2 only, so it cannot rank by cosine; "
            "use 'HNSW32,SQ8' (compressed codes under a graph) or 'IVF1024,PQ48' (PQ codes)"
        )
    return index, factory


def state_from_faiss(
    index: faiss.Index,
    *,
    norms: ArrayLike | Mapping[int, float] | None = None,
    alpha: float = 0.0,
    k_factor: int = 10,
) -> IndexState:
    """The state of a NormIndex over the vectors in ``index`` (``NormIndex.from_faiss``).

    Without ``norms``, the raw vectors are read back (IndexFlatL2/IP, IndexIDMap/IDMap2 over a
    flat index, IndexIVFFlat, IndexHNSWFlat / "HNSW32,Flat"), their norms kept and the vectors
    replaced by unit vectors in a new inner-product index of the same kind; ``index`` itself is
    left untouched. An IVF keeps the user's centroids (normalised: an inner-product quantizer
    over unit vectors ranks lists by a centroid's direction) and nprobe. An HNSW graph was
    built over the raw vectors, so for L2 or inner product it links the wrong neighbours for
    cosine: it is rebuilt over the unit vectors with the same M, efConstruction and efSearch
    (a warning says so; progress shows on a terminal).

    With ``norms``, ``index`` must already hold unit vectors under inner product (a cosine
    index, PQ or HNSW included); it is wrapped as is (an index without ids, other than an IVF,
    inside an ``IndexIDMap``; an IVF beneath a pre-transform gets FAISS's hash-table direct map,
    since only there are vectors read back by id). ``norms`` is one value per stored vector
    in the order the vectors were added (``np.linalg.norm(x, axis=1)`` of the ``x`` given to
    ``add`` / ``add_with_ids``), or a mapping ``{id: norm}`` covering every stored id. An IVF
    index (not inside an id map) keeps its vectors in list order and no record of the order they
    were added (``add`` and ``add_with_ids`` with any permutation of ``0 .. ntotal - 1`` leave the
    same ids), so there only the mapping can be matched: after ``index.add(x)``, pass
    ``norms=dict(enumerate(np.linalg.norm(x, axis=1)))``.

    An IVF's ``nprobe`` above its ``nlist`` is clamped to ``nlist``, as FAISS clamps it.
    """
    check_positions(index)  # before any read: stale positions read the wrong rows
    ids = stored_ids(index)
    if ids is None:
        ids = np.arange(index.ntotal, dtype=np.int64)
    if norms is not None:
        _clamp_nprobe(index)  # wrapped as is
        return _wrap_unit(index, ids, norms, alpha, k_factor)
    if not index.ntotal:
        raise UnsupportedIndexError(
            f"the index is empty ({type(index).__name__}, ntotal 0): there is nothing to wrap; build "
            "NormIndex(dim, factory=...) or NormIndex(empty_inner_product_index) and add raw vectors"
        )
    raw = raw_vectors(index)
    if is_idmap(index) and ivf_of(inner_index(index)) is not None and refine_of(index) is None:
        # raw_vectors reads the IVF's lists (list order), whose ids are positions in the id map
        # (the order added): the id of each vector read is the id map's entry at its position.
        ids = ids[stored_ids(inner_index(index))]
    unit, raw_norms = split_norms(raw, what="stored vectors")
    if np.all(np.abs(raw_norms - 1.0) < _UNIT_TOLERANCE):
        raise UnsupportedIndexError(
            "the stored vectors are already unit length, so their raw norms are lost: "
            "pass norms=... (computed from your raw embeddings) to NormIndex.from_faiss"
        )
    ids = as_ids(ids, raw.shape[0])
    fresh, factory = _unit_twin(inner_index(index), unit)
    target = with_ids(fresh)
    _add_with_progress(target, unit, ids, isinstance(fresh, faiss.IndexHNSW))
    ids, raw_norms = _by_id_if_ivf(target, ids, raw_norms)
    return IndexState(
        target, ids, raw_norms, next_id=int(ids.max()) + 1 if ids.size else 0,
        alpha=alpha, k_factor=k_factor, factory=factory,
    )  # fmt: skip


def _norms_in_storage_order(index: faiss.Index, ids: np.ndarray, norms) -> np.ndarray:
    """``norms`` (see :func:`state_from_faiss`) as float64, one per stored vector in storage
    order (the order of ``ids``)."""
    if isinstance(norms, Mapping):
        missing = [int(i) for i in ids if int(i) not in norms]
        if missing or len(norms) != ids.size:
            raise InvalidInputError(
                f"norms as a mapping must give one norm per stored id ({ids.size}); "
                + (f"missing ids {missing[:5]}" if missing else f"it has {len(norms)} entries")
            )
        return _numbers([norms[int(i)] for i in ids])
    n = _numbers(norms)
    if n.shape != (index.ntotal,):
        raise InvalidInputError(
            f"norms must be {index.ntotal} values, one per stored vector, got shape {n.shape}"
        )
    if is_idmap(index) or ivf_of(index) is None or refine_of(index) is not None:
        return n  # stored in the order added: the id map's order, or ids 0 .. ntotal - 1
    # IVF lists hold the vectors out of the order they were added, and nothing in the index says
    # which order that was: ids 0 .. n-1 from add() and a permutation of them from add_with_ids
    # look alike, and reading the array by id would weight the wrong vectors in the second case.
    raise UnsupportedIndexError(
        "an IVF index keeps its vectors in list order and no record of the order they were added "
        "(add() and add_with_ids() look alike), so an array of norms cannot be matched to them: "
        "pass norms={id: norm, ...} (after index.add(x): dict(enumerate(np.linalg.norm(x, axis=1))))"
    )


def _clamp_nprobe(index: faiss.Index) -> None:
    """FAISS searches ``min(nprobe, nlist)`` lists: an IVF set to more is clamped here the same
    way (the search is unchanged), so that the wrapped index holds a valid breadth."""
    ivf = ivf_of(index)
    if ivf is not None and ivf.nprobe > ivf.nlist:
        ivf.nprobe = ivf.nlist


def _numbers(values) -> np.ndarray:
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise InvalidInputError(f"norms must be numbers: {e}") from e


def _wrap_unit(index: faiss.Index, ids: np.ndarray, norms, alpha: float, k_factor: int) -> IndexState:
    """``index`` holds unit vectors under inner product: wrap it as is, with the given norms."""
    n = _norms_in_storage_order(index, ids, norms)
    if not (np.isfinite(n).all() and (n > 0).all()):
        raise InvalidInputError(
            f"norms must be finite values > 0 (got {int((~(np.isfinite(n) & (n > 0))).sum())} others)"
        )
    if index.metric_type != faiss.METRIC_INNER_PRODUCT:
        raise UnsupportedIndexError("with norms=, the index must be inner-product over unit vectors")
    if is_gpu(index):
        index = faiss.index_gpu_to_cpu(index)
    # The weight-order scan reads rows by storage position (the id map's order, an IVF's lists, a
    # refine stage's refine index): only an IVF beneath a pre-transform is read by id, through a
    # direct map. A refine stage takes ids only through an id map.
    refined = refine_of(index) is not None
    if not refined:
        hashed_if_hidden(index)
    if is_idmap(index) or (ivf_of(index) is not None and not refined):
        wrapped = index  # an id map (IDMap or IDMap2) or an IVF, as the user built it
    else:
        if not np.array_equal(ids, np.arange(index.ntotal)):
            raise UnsupportedIndexError("cannot wrap this index type with custom ids")
        # IndexIDMap insists on an empty index: build it empty, then point it at this one.
        wrapped = faiss.IndexIDMap(faiss.IndexFlatIP(index.d))
        wrapped.index = index
        wrapped.own_fields = False
        wrapped.referenced_objects = [index]  # keeps the Python object (and C++ index) alive
        wrapped.ntotal = index.ntotal
        wrapped.is_trained = index.is_trained
        faiss.copy_array_to_vector(ids, wrapped.id_map)
    ids, n = _by_id_if_ivf(wrapped, ids, n)
    _check_unit(wrapped, ids)
    return IndexState(
        wrapped, ids, n.astype(np.float32), next_id=int(ids.max()) + 1 if ids.size else 0,
        alpha=alpha, k_factor=k_factor,
    )  # fmt: skip


def _by_id_if_ivf(index: faiss.Index, ids: np.ndarray, norms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An IVF's documents (not beneath an id map or a refine stage) may be kept in any order:
    its rows are found from the ids in its lists. Sorted by id, ids 0 .. n - 1 (``add``'s) need
    no id array (8 bytes a document), whatever the list order they were read in."""
    if is_idmap(index) or isinstance(index, faiss.IndexRefine) or ivf_of(index) is None:
        return ids, norms
    by_id = np.argsort(ids, kind="stable")
    return ids[by_id], norms[by_id]


def _check_unit(wrapped: faiss.Index, ids: np.ndarray, sample: int = 256) -> None:
    """With ``norms=``, the stored vectors must be unit: raw vectors under inner product would be
    scored ``d . q * w``, every result plausible and wrong. Checked on up to ``sample`` stored
    vectors where FAISS keeps them exactly (flat storage, IVF-Flat lists, an HNSW's flat
    storage); compressed codes decode to approximations and are not checked."""
    inner = inner_index(wrapped)
    storage = faiss.downcast_index(inner.storage) if isinstance(inner, faiss.IndexHNSW) else inner
    if isinstance(inner, faiss.IndexRefine):
        storage = faiss.downcast_index(inner.refine_index)
    ivf = None if isinstance(inner, faiss.IndexRefine) else ivf_of(inner)
    exact = isinstance(storage, faiss.IndexFlat) or (
        ivf is not None and isinstance(faiss.downcast_index(ivf), faiss.IndexIVFFlat)
    )
    if not exact or not ids.size:
        return
    picked = np.linspace(0, ids.size - 1, min(ids.size, sample)).astype(np.int64)
    rows = row_source(wrapped, inner, DocIds.of(ids), 0).gather(picked)
    lengths = np.linalg.norm(rows.astype(np.float64), axis=1)
    worst = float(np.max(np.abs(lengths - 1.0)))
    if worst > _NORMS_GIVEN_TOLERANCE:
        raise InvalidInputError(
            "with norms=, the index must hold unit vectors, but its stored vectors have lengths "
            f"{lengths.min():.4g}..{lengths.max():.4g}: normalise before adding (faiss.normalize_L2), "
            "or wrap an index of raw vectors without norms= (their norms are read from it)"
        )


def _unit_twin(inner: faiss.Index, unit: np.ndarray) -> tuple[faiss.Index, str]:
    """An empty inner-product index of ``inner``'s kind for ``unit`` vectors, and its factory."""
    d = inner.d
    if isinstance(inner, faiss.IndexRefine):
        return _refine_twin(inner, unit)
    ivf = ivf_of(inner)
    if ivf is not None:
        centroids = ivf.quantizer.reconstruct_n(0, ivf.nlist).astype(np.float64)
        lengths = np.linalg.norm(centroids, axis=1, keepdims=True)
        fresh = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, ivf.nlist, faiss.METRIC_INNER_PRODUCT)
        fresh.nprobe = min(ivf.nprobe, ivf.nlist)  # FAISS searches at most nlist lists
        if (lengths > 0).all() and np.isfinite(centroids).all():
            fresh.quantizer.add((centroids / lengths).astype(np.float32))
            fresh.is_trained = True
        else:  # a zero centroid has no direction: train afresh
            fresh.train(unit)
        return fresh, f"IVF{ivf.nlist},Flat"
    if isinstance(inner, faiss.IndexHNSW):
        hnsw = inner.hnsw
        m = hnsw.nb_neighbors(1)
        fresh = faiss.IndexHNSWFlat(d, m, faiss.METRIC_INNER_PRODUCT)
        fresh.hnsw.efConstruction, fresh.hnsw.efSearch = hnsw.efConstruction, hnsw.efSearch
        warnings.warn(
            f"from_faiss: rebuilding the HNSW graph (M={m}, efConstruction={hnsw.efConstruction}) over "
            f"the {inner.ntotal} unit vectors: the original graph links neighbours of the raw vectors",
            stacklevel=4,
        )
        return fresh, f"HNSW{m},Flat"
    return faiss.index_factory(d, "Flat", faiss.METRIC_INNER_PRODUCT), "Flat"


def _refine_twin(inner: faiss.IndexRefine, unit: np.ndarray) -> tuple[faiss.Index, str]:
    """A refine stage rebuilt for the unit vectors: the same kind by FAISS's own reverse factory,
    trained on them (the codes of the raw vectors encode the wrong directions), with the same
    refine ``k_factor`` and breadth."""
    from faiss.contrib.factory_tools import reverse_index_factory

    try:
        factory = reverse_index_factory(inner)
        fresh = faiss.index_factory(inner.d, factory, faiss.METRIC_INNER_PRODUCT)
    except (NotImplementedError, RuntimeError) as e:
        raise UnsupportedIndexError(
            f"cannot rebuild this {type(inner).__name__} over unit vectors ({e}): build "
            "NormIndex(dim, factory='...,RFlat') and add the raw vectors, or pass norms=... with an "
            "index of unit vectors"
        ) from e
    warnings.warn(
        f"from_faiss: retraining {factory!r} over the {inner.ntotal} unit vectors: the codes of the "
        "raw vectors encode the wrong directions for cosine",
        stacklevel=4,
    )
    fresh.train(unit)
    fresh.k_factor = inner.k_factor
    breadth = ann_params(inner)
    set_breadth(fresh, {key: breadth[key] for key in ("nprobe", "efSearch") if key in breadth})
    return fresh, factory


def _add_with_progress(target: faiss.Index, unit: np.ndarray, ids: np.ndarray, slow: bool) -> None:
    """``add_with_ids``; a slow build (an HNSW graph of 50k rows or more) shows its progress, in
    chunks: a bar on a terminal, plain lines in a log (normrank.progress)."""
    if not slow or unit.shape[0] < 50_000:
        target.add_with_ids(unit, ids)
        return
    from normrank.progress import progress_bar

    step = 20_000
    with progress_bar(transient=True) as bar:
        task = bar.add_task("rebuilding HNSW", total=unit.shape[0])
        for start in range(0, unit.shape[0], step):
            target.add_with_ids(unit[start : start + step], ids[start : start + step])
            bar.advance(task, min(step, unit.shape[0] - start))
