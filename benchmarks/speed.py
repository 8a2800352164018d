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

Recall is against the exact norm-weighted top-10 (numpy; tied scores count alike, see
``recall``). Latency ratios are medians over interleaved repetitions (the machine may be
shared). Usage:

    python benchmarks/speed.py --quick --json speed.json   # < 15 min on 2 cores
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

import argparse  # noqa: E402 - after the thread settings above
import json  # noqa: E402 - after the thread settings above
import platform  # noqa: E402 - after the thread settings above
import time  # noqa: E402 - after the thread settings above
from dataclasses import dataclass  # noqa: E402 - after the thread settings above
from pathlib import Path  # noqa: E402 - after the thread settings above

import faiss  # noqa: E402 - after the thread settings above
import numpy as np  # noqa: E402 - after the thread settings above

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ann_alternatives import Banded, depth_growing_search  # noqa: E402
from bench_data import real_embeddings, synthetic_like  # noqa: E402

from normrank import NormIndex  # noqa: E402
from normrank.ann import IdLookup, ann_params, default_band_start, default_start  # noqa: E402

K = 10
# nq = 1 rows time this many queries one call at a time; fewer would leave recall at the mercy of
# a few misses (50 queries: one miss is 0.002).
SINGLE_QUERIES = 100
NOTES_MARKER = "<!-- notes: kept across runs -->"
ROOT = Path(__file__).resolve().parent


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@dataclass
class ExactTop:
    """The exact 10th score of ``cos * norm**alpha`` per query, with what scores any result."""

    kth: np.ndarray
    x_unit: np.ndarray
    norms: np.ndarray
    qu: np.ndarray
    alpha: float


def exact_top(x_unit: np.ndarray, norms: np.ndarray, qu: np.ndarray, alpha: float) -> ExactTop:
    """Reference: the exact top-10 of cos * norm**alpha by numpy, in blocks (its 10th score)."""
    w = norms.astype(np.float64) ** alpha
    kth = np.empty(qu.shape[0])
    for i in range(0, qu.shape[0], 256):
        s = (qu[i : i + 256] @ x_unit.T) * w
        kth[i : i + 256] = -np.partition(-s, K - 1, axis=1)[:, K - 1]
    return ExactTop(kth, x_unit, norms, qu, alpha)


def recall(got: np.ndarray, ref: ExactTop) -> float:
    """Recall@10 against the exact top-10, ties counted: a result is right when its exact score
    reaches the exact 10th score (less 1e-6 relative, float32 rounding). The corpora hold
    duplicated documents, and which of two equal scores an exact reference keeps is arbitrary;
    counting by id would score the reference's tie order, not the search."""
    hits = 0
    for i, row in enumerate(np.asarray(got)):
        row = np.unique(row[row >= 0])  # a result returned twice counts once
        s = (ref.x_unit[row].astype(np.float64) @ ref.qu[i].astype(np.float64)) * (
            ref.norms[row].astype(np.float64) ** ref.alpha
        )
        hits += min(K, int(np.sum(s >= ref.kth[i] - 1e-6 * abs(ref.kth[i]))))
    return hits / (K * len(got))


def timed(fns: dict[str, callable], reps: int) -> dict[str, float]:
    """Median seconds per function; repetitions interleaved so load spikes hit all alike."""
    for f in fns.values():
        f()  # warm-up (caches, lazily built state)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
    return {name: float(np.median(t)) for name, t in times.items()}


def per_query(fn, q: np.ndarray):
    """nq = 1 latency: the same queries, one call each."""
    return lambda: [fn(q[i : i + 1]) for i in range(q.shape[0])]


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
                fns = {
                    "plain": per_query(lambda z: plain.search(z, K), qu),
                    "nr": per_query(lambda z, a=a: ni.search(z, K, alpha=a), qs),
                }
            else:
                fns = {
                    "plain": lambda qu=qu: plain.search(qu, K),
                    "nr": lambda a=a, qs=qs: ni.search(qs, K, alpha=a),
                    "plain_blas": lambda qu=qu: blas_search(plain, qu),
                }
            t = timed(fns, reps)
            # The baseline is the faster of FAISS's two flat paths (its default BLAS threshold
            # is 128000 queries in this build, so below that it scans row by row).
            base = min(t["plain"], t.get("plain_blas", np.inf))
            rows.append(
                dict(
                    backend="faiss-flat",
                    alpha=a,
                    nq=nq,
                    recall_at_10=r,
                    latency_ratio=t["nr"] / base,
                    dataset=label,
                    n=x.shape[0],
                    t_plain_ms=1e3 * base,
                    t_ms=1e3 * t["nr"],
                    t_plain_default_ms=1e3 * t["plain"],
                    t_plain_blas_ms=1e3 * t.get("plain_blas", np.nan),
                )
            )
            print(json.dumps(rows[-1]), flush=True)


# -- ANN -------------------------------------------------------------------------------------


def set_params(index: faiss.Index, kind: str, value: int) -> None:
    inner = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexIDMap2) else index
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


def operating_point(xu, kind, factory, train, qu, ladder):
    """The narrowest nprobe / efSearch on ``ladder`` at which plain cosine search has recall@10
    >= 0.995 against exact cosine: no re-ranking of an index's output beats the index's own
    recall, so the norm-weighted goal (0.99) needs an index with some margin above it."""
    idx = build(xu, factory, kind, ladder[0], train=train)
    ref = exact_top(xu, np.ones(xu.shape[0]), qu, 0.0)
    for value in ladder:
        set_params(idx, kind, value)
        rec = recall(idx.search(qu, K)[1], ref)
        if rec >= 0.995:
            break
    return idx, value, rec


def bench_ann(x, q, kind, alphas, nqs, reps, rows, label, *, evaluate_alternatives: bool) -> None:
    n, d = x.shape
    xu, norms = unit(x), np.linalg.norm(x, axis=1)
    # IVF trains on a sample (50 per list), as one would at scale; both sides get the same one.
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
    plain, value, plain_rec = operating_point(xu, kind, factory, xu[sample], unit(q[:100]), ladder)
    t_build_plain = time.perf_counter() - t0
    print(f"{label} {kind}: {factory} at {value} (plain cosine recall {plain_rec:.3f})", flush=True)
    t0 = time.perf_counter()
    ni = NormIndex(d, factory=factory)
    if kind == "ivf":
        ni.train(x[sample])
    ni.add(x)
    set_params(ni.faiss_index, kind, value)
    t_build_nr = time.perf_counter() - t0
    variants = {backend: lambda z, a: ni.search(z, K, alpha=a)[1]}
    build_s = {backend: t_build_nr}
    if evaluate_alternatives:
        over = NormIndex.__new__(NormIndex)
        over.__dict__.update(ni.__dict__)
        over.ann = "overfetch"
        over._aux = {}
        variants[f"{backend}/overfetch"] = lambda z, a: over.search(z, K, alpha=a)[1]
        lk = IdLookup(np.arange(n))
        tails = {}

        def depth_growing(z, a):
            w = (norms.astype(np.float64) ** a).astype(np.float32)
            t = default_band_start(n, ann_params(plain))
            if (t, a > 0) not in tails:
                pos = np.argpartition(-w, t - 1)[:t]
                tails[(t, a > 0)] = (pos, xu[pos])
            return depth_growing_search(
                plain, unit(z), K, w, lk, start_depth=default_start(K, 10, ann_params(plain)), max_depth=n,
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
            fns = {
                "plain": (
                    per_query(lambda z: plain.search(z, K), qu)
                    if nq == 1
                    else lambda qu=qu: plain.search(qu, K)
                )
            }
            for name, f in variants.items():
                fns[name] = (
                    per_query(lambda z, f=f, a=a: f(z, a), qs)
                    if nq == 1
                    else (lambda f=f, a=a, qs=qs: f(qs, a))
                )
            recs = {name: recall(f(qs, a), ref) for name, f in variants.items()}
            t = timed(fns, reps)
            for name in variants:
                rows.append(
                    dict(
                        backend=name,
                        alpha=a,
                        nq=nq,
                        recall_at_10=recs[name],
                        latency_ratio=t[name] / t["plain"],
                        dataset=label,
                        n=n,
                        factory=factory,
                        params={"nprobe" if kind == "ivf" else "efSearch": value},
                        plain_cosine_recall=plain_rec,
                        t_plain_ms=1e3 * t["plain"],
                        t_ms=1e3 * t[name],
                        build_s=build_s.get(name),
                        plain_build_s=t_build_plain,
                    )
                )
                print(json.dumps(rows[-1]), flush=True)


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
                latency_ratio=t["nr"] / t["plain"],
                dataset=label,
                n=x.shape[0],
                t_plain_ms=1e3 * t["plain"],
                t_ms=1e3 * t["nr"],
            )
        )
        print(json.dumps(rows[-1]), flush=True)


# -- report ----------------------------------------------------------------------------------


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores visible, faiss {faiss.__version__} "
        f"(omp threads {faiss.omp_get_max_threads()}), numpy {np.__version__}, "
        f"Python {platform.python_version()}"
    )


def markdown(rows: list[dict], meta: dict) -> str:
    out = [
        "# normrank speed: ratios to plain FAISS / Qdrant on the same machine",
        "",
        f"Machine: {meta['machine']}; threads per side: {meta['threads']}. "
        f"Real corpora: {', '.join(meta['real_corpora'])}. "
        f"Run: `{meta['command']}` ({meta['minutes']:.1f} min). "
        "Latency ratio = normrank time / plain cosine search time with the same index and parameters "
        "(median of interleaved repetitions; the machine was shared, so read ratios, not absolute times). "
        "Recall@10 is against the exact norm-weighted top-10 (numpy brute force); a result counts "
        "when its exact score reaches the exact 10th score (ties: the corpora hold duplicates). "
        f"nq = 1 rows time {SINGLE_QUERIES} queries one call at a time (ms are their total).",
        "",
        "| backend | dataset | n | alpha | nq | recall@10 | latency ratio | plain ms | normrank ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['backend']} | {r.get('dataset', '')} | {r.get('n', '')} | {r['alpha']:g} | {r['nq']} | "
            f"{r['recall_at_10']:.4f} | {r['latency_ratio']:.2f} | {r.get('t_plain_ms', 0):.2f} | "
            f"{r.get('t_ms', 0):.2f} |"
        )
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--quick", action="store_true", help="smaller sets and fewer repetitions (< 15 min, 2 cores)"
    )
    ap.add_argument("--json", type=Path, help="write {'rows': [...], 'meta': {...}} here")
    ap.add_argument("--md", type=Path, default=ROOT / "results" / "speed.md", help="markdown table output")
    ap.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP threads for both sides (default 1)")
    ap.add_argument(
        "--cached-only", action="store_true", help="use only corpora already encoded (skip the rest)"
    )
    ap.add_argument("--only", default="flat,ivf,hnsw,qdrant", help="comma list of sections to run")
    ap.add_argument(
        "--synthetic-n",
        type=int,
        default=None,
        help="size of the generated set (default 200k quick, 1M full)",
    )
    args = ap.parse_args()
    only = set(args.only.split(","))
    t_start = time.time()
    quick = args.quick
    reps = 5 if quick else 9
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
            3 * reps,  # cheap, and the goal (<= 1.10) is tighter than one run's noise
            rows,
            "minilm-like-100k",
        )
        del x100k
    real_label = f"minilm-beir-{docs.shape[0] // 1000}k"
    syn = None
    for kind in ("ivf", "hnsw"):
        if kind not in only:
            continue
        bench_ann(docs, queries, kind, alphas, [1, 100], reps, rows, real_label, evaluate_alternatives=True)
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
            max(3, reps // 2),
            rows,
            f"minilm-like-{m // 1000}k",
            evaluate_alternatives=m <= 20_000,
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
    if "qdrant" in only:
        m = 3000 if quick else 10000
        bench_qdrant(docs[:m], queries[:20], [-1.5, -0.75, 0.5, 1.0], 3, rows, f"minilm-beir-{m // 1000}k")
    meta = {
        "machine": machine(),
        "real_corpora": used,
        "threads": THREADS,
        "command": "python benchmarks/speed.py " + " ".join(sys.argv[1:]),
        "minutes": (time.time() - t_start) / 60,
        "k": K,
    }
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "meta": meta}, indent=1))
    args.md.parent.mkdir(parents=True, exist_ok=True)
    # Hand-written notes below the marker survive a re-run; the table above it is regenerated.
    notes = ""
    if args.md.exists() and NOTES_MARKER in args.md.read_text():
        notes = args.md.read_text().split(NOTES_MARKER, 1)[1]
    args.md.write_text(markdown(rows, meta) + "\n" + NOTES_MARKER + notes)
    print(f"done in {meta['minutes']:.1f} min; table in {args.md}")


if __name__ == "__main__":
    main()
