"""The one depth rule: how deep a norm-weighted search fetches cosines, which cosine rank it
trusts, and how far its weight-order scan reads first. Every backend asks :func:`plan_search`
(NormIndex's searcher; the Qdrant backends through :mod:`normrank.search.norm_band`; the
PostgreSQL backend, :mod:`normrank.backends.pgvector_search`), so that "the same method" means
the same numbers.

Measured reasons for each number are in :func:`plan_search`'s docstring
(benchmarks/results/speed.md holds the runs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from normrank import settings

__all__ = ["ANY_WEIGHTED_ALPHA", "METHODS", "SearchOptions", "SearchPlan", "SearchStats", "plan_search"]

#: What a search can run, as :attr:`SearchPlan.method` names it (and ``SearchStats.path``
#: reports it): ``"flat"`` the exact kernel over flat storage; ``"cosine"`` (alpha = 0) the
#: index's own ranking; ``"scan"`` candidates + weight-order scan + bound; ``"overfetch"``
#: a fixed ``depth`` of candidates re-scored, no bound.
METHODS = ("flat", "cosine", "scan", "overfetch")

#: The alpha of a plan shared by weighted searches of every nonzero alpha (a backend's plan for
#: its alpha groups): the plan depends on alpha only through alpha = 0 (``"cosine"``).
ANY_WEIGHTED_ALPHA = 1.0


@dataclass(frozen=True, slots=True)
class SearchOptions:
    """The options of one search, built once from the public call (the call's own values, else
    the index's) and read by :func:`plan_search` and nothing later: the plan says what runs.

    Attributes:
        k: results per query.
        alpha: the exponent of ``w = base**alpha`` (a number once the queries are grouped by
            alpha; at the public call, the caller's value or one per query, checked later).
        k_factor: scales the cosine depth (``k * k_factor``).
        method: the index's ``ann`` option: ``"adaptive"`` (scan + bound, or an over-fetch where
            the plan finds it as good: :func:`plan_search`), ``"scan"`` (scan + bound always) or
            ``"overfetch"``.
        n_tail: the weight-order scan's first chunk (None: the plan's).
        max_depth: caps the cosine depth of every method (never below ``k``).
        breadth: the FAISS breadth the search runs at (``{"efSearch": ef}`` for HNSW,
            ``{"nprobe": p, "nlist": L}`` for IVF, ``{}`` for an exact cosine source).
    """

    k: int
    alpha: float
    k_factor: int = 10
    method: str = "adaptive"
    n_tail: int | None = None
    max_depth: int | None = None
    breadth: Mapping[str, int] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class SearchPlan:
    """What one search does; built only by :func:`plan_search` from a :class:`SearchOptions`.

    Attributes:
        k: results per query.
        depth: cosines fetched from the index per query.
        trust: the rank whose cosine bounds every document not fetched (``<= depth``).
        band: the weight-order scan's first chunk (rows in decreasing weight order).
        ef: the HNSW ``efSearch`` the plan was made for (None: not HNSW). A fetch deeper than
            it searches with the beam widened to the fetch (FAISS would fill the fetch from the
            narrower beam otherwise: worse results), never narrowed.
        method: what runs, one of :data:`METHODS`; every later step (and ``SearchStats.path``)
            reads it.
    """

    k: int
    depth: int
    trust: int
    band: int
    ef: int | None = None
    method: str = "scan"


@dataclass
class SearchStats:
    """What one search call did (``search(..., return_stats=True)`` of NormIndex and
    PgVectorNormIndex), over all its queries.

    Attributes:
        path: ``"flat"`` (exact kernel over flat storage, or over a small HNSW's float32
            storage for a batch: see :func:`plan_search`; PostgreSQL: every row ranked in SQL,
            nothing counted),
            ``"cosine"`` (alpha = 0: the index's own ranking), ``"scan"`` (candidates +
            weight-order scan + bound), ``"sql_band"`` (PostgreSQL's band scored in SQL:
            ``scanned`` is the first band, ``widened`` the queries of its second round),
            ``"overfetch"``; ``"mixed"`` when queries with different alphas took different
            paths (each alpha's own stats are in ``groups``).
        depth: the deepest cosine fetch from the index (per query).
        scanned: rows read in weight order by the query that read most.
        rounds: index fetches plus scan chunks of the query that needed most (the first fetch
            counts one; the flat kernel's single pass is one).
        widened: queries that scanned past the first chunk.
        filled: queries the index answered short while live documents it did not return
            remain (an IVF whose probed lists hold fewer documents than asked for; FAISS pads
            the rest): ``"scan"``, those left with fewer than ``k`` live candidates, scanned
            with the unseen documents' cosines bounded only by the longest row (one with ``k`` or
            more but fewer than the trusted rank is bounded by the last cosine returned, as a
            full trusted rank bounds it, and is not counted);
            ``"cosine"`` / ``"overfetch"``, those left with fewer than ``k`` results, completed
            by that scan (at alpha = 0 a full one). Exact over the whole collection; never
            certified.
        cache_bytes: bytes the index's search cache holds after the search (PostgreSQL: the
            client's copy of the table, ids, weights and the vectors read so far).
        cache_budget_bytes: the budget of that cache's bounded parts (the weights of the alphas
            kept, the scan's prefix copy and int8 codes: :func:`normrank.search.cache.cache_budget`);
            ``cache_bytes`` also counts the per-document parts beside it (weight order, id table:
            4 bytes a document each; an IVF's row reader, 8). PostgreSQL: the client's whole
            budget (:data:`normrank.settings.PG_CLIENT_CACHE_BYTES`), ``cache_bytes`` within it.
        groups: for a call with several alphas (one per query), each alpha's own stats; the
            fields above then aggregate them (``depth``, ``scanned``, ``rounds``: the largest;
            ``widened``, ``filled``: the sum). Empty when every query had the same alpha.
        certified: one bool per query, in the caller's query order: the result is provably the
            exact top-k given the candidates the index returned (the bound of
            :func:`normrank.search.bound.unseen_can_beat` over the trusted cosine and the
            weights' range held before any scan row was read; ``"flat"``: exact over the whole
            collection; ``"cosine"``: the index's own ranking, exact w.r.t. its candidates, but
            not a short answer completed (``filled``);
            ``"overfetch"``: the bound checked on the re-scored depth, nothing scanned). A
            query not certified may still be exact: its scan went on until the bound held.
            Only NormIndex fills it; empty (not all False) where a backend does not
            (PgVectorNormIndex).
    """

    path: str = ""
    depth: int = 0
    scanned: int = 0
    rounds: int = 0
    widened: int = 0
    filled: int = 0
    cache_bytes: int = 0
    cache_budget_bytes: int = 0
    groups: dict[float, SearchStats] = field(default_factory=dict)
    certified: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    @property
    def n_certified(self) -> int:
        """How many queries :attr:`certified` holds as certified."""
        return int(np.count_nonzero(self.certified))

    def include(self, part: SearchStats) -> None:
        """Fold in the stats of another part of the same call (an alpha group, a query block).
        ``certified`` is concatenated (parts in query order), empty if a part has none."""
        if not self.path:  # the first part
            self.certified = part.certified
        elif self.certified.size and part.certified.size:
            self.certified = np.concatenate([self.certified, part.certified])
        else:  # a part without certificates: none for the call (empty, never a wrong False)
            self.certified = np.zeros(0, dtype=bool)
        self.path = part.path if self.path in ("", part.path) else "mixed"
        self.depth = max(self.depth, part.depth)
        self.scanned = max(self.scanned, part.scanned)
        self.rounds = max(self.rounds, part.rounds)
        self.widened += part.widened
        self.filled += part.filled


def plan_search(
    options: SearchOptions,
    n: int,
    *,
    flat: bool = False,
    trust_whole_depth: bool = False,
    nq: int = 1,
    dim: int = 0,
    flat_rows: bool = False,
    lossy_boost: float | None = None,
) -> SearchPlan:
    """The plan of a search for ``options.k`` results over ``n`` stored vectors at the index
    breadth ``options.breadth``; ``flat``: the vectors are in flat storage (the exact kernel).

    * **method** (what runs): ``"flat"`` for flat storage; ``"overfetch"`` for
      ``method="overfetch"`` (``k * k_factor`` candidates re-scored, no scan); ``"cosine"`` at
      alpha = 0 (the index's own ranking: ``k`` cosines, fetched deeper only to refill the
      places removed documents took); ``"flat"`` also for a batch on a small HNSW whose
      storage is float32 rows with no removed document (``flat_rows``): at least 20 queries
      (``nq``), ``n <= 320 x efSearch`` and ``n x dim <= 50k x 384`` (the ``FLAT_BATCH_*``
      settings; ``FLAT_BATCH_ROWS_PER_EF = 0``: never): every stored row scored
      by FAISS's BLAS, exact over the whole collection. Measured (benchmarks/small_flat.py,
      batches interleaved with plain FAISS on 2 shared AMD EPYC cores, load 5.7-8.5; ratios
      to plain HNSW32): efSearch 64, nq 100: 3k generated flat 0.53-1.17 against the scan's
      1.81-2.98, 8.4k generated 0.54-0.74 / 1.37-2.13, 8.4k real MiniLM (SciFact + CACM)
      0.99-2.31 / 1.53-2.52, 20k generated 0.90-1.35 / 1.23-1.84; nq 20: 8.4k 1.15-1.59 /
      1.93-2.75, 20k 1.94-3.17 / 2.68-3.05; efSearch 256, nq 100: 20k 0.30-0.56 / 1.03-1.49,
      50k 0.29-0.74 / 0.69-1.61. Likewise for a batch on an IVF-Flat (``flat_rows``: float32
      codes in its lists, no removed document stored) that probes at least 0.15 of its lists
      (``nprobe / nlist >= FLAT_BATCH_MIN_PROBED``; 0: never), with the same ``nq`` bound and no
      size bound (the IVF reads that share of every list whatever the size): the lists read one by
      one in place, copied a block at a time into one BLAS product. Measured (same benchmark, load
      5-7.5; product / scan): real 8.4k MiniLM, IVF366: nprobe 45 (0.12) 1.99-2.37 / 1.68-2.55
      (mixed: not taken), 61 (0.17) 1.56-1.87 / 1.72-2.68, 91 (0.25) 1.15-1.30 / 1.41-2.06, 183
      (0.5) 0.55-0.78 / 1.42-1.55; generated 20k, IVF565: 70 (0.12) 1.39-1.68 / 1.40-1.94, 94 (0.17)
      1.03-1.30 / 1.25-1.80, 141 (0.25) 0.47-0.86 / 1.05-1.49; generated 100k, IVF1264, nprobe 316
      (0.25), nq 100, quiet: 0.56-0.63 against the scan's 1.12-1.40, recall 0.999-1.000 against
      0.996-0.998.

      ``"overfetch"`` also where ``method="adaptive"`` searches lossy codes (PQ, additive
      quantizers: ``lossy_boost`` is given) at an alpha whose weights lift a document at most
      ``LOSSY_OVERFETCH_MAX_BOOST`` times (``lossy_boost``: the 95th (alpha > 0) or 5th (alpha < 0)
      percentile weight over the median), fetching ``k * k_factor * LOSSY_OVERFETCH_DEPTH_SCALE``:
      codes that cap cosine recall (IVF1264,PQ48 on 100k MiniLM-like vectors: 0.614) cap the scan's
      recall too, and there the over-fetch reached the scan's recall at 1.06-1.21x plain against its
      2.7-23x (docs/frontier.md; boost 1.1-1.6 at alpha -1, -0.5, +0.5). At boost 2.7 (alpha = +1)
      it did not (0.484 at K' 4096 against 0.600): the scan stays; nor on an IVF probing under
      ``LOSSY_OVERFETCH_MIN_PROBED`` of its lists (its misses in the lists skipped are the scan's
      to find: 1M, IVF4096,PQ48 at nprobe 32: 0.05-0.09 against 0.76-0.88 at about the same time).
      ``method="scan"``: never. Else
      ``"scan"``, with the depths below.

    * **depth** (cosines fetched). HNSW: the trusted eighth of the ``efSearch`` beam, or
      ``k * k_factor`` if more, never past the beam itself (at least ``k``): a deeper fetch makes
      FAISS widen the beam, which costs more than everything else a query adds (8.4k real MiniLM
      embeddings, efSearch 16, one query: 12 us at depth 16, 53 us at depth 100). IVF:
      ``k * k_factor`` or 1/256 of the documents it probes if more (a document in an unprobed
      list is missing at every depth; 100k MiniLM-like vectors: trusting 781 cost recall
      0.997 -> 0.995). Else ``k * k_factor``. Capped by ``max_depth`` (at least ``k``) and ``n``.
    * **trust** (rank whose cosine bounds the unseen). HNSW: an eighth of ``efSearch``, at least
      ``2 k`` (the graph is least sure of its deepest candidates; 8.4k real MiniLM embeddings,
      efSearch 64, alpha = 1: 3,397 rows scanned at recall 0.9995 trusting rank 10, 2,008 at
      0.9980 trusting 32). Else all of the depth. Never below ``k`` nor past ``depth``.
      ``trust_whole_depth``: all of the depth whatever the index, for a source whose every
      widening past the first chunk costs a round trip (PostgreSQL's band scored in SQL: 5,719
      real MiniLM embeddings, ef_search 64, alpha -1, 60 queries: trusting an eighth of ef
      widened every query, 13.7x plain latency at recall 1.000; the whole depth 2%, 4.7x, recall
      0.995).
    * **band** (first scan chunk): ``n_tail``, else ~1/30 of the documents, at least 64, capped so
      that it stays a fraction of the ANN's own work (IVF: a quarter of the probed share; HNSW:
      8 x efSearch; else 2048). Later chunks are read off the bound.

    ``max_depth`` caps the depth of every method (at least ``k``); the flat product reads
    every row whatever it says (it fetches no cosines).
    """
    k, k_factor, params = options.k, options.k_factor, options.breadth
    ef = params.get("efSearch")
    if flat:
        return SearchPlan(k=k, depth=n, trust=n, band=n, method="flat")
    if options.method == "overfetch":
        depth = _capped(min(n, k * k_factor), options)
        return SearchPlan(k=k, depth=depth, trust=depth, band=0, ef=ef, method="overfetch")
    if options.alpha == 0:
        depth = _capped(min(n, k), options)
        return SearchPlan(k=k, depth=depth, trust=depth, band=0, ef=ef, method="cosine")
    if (
        options.method == "adaptive"
        and lossy_boost is not None
        and lossy_boost <= settings.LOSSY_OVERFETCH_MAX_BOOST
        and params.get("nprobe", 1) >= settings.LOSSY_OVERFETCH_MIN_PROBED * params.get("nlist", 1)
    ):
        depth = _capped(min(n, k * k_factor * settings.LOSSY_OVERFETCH_DEPTH_SCALE), options)
        return SearchPlan(k=k, depth=depth, trust=depth, band=0, ef=ef, method="overfetch")
    if flat_rows and nq >= settings.FLAT_BATCH_MIN_QUERIES:
        small = n * dim <= settings.FLAT_BATCH_MAX_WORK
        if ef is not None and small and n <= settings.FLAT_BATCH_ROWS_PER_EF * ef:
            return SearchPlan(k=k, depth=n, trust=n, band=n, ef=ef, method="flat")
        # (no size cap for an IVF: its own search reads the probed share of every list anyway)
        share, nlist = settings.FLAT_BATCH_MIN_PROBED, params.get("nlist", 0)
        if ef is None and nlist > 0 and 0 < share <= 1 and params.get("nprobe", 0) >= share * nlist:
            return SearchPlan(k=k, depth=n, trust=n, band=n, method="flat")
    if "efSearch" in params:
        depth = min(max(k * k_factor, ef // 8), max(ef, k))
    elif "nprobe" in params:
        probed = n * params["nprobe"] // max(params.get("nlist", 1), 1)
        depth = max(k * k_factor, probed // 256)
    else:
        depth = k * k_factor
    depth = _capped(min(n, depth), options)
    trust = max(2 * k, params["efSearch"] // 8) if "efSearch" in params and not trust_whole_depth else depth
    trust = max(1, min(depth, max(k, trust)))
    if options.n_tail is not None:
        band = int(options.n_tail)
    else:
        cap = 2048
        if "efSearch" in params:
            cap = 8 * params["efSearch"]
        elif "nprobe" in params and params.get("nlist"):
            cap = int(n * params["nprobe"] / params["nlist"] / 4)
        band = max(64, min(n // 30, cap))
    band = int(max(0, min(n, band)))
    return SearchPlan(k=k, depth=depth, trust=trust, band=band, ef=ef, method="scan")


def _capped(depth: int, options: SearchOptions) -> int:
    """``depth`` within ``options.max_depth`` (never below ``k``): the one depth cap."""
    if options.max_depth is None:
        return depth
    return min(depth, max(options.k, options.max_depth))
