"""What searches derive from one state of a :class:`~normrank.NormIndex`: owned by the index,
built lazily, dropped whole by any change (add, remove, set_bases), so nothing here is ever
stale. Per document it holds one int32 (the weight order), the id -> position table where ids
are not ``0 .. n - 1`` in order, where the rows are where storage positions are not document
positions (an IVF: one int64 in its row reader's direct map, IVF-Flat / SQ / PQ, else one
int32; an HNSW
after a removal: one int32) and, bounded by
:data:`~normrank.settings.SEARCH_CACHE_BYTES`, one float32 per cached alpha; of the vectors only
the scan's first rows, within :data:`~normrank.settings.SCAN_PREFIX_BYTES` whatever the size
of the index, and their int8 scan codes for single queries, within
:data:`~normrank.settings.SCAN_CODES_BYTES`. ``nbytes`` counts all of it."""

from __future__ import annotations

from typing import Any

import numpy as np

from normrank import settings
from normrank.scoring import norm_weight
from normrank.search.id_lookup import IdLookup
from normrank.search.rows import PrefixCopy
from normrank.search.weight_order import WeightOrder

__all__ = ["SearchCache"]


class SearchCache:
    """Derived search state of one index state.

    Attributes:
        powers: ``w**alpha`` (float32, by storage position) per alpha: the last
            ``WEIGHT_CACHE_ENTRIES`` used, within ``SEARCH_CACHE_BYTES``.
        ascending: storage positions by ascending weight base (int32), both signs' order.
        orders: one :class:`~normrank.search.weight_order.WeightOrder` per sign of alpha (views of
            ``ascending`` and the row source, a 1/64 weight sample, a contiguous copy of the
            first rows scanned, at most ``SCAN_PREFIX_BYTES / 2`` each, and their int8 scan codes,
            at most ``SCAN_CODES_BYTES / 2`` each).
        lookup: FAISS id -> storage position (ANN results).
        rows: where the scan (and ``reconstruct``) reads document rows
            (:mod:`normrank.search.rows`), set at the state's first ANN search or reconstruct.
        device: the flat storage copied to a torch device (``device=`` searches; opt-in).
        one: the latency case bound to this state (:class:`normrank.search.searcher.OneQuery`),
            False where the index is flat.
    """

    __slots__ = ("ascending", "device", "lookup", "one", "orders", "powers", "rows")

    def __init__(self) -> None:
        self.powers: dict[float, np.ndarray] = {}
        self.ascending: np.ndarray | None = None
        self.orders: dict[int, WeightOrder] = {}
        self.lookup: IdLookup | None = None
        self.rows: Any = None
        self.device: Any = None
        self.one: Any = None

    def power(self, base: np.ndarray, alpha: float) -> np.ndarray | None:
        """``base**alpha`` (None for alpha = 0: plain cosine needs no weights)."""
        if alpha == 0:
            return None
        w = self.powers.get(alpha)
        if w is None:
            w = norm_weight(base, alpha)
            while self.powers and (
                len(self.powers) >= settings.WEIGHT_CACHE_ENTRIES
                or sum(p.nbytes for p in self.powers.values()) + w.nbytes > settings.SEARCH_CACHE_BYTES
            ):
                self.powers.pop(next(iter(self.powers)))
            self.powers[alpha] = w
        return w

    def id_lookup(self, ids: np.ndarray) -> IdLookup:
        if self.lookup is None:
            self.lookup = IdLookup(ids)
        return self.lookup

    def order(self, base: np.ndarray, alpha: float, rows) -> WeightOrder | None:
        """The weight order for the sign of ``alpha`` (None at alpha = 0), reading rows through
        ``rows`` (a row source of :mod:`normrank.search.rows`; one that keeps its own copy by
        rank, a :class:`~normrank.search.rows.PrefixCopy`, serves this order only)."""
        if alpha == 0:
            return None
        sign = 1 if alpha > 0 else -1
        order = self.orders.get(sign)
        if order is None:
            if self.ascending is None:
                small = np.int32 if base.size < 2**31 - 1 else np.int64
                self.ascending = np.argsort(base, kind="stable").astype(small)
            if isinstance(rows, PrefixCopy):  # rows fetched by a round trip: the source keeps its own copy
                order = WeightOrder(self.ascending, sign, rows)
            else:  # half the scan budget per sign
                order = WeightOrder(
                    self.ascending,
                    sign,
                    rows,
                    settings.SCAN_PREFIX_BYTES // 2,
                    settings.SCAN_CODES_BYTES // 2,
                )
            self.orders[sign] = order
        return order

    @property
    def nbytes(self) -> int:
        """Bytes held here (device copies excluded: they live on the device)."""
        total = sum(p.nbytes for p in self.powers.values())
        total += 0 if self.ascending is None else self.ascending.nbytes
        total += sum(o.nbytes for o in self.orders.values())
        # rows a weight order's own copy holds (fetched by round trips), one copy per order
        total += sum(o.rows.nbytes for o in self.orders.values() if isinstance(o.rows, PrefixCopy))
        total += 0 if self.lookup is None else self.lookup.nbytes
        return total + int(getattr(self.rows, "nbytes", 0))
