"""Resident memory of a NormIndex beside the FAISS index it wraps, per kind (not a test).

Each (kind, side) runs in a fresh subprocess, so that nothing one side loaded counts for the
other. In each process:

1. the libraries are imported (RSS ``r0``);
2. a small index of the kind is built, searched (alpha = 0, -0.5, +0.5; one query and a batch
   of 20) and dropped: what stays is the **fixed cost** of a first search (libraries' lazily
   loaded code and pools: numba's LLVM runtime was ~125 MiB of it), RSS ``r1``;
3. ``n`` documents are added to a fresh index of the kind and searched the same way; the index
   kept, the data dropped: RSS ``r2``. **Bytes per document** = ``(r2 - r1) / n``.
4. The same is measured once half of them are in (``r_half`` at ``n_half = n // 2``):
   ``(r2 - r_half) / (n - n_half)`` is the **slope**, what each further document costs, free
   of anything paid once for a large index that the small one did not pay. (FAISS's growing
   arrays double, so either side's slope alone depends on where n falls between doublings;
   both sides add the same blocks, so their difference does not.)

RSS is read after ``gc.collect()`` and glibc's ``malloc_trim(0)`` (freed heap given back).
Vectors: ``n x d`` clustered float32 with log-normal norms (``bench_data``-like statistics, made
here so that the run needs no data). "faiss" is the plain factory index with inner product over
the same unit vectors (no id map, no direct map: what a FAISS user holds); "normrank" is
``NormIndex(d, factory=kind)`` fed the raw vectors. IVF indexes search at nprobe 32, HNSW at
efSearch 64, both sides.

The table gives, per kind, FAISS alone, the NormIndex in all, the bounded search caches
(``search(..., return_stats=True).cache_bytes`` less the cache's parts that grow with n: what
remains is weights per alpha and the scan's prefix copy, a fixed budget, so fewer bytes a
document as n grows) and the **excess**: NormIndex minus FAISS minus the bounded caches, what
normrank keeps per document beyond FAISS's own structures; the same from the slopes (second
half) counts what grows with n only.

glibc's defaults make RSS depend on the order of allocations: its mmap threshold rises with
each large block freed, after which FAISS's growing arrays (doubling ``std::vector``s: IVF
lists, HNSW links, SQ codes) and numpy's temporaries share the heap, and what one side's
history leaves resident moves either side's figure by tens to hundreds of bytes a document
(HNSW32,SQ8 at 100k: +175 over FAISS with the defaults, +17 with a fixed threshold, the same
code). ``--mmap-threshold BYTES`` fixes it in both sides' processes (glibc's
``MALLOC_MMAP_THRESHOLD_``): every block that large gets its own mapping, resident only as far
as it is written and returned whole when freed, so RSS follows the live arrays. Run both.
Usage:

    nice -n 10 python benchmarks/memory.py --n 200000 --hnsw-n 100000 [--kinds "Flat;HNSW32"] [--json out.json]
    nice -n 10 python benchmarks/memory.py --n 200000 --hnsw-n 100000 --mmap-threshold 1048576

The first (glibc's defaults, as the issue-48 goal is stated) is the committed run,
benchmarks/results/memory.json (the default ``--json``); memory.md gives the other beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import os
import subprocess
import sys
import time

KINDS = ("Flat", "IVF1024,Flat", "HNSW32", "IVF1024,PQ48", "HNSW32,SQ8")
ALPHAS = (0.0, -0.5, 0.5)
_TRAIN = 40_000  # IVF1024 wants >= 39 points per centroid
_SMALL = 2_000


def _rss() -> int:
    gc.collect()
    with contextlib.suppress(OSError):  # not glibc: RSS as it is
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _vectors(np, n: int, d: int, seed: int, block: int = 20_000):
    """``n x d`` clustered float32 with log-normal norms, a block at a time."""
    rng = np.random.default_rng(12345)
    centres = rng.standard_normal((64, d)).astype(np.float32)
    rng = np.random.default_rng(seed)
    for s in range(0, n, block):
        m = min(block, n - s)
        x = centres[rng.integers(0, 64, m)] + 0.8 * rng.standard_normal((m, d)).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        x *= rng.lognormal(0.0, 0.35, (m, 1)).astype(np.float32)
        yield x


def _child(kind: str, side: str, n: int, d: int) -> dict:
    import faiss
    import numpy as np

    if side == "normrank":
        from normrank import NormIndex
    r0 = _rss()
    queries = next(_vectors(np, 20, d, seed=7))

    def build(count: int, halfway=None):
        """A trained index of the kind holding ``count`` documents; ``halfway(index)`` is
        called once half of them are in."""
        if side == "faiss":
            index = faiss.index_factory(d, kind, faiss.METRIC_INNER_PRODUCT)
        else:
            index = NormIndex(d, factory=kind)
        inner = index if side == "faiss" else index.faiss_index
        if not index.is_trained:
            train = np.concatenate(list(_vectors(np, _TRAIN, d, seed=1)))
            if side == "faiss":
                train /= np.linalg.norm(train, axis=1, keepdims=True)
            index.train(train)
            del train
        ivf = _ivf(faiss, inner)
        if ivf is not None:
            ivf.nprobe = 32
        hnsw = _hnsw(faiss, inner)
        if hnsw is not None:
            hnsw.hnsw.efSearch = 64
        first = count // 2 if halfway is not None else count
        for part, seed in ((first, 2), (count - first, 3)):
            # Each half from a generator of its own, spent before the halfway measure: a block
            # still referenced by a live generator (31 MB at 20k x 384) would count there.
            for x in _vectors(np, part, d, seed=seed):
                if side == "faiss":
                    x /= np.linalg.norm(x, axis=1, keepdims=True)
                index.add(x)
            x = None
            if halfway is not None and index.ntotal < count:
                halfway(index)
        return index

    def search(index) -> tuple[int, int]:
        """Searches at every alpha; the search cache's bytes after them (normrank), and of those
        the ones that grow with n (the weight order, id -> position, where rows are: read from
        the cache's parts, since ``cache_bytes`` gives their sum)."""
        cache = 0
        for a in ALPHAS:
            for q in (queries[:1], queries):
                if side == "faiss":
                    index.search(q / np.linalg.norm(q, axis=1, keepdims=True), 10)
                else:
                    got = index.search(q, 10, alpha=a, return_stats=True)[2]
                    cache, budget["bytes"] = got.cache_bytes, got.cache_budget_bytes
        if side == "faiss":
            return 0, 0
        c = index._cache
        parts = (c.ascending, c.lookup, c.rows)
        return cache, sum(int(getattr(p, "nbytes", 0)) for p in parts if p is not None)

    budget = {"bytes": 0}
    small = build(_SMALL)
    if side == "normrank":
        # The small index's scans are short: have them read the int8 codes from their first row,
        # so that the code those load (FAISS's scanner, numpy's rounding) counts as fixed too.
        from normrank.search import ann

        min_rows, ann.MIN_ROWS = ann.MIN_ROWS, 0
        search(small)
        ann.MIN_ROWS = min_rows
    else:
        search(small)
    del small
    r1 = _rss()
    half = {}

    def halfway(index) -> None:
        """The same measure at n / 2: what the second half adds is the
        slope, free of every cost paid once (fixed costs a first large index pays, not the
        small one: the 1/n part of ``bytes_per_doc``)."""
        half["cache"], half["per_doc"] = search(index)
        half["n"], half["rss"] = int(index.ntotal), _rss()

    t = time.perf_counter()
    index = build(n, halfway)
    built = time.perf_counter() - t
    cache, per_doc = search(index)
    r2 = _rss()
    return {"kind": kind, "side": side, "n": n, "d": d, "fixed_mib": (r1 - r0) / 2**20,
            "bytes_per_doc": (r2 - r1) / n, "build_s": round(built, 1), "search_cache_bytes": cache,
            "search_cache_per_doc_bytes": per_doc, "half_n": half["n"],
            "half_search_cache_bytes": half["cache"], "half_search_cache_per_doc_bytes": half["per_doc"],
            "bytes_per_doc_second_half": (r2 - half["rss"]) / (n - half["n"]),
            "cache_budget_bytes": budget["bytes"]}  # fmt: skip


def _ivf(faiss, index):
    try:
        return faiss.extract_index_ivf(index)
    except RuntimeError:
        return None


def _hnsw(faiss, index):
    for _ in range(4):
        index = faiss.downcast_index(index)
        if isinstance(index, faiss.IndexHNSW):
            return index
        # beneath an id map, or a refine stage's base ("...,RFlat")
        index = getattr(index, "index", None) or getattr(index, "base_index", None)
        if index is None:
            return None
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--hnsw-n", type=int, default=None, help="n for HNSW kinds (slow builds); default --n")
    ap.add_argument("--d", type=int, default=384)
    ap.add_argument("--kinds", default=";".join(KINDS), help="index factory strings, ;-separated")
    ap.add_argument(
        "--json", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "memory.json")
    )
    ap.add_argument(
        "--mmap-threshold", type=int, default=None,
        help="glibc's fixed mmap threshold in bytes for both sides (MALLOC_MMAP_THRESHOLD_); default: glibc's dynamic one",
    )  # fmt: skip
    ap.add_argument("--child", nargs=2, metavar=("KIND", "SIDE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args.child[0], args.child[1], args.n, args.d)))
        return
    rows = []
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    if args.mmap_threshold is not None:
        env["MALLOC_MMAP_THRESHOLD_"] = str(args.mmap_threshold)
    for kind in args.kinds.split(";"):
        got = {}
        n = args.hnsw_n if args.hnsw_n and "HNSW" in kind else args.n
        for side in ("faiss", "normrank"):
            cmd = [sys.executable, __file__, "--n", str(n), "--d", str(args.d), "--child", kind, side]
            res = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if res.returncode:
                print(res.stderr[-2000:], file=sys.stderr)
                raise SystemExit(f"{kind} / {side} failed")
            got[side] = json.loads(res.stdout.strip().splitlines()[-1])
            got[side]["malloc_mmap_threshold"] = env.get("MALLOC_MMAP_THRESHOLD_", "glibc default (dynamic)")
            print(json.dumps(got[side]), flush=True)
        rows.append(got)
    print(
        "\n| index (n) | FAISS B/doc | NormIndex B/doc | total excess B/doc (goal) | total excess, second half | "
        "bounded caches MiB (B/doc; budget MiB) | excess B/doc | excess B/doc, second half | fixed MiB FAISS / NormIndex |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for got in rows:
        f, m = got["faiss"], got["normrank"]
        bounded = m["search_cache_bytes"] - m["search_cache_per_doc_bytes"]
        bounded_half = m["half_search_cache_bytes"] - m["half_search_cache_per_doc_bytes"]
        m["bounded_cache_bytes"] = bounded
        m["excess_bytes_per_doc"] = m["bytes_per_doc"] - f["bytes_per_doc"] - bounded / m["n"]
        # The slope: the second half's bytes a document on each side, less what the bounded
        # caches grew by over it (both sides added the same blocks, so FAISS's arrays grew alike).
        m["excess_bytes_per_doc_second_half"] = (
            m["bytes_per_doc_second_half"] - f["bytes_per_doc_second_half"]
            - (bounded - bounded_half) / (m["n"] - m["half_n"])
        )  # fmt: skip
        # The issue-48 goal: everything normrank holds beyond FAISS, caches included, within
        # max(32 B/doc, 10% of FAISS's own bytes a document).
        m["total_excess_bytes_per_doc"] = m["bytes_per_doc"] - f["bytes_per_doc"]
        m["total_excess_bytes_per_doc_second_half"] = (
            m["bytes_per_doc_second_half"] - f["bytes_per_doc_second_half"]
        )
        m["goal_bytes_per_doc"] = max(32.0, 0.1 * f["bytes_per_doc"])
        print(f"| {f['kind']} ({f['n']:,}) | {f['bytes_per_doc']:,.0f} | {m['bytes_per_doc']:,.0f} | "
              f"{m['total_excess_bytes_per_doc']:+,.0f} (<= {m['goal_bytes_per_doc']:,.0f}) | "
              f"{m['total_excess_bytes_per_doc_second_half']:+,.0f} | "
              f"{bounded / 2**20:.1f} ({bounded / m['n']:,.0f}; {m['cache_budget_bytes'] / 2**20:.1f}) | "
              f"{m['excess_bytes_per_doc']:+,.0f} | "
              f"{m['excess_bytes_per_doc_second_half']:+,.0f} | "
              f"{f['fixed_mib']:.0f} / {m['fixed_mib']:.0f} |")  # fmt: skip
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
