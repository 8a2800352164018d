"""``QdrantEdgeNormIndex``: norm-weighted search ``cos(q, d) * ||d||**alpha`` inside Qdrant Edge.

Qdrant Edge (``qdrant-edge-py``) is Qdrant's engine embedded in the process: the server's
segments, HNSW, payload indexes and formula code, stored in one shard folder. Unit vectors go
in a cosine shard, the raw norm in each point's payload (``"norm"``, with a float index). The
method is that of :mod:`normrank.search.ann` and the client backend: a band of extreme norms on the
side alpha favours, searched exactly, plus the best cosines of the rest, until the bound
(:func:`normrank.search.ann.unseen_bound`) proves that nothing unseen can beat the k-th score. Every
returned score is computed by the engine's formula ``$score * norm**alpha``. Per query (all
queries' requests of a round go in one ``query_batch``):

1. **First round**, by cosine alone (no formula: the engine's formula costs about a
   microsecond per point, so it runs once, in the last round, over the few points that can
   make the top-k): the ``depth`` best cosines (HNSW at ``hnsw_ef``, or exact) and the
   ``_FIRST_LIMIT`` best cosines of the first band (``n_tail``; by default the first band of
   :mod:`normrank.search.ann`, scanned exactly by the engine). Their scores are computed here from
   the mirrored norms, only to choose what to ask for next.
2. The bound: with ``c_T`` the cosine at the trusted rank and ``kth`` the k-th of those
   scores, the band must hold every document whose weight could lift ``c_T`` past ``kth``:
   :func:`normrank.search.ann.scan_needed` over the sorted weights (norms are mirrored in memory,
   read from the shard when it is opened, so no count query is needed). The first band counts
   as seen only if the bound clears its points below the last cosine it returned.
3. **Last round**, one request per query: the formula over the first round's top-k (fetched
   by id) and, where the bound asks for more, the rest of the band, cut into ranges of similar
   weight, each searched by cosine with the threshold ``kth / w_max`` of its range (its other
   points score below the k-th score already) and a small limit, doubled (one more request)
   while a range comes back full and its own bound does not hold. The engine's cost grows
   with a prefetch's limit, so thresholds and small limits are what keep this round cheap.

Exactness: with ``exact=True`` the ranking is exact. With HNSW it is exact up to what the
graph returns (the trusted cosine prefetch; ranges above Qdrant's full-scan threshold are
searched through the filtered graph), as for FAISS ANN indexes.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from normrank.errors import (
    DimensionMismatchError,
    DuplicateIdError,
    IndexStateError,
    InvalidInputError,
    InvalidParameterError,
    MissingDependencyError,
    UnknownIdError,
)
from normrank.search.ann import IdLookup, scan_needed
from normrank.search.norm_band import (
    SCORE_RTOL,
    bound_holds,
    first_band,
    hnsw_params,
    search_depths,
    start_search,
)
from normrank.validation import (
    Checked,
    as_alpha,
    as_count,
    as_flag,
    as_ids,
    as_k_factor,
    as_positive_int,
    as_vectors,
    split_norms,
)

__all__ = ["QdrantEdgeNormIndex"]

_NORM = "norm"
_WEIGHT = "weight"  # custom weights (set_weights) live beside the norm, with their own index
_CONFIG_FILE = "edge_config.json"  # written by Qdrant Edge into the shard folder
_SCROLL_PAGE = 4096
_MISSING_COS = -2.0  # below any cosine: the default score of a point a prefetch did not return
# Points of each range of a widened band returned in its first request (doubled while needed).
_PART_LIMIT = 64
# Points of the first band returned in the first round (its best cosines).
_FIRST_LIMIT = 64
# A widened band is searched in ranges of weights within this ratio (at most _MAX_RANGES).
_RANGE_RATIO = 1.25
_MAX_RANGES = 6


def _qe() -> Any:
    try:
        import qdrant_edge
    except ImportError as e:
        raise MissingDependencyError(
            "the Qdrant Edge backend needs qdrant-edge-py: pip install 'normrank[qdrant]'"
        ) from e
    return qdrant_edge


class QdrantEdgeNormIndex:
    """A Qdrant Edge shard searched by ``cos(q, d) * ||d||**alpha``; API as :class:`normrank.NormIndex`.

    Args:
        path: the shard folder. An existing shard is opened (its points, norms and custom
            weights come back); otherwise one is created there (``dim`` required).
        dim: vector dimension (read from the shard when opening one; checked if given).
        alpha: default exponent (``search(..., alpha=)`` overrides it, per query if wanted).
        m / ef_construct: HNSW graph parameters, fixed when the shard is created.
        hnsw_ef: HNSW search beam (Qdrant's ``hnsw_ef``), per search.
        exact: search with ``SearchParams(exact=True)`` (brute force in the engine): the
            ranking is then exact.
        k_factor: the cosine prefetch is at least ``k * k_factor`` deep.
        n_tail: size of the first extreme-norm band, whose best cosines are asked with every
            query's first round. ``None`` (default): the first band of :mod:`normrank.search.ann`
            (:func:`normrank.search.norm_band.first_band`); ``0``: none (cheaper where the
            bound rarely needs a band, as at alpha < 0 on 27k real MiniLM embeddings; dearer
            where it needs a wide one; docs/qdrant.md).
        indexing_threshold_kb: segments above this size get an HNSW graph when
            :meth:`optimize` runs (Qdrant's default 10,000 KB when None).
        max_search_threads: the engine's search thread pool (default: from the CPU count).

    The HNSW graph is built by :meth:`optimize` (Qdrant Edge runs no background optimizer);
    segments without one are scanned exactly. ``search`` returns ``(scores, ids)``: float32 /
    int64 ``(nq, k)``, padded with ``-inf`` / ``-1``. Ids are non-negative integers.
    Every ``add`` / ``remove`` / ``set_weights`` is one engine update, written to the shard's
    write-ahead log before it returns: after :meth:`close`, or a crash, reopening the folder
    returns every acknowledged point with its norm.
    """

    # Search options, checked on every assignment (``index.hnsw_ef = 0`` raises, not searches).
    hnsw_ef = Checked(as_positive_int)
    k_factor = Checked(lambda v, _name: as_k_factor(v))
    n_tail = Checked(as_count)
    exact = Checked(as_flag)

    def __init__(
        self,
        path: str | os.PathLike[str],
        dim: int | None = None,
        alpha: float = 0.0,
        *,
        m: int = 16,
        ef_construct: int = 100,
        hnsw_ef: int = 128,
        exact: bool = False,
        k_factor: int = 10,
        n_tail: int | None = None,
        indexing_threshold_kb: int | None = None,
        max_search_threads: int | None = None,
    ) -> None:
        qe = _qe()
        self.path = Path(path)
        self.alpha = float(as_alpha(alpha, 1)[0])
        self.hnsw_ef, self.k_factor, self.n_tail, self.exact = hnsw_ef, k_factor, n_tail, exact
        m, ef_construct = as_positive_int(m, "m"), as_positive_int(ef_construct, "ef_construct")
        stored = self._stored_dim()
        if dim is not None:
            dim = as_positive_int(dim, "dim")
            if stored is not None and stored != dim:
                raise DimensionMismatchError(f"the shard at {self.path} holds dimension {stored}, not {dim}")
        elif stored is None:
            raise InvalidParameterError(f"no shard at {self.path}: give dim to create one")
        self.dim = int(stored if stored is not None else dim)
        vectors = qe.EdgeVectorParams(size=self.dim, distance=qe.Distance.Cosine)
        try:
            if stored is None:
                config = qe.EdgeConfig(
                    vectors=vectors,
                    hnsw_config=qe.HnswIndexConfig(
                        m=m, ef_construct=ef_construct, full_scan_threshold=10_000
                    ),
                    optimizers=qe.EdgeOptimizersConfig(indexing_threshold=indexing_threshold_kb),
                    payload_memory=qe.Memory.Cached,
                    max_search_threads=max_search_threads,
                )
                self.path.mkdir(parents=True, exist_ok=True)
                self._shard = qe.EdgeShard.create(str(self.path), config)
            else:
                config = qe.EdgeConfig(vectors=vectors, max_search_threads=max_search_threads)
                self._shard = qe.EdgeShard.load(str(self.path), config)
            # Float range indexes: the band is a norm-range filter, read off the index. Checked
            # on opening too: a process killed right after create may have left them out.
            indexed = self._shard.info().payload_schema
            for key in (_NORM, _WEIGHT):
                if key not in indexed:
                    self._shard.update(qe.UpdateOperation.create_field_index(key, qe.PayloadSchemaType.Float))
        except (OSError, RuntimeError, ValueError) as e:
            raise IndexStateError(f"Qdrant Edge could not open {self.path}: {e}") from e
        self._lock = threading.RLock()
        self._closed = False
        self.last_widened = 0
        self._load_mirror()

    # -- the in-memory mirror of ids, norms and weights ------------------------------------

    def _stored_dim(self) -> int | None:
        cfg = self.path / _CONFIG_FILE
        if not cfg.exists():
            if self.path.exists() and any(self.path.iterdir()):
                raise IndexStateError(f"{self.path} is not empty and holds no Qdrant Edge shard")
            return None
        try:
            return int(json.loads(cfg.read_text())["vectors"][""]["size"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise IndexStateError(f"cannot read the shard config {cfg}: {e}") from e

    def _load_mirror(self) -> None:
        qe = _qe()
        ids, norms, weights = [], [], []
        offset = None
        while True:
            recs, offset = self._shard.scroll(
                qe.ScrollRequest(offset=offset, limit=_SCROLL_PAGE, with_payload=True, with_vector=False)
            )
            for r in recs:
                payload = r.payload or {}
                if not isinstance(r.id, int) or not isinstance(payload.get(_NORM), float | int):
                    raise IndexStateError(
                        f"point {r.id!r} in {self.path} has no integer id or no {_NORM!r} payload: "
                        "not a shard written by QdrantEdgeNormIndex"
                    )
                ids.append(int(r.id))
                norms.append(payload[_NORM])
                weights.append(payload.get(_WEIGHT))
            if offset is None:
                break
        have = [w is not None for w in weights]
        if any(have) and not all(have):
            # set_weights is one update, so this is a shard written by something else.
            raise IndexStateError(
                f"{sum(have)} of {len(have)} points carry custom weights: call set_weights or "
                "clear_weights on a shard opened elsewhere"
            )
        self._set_mirror(
            np.array(ids, dtype=np.int64),
            np.array(norms, dtype=np.float32),
            np.array(weights, dtype=np.float32) if ids and all(have) else None,
        )

    def _set_mirror(self, ids: np.ndarray, norms: np.ndarray, weights: np.ndarray | None) -> None:
        self._ids, self._norms, self._weights = ids, norms, weights
        self._pos = dict(zip(ids.tolist(), range(ids.size), strict=True))
        self._derived: dict[Any, Any] = {}

    def _base(self) -> np.ndarray:
        return self._norms if self._weights is None else self._weights

    def _order(self, sign: int) -> tuple[np.ndarray, np.ndarray]:
        """``(positions, base values)`` in decreasing weight order for this sign of alpha."""
        got = self._derived.get(("order", sign))
        if got is None:
            base = self._base()
            order = np.argsort(-base if sign > 0 else base, kind="stable")
            got = self._derived[("order", sign)] = (order, base[order].astype(np.float64))
        return got

    def _sorted_weights(self, alpha: float) -> tuple[np.ndarray, np.ndarray]:
        """``(weights in decreasing order, their negatives)`` for :func:`scan_needed`."""
        got = self._derived.get(("w", alpha))
        if got is None:
            w = self._order(1 if alpha > 0 else -1)[1] ** alpha
            got = self._derived[("w", alpha)] = (w, -w)
        return got

    def _powered(self, alpha: float) -> np.ndarray:
        """Each stored point's weight ``base ** alpha`` (float64, storage order), per alpha."""
        got = self._derived.get(("pow", alpha))
        if got is None:
            got = self._derived[("pow", alpha)] = self._base().astype(np.float64) ** alpha
        return got

    def _lookup(self) -> IdLookup:
        got = self._derived.get("lookup")
        if got is None:
            got = self._derived["lookup"] = IdLookup(self._ids)
        return got

    # -- bookkeeping --------------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self._ids.size)

    @property
    def ntotal(self) -> int:
        return len(self)

    def __repr__(self) -> str:
        shown = {"dim": self.dim, "ntotal": self.ntotal, "alpha": self.alpha, "hnsw_ef": self.hnsw_ef}
        fields = ", ".join(f"{key}={value}" for key, value in shown.items())
        return f"QdrantEdgeNormIndex({str(self.path)!r}, {fields}, exact={self.exact})"

    @property
    def ids(self) -> np.ndarray:
        with self._lock:
            return self._ids.copy()

    @property
    def shard(self) -> Any:
        """The ``qdrant_edge.EdgeShard`` (read it; writing to it directly desynchronises)."""
        return self._shard

    def _check_open(self) -> None:
        if self._closed:
            raise IndexStateError("the index is closed: open the shard folder again")

    def norm_of(self, ids: ArrayLike) -> np.ndarray:
        """Raw norms of ``ids`` (float32); raises :class:`UnknownIdError` for an id not present."""
        arr = np.atleast_1d(np.asarray(ids))
        with self._lock:
            return self._norms[self._positions(arr)]

    def _positions(self, ids: np.ndarray) -> np.ndarray:
        missing = [int(i) for i in ids if int(i) not in self._pos]
        if missing:
            raise UnknownIdError(f"unknown ids: {missing[:10]}")
        return np.fromiter((self._pos[int(i)] for i in ids), dtype=np.int64, count=len(ids))

    def __contains__(self, id_: object) -> bool:
        return isinstance(id_, int | np.integer) and int(id_) in self._pos

    def optimize(self) -> bool:
        """Run Qdrant's optimizers (merge segments, build the HNSW graph); blocks until done."""
        with self._lock:
            self._check_open()
            return bool(self._shard.optimize())

    def flush(self) -> None:
        with self._lock:
            self._check_open()
            self._shard.flush()

    def close(self) -> None:
        """Flush and close the shard (idempotent)."""
        with self._lock:
            if not self._closed:
                self._shard.flush()
                self._shard.close()
                self._closed = True

    def __enter__(self) -> QdrantEdgeNormIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- mutation -----------------------------------------------------------------------------

    def _update(self, op: Any) -> None:
        try:
            self._shard.update(op)
        except (RuntimeError, ValueError, OSError) as e:
            raise IndexStateError(f"Qdrant Edge refused the update: {e}") from e

    def add(
        self, x: ArrayLike, ids: ArrayLike | None = None, *, weights: ArrayLike | None = None
    ) -> np.ndarray:
        """Add raw vectors ``x`` (n, dim); returns their int64 ids (default: after the largest).

        One engine update: the whole batch is in the shard's log when this returns, or none of
        it. With custom weights set, ``weights`` for the new rows are required.
        """
        qe = _qe()
        unit, norms = split_norms(as_vectors(x, self.dim))
        n = unit.shape[0]
        w = None if weights is None else _check_weights(weights, n)
        with self._lock:
            self._check_open()
            start = int(self._ids.max()) + 1 if self._ids.size else 0
            new_ids = np.arange(start, start + n, dtype=np.int64) if ids is None else as_ids(ids, n)
            present = [int(i) for i in new_ids if int(i) in self._pos]
            if present:
                raise DuplicateIdError(f"ids already in the shard: {present[:10]}")
            if self._weights is not None and w is None and n:
                raise InvalidInputError("this index has custom weights: pass weights= for the new rows")
            if w is not None and self._weights is None:
                raise InvalidInputError("weights= is for an index with custom weights (set_weights first)")
            if n == 0:
                return new_ids
            points = [
                qe.Point(id=int(i), vector=v.tolist(), payload=_payload(nv, None if w is None else w[j]))
                for j, (i, v, nv) in enumerate(zip(new_ids, unit, norms, strict=True))
            ]
            self._update(qe.UpdateOperation.upsert_points(points))
            self._set_mirror(
                np.concatenate([self._ids, new_ids]),
                np.concatenate([self._norms, norms]),
                None if self._weights is None else np.concatenate([self._weights, w]),
            )
            return new_ids

    def remove(self, ids: ArrayLike) -> int:
        """Remove ``ids``; unknown ids raise :class:`UnknownIdError` and remove nothing."""
        qe = _qe()
        arr = np.atleast_1d(np.asarray(ids))
        with self._lock:
            self._check_open()
            arr = as_ids(arr, arr.shape[0])
            self._positions(arr)
            if arr.size:
                self._update(qe.UpdateOperation.delete_points([int(i) for i in arr]))
                keep = ~np.isin(self._ids, arr)
                self._set_mirror(
                    self._ids[keep], self._norms[keep], None if self._weights is None else self._weights[keep]
                )
            return int(arr.size)

    def set_weights(self, weights: ArrayLike, ids: ArrayLike | None = None) -> None:
        """Score by ``cos * w**alpha`` with your own per-document ``w``, covering every document
        (aligned with ``ids``, default :attr:`ids` order). Stored in the shard (one update)."""
        qe = _qe()
        with self._lock:
            self._check_open()
            if ids is None:
                order, w = self._ids, _check_weights(weights, self.ntotal)
            else:
                order = as_ids(ids, np.asarray(ids).shape[0])
                if order.size != self.ntotal:
                    raise InvalidInputError(
                        f"weights must cover all {self.ntotal} documents, got {order.size}"
                    )
                w = _check_weights(weights, order.size)
            full = np.empty(self.ntotal, dtype=np.float32)
            full[self._positions(order)] = w
            points = [
                qe.Point(id=int(i), vector=v, payload=_payload(nv, wv))
                for i, v, nv, wv in zip(
                    self._ids, self._unit_vectors(self._ids), self._norms, full, strict=True
                )
            ]
            self._update(qe.UpdateOperation.upsert_points(points))
            self._set_mirror(self._ids, self._norms, full)

    def clear_weights(self) -> None:
        """Score by the norms again."""
        qe = _qe()
        with self._lock:
            self._check_open()
            if self._weights is not None and self._ids.size:
                flt = qe.Filter(must=[qe.FieldCondition(key=_WEIGHT, range=qe.RangeFloat(gt=0.0))])
                self._update(qe.UpdateOperation.delete_payload_by_filter(flt, [_WEIGHT]))
            self._set_mirror(self._ids, self._norms, None)

    def _unit_vectors(self, ids: np.ndarray) -> list[list[float]]:
        recs = []
        for i0 in range(0, ids.size, _SCROLL_PAGE):
            chunk = [int(i) for i in ids[i0 : i0 + _SCROLL_PAGE]]
            got = {int(r.id): r.vector for r in self._shard.retrieve(chunk, False, True)}
            recs += [got[i] for i in chunk]
        return recs

    # -- search -------------------------------------------------------------------------------

    def _params(self) -> dict[str, int]:
        return hnsw_params(None if self.exact else self.hnsw_ef)

    def _band_filter(self, alpha: float, edge: float | None, inner: float | None = None) -> Any:
        """Points strictly beyond ``edge`` on the side alpha favours (``None``: no limit), and,
        with ``inner``, not strictly beyond ``inner`` (the part of a band outside a smaller one)."""
        qe = _qe()
        lo, hi = (edge, inner) if alpha > 0 else (inner, edge)  # norms in (lo, hi] or [lo, hi)
        rng = qe.RangeFloat(gt=lo, lte=hi) if alpha > 0 else qe.RangeFloat(gte=lo, lt=hi)
        if lo is None and hi is None:
            return None
        return qe.Filter(must=[qe.FieldCondition(key=self._key(), range=rng)])

    def _key(self) -> str:
        return _NORM if self._weights is None else _WEIGHT

    def _band(self, alpha: float, t: int) -> tuple[int, float | None]:
        """The band of the first ``t`` documents in weight order as ``(size, edge)``: the points
        strictly beyond the ``t``-th base value (ties at the edge stay outside, so the size can
        be below ``t``); ``(n, None)`` when ``t`` covers everything."""
        n = self.ntotal
        if t >= n:
            return n, None
        sign = 1 if alpha > 0 else -1
        key = ("band", sign, t)  # a query asks for the same few bands again and again
        got = self._derived.get(key)
        if got is None:
            base = self._order(sign)[1]
            edge = float(base[t])
            size = int(
                np.searchsorted(-base, -edge, "left") if sign > 0 else np.searchsorted(base, edge, "left")
            )
            got = self._derived[key] = (size, edge)
        return got

    def _search_params(self) -> Any:
        key = ("params", self.exact, self.hnsw_ef)  # hnsw_ef may be changed between searches
        got = self._derived.get(key)
        if got is None:
            qe = _qe()
            got = qe.SearchParams(exact=True) if self.exact else qe.SearchParams(hnsw_ef=self.hnsw_ef)
            self._derived[key] = got
        return got

    def _weight_expr(self, alpha: float) -> Any:
        """``key ** alpha``, built once per (key, alpha): expressions are immutable values."""
        key = ("expr", self._key(), alpha)
        got = self._derived.get(key)
        if got is None:
            ex = _qe().Expression
            got = self._derived[key] = ex.Pow(ex.Variable(self._key()), ex.Constant(alpha))
        return got

    def _request(self, vec: list[float], k: int, alpha: float, depth: int) -> Any:
        """First round, by cosine alone: the ``depth`` best (``k`` at alpha = 0, where that is
        the answer). The formula comes in the last round, over the points that can make the
        top-k: run here over the whole depth it cost a third of a plain query (27k real
        MiniLM embeddings, hnsw_ef 1024)."""
        qe = _qe()
        return qe.QueryRequest(
            limit=k if alpha == 0 else depth, query=qe.Query.Nearest(vec), params=self._search_params()
        )

    def _band_request(self, vec: list[float], alpha: float, edge: float | None) -> Any:
        """First round, sent with :meth:`_request`: the ``_FIRST_LIMIT`` best cosines of the first
        band (the engine scans a band below its full-scan threshold exactly). Its best scores
        raise the k-th score, which shrinks the band the bound asks for (100k MiniLM-like
        vectors, alpha = 1: by half)."""
        qe = _qe()
        return qe.QueryRequest(
            limit=_FIRST_LIMIT,
            query=qe.Query.Nearest(vec),
            filter=self._band_filter(alpha, edge),
            params=self._search_params(),
        )

    def _ranges(self, alpha: float, first: tuple[int, float | None], need: int) -> list[list]:
        """The part of the widened band (weight order, from the first band's end to ``need``)
        cut into ranges whose weights differ by at most ``_RANGE_RATIO``, so that each gets
        its own cosine threshold (``kth / w_max`` of the range: far tighter than one threshold
        for the whole part where weights spread, as at alpha > 0 on real norms). Each range is
        ``[size, edge, inner_edge, w_max, rank_start, limit]``."""
        w_sorted, neg_w = self._sorted_weights(alpha)
        n = self.ntotal
        start = first[0]
        w_hi, w_lo = float(w_sorted[start]), float(w_sorted[min(need, n) - 1])
        parts = int(min(_MAX_RANGES, max(1, np.ceil(np.log(max(w_hi / w_lo, 1.0)) / np.log(_RANGE_RATIO)))))
        # Cut where the weight has fallen by equal ratios (plain floats: numpy's per-call
        # overhead would be most of a single query's Python time).
        step = (w_lo / w_hi) ** (1.0 / parts)
        cuts = [int(np.searchsorted(neg_w, -w_hi * step**j, "left")) for j in range(1, parts)]
        bounds = [first] + [self._band(alpha, c) for c in cuts] + [self._band(alpha, need)]
        out = []
        for (s0, e0), (s1, e1) in itertools.pairwise(bounds):
            if s1 > s0:
                w_max = float(self._order(1 if alpha > 0 else -1)[1][s0] ** alpha)
                out.append([s1 - s0, e1, e0 if s0 else None, w_max, s0, min(s1 - s0, _PART_LIMIT)])
        return out

    def _widening_request(
        self,
        vec: list[float],
        k: int,
        alpha: float,
        ranges: list[list],
        kth: float,
        rescore: list[int] | None = None,
    ) -> Any:
        """Second round: each range of the widened band, by cosine, only its points with
        cosine >= ``kth / w_max`` (``w_max``: the range's largest weight; the others score
        below the k-th score found already), at most its ``limit``, scored by the formula.
        Exact when the engine scans (exact search, or a range below the HNSW full-scan
        threshold); through the filtered HNSW graph otherwise. ``rescore``: ids of the first
        round's top-k (found by cosine alone), fetched by id so that the formula scores them too."""
        qe = _qe()
        ex = qe.Expression
        prefetch = []
        if rescore:
            prefetch.append(
                qe.Prefetch(
                    limit=len(rescore),
                    query=qe.Query.Nearest(vec),
                    filter=qe.Filter(must=[qe.HasIdCondition(set(rescore))]),
                    params=qe.SearchParams(exact=True),
                )
            )
        for _size, edge, inner, w_max, _rank, limit in ranges:
            # (A hair low, against float32 rounding; none for kth <= 0, where a negative cosine
            # times a small weight can still reach it.)
            threshold = (kth - SCORE_RTOL * abs(kth)) / w_max if kth > 0 else None
            prefetch.append(
                qe.Prefetch(
                    limit=limit,
                    query=qe.Query.Nearest(vec),
                    filter=self._band_filter(alpha, edge, inner=inner),
                    params=self._search_params(),
                    score_threshold=threshold,
                )
            )
        key = ("f2", self._key(), alpha, len(prefetch))
        formula = self._derived.get(key)
        if formula is None:
            names = [f"$score[{j}]" for j in range(len(prefetch))]
            cos = ex.Max([ex.Variable(v) for v in names]) if len(names) > 1 else ex.Variable("$score")
            formula = self._derived[key] = qe.Formula(
                ex.Mult([cos, self._weight_expr(alpha)]), defaults=dict.fromkeys(names, _MISSING_COS)
            )
        limit = sum(r[5] for r in ranges) + (len(rescore) if rescore else 0)
        return qe.QueryRequest(limit=limit, query=formula, prefetches=prefetch)

    def _rank(self, sign: int) -> np.ndarray:
        """Weight-order rank of each storage position."""
        got = self._derived.get(("rank", sign))
        if got is None:
            order = self._order(sign)[0]
            got = self._derived[("rank", sign)] = np.empty_like(order)
            got[order] = np.arange(order.size)
        return got

    def _widen(self, vecs, k, alphas, wide, scores, ids, rescore=None) -> None:
        """Second round for the queries in ``wide`` (query -> ranges, possibly none). A range
        that returns its whole ``limit`` may hold more points above its threshold: those have
        cosine at most the last one returned, so unless the k-th score already beats that times
        the range's ``w_max``, the range is asked again, twice as deep. ``rescore`` (query ->
        ids): rows whose scores were computed here from cosines, replaced by the engine's
        formula scores in the first pass."""
        pending = dict(wide)
        rescore = rescore or {}
        while pending:
            order = list(pending)
            reqs = [
                self._widening_request(
                    vecs[i], k, float(alphas[i]), pending[i], float(scores[i, -1]), rescore.get(i)
                )
                for i in order
            ]
            nxt = {}
            for i, pts in zip(order, self._query(reqs), strict=True):
                if i in rescore:
                    # Every point of the row comes back with the engine's score, and the engine
                    # sorts by it: the row is the first k.
                    m = min(k, len(pts))
                    scores[i], ids[i] = -np.inf, -1
                    scores[i, :m] = [p.score for p in pts[:m]]
                    ids[i, :m] = [p.id for p in pts[:m]]
                else:
                    _merge_into(scores[i], ids[i], pts)
                ranges = pending[i]
                if not any(len(pts) >= r[5] and r[5] < r[0] for r in ranges):  # (false if none)
                    continue  # no range returned its whole limit (the usual case)
                a = float(alphas[i])
                pos = self._lookup()(np.array([int(p.id) for p in pts], dtype=np.int64))
                cos = (
                    np.array([p.score for p in pts], dtype=np.float64)
                    / self._base()[pos].astype(np.float64) ** a
                )
                rank = self._rank(1 if a > 0 else -1)[pos]
                w_min = float(self._sorted_weights(a)[0][-1])
                again = []
                for r in ranges:
                    size, _edge, _inner, w_max, r0, limit = r
                    mine = (rank >= r0) & (rank < r0 + size)
                    if limit >= size or mine.sum() < limit:
                        continue
                    if not bound_holds(float(scores[i, -1]), float(cos[mine].min()), w_max, w_min):
                        again.append([*r[:5], min(size, 2 * limit)])
                if again:
                    nxt[i] = again
            pending, rescore = nxt, {}

    def search(
        self, q: ArrayLike, k: int, *, alpha: float | ArrayLike | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` by ``cos(q, d) * ||d||**alpha`` (``alpha`` scalar or one per query); every
        returned score is the engine's own formula value, not recomputed here."""
        unit_q, alphas, scores, ids = start_search(q, k, self.dim, self.alpha if alpha is None else alpha)
        nq, k = scores.shape
        if not nq:
            return scores, ids
        with self._lock:
            self._check_open()
            self.last_widened = 0  # queries whose band was widened (for benchmarks and tuning)
            n = self.ntotal
            if n == 0:
                return scores, ids
            params = self._params()
            depth, trust = search_depths(n, k, self.k_factor, params)
            t0 = first_band(n, params, self.n_tail)
            vecs = unit_q.tolist()
            bands = [self._band(float(a), t0) if a != 0 else (0, None) for a in alphas]
            reqs, band_at = [], {}
            for i in range(nq):
                a = float(alphas[i])
                reqs.append(self._request(vecs[i], k, a, depth))
                if bands[i][0] and a != 0:
                    band_at[i] = len(reqs)
                    reqs.append(self._band_request(vecs[i], a, bands[i][1]))
            results = self._query(reqs)
            wide, rescore = {}, {}
            at = 0
            for i in range(nq):
                a = float(alphas[i])
                pts = results[at]
                at += 1 + (i in band_at)
                if a == 0:
                    scores[i, : len(pts)] = [p.score for p in pts]
                    ids[i, : len(pts)] = [p.id for p in pts]
                    continue
                bpts = results[band_at[i]] if i in band_at else []
                pid = np.fromiter((p.id for p in itertools.chain(pts, bpts)), np.int64, len(pts) + len(bpts))
                cs = np.fromiter((p.score for p in itertools.chain(pts, bpts)), np.float64, pid.size)
                pos = self._lookup()(pid)
                if (pos < 0).any():
                    raise IndexStateError(
                        "Qdrant Edge returned ids this index does not hold (written elsewhere?)"
                    )
                # The scores the formula will give them (the engine's come in the last round).
                sc = cs * self._powered(a)[pos]
                pid, sc = _top_unique(pid, sc, k)
                rescore[i] = pid.tolist()
                scores[i, : sc.size], ids[i, : sc.size] = sc, pid
                first = bands[i]
                if bpts and len(bpts) >= _FIRST_LIMIT and first[0] > len(bpts):
                    # The band's points below its last cosine were not seen: unless the bound
                    # clears them, the band is searched again in the second round.
                    w_sorted = self._sorted_weights(a)[0]
                    kth = float(sc[k - 1]) if sc.size >= k else -np.inf
                    if not bound_holds(kth, float(bpts[-1].score), float(w_sorted[0]), float(w_sorted[-1])):
                        first = (0, None)
                need = self._band_needed(cs[: len(pts)], sc, k, a, depth, trust, first[0])
                wide[i] = [] if need is None else self._ranges(a, first, need)
            self.last_widened = sum(1 for r in wide.values() if r)
            if wide:
                # The bound holds with the widened band (the k-th score can only rise): one more
                # round, for the queries that need it, over the part of the band not yet seen,
                # with the engine's formula over everything that can make the top-k.
                self._widen(vecs, k, alphas, wide, scores, ids, rescore)
        return scores, ids

    def _query(self, reqs: list[Any]) -> list[list[Any]]:
        qe = _qe()
        try:
            if len(reqs) == 1:
                return [self._shard.query(reqs[0])]
            return self._shard.query_batch(qe.QueryBatchRequest(reqs))
        except (RuntimeError, ValueError) as e:
            raise IndexStateError(f"Qdrant Edge query failed: {e}") from e

    def _band_needed(
        self, cos: np.ndarray, s: np.ndarray, k: int, alpha: float, depth: int, trust: int, band: int
    ) -> int | None:
        """None when the bound holds; otherwise how many documents, in weight order, the band
        must hold for it to (:func:`normrank.search.ann.scan_needed`).

        ``cos`` are the cosine prefetch's cosines in decreasing order (the ``depth`` best), ``s``
        the first round's top scores (cosine prefetch and first band together), likewise."""
        n = self.ntotal
        if band >= n or depth >= n:  # every point was fetched
            return None
        if cos.size < trust:  # fewer points than the shard holds came back: scan them all
            return n
        c_trust = cos[trust - 1]
        kth = s[k - 1] if s.size >= k else -np.inf
        w_sorted, neg_w = self._sorted_weights(alpha)
        kth_safe = np.array([kth - SCORE_RTOL * abs(kth)])
        need = int(scan_needed(kth_safe, np.array([c_trust]), neg_w, float(w_sorted[-1]))[0])
        return None if need <= band else need


def _top_unique(pid: np.ndarray, sc: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best ``(ids, scores)`` in decreasing score, each id once (a first band's point
    may also be among the best cosines)."""
    order = np.argsort(-sc, kind="stable")
    pid, sc = pid[order], sc[order]
    if np.unique(pid).size < pid.size:
        keep = np.sort(np.unique(pid, return_index=True)[1])
        pid, sc = pid[keep], sc[keep]
    return pid[:k], sc[:k]


def _merge_into(scores: np.ndarray, ids: np.ndarray, pts: list) -> None:
    """Merge the second round's points into one query's sorted top-k row (a point met in both
    rounds has the same score in both: keep it once)."""
    have = set(ids[ids >= 0].tolist())
    s = np.concatenate([scores, np.array([p.score for p in pts if int(p.id) not in have], dtype=np.float32)])
    i = np.concatenate([ids, np.array([int(p.id) for p in pts if int(p.id) not in have], dtype=np.int64)])
    order = np.argsort(-s, kind="stable")[: scores.size]
    scores[:], ids[:] = s[order], i[order]


def _payload(norm: float, weight: float | None) -> dict[str, float]:
    out = {_NORM: float(norm)}
    if weight is not None:
        out[_WEIGHT] = float(weight)
    return out


def _check_weights(weights: ArrayLike, n: int) -> np.ndarray:
    try:
        w = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise InvalidInputError(f"weights must be numbers: {e}") from e
    if w.shape != (n,):
        raise InvalidInputError(f"weights must have shape ({n},), got {w.shape}")
    if not (np.isfinite(w).all() and (w > 0).all()):
        raise InvalidInputError("weights must be finite and > 0 (they are raised to the power alpha)")
    return w.astype(np.float32)
