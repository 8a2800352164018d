"""FAISS's search breadth on a NormIndex, spelt as FAISS users spell it: ``index.nprobe = 16``,
``index.efSearch = 128``, ``search_params``, ``set_search_params``. The values live in the
wrapped FAISS index, so :meth:`~normrank.NormIndex.save` keeps them."""

from __future__ import annotations

import threading
from typing import Any

from normrank.search.faiss_info import ann_params, breadth_knobs, set_breadth

__all__ = ["SearchKnobs"]


class SearchKnobs:
    """Mixin of :class:`~normrank.NormIndex`: needs ``_inner`` (the innermost FAISS index),
    ``_lock`` and ``_changed()`` (drops what searches derived from the old state)."""

    _inner: Any
    _lock: threading.RLock

    def _changed(self) -> None:  # pragma: no cover - NormIndex defines it
        raise NotImplementedError

    @property
    def search_params(self) -> dict[str, int]:
        """FAISS's search breadth, saved with the index: IVF ``nprobe`` / ``nlist``, HNSW
        ``efSearch`` (empty for flat indexes). Change it with :meth:`set_search_params`.

        Read under the lock: a search with a per-call ``nprobe`` / ``ef_search`` sets it in the
        FAISS index while it runs (under the lock), and no other thread may see that value."""
        with self._lock:
            return ann_params(self._inner)

    def _breadth(self, key: str, kind: str) -> int:
        have = self.search_params
        if key not in have:  # AttributeError, as FAISS's own indexes without the knob raise
            raise AttributeError(f"{key} applies to {kind} indexes; this one is {type(self._inner).__name__}")
        return have[key]

    @property
    def nprobe(self) -> int:
        """FAISS's ``index.nprobe`` (IVF): ``index.nprobe = 16`` is :meth:`set_search_params`."""
        return self._breadth("nprobe", "IVF")

    @nprobe.setter
    def nprobe(self, value: int) -> None:
        self.set_search_params(nprobe=value)

    @property
    def efSearch(self) -> int:  # FAISS's spelling, so that FAISS code runs unchanged
        """FAISS's ``index.hnsw.efSearch`` (HNSW): assigning it is :meth:`set_search_params`."""
        return self._breadth("efSearch", "HNSW")

    @efSearch.setter
    def efSearch(self, value: int) -> None:
        self.set_search_params(ef_search=value)

    def set_search_params(self, *, nprobe: int | None = None, ef_search: int | None = None) -> None:
        """Set the default IVF ``nprobe`` / HNSW ``efSearch`` (kept by :meth:`save`)."""
        knobs = breadth_knobs(self._inner, nprobe, ef_search)
        with self._lock:
            set_breadth(self._inner, knobs)
            self._changed()
