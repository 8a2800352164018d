"""An IVF beneath FAISS's ``IndexIDMap`` / ``IndexIDMap2``, kept consistent across removals.

Beneath an id map the IVF stores, as each vector's id, its position in the id map's ``id_map``
(``0 .. ntotal - 1`` in the order added). FAISS's ``IndexIDMap.remove_ids`` removes the vectors
from the IVF and compacts ``id_map``, but leaves the IVF's stored positions as they were: every
vector added after a removed one then maps to the wrong user id (FAISS's own search returns
them; faiss 1.15.1), and a position past the end makes ``reconstruct`` fail. Compaction keeps
the order, so the right position of each remaining vector is its rank among the stored ones:
:func:`renumber_positions` writes those back (and rebuilds the IVF's direct map, which holds the
old ones), which makes the index what an ``IndexIDMap`` over an ``IndexFlat`` would be.
"""

from __future__ import annotations

import faiss
import numpy as np

from normrank.errors import UnsupportedIndexError
from normrank.search.faiss_info import inner_index, is_idmap, ivf_of, refine_of, stored_ids

__all__ = ["check_positions", "idmap_ivf", "positions_consistent", "remove_ids", "renumber_positions"]


def idmap_ivf(index: faiss.Index) -> faiss.IndexIVF | None:
    """The IVF that stores id-map positions as its ids (an IVF beneath an id map, possibly under
    a pre-transform; not a refine stage's base, which FAISS cannot remove from), else None."""
    if not is_idmap(index) or refine_of(index) is not None:
        return None
    return ivf_of(inner_index(index))


def positions_consistent(index: faiss.Index) -> bool:
    """Whether the positions stored in ``index``'s IVF are exactly ``0 .. ntotal - 1`` (True
    where there is no such IVF)."""
    ivf = idmap_ivf(index)
    if ivf is None:
        return True
    held = np.sort(stored_ids(ivf))
    return held.size == index.ntotal and np.array_equal(held, np.arange(held.size))


def check_positions(index: faiss.Index) -> None:
    """Refuse an id map over an IVF whose stored positions are stale (FAISS's own
    ``remove_ids`` on it, module docstring): its ids would come back shifted."""
    if not positions_consistent(index):
        raise UnsupportedIndexError(
            f"the IVF beneath this {type(index).__name__} stores positions that no longer match its "
            "id_map: FAISS's IndexIDMap.remove_ids leaves them stale (its own search then returns "
            "wrong ids). Rebuild the index from your vectors, and remove through the NormIndex "
            "(NormIndex.from_faiss(index, norms=...).remove(ids) keeps the positions consistent)"
        )


def remove_ids(index: faiss.Index, ids: np.ndarray) -> int:
    """``index.remove_ids`` of ``ids``, leaving an id map over an IVF consistent. FAISS removes
    from an IVF with a hash-table direct map only through an ``IDSelectorArray``, and the id
    map hands it a translated selector: the direct map is dropped for the removal and rebuilt
    with the positions (:func:`renumber_positions`)."""
    ivf = idmap_ivf(index)
    if ivf is None:
        own = ivf_of(index)
        if own is not None and own.direct_map.type == faiss.DirectMap.Hashtable:
            return index.remove_ids(faiss.IDSelectorArray(ids))  # the ids are the IVF's own
        return index.remove_ids(faiss.IDSelectorBatch(ids))
    kind = ivf.direct_map.type
    if kind == faiss.DirectMap.Hashtable:
        ivf.set_direct_map_type(faiss.DirectMap.NoMap)
    try:
        return index.remove_ids(faiss.IDSelectorBatch(ids))
    finally:
        renumber_positions(index)
        if ivf.direct_map.type != kind:
            ivf.set_direct_map_type(kind)


def renumber_positions(index: faiss.Index) -> None:
    """Give each vector of the IVF beneath ``index``'s id map its position in the compacted
    ``id_map`` (its rank among the stored positions; see the module docstring)."""
    ivf = idmap_ivf(index)
    if ivf is None:
        return
    held = np.sort(stored_ids(ivf))
    if held.size != index.ntotal or (held[1:] == held[:-1]).any():  # sorted: repeats are neighbours
        raise RuntimeError("the IVF beneath the id map holds a different set of vectors")  # caller types it
    if np.array_equal(held, np.arange(held.size)):
        return
    lists = ivf.invlists
    for lst in range(ivf.nlist):
        size = lists.list_size(lst)
        if not size:
            continue
        old = faiss.rev_swig_ptr(lists.get_ids(lst), size).astype(np.int64)
        new = np.ascontiguousarray(np.searchsorted(held, old), dtype=np.int64)
        codes = faiss.rev_swig_ptr(lists.get_codes(lst), size * lists.code_size).copy()
        lists.update_entries(lst, 0, size, faiss.swig_ptr(new), faiss.swig_ptr(codes))
    kind = ivf.direct_map.type
    if kind != faiss.DirectMap.NoMap:  # it maps the old positions: build it again
        ivf.set_direct_map_type(faiss.DirectMap.NoMap)
        ivf.set_direct_map_type(kind)
