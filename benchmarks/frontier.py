"""The recall-latency frontier of norm-weighted top-10 search (issue 48, deliverable 1; not a test).

``score(q, d) = cos(q, d) * ||d||**alpha``. Sets: real-8.4k (SciFact + CACM MiniLM-L6, cached),
real-27k (every cached BEIR corpus), generated-100k (``synthetic_like`` of the 8.4k); indexes:
HNSW32 (efSearch 64, 512), IVF-Flat, and on the 100k IVF-PQ48 and HNSW32,SQ8 (``configs``: the cuts
that fit the run in an hour). For each set, index and alpha, every method is run at its operating
points, and each point is one (microseconds per query, recall@10) pair:

* ``plain``: FAISS cosine top-10 (the baseline every ratio divides by; its weighted recall);
* ``normrank``: ``NormIndex`` over the very FAISS index plain searches (``ann="adaptive"``, the
  default, at ``k_factor`` 5 / 10 / 40) and ``ann="overfetch"`` (``k_factor`` 10);
* ``over-fetch``: the peers' method: FAISS cosine search at depth K' (an HNSW beam widened to K'),
  the K' candidates re-scored by ``cos * ||d||**alpha``, best 10 kept;
* ``refine-flat`` (alpha = 1 only): FAISS's ``IndexRefineFlat`` over the raw vectors, whose inner
  product with a unit query is the alpha = 1 score, at ``k_factor = K' / 10``;
* ``baked``: an index of ``d_hat * ||d||**a0`` (a0 = -0.25, benchmarks/speed.py's choice), re-scored
  by ``||d||**(alpha - a0)``: at depth K', and with the bound of ``depth_growing_search``
  (benchmarks/ann_alternatives.py);
* ``banded``: norm ranging (ann_alternatives.Banded): one index per norm quartile, each searched at a
  growing depth (from 20 or 100) until its bound holds;
* ``brute-force``: numpy, every document scored (the exact reference's own method).

Recall@10 is against the exact weighted top-10 over the whole collection (bench_exact.py, ties
counted). Time is one thread, wall clock (``--clock cpu``: the thread's CPU time, for a shared
machine), the methods interleaved in rounds (speed.py's ``timed`` / ``timed_single``), medians;
single queries (nq = 1) are timed one call each (their recall: those calls' results), batches
(nq = 100; 50 above 20k documents) as one call. normrank's points also record the share of queries
whose ``SearchStats.certified`` is true. Ratios to plain in the same run are what compare. The
committed results come from the first command:

    python benchmarks/frontier.py --clock cpu  # ~25 min on 2 quiet cores: results/frontier*.{json,md,png}
    python benchmarks/frontier.py --clock cpu --resume  # only the (set, index) pairs the JSON lacks
    python benchmarks/frontier.py --quick   # a smoke test: 3k generated, every index kind (< 1 min)
    python benchmarks/frontier.py --render  # chart and table again from results/frontier.json
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# speed.py sizes the thread pools (1) and the SIMD target before numpy / faiss load: import it first.
import speed  # noqa: I001

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import faiss
import numpy as np
from ann_alternatives import Banded, _search, depth_growing_search
from bench_data import CORPORA, real_embeddings, synthetic_like
from bench_exact import exact_top, recall, unit

from normrank import NormIndex
from normrank.search.id_lookup import IdLookup

K = 10
KPRIMES = (10, 20, 50, 100, 200, 500, 1000, 2000, 4096)
ALPHAS = (-1.5, -1.0, -0.5, 0.0, 0.5, 1.0)
# Cut to fit the run in its hour: compressed codes (IVF-PQ, HNSW-SQ8) at four alphas, and they
# and the 27k set at fewer depths K'; the 27k set at one efSearch (64).
CODE_ALPHAS = (-1.0, -0.5, 0.5, 1.0)
KPRIMES_LEAN = (10, 50, 100, 500, 1000, 2000, 4096)
BAKED_A0 = -0.25  # speed.py's baked exponent: between the alphas users pick most
N_BANDS = 4  # norm ranging: bands of equal size (quantiles of the norm)
TARGET = 0.995
DEFAULT = "normrank kf10"  # NormIndex's default point (ann="adaptive", k_factor 10)
RESULTS = Path(__file__).resolve().parent / "results"
# Methods drawn and tabulated, in this order; a method is a family of operating points.
METHODS = (
    "plain",
    "normrank",
    "normrank/overfetch",
    "over-fetch",
    "refine-flat",
    "baked",
    "baked/bound",
    "banded",
    "brute-force",
)
NORMRANK = ("normrank", "normrank/overfetch")  # the families whose points carry certificates
# The 1M set: scale.py's cached builds (``scale.py --build-only``; an HNSW32 build of 1M takes ~18
# minutes here), its generated vectors and queries. (name, factory, kind, efSearch, alphas); no
# SQ8 build at 1M, and no baked index or bands (another 1M build each).
LABEL_1M = "generated-1m"
SCALE_1M = (
    ("IVF4096,Flat", "IVF4096,Flat", "ivf", None, ALPHAS),
    ("IVF4096,PQ48", "IVF4096,PQ48", "ivf", None, CODE_ALPHAS),
    ("HNSW32 ef512", "HNSW32", "hnsw", 512, ALPHAS),
)


# -- the methods (pure: each returns positions (nq, K), -1 padded) ------------------------------


def weights(norms: np.ndarray, alpha: float) -> np.ndarray:
    return (norms.astype(np.float64) ** alpha).astype(np.float32)


def top_k(scores: np.ndarray, pos: np.ndarray, k: int = K) -> np.ndarray:
    """Positions of the ``k`` best scores per row (``-inf`` rows are padding)."""
    k = min(k, scores.shape[1])
    cols = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    return np.where(np.isfinite(np.take_along_axis(scores, cols, 1)), np.take_along_axis(pos, cols, 1), -1)


def brute_force(xu: np.ndarray, w: np.ndarray, qu: np.ndarray, k: int = K) -> np.ndarray:
    """Every document scored: the exact top-k of ``cos * w``."""
    s = (qu @ xu.T) * w
    return top_k(s, np.broadcast_to(np.arange(xu.shape[0]), s.shape), k)


def rescore(cos: np.ndarray, pos: np.ndarray, w: np.ndarray, k: int = K) -> np.ndarray:
    """The candidates' best ``k`` by ``cos * w`` (FAISS pads missing candidates with -1)."""
    ok = pos >= 0
    # FAISS pads with -FLT_MAX: zeroed before the product so nothing overflows, then masked.
    return top_k(np.where(ok, np.where(ok, cos, 0) * w[np.maximum(pos, 0)], -np.inf), pos, k)


def over_fetch(index: faiss.Index, qu: np.ndarray, w: np.ndarray, depth: int, k: int = K) -> np.ndarray:
    """The peers' method: cosine top-``depth`` (beam widened to it), re-scored, best ``k`` kept.
    On compressed codes (PQ, SQ8) the cosines re-scored are FAISS's own estimates from the codes."""
    cos, pos = _search(index, qu, min(depth, index.ntotal))
    return rescore(cos, pos, w, k)


def refine_flat(refine: faiss.IndexRefineFlat, qu: np.ndarray, depth: int, ef: int | None) -> np.ndarray:
    """FAISS's own re-ranking (alpha = 1: its flat store holds the raw vectors)."""
    base = faiss.SearchParametersHNSW(efSearch=max(ef, depth)) if ef else None
    params = faiss.IndexRefineSearchParameters(k_factor=depth / K, base_index_params=base)
    return refine.search(qu, K, params=params)[1]


def recall_key(nq: int) -> str:
    """The row field holding a point's recall for single queries (nq = 1) or the batch."""
    return "recall_1" if nq == 1 else "recall"


def recall_at(points: list[dict], target: float = TARGET, nq: int = 1) -> dict | None:
    """The cheapest point (us per query at ``nq``) with recall >= ``target`` at that ``nq``; None
    if none reaches it. (Single-query recall falls back to the batch's in runs before it was kept.)"""
    key = recall_key(nq)
    ok = [p for p in points if p.get(key, p["recall"]) >= target]
    return min(ok, key=lambda p: p[f"us_{nq}"]) if ok else None


# -- data and indexes ------------------------------------------------------------------------


def load_sets(quick: bool) -> tuple[list[tuple[str, np.ndarray, np.ndarray]], str]:
    """``[(label, docs, queries)]`` and where the data came from: the SciFact + CACM set, the set
    of every cached corpus (where it holds more) and 100k generated from the first."""
    try:
        docs, queries, used = real_embeddings(speed.SMALL_REAL, encode_missing=False)
        source = f"MiniLM-L6 embeddings of {'+'.join(used)} (cached), their BEIR test queries"
    except FileNotFoundError:
        # No cache: a generated stand-in with a log-normal norm law, said so in the results.
        rng = np.random.default_rng(0)
        cents = rng.normal(size=(64, 384))
        docs = cents[rng.integers(0, 64, 8400)] + rng.normal(size=(8400, 384))
        docs = (unit(docs) * np.exp(rng.normal(0.9, 0.3, (8400, 1)))).astype(np.float32)
        queries = docs[rng.choice(8400, 300, replace=False)] + rng.normal(0, 0.3, (300, 384))
        used, source = [], "GENERATED stand-in (no embedding cache)"
    queries = shuffled(queries)
    if quick:
        x, q = synthetic_like(docs, queries, 3000, 40, seed=2)
        return [("generated-3k", x, q)], source
    sets = [(f"real-{docs.shape[0] / 1000:.1f}k", docs, queries)]
    if used:
        all_docs, all_queries, all_used = real_embeddings(CORPORA, encode_missing=False)
        if len(all_used) > len(used):
            sets.append((f"real-{all_docs.shape[0] / 1000:.0f}k", all_docs, shuffled(all_queries)))
            source += f"; every cached corpus ({'+'.join(all_used)})"
    x100k, q100k = synthetic_like(docs, queries, 100_000, 100, seed=1)
    return [*sets, ("generated-100k", x100k, q100k)], source


def load_1m() -> tuple[np.ndarray, np.ndarray]:
    """scale.py's 1M documents (seed 2) and its 100 queries (seed 7), regenerated."""
    from memory import _vectors
    from scale import BLOCK, NQ, D

    x = np.concatenate(list(_vectors(np, 1_000_000, D, seed=2, block=BLOCK)))
    return x, next(_vectors(np, NQ, D, seed=7))


def load_1m_index(factory: str, x: np.ndarray) -> dict:
    """scale.py's cached build of ``factory`` (as build_indexes returns it: NormIndex over the
    plain FAISS index, and IndexRefineFlat over it and ``x``)."""
    from scale import D, cache_dir, load_normindex

    path = cache_dir(factory, x.shape[0], D, 2)
    if not (path / "build.json").exists():
        raise SystemExit(
            f"{path}: no 1M build; run `nice -n 19 python benchmarks/scale.py --build-only` first"
        )
    t0 = time.perf_counter()
    ni, _ = load_normindex(path / "normindex")
    return {
        "baked": None,
        "banded": None,
        "ni": ni,
        "refine": refine_over(ni, x),
        "build_s": {"load": time.perf_counter() - t0},
    }


def shuffled(queries: np.ndarray) -> np.ndarray:
    """The queries in a fixed random order (the first of each corpus are not all measured)."""
    return queries[np.random.default_rng(0).permutation(queries.shape[0])].astype(np.float32)


@dataclass(frozen=True)
class Config:
    """One index at one breadth: ``kind`` names the breadth knob ("hnsw": efSearch ``ef``;
    "ivf": nprobe from the ladder); ``baked`` / ``banded``: those indexes are built beside it."""

    name: str
    factory: str
    kind: str
    ef: int | None
    alphas: tuple[float, ...]
    baked: bool
    banded: bool
    kprimes: tuple[int, ...] = KPRIMES


def configs(label: str, n: int, quick: bool, grid: str = "lean") -> list[Config]:
    """HNSW32 at efSearch 64 and 512 (the largest real set: 64 only), IVF-Flat at nlist 4 sqrt(n)
    (nprobe: the first on the ladder with plain cosine recall >= 0.995) on every set; on generated
    sets also IVF-PQ48 (the same ladder, or the narrowest nprobe within 0.002 of the best it
    reaches) and HNSW32,SQ8 (efSearch as HNSW32's). ``grid="full"`` adds what the lean grid cuts
    (efSearch 512 on the largest real set, every alpha on every index); the 1M set is scale.py's
    cached indexes (``SCALE_1M``)."""
    if label == LABEL_1M:
        return [
            Config(name, factory, kind, ef, alphas, False, False, KPRIMES_LEAN)
            for name, factory, kind, ef, alphas in SCALE_1M
        ]
    nlist = int(4 * np.sqrt(n))
    if grid == "full" and not quick:
        lean = configs(label, n, quick)
        out = [Config(c.name, c.factory, c.kind, c.ef, ALPHAS, c.baked, c.banded, c.kprimes) for c in lean]
        if label.startswith("real") and n > 20_000:
            out.append(Config("HNSW32 ef512", "HNSW32", "hnsw", 512, ALPHAS, False, False, KPRIMES_LEAN))
        return out
    if quick:
        alphas = codes = (-1.0, 1.0)
        efs, kps, lean = (64,), (10, 100, 1000), (10, 100, 1000)
    else:
        alphas, codes, efs, kps, lean = ALPHAS, CODE_ALPHAS, (64, 512), KPRIMES, KPRIMES_LEAN
    if label.startswith("real") and n > 20_000:  # (cut to fit the run)
        efs, kps = (64,), lean
    if quick or not label.startswith("generated"):
        out = [Config(f"HNSW32 ef{ef}", "HNSW32", "hnsw", ef, alphas, True, True, kps) for ef in efs]
        out.append(Config(f"IVF{nlist},Flat", f"IVF{nlist},Flat", "ivf", None, alphas, True, True, kps))
        if quick:
            out.append(Config(f"IVF{nlist},PQ48", f"IVF{nlist},PQ48", "ivf", None, codes, False, False, lean))
            out += [
                Config(f"HNSW32,SQ8 ef{ef}", "HNSW32,SQ8", "hnsw", ef, codes, False, False, lean)
                for ef in efs
            ]
        return out
    # The 100k set, cut to fit the run: the indexes after the first at four alphas, in the order of
    # what the issue asks first; efSearch 512 without the baked index and the bands (a second and
    # third graph to build). (At efSearch 64 the baked bound took 0.1-0.7 s a query at alpha > 0:
    # its depth grows to the whole collection.)
    return [
        Config("HNSW32 ef64", "HNSW32", "hnsw", 64, alphas, True, True, kps),
        Config(f"IVF{nlist},Flat", f"IVF{nlist},Flat", "ivf", None, codes, True, True, kps),
        Config(f"IVF{nlist},PQ48", f"IVF{nlist},PQ48", "ivf", None, codes, False, False, lean),
        Config("HNSW32,SQ8 ef512", "HNSW32,SQ8", "hnsw", 512, codes, False, False, lean),
        Config("HNSW32 ef512", "HNSW32", "hnsw", 512, codes, False, False, kps),
        Config("HNSW32,SQ8 ef64", "HNSW32,SQ8", "hnsw", 64, codes, False, False, lean),
    ]


def refine_over(ni: NormIndex, x: np.ndarray) -> faiss.IndexRefineFlat:
    """The alpha = 1 score exactly: FAISS's IndexRefineFlat over ``ni``'s index and the raw
    vectors (ids 0..n-1 are positions)."""
    refine = faiss.IndexRefineFlat(ni.faiss_index, faiss.swig_ptr(np.ascontiguousarray(x, dtype=np.float32)))
    refine.own_fields = False  # the base belongs to NormIndex
    return refine


def ivf_factory(m: int) -> str:
    """A band's IVF-Flat: nlist 4 sqrt(m), as the whole set's."""
    return f"IVF{max(4, int(4 * np.sqrt(m)))},Flat"


def build_indexes(x: np.ndarray, cfg: Config) -> dict:
    """NormIndex (its FAISS index is plain's), FAISS's IndexRefineFlat over it and the raw
    vectors, and (``cfg.baked``, ``cfg.banded``) the baked index and the norm bands over the same kind;
    with each one's build seconds (two threads)."""
    n, d = x.shape
    xu, norms = unit(x), np.linalg.norm(x, axis=1)
    sample = np.random.default_rng(0).choice(n, min(n, 50 * int(4 * np.sqrt(n))), replace=False)
    faiss.omp_set_num_threads(2)  # building is not measured: both cores
    out, secs = {"baked": None, "banded": None}, {}
    t0 = time.perf_counter()
    ni = NormIndex(d, factory=cfg.factory)
    if "PQ" in cfg.factory:
        # index_factory turns on polysemous training (a code reordering for Hamming filters this
        # search never uses): minutes on two cores, and the codes' distances are the same without it.
        faiss.downcast_index(faiss.extract_index_ivf(ni.faiss_index)).do_polysemous_training = False
    if not ni.faiss_index.is_trained:
        ni.train(x[sample])
    ni.add(x)
    secs["index"] = time.perf_counter() - t0
    refine = refine_over(ni, x)
    if cfg.baked:
        t0 = time.perf_counter()
        out["baked"] = speed.build(
            (xu * norms[:, None] ** BAKED_A0).astype(np.float32), cfg.factory, cfg.kind, 64, xu[sample]
        )
        secs["baked"] = time.perf_counter() - t0
    if cfg.banded:
        t0 = time.perf_counter()
        factory_for = ivf_factory if cfg.kind == "ivf" else (lambda m: cfg.factory)
        out["banded"] = Banded(x, lambda u, f: speed.build(u, f, cfg.kind, 64), factory_for, n_bands=N_BANDS)
        secs["banded"] = time.perf_counter() - t0
    faiss.omp_set_num_threads(1)
    return {**out, "ni": ni, "refine": refine, "build_s": secs}


def ivf_point(index: faiss.Index, xu: np.ndarray, qu: np.ndarray, nlist: int) -> tuple[int, float]:
    """nprobe on the ladder {nlist/8, /4, /2, 3/4}: the first with plain cosine recall >= 0.995
    (speed.operating_point's choice); where none reaches it (PQ), the narrowest within 0.002 of
    the best recall on the ladder. From 2048 lists (the 1M set's 4096) the ladder starts at
    nlist/64: nlist/8 would probe an eighth of a million documents. Set on ``index``; returns
    (nprobe, plain cosine recall)."""
    ref = exact_top(xu, np.ones(xu.shape[0]), qu, 0.0)
    got = []
    eighths = (1 / 8, 1 / 4, 1 / 2, 1, 2, 4, 6) if nlist >= 2048 else (1, 2, 4, 6)
    for value in [max(8, int(nlist * f) // 8) for f in eighths]:
        speed.set_params(index, "ivf", value)
        got.append((value, recall(index.search(qu, K)[1], ref)))
        if got[-1][1] >= TARGET:
            return got[-1]
    best = max(r for _, r in got)
    value, rec = next((v, r) for v, r in got if r >= best - 0.002)
    speed.set_params(index, "ivf", value)
    return value, rec


def set_band_breadth(banded: Banded, kind: str, ef: int | None, nprobe: int, nlist: int) -> None:
    """Each band's index at the whole index's breadth: efSearch as is, nprobe as the same share
    of its lists."""
    for _, _, idx, _ in banded.parts:
        if kind == "hnsw":
            speed.set_params(idx, kind, ef)
        else:
            lists = faiss.extract_index_ivf(idx).nlist
            speed.set_params(idx, kind, max(1, round(nprobe * lists / nlist)))


# -- one configuration -----------------------------------------------------------------------


def with_k_factor(ni: NormIndex, kf: int) -> NormIndex:
    """``ni`` set to ``k_factor`` ``kf``: as an attribute, not a search argument, because a search
    call with any argument beyond ``alpha`` leaves normrank's one-query fast path (the default
    that users get would not be the point measured)."""
    if ni.k_factor != kf:
        ni.k_factor = kf
    return ni


def methods_for(built: dict, x, xu, norms, alpha, cfg: Config) -> dict[str, dict]:
    """``{point name: {"method", "knob", "fn": f(queries) -> positions}}`` at one alpha; normrank's
    points also ``"stats"``: f(queries) -> SearchStats of the same call."""
    ni, baked, banded, refine = built["ni"], built["baked"], built["banded"], built["refine"]
    plain = ni.faiss_index
    w, res = weights(norms, alpha), weights(norms, alpha - BAKED_A0)
    ef = cfg.ef if cfg.kind == "hnsw" else None
    lk = IdLookup(np.arange(x.shape[0]))
    over = NormIndex.from_faiss(plain, norms=dict(enumerate(norms.tolist())))
    over.ann = "overfetch"
    pts = {"plain": {"method": "plain", "knob": "", "fn": lambda z: plain.search(unit(z), K)[1]}}
    for kf in (5, 10, 40):
        pts[f"normrank kf{kf}"] = {
            "method": "normrank",
            "knob": f"k_factor {kf}",
            "fn": lambda z, kf=kf: with_k_factor(ni, kf).search(z, K, alpha=alpha)[1],
            "stats": lambda z, kf=kf: with_k_factor(ni, kf).search(z, K, alpha=alpha, return_stats=True)[2],
        }
    pts["normrank/overfetch"] = {
        "method": "normrank/overfetch",
        "knob": "k_factor 10",
        "fn": lambda z: over.search(z, K, alpha=alpha)[1],
        "stats": lambda z: over.search(z, K, alpha=alpha, return_stats=True)[2],
    }
    for kp in cfg.kprimes:
        pts[f"over-fetch {kp}"] = {
            "method": "over-fetch",
            "knob": f"K' {kp}",
            "fn": lambda z, kp=kp: over_fetch(plain, unit(z), w, kp),
        }
    if alpha == 1.0:
        for kp in (100, 1000, 4096):
            pts[f"refine-flat {kp}"] = {
                "method": "refine-flat",
                "knob": f"K' {kp}",
                "fn": lambda z, kp=kp: refine_flat(refine, unit(z), kp, ef),
            }
    if baked is not None:
        for kp in (10, 100, 1000):
            pts[f"baked {kp}"] = {
                "method": "baked",
                "knob": f"K' {kp}",
                "fn": lambda z, kp=kp: over_fetch(baked, unit(z), res, kp),
            }
        pts["baked bound"] = {
            "method": "baked/bound",
            "knob": "bound",
            "fn": lambda z: depth_growing_search(
                baked, unit(z), K, res, lk, start_depth=10 * K, max_depth=x.shape[0]
            )[1],
        }
    if banded is not None:
        for start in (2 * K, 10 * K):
            pts[f"banded {start}"] = {
                "method": "banded",
                "knob": f"{N_BANDS} bands, depth {start}+",
                "fn": lambda z, start=start: banded.search(unit(z), alpha, K, start_depth=start),
            }
    pts["brute-force"] = {"method": "brute-force", "knob": "", "fn": lambda z: brute_force(xu, w, unit(z))}
    return pts


def measure(label, x, q, cfg: Config, alphas, args, rows, stats, built: dict, meta: dict) -> None:
    """Every point of every method at each of ``alphas`` on one (set, index) pair: recall of single
    queries (the results of the timed calls) and of the batch, us per query single and batched,
    ratios to plain in the same interleaved rounds, and normrank's certificates.
    ``built``: indexes by (set, factory), so that both efSearch values search the same graph."""
    xu, norms = unit(x), np.linalg.norm(x, axis=1)
    if (label, cfg.factory) not in built:
        built.clear()  # one index (and its companions) in memory at a time
        built[label, cfg.factory] = (
            load_1m_index(cfg.factory, x) if label == LABEL_1M else build_indexes(x, cfg)
        )
        by = meta["build_s"].setdefault(label, {})
        # (a second build of the same factory, without the baked index or the bands, keeps the first's)
        by[cfg.factory if cfg.factory not in by else f"{cfg.factory} again"] = built[label, cfg.factory][
            "build_s"
        ]
    b = built[label, cfg.factory]
    plain = b["ni"].faiss_index
    # Batches of 50 above 20k documents (cut to fit the run: batch timing was 2/3 of its time).
    qb, q1 = q[: args.nq_batch if x.shape[0] <= 20_000 else args.nq_batch // 2], q[: args.nq_single]
    nlist = faiss.extract_index_ivf(plain).nlist if cfg.kind == "ivf" else None
    if cfg.kind == "hnsw":
        speed.set_params(plain, "hnsw", cfg.ef)
        cos_rec = recall(plain.search(unit(qb), K)[1], exact_top(xu, np.ones_like(norms), unit(qb), 0.0))
        value, breadth = cfg.ef, {"efSearch": cfg.ef}
    else:
        value, cos_rec = ivf_point(plain, xu, unit(qb), nlist)
        breadth = {"nprobe": value, "nlist": nlist}
    if b["baked"] is not None:
        speed.set_params(b["baked"], cfg.kind, value)
    if b["banded"] is not None:
        set_band_breadth(b["banded"], cfg.kind, cfg.ef, value, nlist)
    print(f"{label} {cfg.name}: {breadth}, plain cosine recall {cos_rec:.4f}", flush=True)
    for alpha in alphas:
        pts = methods_for(b, x, xu, norms, alpha, cfg)
        ref, ref1 = exact_top(xu, norms, unit(qb), alpha), exact_top(xu, norms, unit(q1), alpha)
        recs, cert = {}, {}
        for p, v in pts.items():
            if "stats" in v:  # normrank: the batch's certificates (an untimed call of its own)
                cert[p] = {"batch": v["stats"](qb).n_certified / len(qb), "single": None}
            recs[p] = recall(v["fn"](qb), ref)
        # Single queries: each call's result kept (the last round's), so their recall is the one timed.
        got1 = {p: [None] * len(q1) for p in pts}

        def single(i, f, out):
            out[i] = f(q1[i : i + 1])

        t1 = speed.timed_single(
            {p: (lambda i, f=v["fn"], o=got1[p]: single(i, f, o)) for p, v in pts.items()}, len(q1), args.reps
        )
        recs1 = {p: recall(np.vstack(got1[p]), ref1) for p in pts}
        one = []  # the default point's single-query stats (untimed calls: stats cost ~10 us)
        for p, v in pts.items():
            if "stats" in v:
                sts = [v["stats"](q1[i : i + 1]) for i in range(len(q1))]
                cert[p]["single"] = sum(s.n_certified for s in sts) / len(q1)
                one = sts if p == DEFAULT else one
        tb = speed.timed({p: (lambda f=v["fn"]: f(qb)) for p, v in pts.items()}, args.reps, len(qb))
        _, _, st = with_k_factor(b["ni"], 10).search(qb, K, alpha=alpha, return_stats=True)
        counts = {f: v for f, v in asdict(st).items() if f not in ("groups", "certified")}
        # The share of the batch's queries whose bound held on the candidates alone (no scan row).
        counts["certified_fraction"] = st.n_certified / len(qb)
        counts["single"] = {
            "paths": sorted({s.path for s in one}),
            "scanned_max": max(s.scanned for s in one),
            "certified_fraction": cert[DEFAULT]["single"],
        }
        stats.append(dict(set=label, index=cfg.name, alpha=alpha, **counts))
        for p, v in pts.items():
            rows.append(
                dict(
                    set=label,
                    index=cfg.name,
                    breadth=breadth,
                    plain_cosine_recall=cos_rec,
                    alpha=alpha,
                    point=p,
                    method=v["method"],
                    knob=v["knob"],
                    recall=recs[p],
                    recall_1=recs1[p],
                    certified_1=cert[p]["single"] if p in cert else None,
                    certified_100=cert[p]["batch"] if p in cert else None,
                    us_1=1e6 * t1.median(p) / len(q1),
                    ratio_1=t1.median(p) / t1.median("plain"),
                    nq_batch=len(qb),  # fewer than asked where the set has fewer queries
                    us_100=1e6 * tb.median(p) / len(qb),
                    ratio_100=tb.median(p) / tb.median("plain"),
                    run=args.run_date,  # which of meta["runs"] measured the row
                )
            )
        this = {r["point"]: r for r in rows[-len(pts) :]}
        best = recall_at([r for r in this.values() if r["method"] == "normrank"])
        d = this[DEFAULT]
        print(
            f"  alpha {alpha:+g}: normrank {d['recall_1']:.4f} {d['ratio_1']:.2f}x cert {d['certified_1']:.2f} "
            f"(cheapest >= {TARGET}: {best['point'] if best else '-'}), load {os.getloadavg()[0]:.2f}",
            flush=True,
        )


# -- outputs ---------------------------------------------------------------------------------


def family(r: dict) -> str:
    """The line a point is drawn on: the baked bound apart from baked at fixed depths."""
    return "baked/bound" if r["point"] == "baked bound" else r["method"]


def spread(x: np.ndarray) -> dict:
    p5, p50, p95 = np.percentile(np.linalg.norm(x, axis=1), [5, 50, 95])
    return {"n": int(x.shape[0]), "p5": float(p5), "p50": float(p50), "p95": float(p95)}


def set_order(result: dict) -> list[str]:
    """The sets by size (the run's order puts the 100k set second)."""
    norms = result["meta"]["norms"]
    done = dict.fromkeys(r["set"] for r in result["rows"])
    return sorted(done, key=lambda s: norms.get(s, {}).get("n", 0))


def pairs(result: dict) -> list[tuple[str, str]]:
    """(set, index) pairs measured, sets by size, indexes in run order."""
    run = list(dict.fromkeys((r["set"], r["index"]) for r in result["rows"]))
    return [p for s in set_order(result) for p in run if p[0] == s]


def chart(rows: list[dict], label: str, path: Path) -> None:
    """One figure per set: a row of panels per index, a panel per alpha, a line per method
    (single-query recall vs single-query us, log x)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    mine = [r for r in rows if r["set"] == label]
    idxs = list(dict.fromkeys(r["index"] for r in mine))
    alphas = sorted({r["alpha"] for r in mine})
    fig, axes = plt.subplots(
        len(idxs), len(alphas), figsize=(2.6 * len(alphas), 2.3 * len(idxs)), squeeze=False, sharey="row"
    )
    style = {
        "plain": ("k", "s"),
        "normrank": ("tab:red", "o"),
        "normrank/overfetch": ("tab:pink", "v"),
        "over-fetch": ("tab:blue", "."),
        "refine-flat": ("tab:cyan", "x"),
        "baked": ("tab:green", "^"),
        "baked/bound": ("tab:olive", "P"),
        "banded": ("tab:purple", "*"),
        "brute-force": ("tab:gray", "D"),
    }
    for i, idx in enumerate(idxs):
        here = [r for r in mine if r["index"] == idx]
        # The region that matters (lower points are in the JSON, and named in the panel); lower
        # where the codes cap recall, so that every panel's best point but brute force's shows.
        bottom = min(
            0.9,
            min(
                max(
                    r.get("recall_1", r["recall"])
                    for r in here
                    if r["alpha"] == a and r["method"] != "brute-force"
                )
                for a in {r["alpha"] for r in here}
            )
            - 0.1,
        )
        for j, a in enumerate(alphas):
            ax = axes[i][j]
            for m in METHODS:
                # In knob order (K' rising): a line that turns back shows a deeper point ran faster (noise).
                pts = [r for r in here if r["alpha"] == a and family(r) == m]
                if pts:
                    c, mk = style[m]
                    ax.plot(
                        [p["us_1"] for p in pts],
                        [p.get("recall_1", p["recall"]) for p in pts],
                        color=c,
                        marker=mk,
                        ms=4,
                        lw=1,
                        label=m,
                    )
            below = [
                f"{m} ≤ {top:.2f}"
                for m in METHODS
                if (
                    top := max(
                        (r.get("recall_1", r["recall"]) for r in here if r["alpha"] == a and family(r) == m),
                        default=None,
                    )
                )
                is not None
                and top < bottom
            ]
            if below:  # families whose every point is under the panel
                ax.text(
                    0.03,
                    0.03,
                    "below:\n" + "\n".join(below),
                    transform=ax.transAxes,
                    fontsize=5.5,
                    va="bottom",
                )
            if not any(r["alpha"] == a for r in here):
                ax.set_visible(False)  # (fewer alphas on compressed codes)
            ax.axhline(TARGET, color="0.6", lw=0.6, ls="--")
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # 2x10^2 ... labels overlap
            ax.set_ylim(bottom, 1.004)
            ax.tick_params(labelsize=7)
            ax.set_title(f"{idx}, α={a:g}", fontsize=8)
            if j == 0 or not any(r["alpha"] == alphas[0] for r in here):
                ax.set_ylabel("recall@10", fontsize=8)
                ax.tick_params(labelleft=True)
            ax.set_xlabel("µs / query (nq=1)", fontsize=7)
    handles = {
        h.get_label(): h for ax in axes.flat for h in ax.get_lines() if not h.get_label().startswith("_")
    }
    fig.legend(handles.values(), handles.keys(), fontsize=7, loc="lower center", ncol=len(handles))
    fig.suptitle(f"{label}: recall@10 of cos·‖d‖^α vs single-query time (1 thread)", fontsize=9)
    fig.tight_layout(rect=(0, 0.04 if len(idxs) < 4 else 0.02, 1, 1))
    fig.savefig(path, dpi=72)
    plt.close(fig)


def cell(p: dict | None, nq: int) -> str:
    if p is None:
        return "—"
    cert = p.get(f"certified_{nq}")
    return f"{p[f'us_{nq}']:.0f} ({p[f'ratio_{nq}']:.2f}×)" + ("" if cert is None else f" cert {cert:.2f}")


def table(result: dict) -> str:
    rows, meta = result["rows"], result["meta"]
    out = [
        "# Frontier: µs per query at recall@10 ≥ 0.995 (ratio to plain FAISS cosine)",
        "",
        f"Built by `{meta['command']}` on {meta['date']}, {meta['cpu']}, one thread ({meta.get('clock', 'wall')} clock), "
        "load average "
        f"{meta['load_start'][0]:.2f} at the start and {meta['load_end'][0]:.2f} at the end (shared machine: "
        "read the ratios, measured in the same interleaved rounds; differences under ~1.3× are not resolved); "
        f"{meta['minutes']:.0f} minutes. Data: "
        f"{meta['source']}. Each cell: the cheapest operating point of the method reaching recall "
        f"0.995 ('—': none does), single queries (nq = 1, {meta['nq_single']} queries, recall of those "
        f"calls' results) and batches (nq = {meta['nq_batch']} up to 20k documents, {meta['nq_batch'] // 2} above; "
        "recall of the batch); "
        f"{meta['reps']} rounds, medians. normrank cells add *cert*: the share of those queries whose "
        "`SearchStats.certified` is true.",
        "",
        *runs_lines(meta),
        "Norm spread (‖d‖ p5 / p50 / p95): "
        + "; ".join(
            f"{s}: {v['p5']:.2f} / {v['p50']:.2f} / {v['p95']:.2f} (n = {v['n']})"
            for s, v in meta["norms"].items()
        ),
        "",
    ]
    if meta.get("build_s"):
        out += [
            "Build seconds (two threads; index: NormIndex's, which plain searches; baked; "
            f"banded: {N_BANDS} norm bands): "
            + "; ".join(
                f"{s} {f}: " + ", ".join(f"{k} {v:.0f}" for k, v in parts.items())
                for s, by in meta["build_s"].items()
                for f, parts in by.items()
            ),
            "",
        ]
    alphas = sorted({r["alpha"] for r in rows})
    for s, idx in pairs(result):
        sub = [r for r in rows if r["set"] == s and r["index"] == idx]
        b = sub[0]
        out += [
            f"## {s}, {idx} ({b['breadth']}, plain cosine recall {b['plain_cosine_recall']:.4f})",
            "",
            "| method | " + " | ".join(f"α={a:g}" for a in alphas) + " |",
            "|---|" + "---|" * len(alphas),
        ]
        for m in ("normrank default", *METHODS):
            for nq in (1, 100):  # 100: the batch row, of meta["nq_batch"] queries
                cells = []
                for a in alphas:
                    pts = [r for r in sub if r["alpha"] == a and (family(r) == m or r["point"] == DEFAULT)]
                    pts = [r for r in pts if (r["point"] == DEFAULT) == (m == "normrank default")]
                    best = recall_at(pts, nq=nq)
                    cells.append(
                        cell(best, nq) + (f" {best['knob']}" if best and best["knob"] else "")
                        if pts
                        else "n/a"
                    )
                if any(c != "n/a" for c in cells):
                    size = 1 if nq == 1 else b["nq_batch"]
                    shown = "normrank k_factor 5 / 40" if m == "normrank" else m  # the default has its row
                    out.append(f"| {shown} nq={size} | " + " | ".join(cells) + " |")
        out.append("")
    out += winners(result, alphas)
    out += ceilings(result)
    out += certificates(result, alphas)
    out += [
        "## normrank's path (default k_factor): one batch (the timed batch's queries), and the single queries",
        "",
        "Certified: the share of the queries whose result the bound proved exact w.r.t. the "
        "index's candidates before any scan row was read (`SearchStats.certified`; docs/guarantees.md).",
        "",
        "| set | index | α | path | depth | scanned (max) | rounds | widened | certified | single: path | scanned (max) | certified |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s, idx in pairs(result):
        for st in [t for t in result["stats"] if t["set"] == s and t["index"] == idx]:
            cert = st.get("certified_fraction")  # (absent from runs before it was recorded)
            one = st.get("single") or {}
            one_cert = one.get("certified_fraction")
            out.append(
                f"| {st['set']} | {st['index']} | {st['alpha']:g} | {st['path']} | {st['depth']} | {st['scanned']} "
                f"| {st['rounds']} | {st['widened']} | {'—' if cert is None else f'{cert:.2f}'} "
                f"| {'/'.join(one.get('paths', [])) or '—'} | {one.get('scanned_max', '—')} "
                f"| {'—' if one_cert is None else f'{one_cert:.2f}'} |"
            )
    return "\n".join(out) + "\n"


def runs_lines(meta: dict) -> list[str]:
    """Where rows came from more than one run (``--resume``): each run's command, date and load."""
    runs = meta.get("runs", [])
    if len(runs) < 2:
        return []
    out = ["Runs (each row's `run` in the JSON names its run; a later run builds its indexes again):", ""]
    for r in runs:
        load = (
            f"{r['load_start'][0]:.2f} → {r['load_end'][0]:.2f}"
            if r.get("load_end")
            else f"{r['load_start'][0]:.2f}"
        )
        mins = f", {r['minutes']:.0f} min" if r.get("minutes") is not None else ""
        out.append(f"- `{r['command']}`, {r['date']}, load {load}{mins}")
    return [*out, ""]


def certificates(result: dict, alphas: list[float]) -> list[str]:
    """Per (set, index) and alpha: the default point's certified fraction, single / batch."""
    out = [
        "## Certified: normrank's default (k_factor 10), single queries / batch",
        "",
        "The share of the queries whose `SearchStats.certified` is true: exact w.r.t. the index's "
        "candidates before any scan row was read. A query not certified may still be exact (its scan "
        "ran until the bound held). α = 0 is plain cosine search (certified by definition).",
        "",
        "| set, index | " + " | ".join(f"α={a:g}" for a in alphas) + " |",
        "|---|" + "---|" * len(alphas),
    ]
    for s, idx in pairs(result):
        cells = []
        for a in alphas:
            d = next(
                (
                    r
                    for r in result["rows"]
                    if (r["set"], r["index"], r["alpha"], r["point"]) == (s, idx, a, DEFAULT)
                ),
                None,
            )
            ok = d is not None and d.get("certified_1") is not None
            cells.append(f"{d['certified_1']:.2f} / {d['certified_100']:.2f}" if ok else "n/a")
        out.append(f"| {s}, {idx} | " + " | ".join(cells) + " |")
    return [*out, ""]


def ceilings(result: dict) -> list[str]:
    """Where the index itself misses cosine neighbours (plain cosine recall < 0.995): the highest
    single-query recall any point reached, and normrank default's."""
    out = [
        "## Below the target: the highest recall reached where plain cosine recall < 0.995",
        "",
        "Single queries. Each cell: point, recall, µs (ratio to plain). Re-ranking an index's output cannot "
        "beat the index: on PQ codes every method but brute force and refine-flat reads the codes' cosines.",
        "",
        "| set, index (plain cosine recall) | α | highest recall | normrank default |",
        "|---|---|---|---|",
    ]
    for s, idx in pairs(result):
        sub = [r for r in result["rows"] if r["set"] == s and r["index"] == idx]
        if sub[0]["plain_cosine_recall"] >= TARGET:
            continue
        for a in dict.fromkeys(r["alpha"] for r in sub):
            pts = [r for r in sub if r["alpha"] == a and r["method"] != "brute-force"]
            top = max(pts, key=lambda r: (r.get("recall_1", r["recall"]), -r["us_1"]))
            d = next(r for r in pts if r["point"] == DEFAULT)
            out.append(
                f"| {s}, {idx} ({sub[0]['plain_cosine_recall']:.4f}) | {a:g} "
                + "".join(
                    f"| {'' if i else r['point'] + ' '}{r.get('recall_1', r['recall']):.4f}, "
                    f"{r['us_1']:.0f} ({r['ratio_1']:.2f}×) "
                    for i, r in enumerate((top, d))
                )
                + "|"
            )
    return [*out, ""]


def winners(result: dict, alphas: list[float]) -> list[str]:
    """Per (set, index, alpha) and nq: the fastest point at recall >= TARGET beside normrank's default."""
    rows = result["rows"]
    out = [
        "## On the frontier: the fastest point at recall ≥ 0.995, and normrank's default",
        "",
        "Each cell: fastest point (µs, ratio to plain) / normrank default (µs, ratio, recall at that nq). "
        "Timing noise on this machine: differences under ~1.3× are not resolved.",
        "",
        "| set, index | nq | " + " | ".join(f"α={a:g}" for a in alphas) + " |",
        "|---|---|" + "---|" * len(alphas),
    ]
    for s, idx in pairs(result):
        batch = next(r["nq_batch"] for r in rows if r["set"] == s and r["index"] == idx)
        for nq in (1, 100):
            cells = []
            for a in alphas:
                pts = [r for r in rows if r["set"] == s and r["index"] == idx and r["alpha"] == a]
                if not pts:
                    cells.append("n/a")
                    continue
                best = recall_at(pts, nq=nq)
                d = next(p for p in pts if p["point"] == DEFAULT)
                win = (
                    "—"
                    if best is None
                    else f"**{best['point']}** {best[f'us_{nq}']:.0f} ({best[f'ratio_{nq}']:.2f}×)"
                )
                rec = d.get(recall_key(nq), d["recall"])
                cells.append(f"{win} / {d[f'us_{nq}']:.0f} ({d[f'ratio_{nq}']:.2f}×, {rec:.4f})")
            out.append(f"| {s}, {idx} | {1 if nq == 1 else batch} | " + " | ".join(cells) + " |")
    return [*out, ""]


def render(result: dict, out_dir: Path, stem: str) -> None:
    (out_dir / f"{stem}.md").write_text(table(result))
    for label in set_order(result):
        chart(result["rows"], label, out_dir / f"{stem}-{label}.png")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--quick", action="store_true", help="a 3k generated set, two alphas, one round (smoke test)"
    )
    ap.add_argument("--render", action="store_true", help="only redraw the chart and table from the JSON")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="keep the JSON's results; measure only the (set, index, alpha) rows it lacks",
    )
    ap.add_argument(
        "--grid",
        choices=("lean", "full"),
        default="lean",
        help="lean: the cut that fits ~25 min; full: also efSearch 512 on the 27k set and every alpha on every index",
    )
    ap.add_argument(
        "--indexes",
        default="",
        help="index names to measure, ;-separated (e.g. 'HNSW32 ef512;IVF4096,Flat'; default: every one)",
    )
    ap.add_argument(
        "--sets",
        default="",
        help=f"comma list of set labels to measure (default: the real sets and generated-100k; {LABEL_1M}: "
        "scale.py's cached 1M builds, asked for by name)",
    )
    ap.add_argument("--out", type=Path, default=RESULTS, help="output folder (default benchmarks/results)")
    ap.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall: latency; cpu: this thread's CPU time (a shared machine: leaves out the time the OS ran others)",
    )
    args = ap.parse_args()
    if args.clock == "cpu":
        speed.CLOCK = time.thread_time  # what speed.timed / timed_single read
    stem = "frontier-quick" if args.quick else "frontier"
    if args.render:
        render(json.loads((args.out / f"{stem}.json").read_text()), args.out, stem)
        return
    args.reps, args.nq_single, args.nq_batch = (1, 10, 40) if args.quick else (3, 50, 100)
    faiss.omp_set_num_threads(1)
    load_start, t0 = os.getloadavg(), time.time()
    t_run = t0
    wanted = [s for s in args.sets.split(",") if s]
    sets, source = load_sets(args.quick)
    if LABEL_1M in wanted:
        x1m, q1m = load_1m()
        sets.append((LABEL_1M, x1m, q1m))
        source += f"; {LABEL_1M}: scale.py's clustered vectors with log-normal norms (memory.py's `_vectors`)"
    if wanted:
        unknown = set(wanted) - {label for label, _, _ in sets}
        if unknown:
            raise SystemExit(f"--sets: no set {sorted(unknown)}; sets: {[label for label, _, _ in sets]}")
        sets = [t for t in sets if t[0] in wanted]
    rows, stats = [], []
    command = " ".join(["python benchmarks/frontier.py", *sys.argv[1:]])
    this_run = dict(
        command=command, date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), load_start=load_start
    )
    args.run_date = this_run["date"]
    meta = dict(
        command=command,
        clock=args.clock,
        date=this_run["date"],
        cpu=speed.cpu_model(),
        cores=os.cpu_count(),
        faiss=faiss.__version__,
        source=source,
        load_start=load_start,
        reps=args.reps,
        nq_single=args.nq_single,
        nq_batch=args.nq_batch,
        baked_a0=BAKED_A0,
        n_bands=N_BANDS,
        norms={label: spread(x) for label, x, _ in sets},
        build_s={},
        index_minutes={},
        runs=[this_run],
    )
    result = {"meta": meta, "rows": rows, "stats": stats}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{stem}.json"
    done = set()
    if args.resume and path.exists():  # earlier runs' rows kept; their first start and load kept
        old = json.loads(path.read_text())
        rows += old["rows"]
        stats += old["stats"]
        done = {(r["set"], r["index"], r["alpha"]) for r in old["rows"]}
        om = old["meta"]
        meta.update(
            {k: om[k] for k in ("command", "date", "load_start", "build_s", "index_minutes") if k in om}
        )
        meta["norms"] = {**om.get("norms", {}), **meta["norms"]}
        if LABEL_1M not in wanted and LABEL_1M in om.get("norms", {}):
            meta["source"] = om["source"]  # (it names the 1M set's data)
        earlier = om.get("runs") or [
            dict(command=om["command"], date=om["date"], load_start=om["load_start"], load_end=om.get("load_end"),
                 minutes=om.get("minutes"))
        ]  # fmt: skip
        meta["runs"] = [*earlier, this_run]
        t0 -= 60 * om.get("minutes", 0)
    wanted_indexes = {i for i in args.indexes.split(";") if i}
    known = {c.name for label, x, _ in sets for c in configs(label, x.shape[0], args.quick, args.grid)}
    if wanted_indexes - known:  # (a name that matches nothing would measure nothing, silently)
        raise SystemExit(
            f"--indexes: no index {sorted(wanted_indexes - known)} in these sets; indexes: {sorted(known)}"
        )
    built: dict = {}
    for label, x, q in sets:
        print(f"{label}: {meta['norms'][label]}", flush=True)
        for cfg in configs(label, x.shape[0], args.quick, args.grid):
            alphas = [a for a in cfg.alphas if (label, cfg.name, a) not in done]
            if not alphas or (wanted_indexes and cfg.name not in wanted_indexes):
                continue
            t_cfg = time.time()
            measure(label, x, q, cfg, alphas, args, rows, stats, built, meta)
            meta["index_minutes"][
                f"{label} {cfg.name}" + ("" if len(alphas) == len(cfg.alphas) else f" {alphas}")
            ] = (time.time() - t_cfg) / 60
            # Written after every index, so that a run cut short still leaves its data.
            this_run.update(load_end=os.getloadavg(), minutes=(time.time() - t_run) / 60)
            meta.update(load_end=os.getloadavg(), minutes=(time.time() - t0) / 60)
            path.write_text(json.dumps(result, indent=1))
    meta.setdefault("load_end", os.getloadavg())
    meta.setdefault("minutes", (time.time() - t0) / 60)
    render(result, args.out, stem)
    print(f"done in {(time.time() - t0) / 60:.1f} min; {args.out / stem}.md", flush=True)


if __name__ == "__main__":
    main()
