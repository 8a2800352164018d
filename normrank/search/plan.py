"""The one depth rule: how deep a norm-weighted search fetches cosines, which cosine rank it
trusts, and how far its weight-order scan reads first. Every backend asks :func:`plan_search`
(NormIndex's searcher; the Qdrant backends through :mod:`normrank.search.norm_band`; the
PostgreSQL backend, :mod:`normrank.backends.pgvector_search`), so that "the same method" means
the same numbers.

Measured reasons for each number are in :func:`plan_search`'s docstring
(benchmarks/results/speed.md holds the runs).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SearchPlan", "SearchStats", "plan_search"]


@dataclass(frozen=True)
class SearchPlan:
    """What one (k, alpha sign, breadth) search does; built only by :func:`plan_search`.

    Attributes:
        depth: cosines fetched from the index per query.
        trust: the rank whose cosine bounds every document not fetched (``<= depth``).
        band: the weight-order scan's first chunk (rows in decreasing weight order).
        ef: the HNSW ``efSearch`` the plan was made for (None: not HNSW). A fetch deeper than
            it searches with the beam widened to the fetch (FAISS would fill the fetch from the
            narrower beam otherwise: worse results), never narrowed.
        scan: False for a fixed over-fetch (``ann="overfetch"``: re-score ``depth``, no bound).
    """

    depth: int
    trust: int
    band: int
    ef: int | None = None
    scan: bool = True


@dataclass
class SearchStats:
    """What one search call did (``search(..., return_stats=True)`` of NormIndex and
    PgVectorNormIndex), over all its queries.

    Attributes:
        path: ``"flat"`` (exact kernel; PostgreSQL: every row ranked in SQL, nothing counted),
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
        cache_bytes: bytes the index's search cache holds after the search (PostgreSQL: the
            client's copy of the table, ids, weights and the vectors read so far).
        groups: for a call with several alphas (one per query), each alpha's own stats; the
            fields above then aggregate them (``depth``, ``scanned``, ``rounds``: the largest;
            ``widened``: the sum). Empty when every query had the same alpha.
    """

    path: str = ""
    depth: int = 0
    scanned: int = 0
    rounds: int = 0
    widened: int = 0
    cache_bytes: int = 0
    groups: dict[float, SearchStats] = field(default_factory=dict)

    def include(self, part: SearchStats) -> None:
        """Fold in the stats of another part of the same call (an alpha group, a query block)."""
        self.path = part.path if self.path in ("", part.path) else "mixed"
        self.depth = max(self.depth, part.depth)
        self.scanned = max(self.scanned, part.scanned)
        self.rounds = max(self.rounds, part.rounds)
        self.widened += part.widened


def plan_search(
    k: int,
    k_factor: int,
    n: int,
    params: dict[str, int],
    *,
    n_tail: int | None = None,
    max_depth: int | None = None,
    overfetch: bool = False,
    trust_whole_depth: bool = False,
) -> SearchPlan:
    """The plan of a search for ``k`` results over ``n`` stored vectors at the index breadth
    ``params`` (``{"efSearch": ef}`` for HNSW, ``{"nprobe": p, "nlist": L}`` for IVF, ``{}``
    for an exact cosine source).

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
    """
    if overfetch:
        depth = min(n, k * k_factor)
        return SearchPlan(depth, depth, 0, params.get("efSearch"), scan=False)
    if "efSearch" in params:
        ef = params["efSearch"]
        depth = min(max(k * k_factor, ef // 8), max(ef, k))
    elif "nprobe" in params:
        probed = n * params["nprobe"] // max(params.get("nlist", 1), 1)
        depth = max(k * k_factor, probed // 256)
    else:
        depth = k * k_factor
    depth = min(n, depth)
    if max_depth is not None:
        depth = min(depth, max(k, max_depth))
    trust = max(2 * k, params["efSearch"] // 8) if "efSearch" in params and not trust_whole_depth else depth
    trust = max(1, min(depth, max(k, trust)))
    if n_tail is not None:
        band = int(n_tail)
    else:
        cap = 2048
        if "efSearch" in params:
            cap = 8 * params["efSearch"]
        elif "nprobe" in params and params.get("nlist"):
            cap = int(n * params["nprobe"] / params["nlist"] / 4)
        band = max(64, min(n // 30, cap))
    return SearchPlan(depth, trust, int(max(0, min(n, band))), params.get("efSearch"))
