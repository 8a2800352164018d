"""Rows of a FAISS index read where FAISS keeps them: the weight-order scan's only access to the
document vectors. Nothing here copies more than one bounded block.

* :class:`FlatRows`: float32 storage (an HNSW's flat storage) viewed in place; inner products
  by FAISS's ``fvec_inner_products_by_idx`` straight from storage (no gather), blocks gathered
  for a batch.
* :class:`CodeRows`: compressed codes in one array (an HNSW's SQ / PQ storage): the code rows
  gathered and decoded by FAISS's ``sa_decode``, a block at a time.
* :class:`IdRows`: anything else (IVF lists of any codes, pre-transforms): FAISS's
  ``reconstruct_batch`` by id, a block at a time (IVF through its direct map).

Scores read through a row source are ``q . row`` of the stored (decoded) vector: exact on flat
storage, the codes' own cosine estimate on compressed codes (FAISS's search computes the same
quantity in another summation order).
"""

from __future__ import annotations

import faiss
import numpy as np

from normrank.search.faiss_info import flat_storage, stored_ids

__all__ = ["BLOCK_ROWS", "CodeRows", "FlatRows", "IdRows", "PrefixCopy", "row_source"]

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


class CodeRows(_Decoded):
    """Codes of an ``IndexFlatCodes`` (SQ, PQ, ...) decoded by FAISS, a block at a time."""

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

    def __init__(self, index: faiss.Index, doc_ids: np.ndarray) -> None:
        self._index, self._ids = index, doc_ids

    def gather(self, pos: np.ndarray) -> np.ndarray:
        out = np.empty((pos.size, self._index.d), dtype=np.float32)
        for s in range(0, pos.size, BLOCK_ROWS):
            ids = np.ascontiguousarray(self._ids[pos[s : s + BLOCK_ROWS]], dtype=np.int64)
            out[s : s + ids.size] = self._index.reconstruct_batch(ids)
        return out

    nbytes = 0


def row_source(index: faiss.Index, inner: faiss.Index, doc_ids: np.ndarray, n_removed: int):
    """The cheapest row source for a NormIndex's FAISS ``index`` (``inner``: beneath its id map),
    whose live documents are ``doc_ids`` by position (``n_removed`` removed ones still stored).
    A refine stage's rows are its refine index's (``IndexRefineFlat``: the raw unit vectors, read
    in place; a coded refine index: its codes decoded), in the order added, as an HNSW's."""
    stored_in = None
    if isinstance(inner, faiss.IndexHNSW):
        stored_in = inner.storage
    elif isinstance(inner, faiss.IndexRefine):
        stored_in = inner.refine_index
    if stored_in is not None and index is not inner:
        storage = faiss.downcast_index(stored_in)
        internal = None
        if n_removed:  # FAISS positions of the live documents (removed ones stay in storage)
            stored = stored_ids(index)
            live = np.flatnonzero(np.isin(stored, doc_ids))
            internal = live.astype(np.int32 if live.size < 2**31 else np.int64)
        if isinstance(storage, faiss.IndexFlat):
            return FlatRows(storage, internal)
        if isinstance(storage, faiss.IndexFlatCodes):
            return CodeRows(storage, internal)
    return IdRows(index, doc_ids)


class PrefixCopy:
    """Rows fetched by a callable (``fetch(positions) -> (m, d)``, e.g. from a database table)
    and kept as a prefix of one weight order, grown (doubling) only as far as scans have read:
    for sources whose reads cost a round trip. Its bytes are ``nbytes``."""

    def __init__(self, fetch) -> None:
        self._fetch = fetch
        self._rows: np.ndarray | None = None

    def ranks(self, order: np.ndarray, lo: int, hi: int) -> np.ndarray:
        have = 0 if self._rows is None else self._rows.shape[0]
        if hi > have:
            grow = min(order.size, max(hi, 2 * have))
            new = np.ascontiguousarray(self._fetch(order[have:grow]), dtype=np.float32)
            self._rows = new if self._rows is None else np.concatenate([self._rows, new])
        return self._rows[lo:hi]

    @property
    def nbytes(self) -> int:
        return 0 if self._rows is None else self._rows.nbytes
