"""What searches derive from one state of a :class:`~normrank.NormIndex`, built lazily and
dropped whole by any change (add, remove, set_weights): nothing here is ever stale."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from normrank.scoring import norm_weight
from normrank.search.ann import IdLookup, WeightOrder
from normrank.settings import WEIGHT_CACHE_ENTRIES

__all__ = ["SearchCache"]

# w**alpha is kept for WEIGHT_CACHE_ENTRIES alphas (a sweep or per-query alphas reuse a few).
_POWERS_KEPT = WEIGHT_CACHE_ENTRIES


class SearchCache:
    """Derived search state of one index state.

    Attributes:
        powers: ``w**alpha`` (float32, by storage position) per alpha, the last 8 used.
        lookup: FAISS id -> storage position (ANN results), built at the first ANN search.
        orders: the documents in decreasing ``w**alpha`` order, one per sign of alpha (ANN).
        device: the flat storage copied to a torch device (``device=`` searches).
        fenced: the ids by storage position followed by -1, so that position -1 (padding)
            reads id -1 in one gather.
        plans: ANN search arguments per (alpha, k, options, breadth), the last 8 used
            (:func:`normrank.search.searcher.search_into`; they hold only what this cache derives).
        one: the latency case bound to this state (:class:`normrank.search.searcher.OneQuery`),
            False where the index is flat.
    """

    __slots__ = ("device", "fenced", "lookup", "one", "orders", "plans", "powers")

    def __init__(self) -> None:
        self.powers: dict[float, np.ndarray] = {}
        self.lookup: IdLookup | None = None
        self.orders: dict[int, WeightOrder] = {}
        self.device: Any = None
        self.plans: dict[tuple, dict[str, Any]] = {}
        self.fenced: np.ndarray | None = None
        self.one: Any = None

    def fenced_ids(self, ids: np.ndarray) -> np.ndarray:
        if self.fenced is None:
            self.fenced = np.append(ids.astype(np.int64), -1)
        return self.fenced

    def remember_plan(self, key: tuple, plan: dict[str, Any]) -> None:
        if len(self.plans) >= _POWERS_KEPT:
            self.plans.pop(next(iter(self.plans)))
        self.plans[key] = plan

    def power(self, base: np.ndarray, alpha: float) -> np.ndarray | None:
        """``base**alpha`` (None for alpha = 0: plain cosine needs no weights)."""
        if alpha == 0:
            return None
        w = self.powers.get(alpha)
        if w is None:
            if len(self.powers) >= _POWERS_KEPT:
                self.powers.pop(next(iter(self.powers)))
            w = self.powers[alpha] = norm_weight(base, alpha)
        return w

    def id_lookup(self, ids: np.ndarray) -> IdLookup:
        if self.lookup is None:
            self.lookup = IdLookup(ids)
        return self.lookup

    def order(self, base: np.ndarray, alpha: float, fetch: Callable[[np.ndarray], np.ndarray]):
        """The weight order for the sign of ``alpha`` (None at alpha = 0)."""
        if alpha == 0:
            return None
        sign = 1 if alpha > 0 else -1
        order = self.orders.get(sign)
        if order is None:
            order = self.orders[sign] = WeightOrder(base, sign, fetch)
        return order
