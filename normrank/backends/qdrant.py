"""``QdrantNormIndex``: norm-weighted search ``cos(q, d) * ||d||**alpha`` inside Qdrant.

Unit vectors live in a cosine collection and the raw norm in each point's payload (``"norm"``).
A search is one Qdrant query per query vector: prefetch cosine candidates, then a
``FormulaQuery`` computes ``$score * norm**alpha`` on the server. Which points to prefetch
follows :mod:`normrank.search.ann`: a band of extreme norms on the side alpha favours (the lowest for
``alpha < 0``, the highest for ``alpha > 0``) is prefetched whole, with the ``k * k_factor``
best cosines of the rest. The first band is the cached ``n_tail`` extremes (by default the size
:mod:`normrank.search.ann` uses, :func:`normrank.search.norm_band.first_band`); when the k-th score
does not beat the bound on everything else (last cosine of the rest times the largest weight
outside the band), the band edge is read off the bound, the band is counted, and the query runs
once more with it. The same code runs on local mode (``QdrantClient(":memory:")``, which
evaluates formula queries itself) and on a cluster by URL; see docs/qdrant.md.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from normrank.errors import DuplicateIdError, IndexStateError, MissingDependencyError, UnknownIdError
from normrank.search.bound import cosine_ceiling, unseen_can_beat
from normrank.search.norm_band import (
    LOG_WEIGHT_CAP,
    band_edge,
    first_band,
    hnsw_params,
    powered,
    saturates,
    search_depths,
    start_search,
)
from normrank.validation import (
    Checked,
    as_alpha,
    as_count,
    as_id_list,
    as_ids,
    as_k_factor,
    as_one_id,
    as_positive_int,
    as_vectors,
    split_norms,
)

__all__ = ["QdrantNormIndex"]

_NORM = "norm"
_UPSERT_BATCH = 512
# The collection's metadata key for the next default id: above every id ever removed, so that
# a later QdrantNormIndex (another process, a reopened server) never hands a removed id out again.
_NEXT_ID = "normrank_next_id"


def _models() -> Any:
    try:
        from qdrant_client import models
    except ImportError as e:
        raise MissingDependencyError(
            "the Qdrant backend needs qdrant-client: pip install 'normrank[qdrant]'"
        ) from e
    return models


class QdrantNormIndex:
    """A Qdrant collection searched by ``cos(q, d) * ||d||**alpha``; API as :class:`normrank.NormIndex`.

    Args:
        dim: vector dimension.
        alpha: default exponent (``search(..., alpha=)`` overrides it, per query if wanted).
        client: a ``qdrant_client.QdrantClient`` (local mode or a server/cluster URL).
        collection: collection name; created (cosine, ``dim``) if it does not exist.
        k_factor: the cosine prefetch outside the band is ``k * k_factor`` deep.
        n_tail: size of the first extreme-norm band, prefetched whole (default: as
            :mod:`normrank.search.ann`, ~1/30 of the points, <= 2048); widened per query where the
            bound needs it.
        shard_number / replication_factor: passed to ``create_collection`` for a new collection.

    ``search`` returns ``(scores, ids)``: float32 / int64 ``(nq, k)``, padded with ``-inf`` / ``-1``.
    Ids are non-negative integers (Qdrant point ids). Norm statistics used by the bound are read
    from the server and cached; call :meth:`refresh` after other clients write to the collection.
    """

    # Search options, checked on every assignment, as the constructor's.
    k_factor = Checked(lambda v, _name: as_k_factor(v))
    n_tail = Checked(as_count)

    def __init__(
        self,
        dim: int,
        alpha: float = 0.0,
        *,
        client: Any,
        collection: str,
        k_factor: int = 10,
        n_tail: int | None = None,
        shard_number: int | None = None,
        replication_factor: int | None = None,
    ) -> None:
        m = _models()
        self.dim, self.client, self.collection = as_positive_int(dim, "dim"), client, collection
        self.alpha = float(as_alpha(alpha, 1)[0])
        self.k_factor, self.n_tail = k_factor, n_tail
        if not client.collection_exists(collection):
            client.create_collection(
                collection,
                vectors_config=m.VectorParams(size=self.dim, distance=m.Distance.COSINE),
                shard_number=shard_number,
                replication_factor=replication_factor,
            )
            # A range index on the norm: the tail prefetch filters on it and stats order by it.
            with warnings.catch_warnings():  # local mode warns that it needs no payload index
                warnings.simplefilter("ignore", UserWarning)
                client.create_payload_index(collection, _NORM, field_schema=m.PayloadSchemaType.FLOAT)
        self._stats: dict[str, float] | None = None
        self._next_id: int | None = None

    # -- bookkeeping --------------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self.client.count(self.collection, exact=True).count)

    @property
    def ntotal(self) -> int:
        return len(self)

    def refresh(self) -> None:
        """Forget cached norm statistics (after writes by other clients)."""
        self._stats = None
        self._next_id = None

    def _ordered_norms(self, direction: str, limit: int) -> np.ndarray:
        m = _models()
        points, _ = self.client.scroll(
            self.collection,
            limit=limit,
            order_by=m.OrderBy(key=_NORM, direction=direction),
            with_payload=[_NORM],
            with_vectors=False,
        )
        return np.array([p.payload[_NORM] for p in points], dtype=np.float64)

    def _norm_stats(self) -> dict[str, float]:
        if self._stats is None:
            n = len(self)
            # The same first band as the FAISS ANN search; this backend sets no hnsw_ef (the
            # collection's own), so the cap is that of an exact search.
            t = first_band(n, hnsw_params(None), self.n_tail)
            if n <= 2 * t + 2:
                t = 0
            lo = self._ordered_norms("asc", t + 1)
            hi = self._ordered_norms("desc", t + 1)
            self._stats = {
                "n": n,
                "tail": t,
                "min": float(lo[0]) if lo.size else 1.0,
                "max": float(hi[0]) if hi.size else 1.0,
                "t_lo": float(lo[-1]) if lo.size else 1.0,  # smallest norm outside the low tail
                "t_hi": float(hi[-1]) if hi.size else 1.0,  # largest norm outside the high tail
            }
        return self._stats

    @property
    def ids(self) -> np.ndarray:
        """Every point id of the collection, int64, ascending (one scroll)."""
        found: list[int] = []
        offset = None
        while True:
            points, offset = self.client.scroll(
                self.collection, limit=4096, offset=offset, with_payload=False, with_vectors=False
            )
            found += [int(p.id) for p in points]
            if offset is None:
                return np.array(sorted(found), dtype=np.int64)

    def _points(self, ids: ArrayLike, vectors: bool) -> tuple[np.ndarray, list[Any]]:
        """The points of ``ids`` in that order (with their vectors if asked);
        :class:`UnknownIdError` for an id not in the collection."""
        arr = as_id_list(ids)  # the core's id parser: 3.7, '3', None, NaN, [[1]] are refused
        got = {
            int(p.id): p
            for i0 in range(0, arr.size, 1024)
            for p in self.client.retrieve(
                self.collection,
                [int(i) for i in arr[i0 : i0 + 1024]],
                with_payload=[_NORM],
                with_vectors=vectors,
            )
        }
        missing = [int(i) for i in arr if int(i) not in got]
        if missing:
            raise UnknownIdError(f"unknown ids: {missing[:10]}")
        return arr, [got[int(i)] for i in arr]

    def norm_of(self, ids: ArrayLike) -> np.ndarray:
        """Raw norms of ``ids`` (float32, from the points' payloads); :class:`UnknownIdError`
        for an id not in the collection."""
        _, points = self._points(ids, vectors=False)
        return np.array([p.payload[_NORM] for p in points], dtype=np.float32)

    def reconstruct(self, id_: int) -> np.ndarray:
        """The raw vector of ``id_``: the stored unit vector times its norm (float32)."""
        _, (point,) = self._points([as_one_id(id_)], vectors=True)
        return (np.asarray(point.vector, dtype=np.float32) * np.float32(point.payload[_NORM])).astype(
            np.float32
        )

    # -- mutation -----------------------------------------------------------------------------

    def _existing(self, ids: np.ndarray) -> list[int]:
        found = []
        for i0 in range(0, ids.size, 1024):
            chunk = [int(i) for i in ids[i0 : i0 + 1024]]
            found += [int(p.id) for p in self.client.retrieve(self.collection, chunk, with_payload=False)]
        return found

    def add(self, x: ArrayLike, ids: ArrayLike | None = None) -> np.ndarray:
        """Add raw vectors ``x`` (n, dim); returns their int64 ids (default: after the largest)."""
        m = _models()
        unit, norms = split_norms(as_vectors(x, self.dim))
        n = unit.shape[0]
        if ids is None:
            if self._next_id is None:
                top, _ = self.client.scroll(self.collection, limit=1 << 30, with_payload=False)
                present = max((int(p.id) for p in top), default=-1) + 1
                self._next_id = max(present, self._saved_next_id())
            new_ids = np.arange(self._next_id, self._next_id + n, dtype=np.int64)
        else:
            new_ids = as_ids(ids, n)
        present = self._existing(new_ids)
        if present:
            raise DuplicateIdError(f"ids already in the collection: {present[:10]}")
        for i0 in range(0, n, _UPSERT_BATCH):
            sl = slice(i0, i0 + _UPSERT_BATCH)
            points = [
                m.PointStruct(id=int(i), vector=v.tolist(), payload={_NORM: float(nv)})
                for i, v, nv in zip(new_ids[sl], unit[sl], norms[sl], strict=True)
            ]
            self.client.upsert(self.collection, points=points, wait=True)
        if n:
            self._next_id = max(self._next_id or 0, int(new_ids.max()) + 1)
        self._stats = None
        return new_ids

    def remove(self, ids: ArrayLike) -> int:
        """Remove ``ids``; unknown ids raise :class:`UnknownIdError` and remove nothing."""
        m = _models()
        arr = as_ids(ids)  # the core's id parser: 3.7, '3', None, NaN, [[1]] are refused
        present = set(self._existing(arr))
        missing = [int(i) for i in arr if int(i) not in present]
        if missing:
            raise UnknownIdError(f"unknown ids: {missing[:10]}")
        if arr.size:
            # Saved before the points go, so that no later opener hands these ids out again.
            self._save_next_id(int(arr.max()) + 1)
            self.client.delete(
                self.collection, points_selector=m.PointIdsList(points=arr.tolist()), wait=True
            )
        self._stats = None
        return int(arr.size)

    def _saved_next_id(self) -> int:
        """The next default id kept in the collection's metadata (0 if none)."""
        meta = self.client.get_collection(self.collection).config.metadata or {}
        value = meta.get(_NEXT_ID, 0)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or value != int(value):
            raise IndexStateError(
                f"collection {self.collection!r} holds metadata {_NEXT_ID}={value!r}, not a "
                "non-negative integer: fix or delete that key"
            )
        return int(value)

    def _save_next_id(self, at_least: int) -> None:
        """Raise the saved next default id to ``at_least``. A server that keeps no collection
        metadata (Qdrant before it had any) cannot hold it: said in a warning, since a later
        opener may then give a removed id again."""
        saved = self._saved_next_id()
        if self._next_id is not None:  # (unknown yet: the first default add reads both)
            self._next_id = max(self._next_id, at_least)
        if at_least <= saved:
            return
        self.client.update_collection(self.collection, metadata={_NEXT_ID: int(at_least)})
        if self._saved_next_id() < at_least:
            warnings.warn(
                f"this Qdrant server did not keep the metadata {_NEXT_ID} of collection "
                f"{self.collection!r}: a later QdrantNormIndex over it may hand out removed ids "
                "again as default ids; pass ids= to add where that matters",
                RuntimeWarning,
                stacklevel=3,
            )

    # -- search -------------------------------------------------------------------------------

    def _request(self, q: np.ndarray, k: int, alpha: float, *, depth: int, tau: float, band: int) -> Any:
        """One query: the band (norms beyond ``tau`` on the side alpha favours, ``band`` points,
        all of them) and the ``depth`` best cosines among the rest, scored by the formula."""
        m = _models()
        vec = q.tolist()
        if alpha == 0:
            return m.QueryRequest(query=vec, limit=k, with_payload=[_NORM])
        prefetch = []
        if band:
            rng_band, rng_rest = self._ranges(tau, alpha)
            prefetch.append(m.Prefetch(query=vec, limit=depth, filter=self._range(rng_rest)))
            prefetch.append(m.Prefetch(query=vec, limit=band, filter=self._range(rng_band)))
        else:
            prefetch.append(m.Prefetch(query=vec, limit=depth))
        cos = m.SumExpression(sum=[f"$score[{i}]" for i in range(len(prefetch))])
        formula = m.MultExpression(mult=[cos, self._weight_expr(alpha)])
        defaults = {f"$score[{i}]": 0.0 for i in range(len(prefetch))}
        return m.QueryRequest(
            prefetch=prefetch,
            query=m.FormulaQuery(formula=formula, defaults=defaults),
            limit=depth + band,
            with_payload=[_NORM],
        )

    def _weight_expr(self, alpha: float) -> Any:
        """``norm ** alpha``; where a stored norm's power passes the cap, the core's saturation
        instead (``exp(min(alpha * ln norm, ln WEIGHT_CAP))``): Qdrant refuses a score beyond
        float32 (and local mode overflows), where NormIndex returns ties at the cap."""
        m = _models()
        st = self._norm_stats()
        if st["n"] and saturates(st["min"], st["max"], alpha):
            log_w = m.MultExpression(mult=[alpha, m.LnExpression(ln=_NORM)])
            return m.ExpExpression(exp=m.MinExpression(min=[log_w, LOG_WEIGHT_CAP]))
        return m.PowExpression(pow=m.PowParams(base=_NORM, exponent=alpha))

    @staticmethod
    def _range(r: Any) -> Any:
        m = _models()
        return m.Filter(must=[m.FieldCondition(key=_NORM, range=r)])

    @staticmethod
    def _ranges(tau: float, alpha: float) -> tuple[Any, Any]:
        """``(band, rest)`` norm ranges: beyond ``tau`` on the side alpha favours, and the others.
        Disjoint, so that no point is counted by both prefetches."""
        m = _models()
        return (m.Range(gt=tau), m.Range(lte=tau)) if alpha > 0 else (m.Range(lt=tau), m.Range(gte=tau))

    def _band_size(self, tau: float, alpha: float) -> int:
        band = self._range(self._ranges(tau, alpha)[0])
        return int(self.client.count(self.collection, count_filter=band, exact=True).count)

    def search(
        self, q: ArrayLike, k: int, *, alpha: float | ArrayLike | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` by ``cos(q, d) * ||d||**alpha`` (``alpha`` scalar or one per query)."""
        unit_q, alphas, scores, ids = start_search(q, k, self.dim, self.alpha if alpha is None else alpha)
        nq, k = scores.shape
        if nq == 0:
            return scores, ids
        st = self._norm_stats()
        if st["n"] == 0:
            return scores, ids
        # The plan's depth for an exact cosine source (this backend sets no hnsw_ef): k * k_factor.
        depth = search_depths(int(st["n"]), k, self.k_factor, hnsw_params(None))[0]
        # The first band is the cached tail; a query whose bound does not hold widens it once.
        tau = np.where(alphas < 0, st["t_lo"], st["t_hi"])
        band = np.full(nq, st["tail"], dtype=np.int64)
        active = np.arange(nq)
        while active.size:
            reqs = [
                self._request(
                    unit_q[i], k, float(alphas[i]), depth=depth, tau=float(tau[i]), band=int(band[i])
                )
                for i in active
            ]
            try:
                results = self.client.query_batch_points(self.collection, requests=reqs)
            except Exception as e:
                raise IndexStateError(f"Qdrant query failed: {e}") from e
            still = []
            for i, res in zip(active, results, strict=True):
                pts = res.points
                a = float(alphas[i])
                got = pts[:k]
                scores[i, : len(got)] = [p.score for p in got]
                ids[i, : len(got)] = [int(p.id) for p in got]
                wider = (
                    None
                    if a == 0
                    else self._band_needed(
                        pts, k, a, depth=depth, tau=float(tau[i]), band=int(band[i]), st=st, dim=self.dim
                    )
                )
                if wider is not None:
                    tau[i], band[i] = wider, self._band_size(wider, a)
                    still.append(i)
            active = np.array(still, dtype=np.int64)
        return scores, ids

    @staticmethod
    def _band_needed(
        pts: list, k: int, alpha: float, *, depth: int, tau: float, band: int, st: dict[str, float], dim: int
    ) -> float | None:
        """None when nothing outside the fetched points can enter the top-k
        (:func:`normrank.search.bound.unseen_can_beat`); otherwise the band edge at which it would
        hold (:func:`normrank.search.norm_band.band_edge`).

        A point outside the band has weight at most ``tau**alpha`` and, when not fetched, cosine
        at most ``trusted_cosine``, the last fetched from the rest (read back from its float32 formula
        score: :func:`normrank.search.bound.cosine_ceiling`)."""
        norms = np.array([p.payload[_NORM] for p in pts], dtype=np.float64)
        s = np.array([p.score for p in pts], dtype=np.float64)
        rest = (norms <= tau if alpha > 0 else norms >= tau) if band else np.ones(norms.size, dtype=bool)
        if rest.sum() < depth:  # the rest had fewer points than asked for: all were fetched
            return None
        # Weights saturated as the core's (the formula's own): never inf, 0 where they underflow.
        w_edge = float(powered(tau, alpha))  # with no band, tau is the extreme norm: the largest weight
        w_lo = float(min(powered(st["min"], alpha), powered(st["max"], alpha)))
        trusted_cosine = float(np.min(cosine_ceiling(s[rest], powered(norms[rest], alpha))))
        kth = s[k - 1] if len(pts) >= k else -np.inf
        if not unseen_can_beat(kth, trusted_cosine, w_edge, w_lo, dim):
            return None
        everything = st["min"] / 2 if alpha > 0 else st["max"] * 2
        edge = band_edge(kth, trusted_cosine, alpha, dim)
        if edge is None:  # the bound cannot shrink: every point goes in the band
            return everything
        moved_out = edge < tau if alpha > 0 else edge > tau
        return edge if moved_out else everything
