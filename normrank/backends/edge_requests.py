"""The Qdrant Edge backend's engine requests (:class:`~normrank.backends.qdrant_edge.QdrantEdgeNormIndex`):
the cosine first round, the first band, the widened band cut into ranges of similar weight with
their cosine thresholds, and the formula ``$score * weight**alpha`` that scores the last round.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from normrank.backends.edge_shard import NORM, WEIGHT, edge_module
from normrank.search.bound import cosine_limit
from normrank.search.norm_band import LOG_WEIGHT_CAP

__all__ = ["EdgeRequests", "merge_into", "top_unique"]

_MISSING_COS = -2.0  # below any cosine: the default score of a point a prefetch did not return
# Points of each range of a widened band returned in its first request (doubled while needed).
_PART_LIMIT = 64
# Points of the first band returned in the first round (its best cosines).
FIRST_LIMIT = 64
# A widened band is searched in ranges of weights within this ratio (at most _MAX_RANGES).
_RANGE_RATIO = 1.25
_MAX_RANGES = 6


class EdgeRequests:
    """Mixin of the Edge index: builds the engine's requests from the mirror
    (:class:`~normrank.backends.edge_shard.ShardMirror`) and the search options."""

    dim: int
    exact: bool
    hnsw_ef: int
    _derived: dict[Any, Any]
    _weights: np.ndarray | None
    _saturates: Any  # ShardMirror's
    _sorted_weights: Any

    def _band_filter(self, alpha: float, edge: float | None, inner: float | None = None) -> Any:
        """Points strictly beyond ``edge`` on the side alpha favours (``None``: no limit), and,
        with ``inner``, not strictly beyond ``inner`` (the part of a band outside a smaller one).
        A first band's (no ``inner``) is built once per edge: filters are immutable values."""
        if inner is not None:
            return self._new_band_filter(alpha, edge, inner)
        key = ("filter", self._key(), alpha > 0, edge)
        got = self._derived.get(key)
        if got is None:
            got = self._derived[key] = self._new_band_filter(alpha, edge, None)
        return got

    def _new_band_filter(self, alpha: float, edge: float | None, inner: float | None) -> Any:
        qe = edge_module()
        lo, hi = (edge, inner) if alpha > 0 else (inner, edge)  # norms in (lo, hi] or [lo, hi)
        rng = qe.RangeFloat(gt=lo, lte=hi) if alpha > 0 else qe.RangeFloat(gte=lo, lt=hi)
        if lo is None and hi is None:
            return None
        return qe.Filter(must=[qe.FieldCondition(key=self._key(), range=rng)])

    def _key(self) -> str:
        return NORM if self._weights is None else WEIGHT

    def _search_params(self, exact: bool = False) -> Any:
        """The requests' ``SearchParams`` (``exact``: an exact search whatever the options), one
        object per setting: params are immutable values."""
        exact = exact or self.exact
        key = ("params", exact, None if exact else self.hnsw_ef)  # hnsw_ef may change between searches
        got = self._derived.get(key)
        if got is None:
            qe = edge_module()
            got = qe.SearchParams(exact=True) if exact else qe.SearchParams(hnsw_ef=self.hnsw_ef)
            self._derived[key] = got
        return got

    def _weight_expr(self, alpha: float) -> Any:
        """``key ** alpha``, built once per (key, alpha): expressions are immutable values. Where a
        stored weight's power passes the cap, the core's saturation instead
        (``exp(min(alpha * ln key, ln WEIGHT_CAP))``): the engine cancels a query whose formula
        gives a score beyond float32 (norms 1e20 at alpha = 2), where NormIndex returns ties."""
        key = ("expr", self._key(), alpha)
        got = self._derived.get(key)
        if got is None:
            ex = edge_module().Expression
            var = ex.Variable(self._key())
            if self._saturates(alpha):
                log_w = ex.Mult([ex.Constant(alpha), ex.Ln(var)])
                got = ex.Exp(ex.Min([log_w, ex.Constant(LOG_WEIGHT_CAP)]))
            else:
                got = ex.Pow(var, ex.Constant(alpha))
            self._derived[key] = got
        return got

    def _request(self, vec: Any, k: int, alpha: float, depth: int) -> Any:
        """First round, by cosine alone: the ``depth`` best (``k`` at alpha = 0, where that is
        the answer). The formula comes in the last round, over the points that can make the
        top-k: run here over the whole depth it cost a third of a plain query (27k real
        MiniLM embeddings, hnsw_ef 1024)."""
        qe = edge_module()
        return qe.QueryRequest(
            limit=k if alpha == 0 else depth, query=_nearest(vec), params=self._search_params()
        )

    def _band_request(self, vec: Any, alpha: float, edge: float | None) -> Any:
        """First round, sent with :meth:`_request`: the ``FIRST_LIMIT`` best cosines of the first
        band (the engine scans a band below its full-scan threshold exactly). Its best scores
        raise the k-th score, which shrinks the band the bound asks for (100k MiniLM-like
        vectors, alpha = 1: by half)."""
        qe = edge_module()
        return qe.QueryRequest(
            limit=FIRST_LIMIT,
            query=_nearest(vec),
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
        if w_lo > 0:
            parts = int(
                min(_MAX_RANGES, max(1, np.ceil(np.log(max(w_hi / w_lo, 1.0)) / np.log(_RANGE_RATIO))))
            )
        else:  # weights that underflow to 0 (the core's saturation) have no ratio to cut by
            parts = 1
        # Cut where the weight has fallen by equal ratios (plain floats: numpy's per-call
        # overhead would be most of a single query's Python time).
        step = (w_lo / w_hi) ** (1.0 / parts)
        cuts = np.searchsorted(neg_w, [-w_hi * step**j for j in range(1, parts)], "left").tolist()
        bounds = [first] + [self._band(alpha, c) for c in cuts] + [self._band(alpha, need)]
        out = []
        for (s0, e0), (s1, e1) in itertools.pairwise(bounds):
            if s1 > s0:
                w_max = float(w_sorted[s0])
                out.append([s1 - s0, e1, e0 if s0 else None, w_max, s0, min(s1 - s0, _PART_LIMIT)])
        return out

    def _widening_request(
        self,
        vec: Any,
        alpha: float,
        ranges: list[list],
        *,
        kth: float,
        rescore: list[int] | None = None,
    ) -> Any:
        """Second round: each range of the widened band, by cosine, only its points with
        cosine >= ``kth / w_max`` (``w_max``: the range's largest weight; the others score
        below the k-th score found already), at most its ``limit``, scored by the formula.
        Exact when the engine scans (exact search, or a range below the HNSW full-scan
        threshold); through the filtered HNSW graph otherwise. ``rescore``: ids of the first
        round's top-k (found by cosine alone), fetched by id so that the formula scores them too."""
        qe = edge_module()
        ex = qe.Expression
        query = _nearest(vec)
        params = self._search_params()
        prefetch = []
        if rescore:
            prefetch.append(
                qe.Prefetch(
                    limit=len(rescore),
                    query=query,
                    filter=qe.Filter(must=[qe.HasIdCondition(set(rescore))]),
                    params=self._search_params(exact=True),
                )
            )
        for _size, edge, inner, w_max, _rank, limit in ranges:
            threshold = _threshold(kth, w_max, self.dim)
            prefetch.append(
                qe.Prefetch(
                    limit=limit,
                    query=query,
                    filter=self._band_filter(alpha, edge, inner=inner),
                    params=params,
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


def _nearest(vec: Any) -> Any:
    """The engine's nearest query for ``vec``: a unit vector (a list of floats), or the
    ``Query.Nearest`` made of it once per search and shared by all the query's requests."""
    return vec if not isinstance(vec, list) else edge_module().Query.Nearest(vec)


def _threshold(kth: float, w_max: float, dim: int) -> float | None:
    """The cosine a range's point needs to reach ``kth`` with weight at most ``w_max``
    (:func:`normrank.search.bound.cosine_limit`: low by the bound's margin); none for kth <= 0,
    where a negative cosine times a small weight can still reach it; above any cosine where every
    weight of the range underflowed to 0 (the core's saturation), so that all its points score
    0 < kth."""
    if kth <= 0:
        return None
    return cosine_limit(kth, w_max, dim) if w_max > 0 else 2.0


def top_unique(pid: np.ndarray, sc: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best ``(ids, scores)`` in decreasing score, each id once (a first band's point
    may also be among the best cosines): the first place of each id in the stable order."""
    order = np.argsort(-sc, kind="stable")
    ids = pid.tolist()
    keep, seen = [], set()
    for j in order.tolist():  # stops after k distinct ids: a few more than k steps
        if ids[j] not in seen:
            seen.add(ids[j])
            keep.append(j)
            if len(keep) == k:
                break
    at = np.array(keep, dtype=np.intp)
    return pid[at], sc[at]


def merge_into(scores: np.ndarray, ids: np.ndarray, pts: list) -> None:
    """Merge the second round's points into one query's sorted top-k row (a point met in both
    rounds has the same score in both: keep it once)."""
    have = set(ids[ids >= 0].tolist())
    s = np.concatenate([scores, np.array([p.score for p in pts if int(p.id) not in have], dtype=np.float32)])
    i = np.concatenate([ids, np.array([int(p.id) for p in pts if int(p.id) not in have], dtype=np.int64)])
    order = np.argsort(-s, kind="stable")[: scores.size]
    scores[:], ids[:] = s[order], i[order]
