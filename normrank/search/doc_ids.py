"""The documents' ids by storage position. Ids ``0 .. n - 1`` in order, what ``add`` gives by
default, are not stored at all (0 bytes a document); any other ids are one int64 array
(8 bytes a document). Immutable: a change returns a new :class:`DocIds`, so a search holding
the old one sees one consistent state."""

from __future__ import annotations

import numpy as np

__all__ = ["DocIds"]


def _is_range(ids: np.ndarray, start: int) -> bool:
    """Whether ``ids`` are ``start, start + 1, ...`` (checked in blocks: no n-sized temporary)."""
    n = ids.size
    if not n:
        return True
    if ids[0] != start or ids[-1] != start + n - 1:
        return False
    step = 1 << 16
    for s in range(0, n, step):
        block = ids[s : s + step]
        if not np.array_equal(block, np.arange(start + s, start + s + block.size, dtype=np.int64)):
            return False
    return True


class DocIds:
    """Ids by position: ``array`` is None for ``0 .. size - 1`` in order (the identity)."""

    __slots__ = ("_array", "size")

    def __init__(self, array: np.ndarray | None, size: int) -> None:
        self._array = array
        self.size = int(size)

    @classmethod
    def of(cls, ids) -> DocIds:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        return cls(None, ids.size) if _is_range(ids, 0) else cls(ids, ids.size)

    @property
    def identity(self) -> bool:
        return self._array is None

    def __len__(self) -> int:
        return self.size

    def array(self) -> np.ndarray:
        """The ids as an int64 array (a new one for the identity; else the stored one, read-only)."""
        if self._array is None:
            return np.arange(self.size, dtype=np.int64)
        view = self._array.view()
        view.flags.writeable = False
        return view

    def at(self, pos: np.ndarray) -> np.ndarray:
        """The ids at storage positions ``pos`` (``-1`` where ``pos < 0``)."""
        pos = np.asarray(pos)
        if self._array is None:
            return np.where(pos >= 0, pos, -1).astype(np.int64, copy=False)
        return np.where(pos >= 0, self._array[np.maximum(pos, 0)], -1)

    def appended(self, new_ids: np.ndarray) -> DocIds:
        new_ids = np.asarray(new_ids, dtype=np.int64).reshape(-1)
        if self._array is None and _is_range(new_ids, self.size):
            return DocIds(None, self.size + new_ids.size)
        return DocIds(np.concatenate([self.array(), new_ids]), self.size + new_ids.size)

    def kept(self, keep: np.ndarray) -> DocIds:
        """The ids where the boolean mask ``keep`` is set (the identity again if they still are)."""
        return DocIds.of(self.array()[keep])

    @property
    def nbytes(self) -> int:
        return 0 if self._array is None else int(self._array.nbytes)
