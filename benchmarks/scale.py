"""Scale benchmark, 1M x 384 (issue 36, item 7): NormIndex beside plain FAISS (not a test).

Kinds: IVF4096,Flat and IVF4096,PQ48 at nprobe 32, HNSW32 (M 32, efConstruction 40, FAISS's
default for the factory string) at efSearch 64. 4096 lists is FAISS's guideline for 1M
(nlist ~ 4-16 sqrt(n)) at its cheapest end; nprobe 32 probes 0.8% of them (~8k documents a query
at 1M), a middle pick of the 16-128 a FAISS user tries there, and memory.py's value. Plain cosine
recall at that breadth is reported beside normrank's, since no re-ranking beats its index.
HNSW32 at 1M: a 100k build took 27 s wall (22.5 s CPU; nice 19, two threads, load ~3.5), so
~12x that (n log n) was ~5.5 min, inside the 30-minute bound; the 1M build then took 18 min wall,
724 s CPU (nice 19, load ~5: memory-bound, 2.7x the extrapolation), still inside it. IVF4096,Flat
took 6.3 min (230 s CPU), IVF4096,PQ48 5.5 min (252 s CPU); ``--hnsw-n`` sets another n for HNSW.

Data: memory.py's ``_vectors`` (clustered float32 with log-normal norms, made in blocks):
documents seed ``--seed``, the IVF training sample (50 a list, at most n) seed 1, 100 queries
seed 7. Steps:

1. **Build** (``--build-only``; a measuring run never builds): NormIndex(384, factory=kind) fed
   the raw vectors, saved by its own ``save`` in ``$NORMRANK_CACHE/scale/KIND-nN-d384-seedS/``
   (default ~/.cache/normrank), the plain FAISS index it wraps (its factory index with the
   IDMap2 taken off / the IVF direct map dropped) by ``faiss.write_index`` beside it, and
   ``build.json`` (train / add / save seconds, wall and CPU) last. FAISS's IVF-PQ factory
   trains polysemous codes: ~100 s of CPU whatever n.
2. **Memory**, each side in a fresh process: the cached index loaded and searched (each alpha,
   one query and a batch of 20), dropped, loaded and searched again; bytes per document = RSS
   difference / n (``gc`` + ``malloc_trim``, memory.py's), the search cache's bytes
   (``return_stats=True``) shown apart. Both sides load from disk: no slack of growing arrays.
3. **Latency**, one process: plain cosine search on the very FAISS index the NormIndex searches
   against NormIndex at each alpha, speed.py's ``timed_single`` (100 queries one call at a
   time, p50 / p99) and ``timed`` (batches of 100), interleaved; recall@10 against the exact
   norm-weighted top-10, numpy over the raw vectors regenerated in blocks (ties as speed.py).

At most two copies of the vectors live at once (NormIndex.save briefly holds three: the index,
FAISS's serialised array and its bytes). Usage (build first; the timed run only loads):

    nice -n 19 python benchmarks/scale.py --build-only   # 1M, 2 threads: ~30 min (build.json)
    python benchmarks/scale.py                           # quiet window -> results/scale_1m.{json,md}
    python benchmarks/scale.py --clock cpu               # a busy one: each thread's CPU time
    nice -n 10 python benchmarks/scale.py --n 50000 --reps 2 --md /tmp/s.md --json /tmp/s.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
KINDS = ("IVF4096,Flat", "IVF4096,PQ48", "HNSW32")
ALPHAS = (-1.0, -0.5, 0.0, 0.5, 1.0)
D, K, NQ, BLOCK = 384, 10, 100, 50_000


def cache_dir(kind: str, n: int, d: int, seed: int) -> Path:
    base = Path(os.environ.get("NORMRANK_CACHE", "~/.cache/normrank")).expanduser()
    return base / "scale" / f"{kind.replace(',', '_')}-n{n}-d{d}-seed{seed}"


def knobs(kind: str, args) -> dict:
    """FAISS's breadth for the kind, as NormIndex.set_search_params takes it."""
    return {"nprobe": args.nprobe} if "IVF" in kind else {"ef_search": args.ef_search} if "HNSW" in kind else {}  # fmt: skip


def load_normindex(path: Path):
    """The NormIndex of a build: the cached plain FAISS index (``plain.faiss`` beside ``path``)
    wrapped by ``NormIndex.from_faiss(index, norms=<the saved norms>)``, so that it has the layout
    this tree gives a new index (an index saved by an older tree loads with the structures it was
    saved with: IndexIDMap2's rev_map, an IVF's hash-table direct map). Returns the index and how
    it was made."""
    import faiss
    import numpy as np

    from normrank import NormIndex

    m = json.loads((path / "manifest.json").read_text())
    data, options = (m, m) if m["format_version"] == 1 else (m["data"], m["options"])  # 1: one flat manifest
    gen = path / data["generation"]
    ids = np.load(gen / "ids.npy")
    if not np.array_equal(ids, np.arange(ids.size)):
        raise SystemExit(f"{path}: the build's ids are not 0 .. n - 1; rebuild with --build-only")
    plain = faiss.read_index(str(path.parent / "plain.faiss"))
    norms = np.load(gen / "norms.npy")
    # An IVF keeps no record of the order vectors were added: norms by id (ids 0 .. n - 1).
    index = NormIndex.from_faiss(plain, norms=dict(enumerate(norms.tolist())), alpha=options["alpha"])
    return index, "from_faiss(plain.faiss, norms=)"


def build(kind: str, n: int, args) -> dict:
    """Builds, saves and returns the build record (nothing is kept in memory afterwards)."""
    import faiss
    import numpy as np
    from memory import _hnsw, _ivf, _vectors

    from normrank import NormIndex

    out = cache_dir(kind, n, D, args.seed)
    out.mkdir(parents=True, exist_ok=True)
    faiss.omp_set_num_threads(args.build_threads)
    wall, cpu = time.perf_counter(), time.process_time()
    rec = {"kind": kind, "n": n, "d": D, "seed": args.seed, "threads": args.build_threads,
           "load_start": os.getloadavg()}  # fmt: skip
    ni = NormIndex(D, factory=kind)
    ivf, hnsw = _ivf(faiss, ni.faiss_index), _hnsw(faiss, ni.faiss_index)
    if hnsw is not None:
        hnsw.hnsw.efConstruction = 40
        rec["efConstruction"] = 40
    if not ni.is_trained:
        ntrain = min(n, 50 * ivf.nlist)
        ni.train(np.concatenate(list(_vectors(np, ntrain, D, seed=1, block=BLOCK))))
        rec.update(train_n=ntrain, train_s=time.perf_counter() - wall)
        gc.collect()
    t = time.perf_counter()
    for x in _vectors(np, n, D, seed=args.seed, block=BLOCK):
        ni.add(x)
    rec["add_s"] = time.perf_counter() - t
    t = time.perf_counter()
    ni.save(out / "normindex")
    # The plain factory index: what a FAISS user holds (no id map, no direct map).
    if ivf is not None:
        ivf.set_direct_map_type(faiss.DirectMap.NoMap)
        plain = ni.faiss_index
    else:
        plain = faiss.downcast_index(ni.faiss_index.index)
    faiss.write_index(plain, str(out / "plain.faiss.tmp"))
    os.replace(out / "plain.faiss.tmp", out / "plain.faiss")  # atomic, as build.json below
    rec["save_s"] = time.perf_counter() - t
    rec.update(wall_s=time.perf_counter() - wall, cpu_s=time.process_time() - cpu, load_end=os.getloadavg())
    (out / "build.tmp").write_text(json.dumps(rec, indent=1))
    os.replace(out / "build.tmp", out / "build.json")  # written last: the build is complete
    return rec


def memory_child(kind: str, side: str, n: int, args) -> dict:
    import faiss
    import numpy as np
    from memory import _hnsw, _ivf, _rss, _vectors

    path = cache_dir(kind, n, D, args.seed)
    r0, loaded = _rss(), {"how": "faiss.read_index"}
    q = next(_vectors(np, 20, D, seed=7))
    qu = q / np.linalg.norm(q, axis=1, keepdims=True)

    def load():
        if side == "faiss":
            index = faiss.read_index(str(path / "plain.faiss"))
            if _ivf(faiss, index) is not None:
                _ivf(faiss, index).nprobe = args.nprobe
            if _hnsw(faiss, index) is not None:
                _hnsw(faiss, index).hnsw.efSearch = args.ef_search
        else:
            index, loaded["how"] = load_normindex(path / "normindex")
            index.set_search_params(**knobs(kind, args))
        return index

    def search(index) -> int:
        cache = 0
        for a in ALPHAS:
            for i in (1, 20):
                if side == "faiss":
                    index.search(qu[:i], K)
                else:
                    cache = index.search(q[:i], K, alpha=a, return_stats=True)[2].cache_bytes
        return cache

    index = load()
    search(index)
    del index
    r1 = _rss()
    index = load()
    cache = search(index)
    r2 = _rss()
    disk = (path / "plain.faiss").stat().st_size if side == "faiss" else sum(
        f.stat().st_size for f in (path / "normindex").rglob("*") if f.is_file())  # fmt: skip
    return {"kind": kind, "side": side, "n": n, "fixed_mib": (r1 - r0) / 2**20, "bytes_per_doc": (r2 - r1) / n,
            "search_cache_bytes": cache, "disk_bytes_per_doc": disk / n, "loaded": loaded["how"]}  # fmt: skip


def memory(kind: str, n: int, args) -> dict:
    """Each side's memory_child in a fresh process, one thread (as memory.py)."""
    got, env = {}, {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    for side in ("faiss", "normrank"):
        flags = ["--n", n, "--seed", args.seed, "--nprobe", args.nprobe, "--ef-search", args.ef_search]
        res = subprocess.run([sys.executable, __file__, "--child", kind, side, *map(str, flags)],
                             capture_output=True, text=True, env=env)  # fmt: skip
        if res.returncode:
            raise SystemExit(f"{res.stderr[-2000:]}\nmemory of {kind} / {side} failed")
        got[side] = json.loads(res.stdout.strip().splitlines()[-1])
        print(json.dumps(got[side]), flush=True)
    return got


def exact_recalls(n: int, args, qu, got: dict) -> dict:
    """Recall@10 of each ``got[(alpha, name)]`` (ids, (nq, K)) against the exact top-10 of
    cos * norm**alpha over the raw vectors, regenerated block by block (never all in memory)."""
    import numpy as np
    from memory import _vectors

    q64 = qu.astype(np.float64)
    alphas = sorted({a for a, _ in got})
    top = {a: np.full((q64.shape[0], K), -np.inf) for a in alphas}
    score = {key: np.full(ids.shape, np.nan) for key, ids in got.items()}
    start = 0
    for x in _vectors(np, n, D, seed=args.seed, block=BLOCK):
        norms = np.linalg.norm(x.astype(np.float64), axis=1)
        cos = q64 @ (x / norms[:, None]).T
        for a in alphas:
            s = cos * norms**a
            both = np.hstack([top[a], -np.partition(-s, K - 1, axis=1)[:, :K]])
            top[a] = -np.partition(-both, K - 1, axis=1)[:, :K]
        for key, ids in got.items():
            r, c = np.nonzero((ids >= start) & (ids < start + x.shape[0]))
            pos = ids[r, c] - start
            score[key][r, c] = cos[r, pos] * norms[pos] ** key[0]
        start += x.shape[0]
    out = {}
    for (a, name), ids in got.items():
        kth, hits = top[a].min(axis=1), 0
        for i, row in enumerate(ids):  # ties count alike, a repeated id once (bench_exact.recall)
            _, first = np.unique(row, return_index=True)
            s = score[(a, name)][i, first[row[first] >= 0]]
            hits += min(K, int(np.sum(s >= kth[i] - 1e-6 * abs(kth[i]))))
        out[(a, name)] = hits / ids.size
    return out


def latency(speed, kind: str, n: int, args, rows: list) -> None:
    import numpy as np
    from memory import _vectors

    t = time.perf_counter()
    ni, how = load_normindex(cache_dir(kind, n, D, args.seed) / "normindex")
    ni.set_search_params(**knobs(kind, args))
    load_s = time.perf_counter() - t
    plain = ni.faiss_index  # the very FAISS index NormIndex searches (unit vectors, ids 0..n-1)
    q = next(_vectors(np, NQ, D, seed=7))
    qu = q / np.linalg.norm(q, axis=1, keepdims=True)
    got = {(0.0, "plain"): plain.search(qu, K)[1]}
    for a in ALPHAS:
        got[(a, "batch")] = ni.search(q, K, alpha=a)[1]
        got[(a, "single")] = np.concatenate([ni.search(q[i : i + 1], K, alpha=a)[1] for i in range(NQ)])
    rec = exact_recalls(n, args, qu, got)
    single = {"plain": lambda i: plain.search(qu[i : i + 1], K)}
    batch = {"plain": lambda: plain.search(qu, K)}
    for a in ALPHAS:
        single[a] = lambda i, a=a: ni.search(q[i : i + 1], K, alpha=a)
        batch[a] = lambda a=a: ni.search(q, K, alpha=a)
    timings = {1: speed.timed_single(single, NQ, args.reps), NQ: speed.timed(batch, args.reps, NQ)}
    for nq, timing in timings.items():
        for a in ALPHAS:
            rows.append(dict(
                backend=f"faiss {kind}", dataset=f"clustered-{n // 1000}k", n=n, alpha=a, nq=nq,
                recall_at_10=rec[(a, "single" if nq == 1 else "batch")], plain_cosine_recall=rec[(0.0, "plain")],
                params=knobs(kind, args), load_s=load_s, loaded=how, **timing.ratio(a, "plain"),
            ))  # fmt: skip
            speed.show(rows[-1])


def markdown(rows: list, mem: list, builds: list, meta: dict) -> str:
    """speed.md's style: a paragraph on the run, then the memory, build and latency tables."""

    def table(head: str, lines: list[str]) -> list[str]:
        cols = head.count("|") - 1
        return ["", head, "|---" * 2 + "|---:" * (cols - 2) + "|", *lines]

    out = [f"# Scale: NormIndex beside plain FAISS at {meta['label']} x {meta['d']}", "",
           f"Machine: {meta['machine']}; threads per side: {meta['threads']}; clock: {meta['clock']}; load average "
           f"at start / end {meta['load_start']} / {meta['load_end']}. Run: `{meta['command']}` ({meta['minutes']:.1f} "
           f"min; repetitions {meta['reps']}). Data: clustered 384-d float32 with log-normal norms (memory.py's "
           "`_vectors`), 100 queries; indexes built once by `--build-only`, loaded from the cache (the script's "
           "docstring). **Memory**: each side in a fresh process, the index loaded from disk; bytes per document "
           "by RSS after `gc` + `malloc_trim`, the bounded search cache included and also shown apart."]  # fmt: skip
    lines = []
    for got in mem:
        f, m = got["faiss"], got["normrank"]
        c, extra = m["search_cache_bytes"], m["bytes_per_doc"] - f["bytes_per_doc"]
        lines.append(f"| {f['kind']} | {f['n']:,} | {f['bytes_per_doc']:,.0f} | {m['bytes_per_doc']:,.0f} | {extra:+,.0f} "
                     f"| {m['bytes_per_doc'] / f['bytes_per_doc']:.2f} | {c / 2**20:.1f} ({c / m['n']:.1f}) | "
                     f"{extra - c / m['n']:+,.0f} | {f['disk_bytes_per_doc']:,.0f} / {m['disk_bytes_per_doc']:,.0f} | "
                     f"{f['fixed_mib']:.0f} / {m['fixed_mib']:.0f} |")  # fmt: skip
    out += table("| index | n | FAISS alone B/doc | NormIndex B/doc | extra | × | search cache MiB (B/doc) | extra "
                 "without the cache | on disk B/doc FAISS / NormIndex | fixed MiB FAISS / NormIndex |", lines)  # fmt: skip
    out += [
        "",
        "The NormIndex side wraps the cached plain FAISS index by `NormIndex.from_faiss(index, "
        "norms=...)` (see `load_normindex`): the layout this tree gives a new index.",
    ]
    out += ["", "**Builds** (`--build-only`, nice 19; seconds, wall unless marked CPU):"]
    out += table("| index | n | threads | train | add | save | wall | CPU | load at start / end |", [
        f"| {b['kind']} | {b['n']:,} | {b['threads']} | {b.get('train_s', 0):.0f} | {b['add_s']:.0f} | {b['save_s']:.0f} "
        f"| {b['wall_s']:.0f} | {b['cpu_s']:.0f} | {b['load_start'][0]:.1f} / {b['load_end'][0]:.1f} |" for b in builds])  # fmt: skip
    out += ["", "**Latency** ratio = NormIndex / plain cosine search on the very FAISS index it searches, median of "
            "interleaved repetitions [lowest-highest per repetition]; nq = 1 rows time 100 queries one call at a "
            "time (ms are their total; p50 / p99 the ratios of per-query latency percentiles). Recall@10 against "
            "the exact norm-weighted top-10 (numpy over the raw vectors); the index's own cosine recall@10 last."]  # fmt: skip
    lines = []
    for r in rows:
        tail = f"{r['p50_ratio']:.2f} / {r['p99_ratio']:.2f}" if "p50_ratio" in r else ""
        knob = " ".join(f"{k} {v}" for k, v in r["params"].items())
        lines.append(f"| {r['backend']} {knob} | {r['dataset']} | {r['n']} | {r['alpha']:g} | {r['nq']} | "
                     f"{r['recall_at_10']:.4f} | {r['latency_ratio']:.2f} [{r['ratio_min']:.2f}-{r['ratio_max']:.2f}] "
                     f"| {tail} | {r['t_plain_ms']:.2f} | {r['t_ms']:.2f} | {r['overhead_us']:.1f} | "
                     f"{r['plain_cosine_recall']:.4f} |")  # fmt: skip
    out += table("| backend | dataset | n | alpha | nq | recall@10 | latency ratio [min-max] | p50 / p99 ratio | "
                 "plain ms | normrank ms | + us / query | plain cosine recall |", lines)  # fmt: skip
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=2, help="documents' seed (part of the cache key)")
    ap.add_argument("--kinds", default=";".join(KINDS), help="FAISS factory strings, ;-separated")
    ap.add_argument("--hnsw-n", type=int, default=None, help="documents for HNSW kinds (default --n)")
    ap.add_argument("--nprobe", type=int, default=32, help="IVF breadth, both sides (default 32)")
    ap.add_argument("--ef-search", type=int, default=64, help="HNSW breadth, both sides (default 64)")
    ap.add_argument(
        "--build-only", action="store_true", help="build and cache what is missing, measure nothing"
    )
    ap.add_argument("--build-threads", type=int, default=2, help="FAISS threads while building (default 2)")
    ap.add_argument("--only", default="memory,latency", help="comma list of: memory, latency")
    ap.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP threads while timing (default 1)")
    ap.add_argument(
        "--clock", choices=("wall", "cpu"), default="wall", help="cpu: thread CPU time (speed.py's)"
    )
    ap.add_argument("--reps", type=int, default=9, help="interleaved repetitions (default 9)")
    ap.add_argument("--json", type=Path, help="default benchmarks/results/scale_<n>.json")
    ap.add_argument("--md", type=Path, help="default benchmarks/results/scale_<n>.md")
    ap.add_argument("--child", nargs=2, metavar=("KIND", "SIDE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(memory_child(args.child[0], args.child[1], args.n, args)))
        return
    kinds = [(k, args.hnsw_n if "HNSW" in k and args.hnsw_n else args.n) for k in args.kinds.split(";")]
    if args.build_only:
        for kind, n in kinds:
            done = cache_dir(kind, n, D, args.seed) / "build.json"
            print(f"{kind} n={n}: cached in {done.parent}" if done.exists() else json.dumps(build(kind, n, args)),
                  flush=True)  # fmt: skip
        return
    only = set(args.only.split(","))
    if not only or only - {"memory", "latency"}:
        ap.error("--only takes memory and / or latency")
    missing = [f"{k} n={n}" for k, n in kinds if not (cache_dir(k, n, D, args.seed) / "build.json").exists()]
    if missing:
        ap.error(
            f"not built yet: {', '.join(missing)}; run this command with --build-only first (nice -n 19)"
        )
    import speed  # sizes the thread pools from --threads before numpy / FAISS load

    if args.clock == "cpu":
        if args.threads != 1:
            ap.error("--clock cpu counts the calling thread only: use it with --threads 1")
        speed.CLOCK = time.thread_time
    t_start, load_start = time.time(), os.getloadavg()
    builds = [json.loads((cache_dir(k, n, D, args.seed) / "build.json").read_text()) for k, n in kinds]
    mem, rows = [], []
    for kind, n in kinds:
        if "memory" in only:
            mem.append(memory(kind, n, args))
        if "latency" in only:
            latency(speed, kind, n, args, rows)
    label = f"{args.n // 10**6}m" if args.n % 10**6 == 0 else f"{args.n // 1000}k"
    meta = {
        "label": label, "d": D, "machine": speed.machine(), "cpu_model": speed.cpu_model(),
        "blas": speed.blas_libraries(), "threads": args.threads, "clock": args.clock, "reps": args.reps,
        "nprobe": args.nprobe, "ef_search": args.ef_search, "queries": NQ, "k": K, "alphas": ALPHAS,
        "load_start": [round(v, 2) for v in load_start], "load_end": [round(v, 2) for v in os.getloadavg()],
        "command": "python benchmarks/scale.py " + " ".join(sys.argv[1:]), "minutes": (time.time() - t_start) / 60,
    }  # fmt: skip
    out_json = args.json or ROOT / "results" / f"scale_{label}.json"
    out_md = args.md or ROOT / "results" / f"scale_{label}.md"
    out_json.write_text(json.dumps({"rows": rows, "memory": mem, "builds": builds, "meta": meta}, indent=1))
    out_md.write_text(markdown(rows, mem, builds, meta))
    print(f"done in {meta['minutes']:.1f} min: {out_md}, {out_json}")


if __name__ == "__main__":
    main()
