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
:data:`~normrank.settings.SCAN_CODES_BYTES`. ``nbytes`` counts all of it.

Those three caps are caps: an index's own budget (:func:`cache_budget`) is
:data:`~normrank.settings.CACHE_FRACTION` of the bytes FAISS holds for it, so that a small or
compressed index does not pay more beside FAISS than the caches are worth."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from normrank import settings
from normrank.errors import InvalidParameterError
from normrank.scoring import norm_weight
from normrank.search.id_lookup import IdLookup
from normrank.search.rows import PrefixCopy
from normrank.search.weight_order import WeightOrder

__all__ = ["CacheBudget", "LazyPower", "SearchCache", "cache_budget"]

# The norm spread that picks the method on lossy codes (SearchCache.weight_boost) is read from at
# most this many bases: a threshold's input, not a statistic to report (a strided 65,536 of 1M
# log-normal norms gave their 5 / 50 / 95th percentiles within 0.3%), and a search after each add
# would otherwise pay a pass over all of them (1M: ~48 ms; the sample: ~2 ms).
_SPREAD_SAMPLE = 1 << 16
# The least share of the scan budget either sign of alpha gets (SearchCache.sign_share).
_SIGN_SHARE_MIN = 0.25
# Below this sum of both tails' log spreads (0.1%) the bases count as equal (float32 rounding of
# equal norms leaves ~1e-7, which would hand one sign the most at random).
_SPREAD_NONE = 1e-3
# A cached ``w**alpha`` read within this many weight requests is not dropped for another alpha
# that does not fit beside it (that one is computed for its call, or read lazily by the ANN path):
# searches that alternate alphas over a large index would otherwise recompute n powers a call
# (1M: 2-11 ms, up to 8x a single query) and drop the array the next call needs. A user who
# switches alpha for good gets the new one kept after this many requests.
_RECENT_CALLS = 16


@dataclass(frozen=True)
class CacheBudget:
    """Bytes one index state's bounded caches may hold: ``weights`` (every cached ``w**alpha``;
    an alpha whose array does not fit is read lazily: :meth:`SearchCache.ann_weights`),
    ``prefix`` (the scan's float32 copy of its first rows) and ``codes`` (their int8 codes),
    both split between the signs of alpha by :meth:`SearchCache.sign_share` (a PostgreSQL
    client's copy of fetched rows too)."""

    weights: int
    prefix: int
    codes: int

    @property
    def total(self) -> int:
        return self.weights + self.prefix + self.codes


def cache_budget(index_bytes: int | None, *, scans: bool = True, floor: int = 0) -> CacheBudget:
    """The budget of an index holding ``index_bytes`` in FAISS
    (:func:`normrank.search.faiss_info.index_bytes`; None: the absolute caps only):
    :data:`~normrank.settings.CACHE_FRACTION` of it, split by
    :data:`~normrank.settings.CACHE_SPLIT` (an eighth to the weights, a quarter to the prefix
    copy, five eighths to the codes: a row's codes are a quarter of its bytes, and what single
    queries read), each within its cap (``SEARCH_CACHE_BYTES``, ``SCAN_PREFIX_BYTES``,
    ``SCAN_CODES_BYTES``). ``scans=False`` (flat storage: no weight-order scan): all of it to
    the weights. ``floor``: the least the scanning budget is before the split (an index of float32
    rows: :data:`~normrank.settings.FLOAT_ROWS_MIN_CACHE_BYTES`)."""
    caps = (int(settings.SEARCH_CACHE_BYTES), int(settings.SCAN_PREFIX_BYTES), int(settings.SCAN_CODES_BYTES))
    if min(caps) < 0:
        raise InvalidParameterError(f"cache caps must be >= 0 bytes, got {caps}")
    fraction = settings.CACHE_FRACTION
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not fraction >= 0:
        raise InvalidParameterError(f"settings.CACHE_FRACTION must be a number >= 0, got {fraction!r}")
    if isinstance(floor, bool) or not isinstance(floor, int) or floor < 0:
        raise InvalidParameterError(f"settings.FLOAT_ROWS_MIN_CACHE_BYTES must be an int >= 0, got {floor!r}")
    if index_bytes is None or math.isinf(fraction):
        weights, prefix, codes = caps
        return CacheBudget(weights, prefix, codes) if scans else CacheBudget(weights, 0, 0)
    share = fraction * max(int(index_bytes), 0)
    if not scans:
        return CacheBudget(min(caps[0], int(share)), 0, 0)
    share = max(share, floor)
    split = settings.CACHE_SPLIT
    if len(split) != 3 or not all(isinstance(f, int | float) and f >= 0 for f in split) or sum(split) > 1:
        raise InvalidParameterError(
            f"settings.CACHE_SPLIT must be 3 numbers >= 0 summing to <= 1, got {split!r}"
        )
    weights, prefix, codes = (min(cap, int(share * f)) for cap, f in zip(caps, split, strict=True))
    return CacheBudget(weights=weights, prefix=prefix, codes=codes)


class LazyPower:
    """``norm_weight(base, alpha)`` computed where it is read: what the ANN path gets for an alpha
    whose whole array does not fit in the weights budget (it reads the weights of its candidates
    and of the ranks it scans, not of every document). Reads as the float32 array would:
    ``w[positions]``, ``w.take(positions)``, ``w[i]``, slices, ``size``, ``min()`` / ``max()``
    (from the bases' extremes: the power is monotone, saturation included). Holds no copy."""

    __slots__ = ("__weakref__", "_base", "_range", "alpha", "shape", "size")
    dtype = np.dtype(np.float32)
    nbytes = 0
    ndim = 1

    def __init__(self, base: np.ndarray, alpha: float) -> None:
        self._base, self.alpha = base, alpha
        self.shape, self.size = base.shape, base.size
        self._range: np.ndarray | None = None

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index) -> np.ndarray:
        b = self._base[index]
        if np.ndim(b) == 0:  # one weight: through the array loop, as the whole array's (same bits)
            return norm_weight(np.reshape(b, 1), self.alpha)[0]
        return norm_weight(b, self.alpha)

    def take(self, positions) -> np.ndarray:
        return norm_weight(self._base.take(positions), self.alpha)

    def _ends(self) -> np.ndarray:
        if self._range is None:
            self._range = norm_weight(np.array([self._base.min(), self._base.max()]), self.alpha)
        return self._range

    def min(self) -> np.float32:
        return self._ends().min()

    def max(self) -> np.float32:
        return self._ends().max()


class SearchCache:
    """Derived search state of one index state.

    ``budget_of``: the state's :class:`CacheBudget`, asked once, at its first use (None: the
    absolute caps, :func:`cache_budget` of None).

    Attributes:
        powers: ``w**alpha`` (float32, by storage position) per alpha: at most
            ``WEIGHT_CACHE_ENTRIES``, within the budget's ``weights``; one read within the last
            ``_RECENT_CALLS`` weight requests is kept, and an alpha that does not fit beside
            those is computed per call (:meth:`power`) or read lazily (:meth:`ann_weights`,
            :class:`LazyPower`).
        used, calls: the weight request that last read each alpha, and the requests so far.
        lazies: one :class:`LazyPower` per alpha read lazily (the scan's samples key on it).
        ascending: storage positions by ascending weight base (int32), both signs' order.
        orders: one :class:`~normrank.search.weight_order.WeightOrder` per sign of alpha (views of
            ``ascending`` and the row source, a 1/64 weight sample, a contiguous copy of the
            first rows scanned and their int8 scan codes, each within its sign's share of the
            budget's ``prefix`` and ``codes``: :meth:`sign_share`).
        lookup: FAISS id -> storage position (ANN results).
        rows: where the scan (and ``reconstruct``) reads document rows
            (:mod:`normrank.search.rows`), set at the state's first ANN search or reconstruct.
        lists: an IVF-Flat's lists viewed in place for the flat product
            (:class:`~normrank.search.rows.FloatLists`: views, nothing per document), set at the
            state's first flat product over them.
        device: the flat storage copied to a torch device (``device=`` searches; opt-in).
        one: the latency case bound to this state (:class:`normrank.search.searcher.OneQuery`),
            False where the index is flat.
    """

    __slots__ = (
        "_budget", "_budget_of", "ascending", "base_range", "base_spread", "calls", "device", "lazies", "lists",
        "lookup", "lossy", "one", "orders", "powers", "rows", "used",
    )  # fmt: skip

    def __init__(self, budget_of: Callable[[], CacheBudget] | None = None) -> None:
        self._budget_of = budget_of
        self._budget: CacheBudget | None = None
        self.powers: dict[float, np.ndarray] = {}
        self.used: dict[float, int] = {}  # alpha -> the weight request that last read its powers
        self.calls = 0  # weight requests so far
        self.lazies: dict[float, LazyPower] = {}  # (one per alpha: the scan's samples key on it)
        self.ascending: np.ndarray | None = None
        self.orders: dict[int, WeightOrder] = {}
        self.lookup: IdLookup | None = None
        self.rows: Any = None
        self.lists: Any = None
        self.device: Any = None
        self.one: Any = None
        self.base_range: np.ndarray | None = None  # (smallest, largest) weight base: 16 bytes
        self.base_spread: tuple[float, float] | None = None  # (p95 / p50, p50 / p5) of the bases
        self.lossy: bool | None = None  # the index ranks by PQ / additive codes (faiss_info.lossy_codes)

    @property
    def budget(self) -> CacheBudget:
        """This state's budget (asked at the first use; callers hold the index's lock)."""
        if self._budget is None:
            self._budget = cache_budget(None) if self._budget_of is None else self._budget_of()
        return self._budget

    def power(self, base: np.ndarray, alpha: float) -> np.ndarray | None:
        """``base**alpha`` as a whole float32 array (None for alpha = 0: plain cosine needs no
        weights), kept where it fits (:meth:`_admit`), else computed for this call only."""
        if alpha == 0:
            return None
        w = self._cached(alpha)
        if w is None:
            w = norm_weight(base, alpha)
            if self._admit(w.nbytes):
                self.powers[alpha] = w
        return w

    def ann_weights(self, base: np.ndarray, alpha: float) -> np.ndarray | LazyPower | None:
        """The weights the ANN path reads: the whole array where it is kept or fits
        (:meth:`_admit`), else a :class:`LazyPower` (the candidates' and scanned ranks' weights
        computed as read; none of the n powers a whole array costs)."""
        if alpha == 0:
            return None
        w = self._cached(alpha)
        if w is not None:
            return w
        if self._admit(4 * base.size):
            w = self.powers[alpha] = norm_weight(base, alpha)
            self.lazies.pop(alpha, None)
            return w
        lazy = self.lazies.get(alpha)
        if lazy is None:
            if len(self.lazies) >= settings.WEIGHT_CACHE_ENTRIES:
                self.lazies.pop(next(iter(self.lazies)))
            lazy = self.lazies[alpha] = LazyPower(base, alpha)
        return lazy

    def _cached(self, alpha: float) -> np.ndarray | None:
        """The kept powers of ``alpha`` (None if none), this request counted."""
        self.calls += 1
        self.used[alpha] = self.calls
        if len(self.used) > 4 * settings.WEIGHT_CACHE_ENTRIES:  # (a sweep's many alphas: forget old ones)
            self.used = {
                a: t for a, t in self.used.items() if a in self.powers or self.calls - t < _RECENT_CALLS
            }
        return self.powers.get(alpha)

    def _admit(self, nbytes: int) -> bool:
        """Whether a new alpha's powers (``nbytes``) may be kept: where they fit the budget's
        ``weights`` beside the alphas kept, after dropping (least recently used first) those
        not read within the last ``_RECENT_CALLS`` requests. An alpha whose array does not fit
        even alone (compressed codes: IVF-PQ48's budget is ~0.3 B a document) is never kept."""
        room = self.budget.weights
        held = sum(p.nbytes for p in self.powers.values())
        while self.powers and (held + nbytes > room or len(self.powers) >= settings.WEIGHT_CACHE_ENTRIES):
            lru = min(self.powers, key=lambda a: self.used.get(a, 0))
            if self.calls - self.used.get(lru, 0) < _RECENT_CALLS:
                return False  # a recent alpha stays; the new one is not kept
            held -= self.powers.pop(lru).nbytes
        return held + nbytes <= room

    def weight_range(self, base: np.ndarray, alpha: float) -> tuple[float, float]:
        """``(smallest, largest)`` of ``base**alpha`` without a pass over the weights: the
        powers of the base's extremes (the power is monotone, saturation included), the
        extremes found once per state."""
        if self.base_range is None:
            self.base_range = np.array([base.min(), base.max()]) if base.size else np.ones(2)
        ends = norm_weight(self.base_range, alpha)
        return float(ends.min()), float(ends.max())

    def weight_boost(self, base: np.ndarray, alpha: float) -> float:
        """How many times ``base**alpha`` lifts a document over the median one: the 95th (alpha >
        0) or the 5th (alpha < 0) percentile of the bases over their median, to the power
        ``|alpha|`` (1 at alpha = 0); the percentiles found once per state, over at most
        :data:`_SPREAD_SAMPLE` bases evenly strided (every base up to that many)."""
        if alpha == 0:
            return 1.0
        up, down = self.spread(base)
        return float((up if alpha > 0 else down) ** abs(alpha))

    def spread(self, base: np.ndarray) -> tuple[float, float]:
        """``(p95 / p50, p50 / p5)`` of the positive bases (1, 1 if none), found once per state
        over at most :data:`_SPREAD_SAMPLE` bases evenly strided (every base up to that many)."""
        if self.base_spread is None:
            b = base[:: -(-base.size // _SPREAD_SAMPLE) or 1]
            b = b[b > 0].astype(np.float64)
            if b.size:
                p5, p50, p95 = np.percentile(b, [5, 50, 95])
                self.base_spread = (float(p95 / p50), float(p50 / p5))
            else:
                self.base_spread = (1.0, 1.0)
        return self.base_spread

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
            else:  # each sign its own share (first come first served starved alpha > 0 after
                # alpha < 0 had filled it: 27k HNSW ef 512, one query, 1.72-1.92x plain -> 2.23-2.41x)
                share = self.sign_share(base, sign)
                order = WeightOrder(
                    self.ascending,
                    sign,
                    rows,
                    prefix_bytes=int(self.budget.prefix * share),
                    scan_codes_bytes=int(self.budget.codes * share),
                )
            self.orders[sign] = order
        return order

    def sign_share(self, base: np.ndarray, sign: int) -> float:
        """The share of the scan budget (prefix copy and codes) the weight order of ``sign``
        gets: each sign's log norm spread (``log(p95 / p50)`` for alpha > 0, ``log(p50 / p5)``
        for alpha < 0) over both, within [:data:`_SIGN_SHARE_MIN`, 1 - it]. The longer tail is
        the one whose scan reads deeper (MiniLM-like norms, p5 / p50 / p95 1.85 / 2.35 / 6.28:
        0.80, so 0.75 after the clamp, to alpha > 0; at 100k IVF the scan reads ~17k rows a query
        at alpha = 1 against ~2k at -0.75); equal tails, half each."""
        up, down = (math.log(max(r, 1.0)) for r in self.spread(base))
        if up + down < _SPREAD_NONE:  # equal bases up to float rounding: no tail to favour
            return 0.5
        share = (up if sign > 0 else down) / (up + down)
        return min(max(share, _SIGN_SHARE_MIN), 1.0 - _SIGN_SHARE_MIN)

    @property
    def nbytes(self) -> int:
        """Bytes held here (device copies excluded: they live on the device)."""
        total = sum(p.nbytes for p in self.powers.values())
        total += 0 if self.ascending is None else self.ascending.nbytes
        total += sum(o.nbytes for o in self.orders.values())
        # rows a weight order's own copy holds (fetched by round trips), one copy per order
        total += sum(o.rows.nbytes for o in self.orders.values() if isinstance(o.rows, PrefixCopy))
        total += 0 if self.lookup is None else self.lookup.nbytes
        total += 0 if self.base_range is None else self.base_range.nbytes
        total += int(getattr(self.lists, "nbytes", 0))
        return total + int(getattr(self.rows, "nbytes", 0))
