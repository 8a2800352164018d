"""Speed and recall of norm-weighted search, as ratios to plain FAISS cosine search (not a test).

One run measures:
  * faiss-flat: NormIndex (exact) vs ``faiss.IndexFlatIP`` on the same unit vectors
    (issue 2 base case: 100k x 384, real-statistics vectors, nq in {1, 100, 1000}, k = 10);
  * faiss-ivf / faiss-hnsw: NormIndex's ANN search (``ann="adaptive"``, the chosen method) vs
    plain FAISS search with the same nprobe / efSearch, on real MiniLM embeddings of the BEIR
    corpora and on a larger set generated to match their statistics; the alternatives evaluated
    to choose it appear as ``faiss-ivf/overfetch``, ``.../no-tail``, ``.../banded``, ``.../baked``;
  * qdrant-local: QdrantNormIndex vs a plain Qdrant query on the same collection in
    qdrant-client's local mode, which evaluates formula queries in Python (not Qdrant's engine);
  * qdrant-edge (``--only qdrant-edge``, benchmarks/qdrant_edge_bench.py): QdrantEdgeNormIndex vs
    a plain Qdrant Edge nearest query on the same shard and HNSW parameters (Qdrant's engine).
  * pgvector (``--only pgvector``, benchmarks/pgvector_bench.py): PgVectorNormIndex vs a plain
    pgvector HNSW query on the same PostgreSQL table, m / ef_construction / ef_search.

Recall is against the exact norm-weighted top-10 (numpy; tied scores count alike, see
``recall``). Latency ratios are medians over interleaved repetitions (the machine may be
shared), printed with their spread over repetitions; single-query rows also give the ratios of
the per-query p50 and p99 latencies. The ANN baseline is plain search on the very FAISS index
NormIndex wraps. The JSON ``meta`` records the CPU model, the BLAS/OpenMP libraries loaded
(threadpoolctl: version, kernel, threads), whose BLAS normrank's product used, the repetition
counts and the load average, so tables from two machines can be compared. Usage:

    python benchmarks/speed.py --quick --json speed.json   # < 15 min on 2 cores

The committed results (benchmarks/results/): ``speed.md``, the chosen method against the goals
over three quiet runs (``speed_runs/run-N.json`` from ``--quick --cached-only --only
flat,ivf,hnsw --no-alternatives --json ...``, summarised by ``speed_targets.py``), and
``speed_methods.{md,json}``, a full run with the alternative methods (the markdown default).
"""

from __future__ import annotations

import os
import sys


def _threads_from_argv(default: int = 1) -> int:
    for i, a in enumerate(sys.argv):
        if a == "--threads" and i + 1 < len(sys.argv):
            return int(sys.argv[i + 1])
        if a.startswith("--threads="):
            return int(a.split("=", 1)[1])
    return default


# Thread pools must be sized before numpy / faiss load. Default 1: on a shared machine,
# multi-threaded BLAS/OpenMP calls of a few microseconds' work can stall for tens of
# milliseconds, which would measure the neighbours, not the code.
THREADS = _threads_from_argv()
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = str(THREADS)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simd_target  # noqa: E402 - no numpy: it sets the SIMD target before numpy / faiss load

SIMD = simd_target.target_from_argv(sys.argv)
simd_target.apply(SIMD)

import argparse  # noqa: E402 - after the thread settings above
import json  # noqa: E402 - after the thread settings above
import platform  # noqa: E402 - after the thread settings above
import time  # noqa: E402 - after the thread settings above
from dataclasses import dataclass  # noqa: E402 - after the thread settings above
from pathlib import Path  # noqa: E402 - after the thread settings above

import faiss  # noqa: E402 - after the thread settings above
import numpy as np  # noqa: E402 - after the thread settings above
from ann_alternatives import Banded, depth_growing_search  # noqa: E402
from bench_data import real_embeddings, synthetic_like  # noqa: E402
from bench_exact import exact_top, recall, unit  # noqa: E402

from normrank import NormIndex  # noqa: E402
from normrank.search.faiss_info import ann_params  # noqa: E402
from normrank.search.flat import PRODUCT_BLAS  # noqa: E402
from normrank.search.id_lookup import IdLookup  # noqa: E402
from normrank.search.plan import ANY_WEIGHTED_ALPHA, SearchOptions, plan_search  # noqa: E402

K = 10
# What timed() and timed_single() read: wall time, or with --clock cpu this thread's CPU time
# (on a machine shared with other jobs it leaves out the time the OS ran them instead).
CLOCK = time.perf_counter
# --only names. A new section adds its name here and its block in main().
SECTIONS = ("flat", "ivf", "hnsw", "qdrant-edge", "qdrant", "pgvector")
# nq = 1 rows time this many queries one call at a time; fewer would leave recall at the mercy of
# a few misses (50 queries: one miss is 0.002).
SINGLE_QUERIES = 100
# The small real set (see main): corpora of bench_data.CORPORA.
SMALL_REAL = ("scifact", "cacm")
NOTES_MARKER = "<!-- notes: kept across runs -->"
ROOT = Path(__file__).resolve().parent


@dataclass
class Timing:
    """Seconds of each timed function per repetition (``totals``: name -> ``(reps,)``) and, for
    single-query rows, per query (``per_query``: name -> ``(reps, nq)``)."""

    totals: dict[str, np.ndarray]
    per_query: dict[str, np.ndarray] | None = None
    nq: int = 0  # queries per repetition (0: unknown)

    def median(self, name: str) -> float:
        return float(np.median(self.totals[name]))

    def ratio(self, name: str, base: str) -> dict:
        """``latency_ratio`` (median time / median base time), its spread over repetitions
        (``ratio_min`` / ``ratio_max`` of the per-repetition ratios) and, for single queries,
        ``p50_ratio`` / ``p99_ratio``: the ratio of the per-query latency percentiles (each
        query's latency its median over repetitions), where a few queries scanning far show."""
        per_rep = self.totals[name] / self.totals[base]
        out = {
            "latency_ratio": self.median(name) / self.median(base),
            "ratio_min": float(per_rep.min()),
            "ratio_max": float(per_rep.max()),
            "t_plain_ms": 1e3 * self.median(base),
            "t_ms": 1e3 * self.median(name),
        }
        if self.nq:  # what a query adds to plain search, in microseconds
            out["overhead_us"] = 1e6 * (self.median(name) - self.median(base)) / self.nq
        if self.per_query is not None:
            lat, lat_base = np.median(self.per_query[name], 0), np.median(self.per_query[base], 0)
            for pct in (50, 99):
                out[f"p{pct}_ratio"] = float(np.percentile(lat, pct) / np.percentile(lat_base, pct))
                out[f"p{pct}_us"] = 1e6 * float(np.percentile(lat, pct))
                out[f"p{pct}_plain_us"] = 1e6 * float(np.percentile(lat_base, pct))
        return out


def timed(fns: dict[str, callable], reps: int, nq: int = 0) -> Timing:
    """Each function once per repetition, interleaved (the order reversed every other
    repetition), so load spikes and cache warmth hit all sides alike."""
    for f in fns.values():
        f()  # warm-up (caches, lazily built state)
    names = list(fns)
    totals = {name: np.empty(reps) for name in names}
    for r in range(reps):
        for name in names if r % 2 == 0 else names[::-1]:
            t0 = CLOCK()
            fns[name]()
            totals[name][r] = CLOCK() - t0
    return Timing(totals, nq=nq)


def timed_single(fns: dict[str, callable], nq: int, reps: int) -> Timing:
    """Single-query latency: ``fns[name](i)`` answers query ``i`` alone; every query is timed on
    every side back to back (order alternating), ``reps`` times over the set."""
    names = list(fns)
    for i in range(nq):
        for f in fns.values():
            f(i)  # warm-up
    per_query = {name: np.empty((reps, nq)) for name in names}
    for r in range(reps):
        for i in range(nq):
            for name in names if (r + i) % 2 == 0 else names[::-1]:
                t0 = CLOCK()
                fns[name](i)
                per_query[name][r, i] = CLOCK() - t0
    return Timing({name: t.sum(axis=1) for name, t in per_query.items()}, per_query, nq)


def show(row: dict) -> None:
    """One result line: the ratio with its spread over repetitions (and p50 / p99 for single
    queries), then the whole row as JSON."""
    extra = ""
    if "p50_ratio" in row:
        extra = f", p50 {row['p50_ratio']:.2f} p99 {row['p99_ratio']:.2f}"
    print(
        f"{row['backend']} {row.get('dataset', '')} alpha={row['alpha']:g} nq={row['nq']}: "
        f"ratio {row['latency_ratio']:.3f} [{row['ratio_min']:.3f}-{row['ratio_max']:.3f}]{extra}, "
        f"recall {row['recall_at_10']:.4f}",
        flush=True,
    )
    print(json.dumps(row), flush=True)


# -- flat ------------------------------------------------------------------------------------


def blas_search(index: faiss.Index, qu: np.ndarray):
    """Plain FAISS flat search forced onto its BLAS path (threshold 20, FAISS's classic default)."""
    old = faiss.cvar.distance_compute_blas_threshold
    faiss.cvar.distance_compute_blas_threshold = 20
    try:
        return index.search(qu, K)
    finally:
        faiss.cvar.distance_compute_blas_threshold = old


def bench_flat(x: np.ndarray, q: np.ndarray, alphas, nqs, reps: int, rows: list, label: str) -> None:
    xu, norms = unit(x), np.linalg.norm(x, axis=1)
    plain = faiss.IndexFlatIP(x.shape[1])
    plain.add(xu)
    ni = NormIndex(x.shape[1], factory="Flat")
    ni.add(x)
    for nq in nqs:
        qs = q[: nq if nq > 1 else SINGLE_QUERIES]
        qu = unit(qs)
        for a in alphas:
            got = ni.search(qs, K, alpha=a)[1]
            r = recall(got, exact_top(xu, norms, qu, a))
            if nq == 1:
                t = timed_single(
                    {
                        "plain": lambda i, qu=qu: plain.search(qu[i : i + 1], K),
                        "nr": lambda i, a=a, qs=qs: ni.search(qs[i : i + 1], K, alpha=a),
                    },
                    qs.shape[0],
                    reps,
                )
                base = "plain"
            else:
                t = timed(
                    {
                        "plain": lambda qu=qu: plain.search(qu, K),
                        "nr": lambda a=a, qs=qs: ni.search(qs, K, alpha=a),
                        "plain_blas": lambda qu=qu: blas_search(plain, qu),
                    },
                    reps,
                    qs.shape[0],
                )
                # The baseline is the faster of FAISS's two flat paths (its default BLAS
                # threshold is 128000 queries in this build, so below that it scans row by row).
                base = min(("plain", "plain_blas"), key=t.median)
            rows.append(
                dict(
                    backend="faiss-flat",
                    alpha=a,
                    nq=nq,
                    recall_at_10=r,
                    dataset=label,
                    n=x.shape[0],
                    baseline=base,
                    **t.ratio("nr", base),
                    t_plain_default_ms=1e3 * t.median("plain"),
                    t_plain_blas_ms=1e3 * t.median("plain_blas") if "plain_blas" in t.totals else None,
                )
            )
            show(rows[-1])


# -- ANN -------------------------------------------------------------------------------------


def set_params(index: faiss.Index, kind: str, value: int) -> None:
    inner = (
        faiss.downcast_index(index.index)
        if isinstance(index, faiss.IndexIDMap | faiss.IndexIDMap2)
        else index
    )
    if kind == "ivf":
        faiss.extract_index_ivf(inner).nprobe = value
    else:
        faiss.downcast_index(inner).hnsw.efSearch = value


def build(x_dirs: np.ndarray, factory: str, kind: str, value: int, train: np.ndarray | None = None):
    idx = faiss.index_factory(x_dirs.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    if not idx.is_trained:
        idx.train(x_dirs if train is None else train)
    idx.add(x_dirs)
    set_params(idx, kind, value)
    return idx


def operating_point(
    index: faiss.Index, kind: str, xu: np.ndarray, qu: np.ndarray, ladder
) -> tuple[int, float]:
    """The narrowest nprobe / efSearch on ``ladder`` at which plain cosine search on ``index``
    has recall@10 >= 0.995 against exact cosine (set on ``index``, with that recall): no
    re-ranking of an index's output beats the index's own recall, so the norm-weighted goal
    (0.995) needs an index with some margin."""
    ref = exact_top(xu, np.ones(xu.shape[0]), qu, 0.0)
    for value in ladder:
        set_params(index, kind, value)
        rec = recall(index.search(qu, K)[1], ref)
        if rec >= 0.995:
            break
    return value, rec


def bench_ann(x, q, kind, alphas, nqs, reps, rows, label, *, evaluate_alternatives: bool) -> None:
    n, d = x.shape
    xu, norms = unit(x), np.linalg.norm(x, axis=1)
    # IVF trains on a sample (50 per list), as one would at scale.
    sample = np.random.default_rng(0).choice(n, min(n, 50 * int(4 * np.sqrt(n))), replace=False)
    if kind == "ivf":
        nlist = int(4 * np.sqrt(n))
        factory, ladder = f"IVF{nlist},Flat", [max(8, nlist * f // 8) for f in (1, 2, 4, 6)]

        def factory_for(m):
            return f"IVF{max(4, int(4 * np.sqrt(m)))},Flat"
    else:
        factory, ladder = "HNSW32", [64, 128, 256, 512]

        def factory_for(m):
            return "HNSW32"

    backend = f"faiss-{kind}"
    t0 = time.perf_counter()
    ni = NormIndex(d, factory=factory)
    if kind == "ivf":
        ni.train(x[sample])
    ni.add(x)
    t_build_nr = time.perf_counter() - t0
    # The baseline is plain cosine search on the very FAISS index NormIndex searches (it holds
    # the unit vectors, ids 0..n-1): two separately built HNSW graphs or IVF quantizers differ
    # by up to ~20% in search time at the same efSearch / nprobe, which a ratio would report.
    plain = ni.faiss_index
    value, plain_rec = operating_point(plain, kind, xu, unit(q[:100]), ladder)
    print(f"{label} {kind}: {factory} at {value} (plain cosine recall {plain_rec:.3f})", flush=True)
    variants = {backend: lambda z, a: ni.search(z, K, alpha=a)[1]}
    build_s = {backend: t_build_nr}
    if evaluate_alternatives:
        # The same index, re-scored by over-fetching (ids 0..n-1: an IVF needs the mapping).
        over = NormIndex.from_faiss(plain, norms=dict(enumerate(norms.tolist())))
        over.ann = "overfetch"
        variants[f"{backend}/overfetch"] = lambda z, a: over.search(z, K, alpha=a)[1]
        lk = IdLookup(np.arange(n))
        tails = {}

        def depth_growing(z, a):
            w = (norms.astype(np.float64) ** a).astype(np.float32)
            plan = plan_search(SearchOptions(K, ANY_WEIGHTED_ALPHA, 10, breadth=ann_params(plain)), n)
            t = plan.band
            if (t, a > 0) not in tails:
                pos = np.argpartition(-w, t - 1)[:t]
                tails[(t, a > 0)] = (pos, xu[pos])
            return depth_growing_search(
                plain, unit(z), K, w, lk, start_depth=plan.depth, max_depth=n,
                tail=tails[(t, a > 0)],
            )[1]  # fmt: skip

        variants[f"{backend}/depth-growing"] = depth_growing
        t0 = time.perf_counter()
        banded = Banded(x, lambda u, f: build(u, f, kind, value), factory_for)
        build_s[f"{backend}/banded"] = time.perf_counter() - t0
        variants[f"{backend}/banded"] = lambda z, a: banded.search(unit(z), a, K)
        # Baked: store d_hat * ||d||**a0 and apply the residual ||d||**(a - a0) at query time.
        a0 = -0.25
        t0 = time.perf_counter()
        baked = build(
            (xu * (norms[:, None] ** a0)).astype(np.float32), factory, kind, value, train=xu[sample]
        )
        build_s[f"{backend}/baked"] = time.perf_counter() - t0

        def baked_search(z, a):
            res = (norms.astype(np.float64) ** (a - a0)).astype(np.float32)
            return depth_growing_search(baked, unit(z), K, res, lk, start_depth=10 * K, max_depth=n)[1]

        variants[f"{backend}/baked"] = baked_search
    for nq in nqs:
        qs = q[: nq if nq > 1 else SINGLE_QUERIES]
        qu = unit(qs)
        plain_rec = recall(plain.search(qu, K)[1], exact_top(xu, norms, qu, 0.0))
        for a in alphas:
            ref = exact_top(xu, norms, qu, a)
            recs = {name: recall(f(qs, a), ref) for name, f in variants.items()}
            if nq == 1:
                fns = {"plain": lambda i, qu=qu: plain.search(qu[i : i + 1], K)}
                for name, f in variants.items():
                    fns[name] = lambda i, f=f, a=a, qs=qs: f(qs[i : i + 1], a)
                t = timed_single(fns, qs.shape[0], reps)
            else:
                fns = {"plain": lambda qu=qu: plain.search(qu, K)}
                for name, f in variants.items():
                    fns[name] = lambda f=f, a=a, qs=qs: f(qs, a)
                t = timed(fns, reps, qs.shape[0])
            for name in variants:
                rows.append(
                    dict(
                        backend=name,
                        alpha=a,
                        nq=nq,
                        recall_at_10=recs[name],
                        dataset=label,
                        n=n,
                        factory=factory,
                        params={"nprobe" if kind == "ivf" else "efSearch": value},
                        plain_cosine_recall=plain_rec,
                        **t.ratio(name, "plain"),
                        build_s=build_s.get(name),
                        index_build_s=t_build_nr,
                    )
                )
                show(rows[-1])


# -- Qdrant ----------------------------------------------------------------------------------


def bench_qdrant(x, q, alphas, reps, rows, label) -> None:
    try:
        from qdrant_client import QdrantClient
    except ImportError:
        print("qdrant-client not installed: skipping qdrant-local rows", flush=True)
        return
    from normrank.backends.qdrant import QdrantNormIndex

    xu, norms = unit(x), np.linalg.norm(x, axis=1)
    client = QdrantClient(":memory:")
    qi = QdrantNormIndex(dim=x.shape[1], client=client, collection="bench")
    qi.add(x)
    qu = unit(q)
    for a in alphas:
        ref = exact_top(xu, norms, qu, a)
        got = qi.search(q, K, alpha=a)[1]
        t = timed(
            {
                "plain": lambda: [client.query_points("bench", query=v.tolist(), limit=K) for v in qu],
                "nr": lambda a=a: qi.search(q, K, alpha=a),
            },
            reps,
        )
        rows.append(
            dict(
                backend="qdrant-local",
                measures="qdrant-client local mode (formula evaluated in Python, not Qdrant's engine)",
                alpha=a,
                nq=q.shape[0],
                recall_at_10=recall(got, ref),
                dataset=label,
                n=x.shape[0],
                **t.ratio("nr", "plain"),
            )
        )
        show(rows[-1])


# -- report ----------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    return (
        f"{cpu_model()}, {os.cpu_count()} cores visible, faiss {faiss.__version__} "
        f"(omp threads {faiss.omp_get_max_threads()}), numpy {np.__version__}, "
        f"Python {platform.python_version()}"
    )


def blas_libraries() -> list[dict]:
    """The BLAS and OpenMP libraries loaded in this process, with version, kernel (OpenBLAS's
    ``architecture``) and thread count (threadpoolctl), and whose product each side runs:
    plain FAISS calls its own BLAS; ``normrank_product`` says whether normrank's flat kernel
    and scan call the same one (``"faiss"``) or numpy's."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return [{"error": "threadpoolctl not installed: pip install threadpoolctl"}]
    faiss_dir = Path(faiss.__file__).resolve().parent.parent
    out = []
    for info in threadpool_info():
        path = Path(info.get("filepath", ""))
        out.append(
            {
                "library": path.name,
                "api": info.get("internal_api"),
                "version": info.get("version"),
                "kernel": info.get("architecture"),
                "threads": info.get("num_threads"),
                "loaded_by": next(
                    (part for part in path.parts if part.endswith(".libs")), str(path.parent.relative_to(faiss_dir))
                    if path.is_relative_to(faiss_dir) else str(path.parent)
                ),
            }
        )  # fmt: skip
    return out


def _simd_words(info: dict | None) -> str:
    if not info:
        return "not recorded"
    return (
        f"FAISS {info.get('faiss_simd_level') or info.get('faiss_compile_options')}, "
        f"numba {info.get('numba_cpu')}"
    )


def markdown(rows: list[dict], meta: dict) -> str:
    blas = "; ".join(
        f"{b.get('library')} {b.get('version') or ''} {b.get('kernel') or ''} ({b.get('loaded_by')})".strip()
        for b in meta["blas"]
    )
    out = [
        "# normrank speed: ratios to plain FAISS / Qdrant on the same machine",
        "",
        f"Machine: {meta['machine']}; SIMD target: {meta.get('simd', 'native')} "
        f"({_simd_words(meta.get('simd_libraries'))}); "
        f"threads per side: {meta['threads']}; clock: {meta['clock']}; load average at start / "
        f"end {meta['load_start']} / {meta['load_end']}. BLAS/OpenMP loaded: {blas}; normrank's "
        f"product runs on {meta['normrank_product']}'s BLAS, its selection on "
        f"{meta.get('normrank_selection', 'faiss')} (normrank.search.kernels). "
        f"Real corpora: {', '.join(meta['real_corpora'])}. "
        f"Run: `{meta['command']}` ({meta['minutes']:.1f} min; repetitions {meta['reps']}). "
        "Latency ratio = normrank time / plain cosine search time with the same index and parameters "
        "(ANN: the very FAISS index NormIndex searches), median of interleaved repetitions, with the "
        "lowest and highest per-repetition ratio in brackets; the machine may have been shared, so "
        "read ratios, not absolute times. "
        "Recall@10 is against the exact norm-weighted top-10 (numpy brute force); a result counts "
        "when its exact score reaches the exact 10th score (ties: the corpora hold duplicates). "
        f"nq = 1 rows time {SINGLE_QUERIES} queries one call at a time (ms are their total; p50 / p99 "
        "are the ratios of per-query latency percentiles).",
        "",
        "| backend | dataset | n | alpha | nq | recall@10 | latency ratio [min-max] | p50 / p99 ratio "
        "| plain ms | normrank ms | + us / query |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        tail = f"{r['p50_ratio']:.2f} / {r['p99_ratio']:.2f}" if "p50_ratio" in r else ""
        added = f"{r['overhead_us']:.1f}" if "overhead_us" in r else ""
        out.append(
            f"| {r['backend']} | {r.get('dataset', '')} | {r.get('n', '')} | {r['alpha']:g} | {r['nq']} | "
            f"{r['recall_at_10']:.4f} | {r['latency_ratio']:.2f} [{r['ratio_min']:.2f}-{r['ratio_max']:.2f}] | "
            f"{tail} | {r.get('t_plain_ms', 0):.2f} | {r.get('t_ms', 0):.2f} | {added} |"
        )
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--quick", action="store_true", help="smaller sets and fewer repetitions (< 15 min, 2 cores)"
    )
    ap.add_argument("--json", type=Path, help="write {'rows': [...], 'meta': {...}} here")
    ap.add_argument(
        "--md",
        type=Path,
        default=None,
        help="markdown table output (default: results/speed_methods.md, for a run of every section with the "
        "alternatives only: a partial run would replace the committed table with fewer rows)",
    )
    ap.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP threads for both sides (default 1)")
    ap.add_argument(
        "--cached-only", action="store_true", help="use only corpora already encoded (skip the rest)"
    )
    ap.add_argument(
        "--only", default=",".join(SECTIONS), help=f"comma list of sections to run, of: {', '.join(SECTIONS)}"
    )
    ap.add_argument(
        "--synthetic-n",
        type=int,
        default=None,
        help="size of the generated set (default 200k quick, 1M full)",
    )
    ap.add_argument(
        "--simd",
        choices=tuple(simd_target.TARGETS),
        default="native",
        help="SIMD target of both sides: native, or avx2 (FAISS AVX2, numba haswell, OpenBLAS Haswell)",
    )
    ap.add_argument(
        "--no-alternatives",
        action="store_true",
        help="skip the ANN methods evaluated against the chosen one (faster; issue 30's runs)",
    )
    ap.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall: latency (default); cpu: this thread's CPU time, for a shared machine (--threads 1 only)",
    )
    args = ap.parse_args()
    if args.clock == "cpu":
        if THREADS != 1:
            ap.error("--clock cpu counts the calling thread only: use it with --threads 1")
        global CLOCK
        CLOCK = time.thread_time
    only = set(args.only.split(","))
    if only - set(SECTIONS):
        ap.error(f"unknown --only section(s) {sorted(only - set(SECTIONS))}; known: {', '.join(SECTIONS)}")
    simd_info = simd_target.describe()
    simd_target.check(SIMD, simd_info, blas_libraries())
    print(f"SIMD target {SIMD}: {simd_info}", flush=True)
    t_start = time.time()
    load_start = os.getloadavg()
    quick = args.quick
    reps = 5 if quick else 9
    # Repetitions per kind of row (recorded in the JSON meta).
    rep_counts = {"flat": 3 * reps, "ann_real": reps, "ann_generated": max(3, reps // 2), "qdrant": 3}
    alphas = [-1.5, -0.75, 0.0, 0.5, 1.0]
    docs, queries, used = real_embeddings(encode_missing=not args.cached_only)
    print(f"real corpora: {used}: {docs.shape[0]} docs, {queries.shape[0]} queries", flush=True)
    rng = np.random.default_rng(0)
    queries = queries[rng.permutation(queries.shape[0])]
    syn_n = args.synthetic_n or (100_000 if quick else 1_000_000)
    rows: list[dict] = []
    if "flat" in only:
        x100k, q1k = synthetic_like(docs, queries, 100_000, 1000, seed=1)
        bench_flat(
            x100k,
            q1k,
            [-1.5, -0.75, 0.5, 1.0] if not quick else [-1.0, 0.5],
            [1, 100, 1000],
            rep_counts["flat"],  # cheap, and the goal (<= 1.05) is tighter than one run's noise
            rows,
            "minilm-like-100k",
        )
        del x100k
    real_label = f"minilm-beir-{docs.shape[0] // 1000}k"
    # A small real index shows fixed per-call costs that larger ones hide (issue 30): SciFact +
    # CACM, 8.4k documents, the real set of a machine that had encoded only those two.
    small = None
    if set(SMALL_REAL) <= set(used) and len(used) > len(SMALL_REAL):
        small = real_embeddings(SMALL_REAL, encode_missing=False)
        small = (small[0], small[1][rng.permutation(small[1].shape[0])])
    alternatives = not args.no_alternatives
    syn = None
    for kind in ("ivf", "hnsw"):
        if kind not in only:
            continue
        if small is not None:
            bench_ann(
                small[0], small[1], kind, alphas, [1, 100], rep_counts["ann_real"], rows,
                f"minilm-beir-{small[0].shape[0] // 1000}k", evaluate_alternatives=False,
            )  # fmt: skip
        bench_ann(
            docs, queries, kind, alphas, [1, 100], rep_counts["ann_real"], rows, real_label,
            evaluate_alternatives=alternatives,
        )  # fmt: skip
        if syn is None:
            syn = synthetic_like(docs, queries, syn_n, 1000, seed=2)
        # HNSW builds slowly on 2 cores: --quick uses the first 30k of the generated set for it.
        m = 20_000 if (kind == "hnsw" and quick) else syn_n
        bench_ann(
            syn[0][:m],
            syn[1],
            kind,
            [-1.5, -0.75, 0.5, 1.0],
            [1, 100],
            rep_counts["ann_generated"],
            rows,
            f"minilm-like-{m // 1000}k",
            evaluate_alternatives=alternatives and m <= 20_000,
        )
    if "qdrant-edge" in only:
        from qdrant_edge_bench import bench_edge

        edge_reps = 3 * reps  # cheap per repetition; the spread is reported
        bench_edge(docs, queries, alphas, edge_reps, rows, real_label, single_queries=SINGLE_QUERIES)
        edge_n = args.synthetic_n or 100_000
        xe, qe_ = (
            syn
            if syn is not None and syn[0].shape[0] == edge_n
            else synthetic_like(docs, queries, edge_n, 1000, seed=2)
        )
        bench_edge(
            xe, qe_, alphas, edge_reps, rows, f"minilm-like-{edge_n // 1000}k", single_queries=SINGLE_QUERIES
        )
    if "pgvector" in only:
        from pgvector_bench import bench_pgvector

        bench_pgvector(docs, queries, alphas, reps, rows, real_label, single_queries=SINGLE_QUERIES)
        pg_n = args.synthetic_n or 100_000
        xp, qp = (
            syn
            if syn is not None and syn[0].shape[0] == pg_n
            else synthetic_like(docs, queries, pg_n, 1000, seed=2)
        )
        bench_pgvector(
            xp, qp, alphas, reps, rows, f"minilm-like-{pg_n // 1000}k", single_queries=SINGLE_QUERIES
        )
    if "qdrant" in only:
        m = 3000 if quick else 10000
        bench_qdrant(
            docs[:m],
            queries[:20],
            [-1.5, -0.75, 0.5, 1.0],
            rep_counts["qdrant"],
            rows,
            f"minilm-beir-{m // 1000}k",
        )
    meta = {
        "simd": SIMD,
        "simd_libraries": simd_info,
        "machine": machine(),
        "cpu_model": cpu_model(),
        "cores_visible": os.cpu_count(),
        "blas": blas_libraries(),
        "normrank_product": PRODUCT_BLAS,
        "normrank_selection": "faiss",  # numpy multiply + FAISS's heaps (no compiled kernel since issue 36)
        "real_corpora": used,
        "threads": THREADS,
        "clock": args.clock,
        "reps": rep_counts,
        "single_queries": SINGLE_QUERIES,
        "load_start": [round(v, 2) for v in load_start],
        "load_end": [round(v, 2) for v in os.getloadavg()],
        "command": "python benchmarks/speed.py " + " ".join(sys.argv[1:]),
        "minutes": (time.time() - t_start) / 60,
        "k": K,
    }
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "meta": meta}, indent=1))
    if args.md is None and (args.no_alternatives or set(args.only.split(",")) != set(SECTIONS)):
        print(f"done in {meta['minutes']:.1f} min (a partial run: no markdown table unless --md is given)")
        return
    args.md = args.md or ROOT / "results" / "speed_methods.md"
    args.md.parent.mkdir(parents=True, exist_ok=True)
    # Hand-written notes below the marker survive a re-run; the table above it is regenerated.
    notes = ""
    if args.md.exists() and NOTES_MARKER in args.md.read_text():
        notes = args.md.read_text().split(NOTES_MARKER, 1)[1]
    args.md.write_text(markdown(rows, meta) + "\n" + NOTES_MARKER + notes)
    print(f"done in {meta['minutes']:.1f} min; table in {args.md}")


if __name__ == "__main__":
    main()
