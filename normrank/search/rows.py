"""Rows of a FAISS index read where FAISS keeps them: the weight-order scan's only access to the
document vectors. Nothing here copies more than one bounded block.

* :class:`FlatRows`: float32 storage (an HNSW's flat storage) viewed in place; inner products
  by FAISS's ``fvec_inner_products_by_idx`` straight from storage (no gather), blocks gathered
  for a batch.
* :class:`FaissCodeRows`: FAISS codes (SQ / PQ) in one array (an HNSW's compressed storage):
  the codes gathered and decoded by FAISS's ``sa_decode``, a block at a time.
* :class:`ListRows`: an IVF's inverted lists of any codes, read in place by (list, offset):
  an IVF-Flat, IVF-SQ or IVF-PQ through a private IVF of its kind that shares the lists and
  maps a document position to (list, offset) (FAISS's ``reconstruct_batch``, one C++ loop);
  other kinds list by list (IVF-Flat rows are the lists' float32 codes, other codes are decoded
  by the IVF's own ``sa_decode``, the list number as prefix), a block at a time. The user's
  index gets no direct map.
* :class:`FloatLists`: not a row source: an IVF-Flat's lists viewed whole, list by list, for the
  flat product over them (:func:`normrank.search.flat.weighted_lists_search`).
* :class:`PositionRows`: any other index beneath an id map (pre-transforms, refine stages):
  FAISS's ``reconstruct_batch`` by storage position, a block at a time.
* :class:`IdRows`: what is left (an IVF beneath a pre-transform): ``reconstruct_batch`` by id
  (through the IVF's direct map, which :func:`~normrank.search.faiss_info.with_ids` sets there).

Where a document is in FAISS's storage costs nothing per document, except: an HNSW holding
removed vectors (int32 FAISS position of each live document) and an IVF (int64 list and
offset of each document in its reader, or an int32 position in the concatenation of the lists
where it has none; built at the first scan).

Scores read through a row source are ``q . row`` of the stored (decoded) vector: exact on flat
storage, the codes' own cosine estimate on compressed codes (FAISS's search computes the same
quantity in another summation order).
"""

from __future__ import annotations

import faiss
import numpy as np

from normrank.search.doc_ids import DocIds
from normrank.search.faiss_info import flat_storage, is_idmap, stored_ids
from normrank.search.id_lookup import IdLookup

__all__ = [
    "BLOCK_ROWS",
    "FaissCodeRows",
    "FlatRows",
    "FloatLists",
    "IdRows",
    "ListRows",
    "PositionRows",
    "PrefixCopy",
    "readable_lists",
    "row_source",
]

# Rows decoded or gathered at a time: 384-d float32, 1.5 MB.
BLOCK_ROWS = 1024


class FlatRows:
    """Float32 rows of an ``IndexFlat`` in place. ``internal``: FAISS position of each document
    position (None: the same; only an HNSW holding removed vectors needs it)."""

    def __init__(self, flat: faiss.IndexFlat, internal: np.ndarray | None = None) -> None:
        self._flat = flat  # keeps the storage alive
        self.x = flat_storage(flat)
        self._internal = internal

    def _at(self, pos: np.ndarray) -> np.ndarray:
        return pos if self._internal is None else self._internal[pos]

    def gather(self, pos: np.ndarray) -> np.ndarray:
        return self.x.take(self._at(pos), axis=0)

    def inner(self, q: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """``q . x_p`` for each document position ``p`` (float32 ``q`` of shape ``(d,)``)."""
        idx = np.ascontiguousarray(self._at(pos), dtype=np.int64)
        out = np.empty(idx.size, dtype=np.float32)
        faiss.fvec_inner_products_by_idx(
            faiss.swig_ptr(out), faiss.swig_ptr(q), faiss.swig_ptr(self.x), faiss.swig_ptr(idx),
            q.size, 1, idx.size,
        )  # fmt: skip
        return out

    @property
    def nbytes(self) -> int:
        return 0 if self._internal is None else self._internal.nbytes


class _Decoded:
    """Shared by the decoding sources: inner products over decoded blocks."""

    def gather(self, pos: np.ndarray) -> np.ndarray:  # pragma: no cover - overridden
        raise NotImplementedError

    def inner(self, q: np.ndarray, pos: np.ndarray) -> np.ndarray:
        out = np.empty(pos.size, dtype=np.float32)
        for s in range(0, pos.size, BLOCK_ROWS):
            rows = np.ascontiguousarray(self.gather(pos[s : s + BLOCK_ROWS]), dtype=np.float32)
            faiss.fvec_inner_products_ny(
                faiss.swig_ptr(out[s:]), faiss.swig_ptr(q), faiss.swig_ptr(rows), q.size, rows.shape[0]
            )
        return out


class FaissCodeRows(_Decoded):
    """FAISS codes of an ``IndexFlatCodes`` (SQ, PQ, ...; not the scan codes of
    :mod:`normrank.search.scan_codes`) decoded by FAISS, a block at a time."""

    def __init__(self, storage: faiss.Index, internal: np.ndarray | None = None) -> None:
        self._storage = storage
        n, size = storage.ntotal, storage.code_size
        self.codes = faiss.rev_swig_ptr(storage.codes.data(), n * size).reshape(n, size)
        self._internal = internal

    def gather(self, pos: np.ndarray) -> np.ndarray:
        at = pos if self._internal is None else self._internal[pos]
        out = np.empty((at.size, self._storage.d), dtype=np.float32)
        for s in range(0, at.size, BLOCK_ROWS):
            codes = np.ascontiguousarray(self.codes.take(at[s : s + BLOCK_ROWS], axis=0))
            m = codes.shape[0]
            self._storage.sa_decode_c(m, faiss.swig_ptr(codes), faiss.swig_ptr(out[s : s + m]))
        return out

    @property
    def nbytes(self) -> int:
        return 0 if self._internal is None else self._internal.nbytes


class IdRows(_Decoded):
    """Rows reconstructed by FAISS from their ids (``doc_ids[pos]``), a block at a time."""

    def __init__(self, index: faiss.Index, doc_ids: DocIds) -> None:
        self._index, self._ids = index, doc_ids

    def gather(self, pos: np.ndarray) -> np.ndarray:
        out = np.empty((pos.size, self._index.d), dtype=np.float32)
        for s in range(0, pos.size, BLOCK_ROWS):
            ids = np.ascontiguousarray(self._ids.at(pos[s : s + BLOCK_ROWS]), dtype=np.int64)
            out[s : s + ids.size] = self._index.reconstruct_batch(ids)
        return out

    nbytes = 0


class PositionRows(_Decoded):
    """Rows reconstructed by FAISS from their storage positions (``internal[pos]``, or ``pos``
    itself), a block at a time: any index that reconstructs by position."""

    def __init__(self, index: faiss.Index, internal: np.ndarray | None = None) -> None:
        self._index, self._internal = index, internal

    def gather(self, pos: np.ndarray) -> np.ndarray:
        at = pos if self._internal is None else self._internal[pos]
        out = np.empty((at.size, self._index.d), dtype=np.float32)
        for s in range(0, at.size, BLOCK_ROWS):
            block = np.ascontiguousarray(at[s : s + BLOCK_ROWS], dtype=np.int64)
            out[s : s + block.size] = self._index.reconstruct_batch(block)
        return out

    @property
    def nbytes(self) -> int:
        return 0 if self._internal is None else self._internal.nbytes


class ListRows(_Decoded):
    """Rows of an IVF read from its inverted lists in place. ``at``: each document's position
    in the concatenation of the lists (list ``l`` starts at the sum of the sizes before it, so
    a position is ``(list, offset)`` with nlist integers, no per-document hash). An
    ``IndexIVFFlat``, ``IndexIVFScalarQuantizer`` or ``IndexIVFPQ`` instead gets a reader
    (:func:`_offset_reader`) and ``at`` is None."""

    def __init__(self, ivf: faiss.IndexIVF, at: np.ndarray) -> None:
        self._ivf = ivf
        lists = ivf.invlists
        sizes = np.array([lists.list_size(i) for i in range(ivf.nlist)], dtype=np.int64)
        self._start = np.concatenate([[0], np.cumsum(sizes)])
        self._code_size = int(lists.code_size)
        self._flat = isinstance(ivf, faiss.IndexIVFFlat)
        self._coarse_code_size = int(ivf.coarse_code_size())
        self._views: dict[int, np.ndarray] = {}  # per list, at most nlist views (no copies)
        self.at = at
        self._reader = None
        if at.size:
            self._reader = _offset_reader(ivf, self._start, at)
        if self._reader is not None:
            self.at = None  # the reader's int64 (list, offset) per document replaces it

    def _list_codes(self, lst: int) -> np.ndarray:
        view = self._views.get(lst)
        if view is None:
            size = int(self._start[lst + 1] - self._start[lst])
            raw = faiss.rev_swig_ptr(self._ivf.invlists.get_codes(lst), size * self._code_size)
            view = self._views[lst] = raw.reshape(size, self._code_size)
        return view

    def _gather_codes(self, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The code of each concatenated position ``at`` and its list number."""
        by = np.argsort(at, kind="stable")
        sorted_at = at[by]
        lst = np.searchsorted(self._start, sorted_at, side="right") - 1
        cut = np.flatnonzero(np.diff(lst)) + 1
        codes = np.empty((at.size, self._code_size), dtype=np.uint8)
        for a, b in zip(np.r_[0, cut], np.r_[cut, at.size], strict=True):
            lo = int(lst[a])
            codes[by[a:b]] = self._list_codes(lo).take(sorted_at[a:b] - self._start[lo], axis=0)
        lists = np.empty(at.size, dtype=np.int64)
        lists[by] = lst
        return codes, lists

    def gather(self, pos: np.ndarray) -> np.ndarray:
        if self._reader is not None:  # FAISS's own loop over (list, offset), in C++
            return self._reader.reconstruct_batch(np.ascontiguousarray(pos, dtype=np.int64))
        at = self.at[pos]
        d = self._ivf.d
        out = np.empty((at.size, d), dtype=np.float32)
        if self._code_size >= 1 << 32:  # lists of packed blocks (fast scan): no code per row
            return self._by_offset(at, out)
        for s in range(0, at.size, BLOCK_ROWS):
            codes, lists = self._gather_codes(at[s : s + BLOCK_ROWS])
            m = codes.shape[0]
            if self._flat:  # IVF-Flat codes are the float32 rows
                out[s : s + m] = codes.view(np.float32).reshape(m, d)
                continue
            # FAISS's standalone code: the list number (little-endian, coarse_code_size bytes)
            # then the list's code; sa_decode adds the centroid back where codes are residuals.
            head = self._coarse_code_size
            sa = np.empty((m, head + self._code_size), dtype=np.uint8)
            sa[:, :head] = lists.astype("<i8").view(np.uint8).reshape(m, 8)[:, :head]
            sa[:, head:] = codes
            self._ivf.sa_decode_c(m, faiss.swig_ptr(sa), faiss.swig_ptr(out[s : s + m]))
        return out

    def _by_offset(self, at: np.ndarray, out: np.ndarray) -> np.ndarray:
        """FAISS's reconstruct_from_offset row by row (~1-3 us a row): the one reader of codes
        packed in blocks (``BlockInvertedLists``, IVF fast scan), whose rows have no offset."""
        lst = np.searchsorted(self._start, at, side="right") - 1
        for i, (lo, a) in enumerate(zip(lst.tolist(), at.tolist(), strict=True)):
            self._ivf.reconstruct_from_offset(lo, a - int(self._start[lo]), faiss.swig_ptr(out[i]))
        return out

    @property
    def nbytes(self) -> int:
        if self._reader is not None:
            return 8 * int(self._reader.direct_map.array.size()) + self._start.nbytes
        return self.at.nbytes + self._start.nbytes


def _offset_reader(ivf: faiss.IndexIVF, start: np.ndarray, at: np.ndarray) -> faiss.IndexIVF | None:
    """A private IVF of ``ivf``'s kind over its own lists (shared, not copied, not owned) whose
    array direct map sends a document position to its (list << 32 | offset): FAISS reads the
    rows by ``reconstruct_batch`` in one C++ loop (8 bytes a document instead of the int32
    position; 50k x 384, 5k rows: IVF-Flat ~1.4 us a row against ~6 for a Python loop over
    lists, IVF-SQ8 1.5 against 8.2, IVF-PQ48 0.5 against 1.3). None for other kinds (IVF-Flat,
    IVF-SQ and IVF-PQ have one; the rest are read list by list)."""
    kind = type(ivf)
    if kind is faiss.IndexIVFFlat:
        reader = faiss.IndexIVFFlat(ivf.quantizer, ivf.d, ivf.nlist, ivf.metric_type)
    elif kind is faiss.IndexIVFScalarQuantizer:
        reader = faiss.IndexIVFScalarQuantizer(
            ivf.quantizer, ivf.d, ivf.nlist, ivf.sq.qtype, ivf.metric_type, ivf.by_residual
        )
        reader.sq = ivf.sq  # (a copy of the trained quantizer: 2 d floats)
    elif kind is faiss.IndexIVFPQ:
        reader = faiss.IndexIVFPQ(ivf.quantizer, ivf.d, ivf.nlist, ivf.pq.M, ivf.pq.nbits, ivf.metric_type)
        # The codebooks only (256 d floats at 8 bits): a copy of the whole quantizer would copy
        # its symmetric-distance table too (M x 256 x 256 floats: 12.6 MB at M = 48).
        faiss.copy_array_to_vector(faiss.vector_to_array(ivf.pq.centroids), reader.pq.centroids)
        reader.by_residual = ivf.by_residual
    else:
        return None
    if reader.code_size != ivf.code_size:
        return None
    lst = np.searchsorted(start, at, side="right") - 1
    lo = (lst.astype(np.int64) << 32) | (at - start[lst]).astype(np.int64)
    reader.replace_invlists(ivf.invlists, False)
    reader.ntotal, reader.is_trained = ivf.ntotal, True
    reader.direct_map.type = faiss.DirectMap.Array
    faiss.copy_array_to_vector(lo, reader.direct_map.array)
    reader.referenced_objects = [ivf]  # the lists and quantizer live as long as the reader
    return reader


class FloatLists:
    """The inverted lists of an ``IndexIVFFlat`` read in place, for the flat product over them
    (:func:`normrank.search.flat.weighted_lists_search`): ``pieces`` holds, for each nonempty
    list, its float32 codes viewed as ``(m, d)`` unit rows and its stored ids (a view too),
    lists longer than FAISS's database block cut into pieces of that size (``sizes``: their rows);
    ``position_of`` maps the stored ids to document positions. A few hundred bytes a list
    (views, no copies), nothing per document; built once per index state (the views are valid
    until the lists change, which makes a new state)."""

    def __init__(self, index: faiss.Index, ivf: faiss.IndexIVF, lookup: IdLookup) -> None:
        """``ivf``: ``index`` itself or beneath its id map (:func:`readable_lists`); ``lookup``:
        the id -> position table of the documents (beneath an id map the stored ids are the
        positions: no table)."""
        self._ivf = ivf  # keeps the lists alive
        self.position_of = IdLookup(DocIds(None, lookup.n)) if is_idmap(index) else lookup
        lists, d = ivf.invlists, int(ivf.d)
        step = max(1, int(faiss.cvar.distance_compute_blas_database_bs))
        self.pieces, self.sizes = [], []
        for lst in range(ivf.nlist):
            m = lists.list_size(lst)
            if m:
                rows = faiss.rev_swig_ptr(lists.get_codes(lst), m * 4 * d).view(np.float32).reshape(m, d)
                ids = faiss.rev_swig_ptr(lists.get_ids(lst), m)
                for a in range(0, m, step):
                    self.pieces.append((rows[a : a + step], ids[a : a + step]))
                    self.sizes.append(min(step, m - a))
        self.sizes = np.array(self.sizes, dtype=np.int64)

    @property
    def nbytes(self) -> int:
        return self.sizes.nbytes  # (the rows and ids are views of FAISS's lists)


def readable_lists(index: faiss.Index, inner: faiss.Index, n_docs: int, n_removed: int) -> bool:
    """Whether :class:`FloatLists` can read ``inner``'s rows (``index`` itself, or beneath its id
    map): an ``IndexIVFFlat`` whose lists are FAISS's in-memory arrays of float32 codes, holding
    the ``n_docs`` documents and no removed one. Not another kind of IVF (SQ / PQ codes, a
    subclass), a pre-transform or a refine stage."""
    if n_removed or type(inner) is not faiss.IndexIVFFlat or (index is not inner and not is_idmap(index)):
        return False
    if not isinstance(faiss.downcast_InvertedLists(inner.invlists), faiss.ArrayInvertedLists):
        return False
    return int(inner.invlists.code_size) == 4 * int(inner.d) and inner.ntotal == n_docs


def _small(values: np.ndarray) -> np.ndarray:
    return values.astype(np.int32 if values.size < 2**31 else np.int64)


def _list_positions(ivf: faiss.IndexIVF, storage_ids: np.ndarray) -> np.ndarray:
    """Position in the concatenation of ``ivf``'s lists of each document, the documents given by
    the id the IVF stores for them (``storage_ids``, by document position)."""
    listed = stored_ids(ivf)  # the ids in list order (a transient copy)
    where = IdLookup(storage_ids)(listed)
    at = np.empty(storage_ids.size, dtype=np.int64)
    at[where] = np.arange(listed.size)
    return _small(at)


def row_source(index: faiss.Index, inner: faiss.Index, doc_ids: DocIds, n_removed: int):
    """The cheapest row source for a NormIndex's FAISS ``index`` (``inner``: beneath its id map),
    whose live documents are ``doc_ids`` by position (``n_removed`` removed ones still stored).
    A refine stage's rows are its refine index's (``IndexRefineFlat``: the raw unit vectors, read
    in place; a coded refine index: its codes decoded), in the order added, as an HNSW's."""
    inner = faiss.downcast_index(inner)
    idmap = is_idmap(index)
    internal = None
    if idmap and n_removed:  # FAISS positions of the live documents (removed ones stay in storage)
        internal = _small(np.flatnonzero(np.isin(stored_ids(index), doc_ids.array())))
    if isinstance(inner, faiss.IndexRefine):
        storage = faiss.downcast_index(inner.refine_index)
    elif isinstance(inner, faiss.IndexIVF):
        # Beneath an id map the IVF stores each vector's position in the id map as its id.
        storage_ids = DocIds(None, doc_ids.size) if idmap else doc_ids
        return ListRows(inner, _list_positions(inner, storage_ids))
    else:
        storage = faiss.downcast_index(inner.storage) if isinstance(inner, faiss.IndexHNSW) else inner
    if isinstance(storage, faiss.IndexFlat):
        return FlatRows(storage, internal)
    if isinstance(storage, faiss.IndexFlatCodes):
        return FaissCodeRows(storage, internal)
    if idmap or stored_ids(index) is None:  # (no ids kept: they are the storage positions)
        return PositionRows(inner, internal)
    return IdRows(index, doc_ids)


class PrefixCopy:
    """Rows fetched by a callable (``fetch(positions) -> (m, d)``, e.g. from a database table)
    and kept as a prefix of one weight order, grown (doubling) only as far as scans have read:
    for sources whose reads cost a round trip. At most ``max_bytes`` of rows are kept (None: no
    limit); rows past them are fetched again by each read that needs them. Its bytes are
    ``nbytes``."""

    def __init__(self, fetch, max_bytes: int | None = None) -> None:
        self._fetch = fetch
        self._max_bytes = max_bytes
        self._rows: np.ndarray | None = None
        self._full = False  # the budget is spent: nothing more is kept

    def _get(self, positions: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(self._fetch(positions), dtype=np.float32)

    def ranks(self, order: np.ndarray, lo: int, hi: int) -> np.ndarray:
        have = 0 if self._rows is None else self._rows.shape[0]
        if hi <= have:
            return self._rows[lo:hi]
        if self._full:  # past the budget: read per search, not kept
            tail = self._get(order[max(lo, have) : hi])
            return tail if lo >= have else np.concatenate([self._rows[lo:have], tail])
        grow = min(order.size, max(hi, 2 * have))
        if self._rows is not None and self._max_bytes is not None:  # (no doubling past the budget)
            grow = min(grow, max(hi, self._max_bytes // max(self._rows[0].nbytes, 1)))
        new = self._get(order[have:grow])
        keep = new.shape[0]
        if self._max_bytes is not None and new.size:
            keep = max(0, min(keep, self._max_bytes // new[0].nbytes - have))
            self._full = keep < new.shape[0]
        out = new[max(lo - have, 0) : hi - have]
        if lo < have:
            out = np.concatenate([self._rows[lo:have], out])
        if keep:
            kept = new[:keep] if keep == new.shape[0] else new[:keep].copy()  # (the rest is freed)
            self._rows = kept if self._rows is None else np.concatenate([self._rows, kept])
        return out

    @property
    def nbytes(self) -> int:
        return 0 if self._rows is None else self._rows.nbytes
