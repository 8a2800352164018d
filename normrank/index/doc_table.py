"""The documents beside a NormIndex's FAISS index: ids in storage order, raw norms, optional
custom bases, id -> position, tombstones and the next default id. Every check that an id
exists or is free lives here, so that ``add`` / ``remove`` / ``norm_of`` agree.

Per document: the norm (float32); the id (int64) unless the ids are ``0 .. n - 1`` in order, the
default (:class:`~normrank.search.doc_ids.DocIds`); custom bases (float32) when set; and
id -> position as an :class:`~normrank.search.id_lookup.IdLookup` (nothing for ids ``0 .. n - 1`` in
order, else 4 to 12 bytes), built at first use and dropped by any change. A position is the
document's place in storage order: the id map's order (flat, HNSW; FAISS's ``IndexIDMap``
holds the same ids once more, 8 bytes), or for an IVF the order added (where its row lies in
the lists is the row source's: :class:`normrank.search.rows.ListRows`). Removed HNSW documents
stay as tombstones (an id each)."""

from __future__ import annotations

import numpy as np

from normrank.errors import DuplicateIdError, InvalidInputError, UnknownIdError
from normrank.search.doc_ids import DocIds
from normrank.search.id_lookup import IdLookup
from normrank.validation import MAX_ID

__all__ = ["DocTable"]


class DocTable:
    """Arrays are replaced on change, never written in place, so a reader holding the old ones
    sees one consistent state."""

    __slots__ = ("_lookup", "custom_bases", "doc_ids", "next_id", "norms", "tombstones")

    def __init__(self, ids, norms, custom_bases, tombstones, next_id: int) -> None:
        self.doc_ids = ids if isinstance(ids, DocIds) else DocIds.of(ids)
        self.norms = np.asarray(norms, dtype=np.float32)
        self.custom_bases = None if custom_bases is None else np.asarray(custom_bases, dtype=np.float32)
        self._lookup: tuple[DocIds, IdLookup] | None = None  # (the ids it was built from, it)
        self.tombstones: set[int] = set(np.asarray(tombstones).tolist())  # removed, kept (HNSW)
        top = self.doc_ids.size if self.doc_ids.identity else int(self.doc_ids.array().max(initial=-1)) + 1
        self.next_id = max(int(next_id), top, *(t + 1 for t in self.tombstones))

    @property
    def count(self) -> int:
        return self.doc_ids.size

    @property
    def ids(self) -> np.ndarray:
        """The ids as an array (built for the default ids: for the rare paths, not searches)."""
        return self.doc_ids.array()

    @property
    def base(self) -> np.ndarray:
        """What alpha exponentiates: the custom bases, else the norms."""
        return self.norms if self.custom_bases is None else self.custom_bases

    def lookup(self) -> IdLookup:
        """id -> position (-1: absent), for these ids.

        Kept with the ids it was built from and used only while they are still the table's: a
        reader that built it from ids a writer replaced meanwhile can never install a table of a
        state that is gone (the lock makes that rare; this makes it harmless)."""
        doc_ids, cached = self.doc_ids, self._lookup
        if cached is not None and cached[0] is doc_ids:
            return cached[1]
        built = IdLookup(doc_ids)
        self._lookup = (doc_ids, built)
        return built

    def has(self, id_: int) -> bool:
        return bool(self.lookup()(np.array([id_], dtype=np.int64))[0] >= 0)

    def positions(self, ids: np.ndarray) -> np.ndarray:
        pos = self.lookup()(np.asarray(ids, dtype=np.int64).reshape(-1))
        if (pos < 0).any():
            missing = [int(i) for i in np.asarray(ids).reshape(-1)[pos < 0][:11]]
            raise UnknownIdError(f"unknown ids: {missing[:10]}" + (" ..." if len(missing) > 10 else ""))
        return pos

    def default_ids(self, n: int) -> np.ndarray:
        """The next ``n`` default ids (after the largest id ever used)."""
        if self.next_id + n - 1 > MAX_ID:
            raise InvalidInputError("default ids would pass 2**63 - 2: pass ids= explicitly")
        return np.arange(self.next_id, self.next_id + n, dtype=np.int64)

    def check_new(self, new_ids: np.ndarray, bases: np.ndarray | None) -> None:
        """Refuse ids in use (or removed from an index that keeps their vectors), and rows
        without bases where custom bases are set."""
        new_ids = np.asarray(new_ids, dtype=np.int64)
        present = [int(i) for i in new_ids[self.lookup()(new_ids) >= 0][:10]]
        if present:
            raise DuplicateIdError(f"ids already in the index: {present}")
        if self.tombstones:
            kept = new_ids[np.isin(new_ids, np.fromiter(self.tombstones, dtype=np.int64))]
            if kept.size:
                # The graph (HNSW) or refine stage still holds the removed vector under its id and
                # FAISS cannot delete it: a second vector under that id would make results ambiguous.
                raise DuplicateIdError(
                    f"ids removed earlier from an index that keeps removed vectors (HNSW, refine): "
                    f"{[int(i) for i in kept[:10]]}; such an id stays reserved: add under a new id, "
                    "or rebuild the index (NormIndex.from_state / a new index) to reuse it"
                )
        if self.custom_bases is not None and bases is None and new_ids.size:
            raise InvalidInputError("this index has custom bases: pass bases= for the new rows")

    # append and drop compute the new table first and swap it in with one assignment (no call
    # between its stores, so no interrupt lands among them): the table is the old one or the new.

    def append(self, new_ids: np.ndarray, norms: np.ndarray, bases: np.ndarray | None) -> None:
        doc_ids = self.doc_ids.appended(new_ids)
        all_norms = np.concatenate([self.norms, norms])
        all_bases = self.custom_bases
        if all_bases is not None:
            all_bases = np.concatenate([all_bases, bases if bases is not None else norms])
        next_id = max(self.next_id, int(new_ids.max()) + 1)
        self.doc_ids, self.norms, self.custom_bases, self.next_id, self._lookup = (
            doc_ids, all_norms, all_bases, next_id, None
        )  # fmt: skip

    def drop(self, ids: np.ndarray, *, tombstone: bool) -> None:
        """Forget ``ids``; ``tombstone`` when their vectors stay in the FAISS index."""
        tombstones = self.tombstones | set(ids.tolist()) if tombstone else self.tombstones
        keep = ~np.isin(self.ids, ids)
        doc_ids, norms = self.doc_ids.kept(keep), self.norms[keep]
        bases = None if self.custom_bases is None else self.custom_bases[keep]
        self.doc_ids, self.norms, self.custom_bases, self.tombstones, self._lookup = (
            doc_ids, norms, bases, tombstones, None
        )  # fmt: skip

    def tombstone_array(self) -> np.ndarray:
        return np.array(sorted(self.tombstones), dtype=np.int64)
