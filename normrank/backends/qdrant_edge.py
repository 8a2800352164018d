"""``QdrantEdgeNormIndex``: norm-weighted search ``cos(q, d) * ||d||**alpha`` inside Qdrant Edge.

Qdrant Edge (``qdrant-edge-py``) is Qdrant's engine embedded in the process: the server's
segments, HNSW, payload indexes and formula code, stored in one shard folder. Unit vectors go
in a cosine shard, the raw norm in each point's payload (``"norm"``, with a float index). The
method is that of :mod:`normrank.search.ann` and the client backend: a band of extreme norms on the
side alpha favours, searched exactly, plus the best cosines of the rest, until the bound
(:func:`normrank.search.bound.unseen_can_beat`) proves that nothing unseen can beat the k-th score. Every
returned score is computed by the engine's formula ``$score * norm**alpha``. Per query (all
queries' requests of a round go in one ``query_batch``):

1. **First round**, by cosine alone (no formula: the engine's formula costs about a
   microsecond per point, so it runs once, in the last round, over the few points that can
   make the top-k): the ``depth`` best cosines (HNSW at ``hnsw_ef``, or exact) and the
   ``FIRST_LIMIT`` best cosines of the first band (``n_tail``; by default the first band of
   :mod:`normrank.search.ann`, scanned exactly by the engine). Their scores are computed here from
   the mirrored norms, only to choose what to ask for next.
2. The bound: with ``c_T`` the cosine at the trusted rank and ``kth`` the k-th of those
   scores, the band must hold every document whose weight could lift ``c_T`` past ``kth``:
   :func:`normrank.search.weight_order.scan_needed` over the sorted weights (norms are mirrored in memory,
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

import contextlib
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from normrank.backends import edge_requests
from normrank.backends.edge_requests import EdgeRequests, merge_into, top_unique
from normrank.backends.edge_shard import (
    NORM,
    WEIGHT,
    ShardMirror,
    edge_module,
    lock_folder,
    payload,
    read_next_id,
    write_next_id,
)
from normrank.errors import (
    DimensionMismatchError,
    DuplicateIdError,
    IndexStateError,
    InvalidInputError,
    InvalidParameterError,
    UnknownIdError,
)
from normrank.search.bound import cosine_ceiling, unseen_can_beat
from normrank.search.norm_band import (
    first_band,
    hnsw_params,
    search_depths,
    start_search,
)
from normrank.search.weight_order import scan_needed
from normrank.validation import (
    Checked,
    as_alpha,
    as_count,
    as_flag,
    as_id_list,
    as_ids,
    as_k_factor,
    as_one_id,
    as_option,
    as_positive_int,
    as_vectors,
    as_weights,
    bases_argument,
    deprecated,
    split_norms,
)

__all__ = ["QdrantEdgeNormIndex"]


class QdrantEdgeNormIndex(ShardMirror, EdgeRequests):
    """A Qdrant Edge shard searched by ``cos(q, d) * ||d||**alpha``; API as :class:`normrank.NormIndex`.

    Args:
        path: the shard folder. An existing shard is opened (its points, norms and
            custom bases come back); otherwise one is created there (``dim`` required).
        dim: vector dimension (read from the shard when opening one; checked if given).
        alpha: default exponent (``search(..., alpha=)`` overrides it, per query if wanted).
        m / ef_construct: HNSW graph parameters, fixed when the shard is created.
        hnsw_ef: HNSW search beam (Qdrant's ``hnsw_ef``), per search.
        exact: search with ``SearchParams(exact=True)`` (brute force in the engine): the
            ranking is then exact.
        k_factor: the cosine prefetch is at least ``k * k_factor`` deep.
        max_depth: caps the cosine prefetch's depth (at least ``k``), as NormIndex's
            ``max_depth``: the plan's (:func:`normrank.search.plan.plan_search`).
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
    Every ``add`` / ``remove`` / ``set_bases`` is one engine update, written to the shard's
    write-ahead log before it returns: after :meth:`close`, or a crash, reopening the folder
    returns every acknowledged point with its norm.

    As NormIndex: one opener at a time (a second gets :class:`IndexStateError`, the first is
    untouched); default ids never reuse a removed id, after a reopen too; ids, bases and
    integer options go through the core's checks (:mod:`normrank.validation`), and powers
    ``w**alpha`` beyond float32 saturate by the core's rule
    (:func:`normrank.search.norm_band.powered`) rather than failing in the engine.
    """

    # Search options, checked on every assignment (``index.hnsw_ef = 0`` raises, not searches).
    alpha = Checked(lambda v, _name: float(as_alpha(v, 1)[0]))
    hnsw_ef = Checked(as_positive_int)
    k_factor = Checked(lambda v, _name: as_k_factor(v))
    n_tail = Checked(as_count)
    max_depth = Checked(as_count)
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
        max_depth: int | None = None,
        indexing_threshold_kb: int | None = None,
        max_search_threads: int | None = None,
    ) -> None:
        qe = edge_module()
        self.path = Path(path)
        self.alpha = alpha
        self.hnsw_ef, self.k_factor, self.n_tail, self.exact = hnsw_ef, k_factor, n_tail, exact
        self.max_depth = max_depth
        m, ef_construct = as_positive_int(m, "m"), as_positive_int(ef_construct, "ef_construct")
        # The option table's bounds: past them the engine raises an untyped OverflowError.
        threshold_kb = as_option(indexing_threshold_kb, "indexing_threshold_kb", allow_none=True)
        threads = as_option(max_search_threads, "max_search_threads", allow_none=True)
        if dim is not None:
            dim = as_positive_int(dim, "dim")
        self._stored_dim()  # a folder that holds something else is refused before it is locked
        self._lock_fd: int | None = lock_folder(self.path)
        try:
            self._open(qe, dim, m=m, ef_construct=ef_construct, threshold_kb=threshold_kb, threads=threads)
        except BaseException:
            shard = self.__dict__.pop("_shard", None)  # the engine's WAL lock first, then the folder's
            if shard is not None:
                with contextlib.suppress(Exception):
                    shard.close()
            self._release()
            raise

    def _open(
        self,
        qe: Any,
        dim: int | None,
        *,
        m: int,
        ef_construct: int,
        threshold_kb: int | None,
        threads: int | None,
    ) -> None:
        """Open or create the shard (the folder's lock is held) and read its mirror."""
        stored = self._stored_dim()
        if dim is not None:
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
                    optimizers=qe.EdgeOptimizersConfig(indexing_threshold=threshold_kb),
                    payload_memory=qe.Memory.Cached,
                    max_search_threads=threads,
                )
                self._shard = qe.EdgeShard.create(str(self.path), config)
            else:
                config = qe.EdgeConfig(vectors=vectors, max_search_threads=threads)
                self._shard = qe.EdgeShard.load(str(self.path), config)
            # Float range indexes: the band is a norm-range filter, read off the index. Checked
            # on opening too: a process killed right after create may have left them out.
            indexed = self._shard.info().payload_schema
            for key in (NORM, WEIGHT):
                if key not in indexed:
                    self._shard.update(qe.UpdateOperation.create_field_index(key, qe.PayloadSchemaType.Float))
        except Exception as e:  # the engine raises bare Exceptions too (a WAL it cannot lock)
            raise IndexStateError(f"Qdrant Edge could not open {self.path}: {e}") from e
        self._lock = threading.RLock()
        self._closed = False
        self.last_widened = 0
        self._load_mirror()
        # Never a removed id: the saved next id, or after the largest id present.
        top = int(self._ids.max()) + 1 if self._ids.size else 0
        self._next_id = self._saved_next_id = max(read_next_id(self.path), top)

    def _release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the folder's flock
            self._lock_fd = None

    def __del__(self) -> None:
        # Dropped without close(): the engine's shard goes with the object (its WAL lock with it),
        # so the folder's lock goes too, first the shard, then the lock.
        if getattr(self, "_lock_fd", None) is not None:
            self._shard = None
            self._release()

    # -- bookkeeping --------------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self._ids.size)

    def __repr__(self) -> str:
        shown = {"dim": self.dim, "ntotal": self.ntotal, "alpha": self.alpha, "hnsw_ef": self.hnsw_ef}
        fields = ", ".join(f"{key}={value}" for key, value in shown.items())
        return f"QdrantEdgeNormIndex({str(self.path)!r}, {fields}, exact={self.exact})"

    @property
    def ids(self) -> np.ndarray:
        with self._lock:
            return self._ids.copy()

    @property
    def bases(self) -> np.ndarray:
        """The per-document bases that alpha exponentiates (a search's weight is ``base**alpha``),
        aligned with :attr:`ids`: the norms unless set by :meth:`set_bases` (a copy)."""
        with self._lock:
            return self._base().copy()

    @property
    def shard(self) -> Any:
        """The ``qdrant_edge.EdgeShard`` (read it; writing to it directly desynchronises)."""
        return self._shard

    def _check_open(self) -> None:
        if self._closed:
            raise IndexStateError("the index is closed: open the shard folder again")

    def norm_of(self, ids: ArrayLike) -> np.ndarray:
        """Raw norms of ``ids`` (float32); raises :class:`UnknownIdError` for an id not present."""
        arr = as_id_list(ids)  # the core's id parser: 3.7, '3', None, NaN, [[1]] are refused
        with self._lock:
            return self._norms[self._positions(arr)]

    def reconstruct(self, id_: int) -> np.ndarray:
        """The raw vector of ``id_``: the engine's unit vector times the mirrored norm (float32);
        :class:`UnknownIdError` for an id not present."""
        one = as_one_id(id_)
        with self._lock:
            self._check_open()
            pos = int(self._positions(np.array([one]))[0])
            unit = np.asarray(self._unit_vectors(np.array([one]))[0], dtype=np.float32)
            return (unit * self._norms[pos]).astype(np.float32)

    def _positions(self, ids: np.ndarray) -> np.ndarray:
        missing = [int(i) for i in ids if int(i) not in self._pos]
        if missing:
            raise UnknownIdError(f"unknown ids: {missing[:10]}")
        return np.fromiter((self._pos[int(i)] for i in ids), dtype=np.int64, count=len(ids))

    def __contains__(self, id_: object) -> bool:
        return isinstance(id_, int | np.integer) and not isinstance(id_, bool) and int(id_) in self._pos

    def optimize(self) -> bool:
        """Run Qdrant's optimizers (merge segments, build the HNSW graph); blocks until done."""
        with self._lock:
            self._check_open()
            return bool(self._engine(self._shard.optimize, "optimize"))

    def flush(self) -> None:
        with self._lock:
            self._check_open()
            self._engine(self._shard.flush, "flush")

    def close(self) -> None:
        """Flush and close the shard, then release the folder's lock (idempotent)."""
        with self._lock:
            if not self._closed:
                try:
                    self._engine(self._shard.flush, "flush")
                    self._engine(self._shard.close, "close")
                finally:
                    self._closed = True
                    self._release()

    def _engine(self, call: Any, what: str) -> Any:
        try:
            return call()
        except Exception as e:  # the engine raises bare Exceptions too
            raise IndexStateError(f"Qdrant Edge {what} failed on {self.path}: {e}") from e

    def __enter__(self) -> QdrantEdgeNormIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- mutation -----------------------------------------------------------------------------

    def _update(self, op: Any) -> None:
        try:
            self._shard.update(op)
        except Exception as e:  # the engine raises bare Exceptions too
            raise IndexStateError(f"Qdrant Edge refused the update: {e}") from e

    def add(
        self,
        x: ArrayLike,
        ids: ArrayLike | None = None,
        *,
        bases: ArrayLike | None = None,
        weights: ArrayLike | None = None,
    ) -> np.ndarray:
        """Add raw vectors ``x`` (n, dim); returns their int64 ids (default: after the largest id
        ever held, so never a removed one, after a reopen too).

        One engine update: the whole batch is in the shard's log when this returns, or none of
        it. With custom bases set (:meth:`set_bases`), ``bases`` for the new rows are required
        (``weights``: its deprecated name).
        """
        bases = bases_argument(bases, weights, "QdrantEdgeNormIndex")
        qe = edge_module()
        unit, norms = split_norms(as_vectors(x, self.dim))
        n = unit.shape[0]
        w = None if bases is None else as_weights(bases, n, what="bases")
        with self._lock:
            self._check_open()
            start = self._next_id
            new_ids = np.arange(start, start + n, dtype=np.int64) if ids is None else as_ids(ids, n)
            present = [int(i) for i in new_ids if int(i) in self._pos]
            if present:
                raise DuplicateIdError(f"ids already in the shard: {present[:10]}")
            if self._weights is not None and w is None and n:
                raise InvalidInputError("this index has custom bases: pass bases= for the new rows")
            if w is not None and self._weights is None:
                raise InvalidInputError("bases= is for an index with custom bases (set_bases first)")
            if n == 0:
                return new_ids
            points = [
                qe.Point(id=int(i), vector=v.tolist(), payload=payload(nv, None if w is None else w[j]))
                for j, (i, v, nv) in enumerate(zip(new_ids, unit, norms, strict=True))
            ]
            self._update(qe.UpdateOperation.upsert_points(points))
            self._set_mirror(
                np.concatenate([self._ids, new_ids]),
                np.concatenate([self._norms, norms]),
                None if self._weights is None else np.concatenate([self._weights, w]),
            )
            self._next_id = max(self._next_id, int(new_ids.max()) + 1)
            return new_ids

    def remove(self, ids: ArrayLike) -> int:
        """Remove ``ids``; unknown ids raise :class:`UnknownIdError` and remove nothing."""
        qe = edge_module()
        arr = as_ids(ids)
        with self._lock:
            self._check_open()
            self._positions(arr)
            if arr.size:
                if self._next_id > self._saved_next_id:
                    # Saved before the engine deletes: a removed id is never handed out again.
                    write_next_id(self.path, self._next_id)
                    self._saved_next_id = self._next_id
                self._update(qe.UpdateOperation.delete_points([int(i) for i in arr]))
                keep = ~np.isin(self._ids, arr)
                self._set_mirror(
                    self._ids[keep], self._norms[keep], None if self._weights is None else self._weights[keep]
                )
            return int(arr.size)

    def set_bases(self, bases: ArrayLike, ids: ArrayLike | None = None) -> None:
        """Score by ``cos * base**alpha`` with your own per-document ``base`` instead of the norm,
        covering every document (aligned with ``ids``, default :attr:`ids` order). Stored in the
        shard (one update; payload field ``weight``, its stored name)."""
        qe = edge_module()
        with self._lock:
            self._check_open()
            if ids is None:
                order, w = self._ids, as_weights(bases, self.ntotal, what="bases")
            else:
                order = as_ids(ids)
                if order.size != self.ntotal:
                    raise InvalidInputError(f"bases must cover all {self.ntotal} documents, got {order.size}")
                w = as_weights(bases, order.size, what="bases")
            full = np.empty(self.ntotal, dtype=np.float32)
            full[self._positions(order)] = w
            points = [
                qe.Point(id=int(i), vector=v, payload=payload(nv, wv))
                for i, v, nv, wv in zip(
                    self._ids, self._unit_vectors(self._ids), self._norms, full, strict=True
                )
            ]
            self._update(qe.UpdateOperation.upsert_points(points))
            self._set_mirror(self._ids, self._norms, full)

    def clear_bases(self) -> None:
        """Score by the norms again: the custom base (payload ``weight``) is deleted from every
        point (one update)."""
        qe = edge_module()
        with self._lock:
            self._check_open()
            if self._weights is not None and self._ids.size:
                self._update(qe.UpdateOperation.delete_payload(self._ids.tolist(), [WEIGHT]))
            self._set_mirror(self._ids, self._norms, None)

    def set_weights(self, weights: ArrayLike, ids: ArrayLike | None = None) -> None:
        """Deprecated: :meth:`set_bases` (the values before the power, not the weights ``base**alpha``)."""
        deprecated("QdrantEdgeNormIndex.set_weights", "QdrantEdgeNormIndex.set_bases")
        self.set_bases(weights, ids)

    def clear_weights(self) -> None:
        """Deprecated: :meth:`clear_bases`."""
        deprecated("QdrantEdgeNormIndex.clear_weights", "QdrantEdgeNormIndex.clear_bases")
        self.clear_bases()

    # -- search -------------------------------------------------------------------------------

    def _params(self) -> dict[str, int]:
        return hnsw_params(None if self.exact else self.hnsw_ef)

    def _plan(self, k: int) -> tuple[int, int, int]:
        """``(depth, trust, first band)`` of a search for ``k`` at the current options: the plan's
        (:func:`normrank.search.norm_band.search_depths`, :func:`~normrank.search.norm_band.first_band`),
        kept per options until the shard changes (two plans cost ~25 us a query)."""
        key = ("plan", k, self.k_factor, self.exact, self.hnsw_ef, self.max_depth, self.n_tail)
        got = self._derived.get(key)
        if got is None:
            n, params = self.ntotal, self._params()
            depth, trust = search_depths(n, k, self.k_factor, params, self.max_depth)
            got = self._derived[key] = (depth, trust, first_band(n, params, self.n_tail))
        return got

    def _widen(
        self,
        vecs: list[Any],
        k: int,
        alphas: list[float],
        wide: dict[int, list[list]],
        *,
        scores: np.ndarray,
        ids: np.ndarray,
        rescore: dict[int, list[int]] | None = None,
    ) -> None:
        """Second round for the queries in ``wide`` (query -> ranges, possibly none). A range
        that returns its whole ``limit`` may hold more points above its threshold: those have
        cosine at most the last one returned, so unless the k-th score already beats that times
        the range's ``w_max``, the range is asked again, twice as deep. ``rescore`` (query ->
        ids): rows whose scores were computed here from cosines, replaced by the engine's
        formula scores in the first pass. ``vecs``: each query's ``Query.Nearest`` (or its
        unit vector as a list)."""
        pending = dict(wide)
        rescore = rescore or {}
        while pending:
            order = list(pending)
            reqs = [
                self._widening_request(
                    vecs[i], alphas[i], pending[i], kth=float(scores[i, -1]), rescore=rescore.get(i)
                )
                for i in order
            ]
            nxt = {}
            for i, pts in zip(order, self._query(reqs), strict=True):
                if i in rescore:
                    # Every point of the row comes back with the engine's score, and the engine
                    # sorts by it: the row is the first k.
                    head = pts[:k]
                    scores[i], ids[i] = -np.inf, -1
                    scores[i, : len(head)] = [p.score for p in head]
                    ids[i, : len(head)] = [p.id for p in head]
                else:
                    merge_into(scores[i], ids[i], pts)
                ranges = pending[i]
                if not any(len(pts) >= r[5] and r[5] < r[0] for r in ranges):  # (false if none)
                    continue  # no range can have returned its whole limit (the usual case)
                again = self._ranges_again(pts, alphas[i], ranges, kth=float(scores[i, -1]))
                if again:
                    nxt[i] = again
            pending, rescore = nxt, {}

    def _ranges_again(self, pts: list[Any], alpha: float, ranges: list[list], *, kth: float) -> list[list]:
        """The ranges of one query's last request to ask again, twice as deep: those that
        returned their whole limit while the bound does not clear their points below the last
        cosine returned (:func:`normrank.search.bound.unseen_can_beat`)."""
        pos = self._lookup()(np.array([p.id for p in pts], dtype=np.int64))
        w = self._powered(alpha)[pos]
        got = np.array([p.score for p in pts], dtype=np.float64)
        # The cosines behind the engine's float32 scores (1 where a weight underflowed to 0 and
        # hides it: the bound then asks again, deeper, rather than guess).
        cos = cosine_ceiling(got, w)
        rank = self._rank(1 if alpha > 0 else -1)[pos]
        w_min = float(self._sorted_weights(alpha)[0][-1])
        again = []
        for r in ranges:
            size, _edge, _inner, w_max, r0, limit = r
            mine = (rank >= r0) & (rank < r0 + size)
            if limit >= size or mine.sum() < limit:
                continue
            if unseen_can_beat(kth, float(cos[mine].min()), w_max, w_min, self.dim):
                again.append([*r[:5], min(size, 2 * limit)])
        return again

    def search(
        self, q: ArrayLike, k: int, *, alpha: float | ArrayLike | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` by ``cos(q, d) * ||d||**alpha`` (``alpha`` scalar or one per query); every
        returned score is the engine's own formula value, not recomputed here."""
        unit_q, alpha_arr, scores, ids = start_search(q, k, self.dim, self.alpha if alpha is None else alpha)
        nq, k = scores.shape
        if not nq:
            return scores, ids
        nearest = edge_module().Query.Nearest
        with self._lock:
            self._check_open()
            self.last_widened = 0  # queries whose band was widened (for benchmarks and tuning)
            if self.ntotal == 0:
                return scores, ids
            depth, trust, t0 = self._plan(k)
            alphas = alpha_arr.tolist()
            # One engine query vector per query, shared by all its requests (converting the
            # vector is most of what building a request costs).
            vecs = [nearest(v) for v in unit_q.tolist()]
            bands = [self._band(a, t0) if a != 0 else (0, None) for a in alphas]
            reqs, band_at = [], {}
            for i, a in enumerate(alphas):
                reqs.append(self._request(vecs[i], k, a, depth))
                if bands[i][0] and a != 0:
                    band_at[i] = len(reqs)
                    reqs.append(self._band_request(vecs[i], a, bands[i][1]))
            results = self._query(reqs)
            wide, rescore = {}, {}
            at = 0
            for i, a in enumerate(alphas):
                pts = results[at]
                at += 1 + (i in band_at)
                if a == 0:
                    scores[i, : len(pts)] = [p.score for p in pts]
                    ids[i, : len(pts)] = [p.id for p in pts]
                    continue
                bpts = results[band_at[i]] if i in band_at else []
                both = pts + bpts if bpts else pts
                pid = np.array([p.id for p in both], dtype=np.int64)
                cs = np.array([p.score for p in both], dtype=np.float64)
                pos = self._lookup()(pid)
                if (pos < 0).any():
                    raise IndexStateError(
                        "Qdrant Edge returned ids this index does not hold (written elsewhere?)"
                    )
                # The scores the formula will give them (the engine's come in the last round).
                sc = cs * self._powered(a)[pos]
                pid, sc = top_unique(pid, sc, k)
                rescore[i] = pid.tolist()
                scores[i, : sc.size], ids[i, : sc.size] = sc, pid
                first = bands[i]
                if bpts and len(bpts) >= edge_requests.FIRST_LIMIT and first[0] > len(bpts):
                    # The band's points below its last cosine were not seen: unless the bound
                    # clears them, the band is searched again in the second round.
                    w_sorted = self._sorted_weights(a)[0]
                    kth = float(sc[k - 1]) if sc.size >= k else -np.inf
                    if unseen_can_beat(
                        kth, bpts[-1].score, float(w_sorted[0]), float(w_sorted[-1]), self.dim
                    ):
                        first = (0, None)
                need = self._band_needed(cs[: len(pts)], sc, k, a, depth=depth, trust=trust, band=first[0])
                wide[i] = [] if need is None else self._ranges(a, first, need)
            self.last_widened = sum(1 for r in wide.values() if r)
            if wide:
                # The bound holds with the widened band (the k-th score can only rise): one more
                # round, for the queries that need it, over the part of the band not yet seen,
                # with the engine's formula over everything that can make the top-k.
                self._widen(vecs, k, alphas, wide, scores=scores, ids=ids, rescore=rescore)
        return scores, ids

    def _query(self, reqs: list[Any]) -> list[list[Any]]:
        qe = edge_module()
        try:
            if len(reqs) == 1:
                return [self._shard.query(reqs[0])]
            return self._shard.query_batch(qe.QueryBatchRequest(reqs))
        except (RuntimeError, ValueError) as e:
            raise IndexStateError(f"Qdrant Edge query failed: {e}") from e

    def _band_needed(
        self, cos: np.ndarray, s: np.ndarray, k: int, alpha: float, *, depth: int, trust: int, band: int
    ) -> int | None:
        """None when the bound holds; otherwise how many documents, in weight order, the band
        must hold for it to (:func:`normrank.search.weight_order.scan_needed`).

        ``cos`` are the cosine prefetch's cosines in decreasing order (the ``depth`` best), ``s``
        the first round's top scores (cosine prefetch and first band together), likewise."""
        n = self.ntotal
        if band >= n or depth >= n:  # every point was fetched
            return None
        if cos.size < trust:  # fewer points than the shard holds came back: scan them all
            return n
        trusted_cosine = cos[trust - 1]
        kth = s[k - 1] if s.size >= k else -np.inf
        neg_w = self._sorted_weights(alpha)[1]
        need = int(scan_needed(np.array([kth]), np.array([trusted_cosine]), neg_w, self.dim)[0])
        return None if need <= band else need
