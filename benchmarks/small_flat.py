"""Small indexes, batches: normrank's scan against the exact flat product over FAISS's own storage
(issue 48, deliverables 2/3; not a test). Batches of 100 queries, one thread, interleaved rounds,
medians; ratios to plain FAISS cosine top-10 in the same rounds.

* ``scan``: ``NormIndex.search`` (candidates + weight-order scan + bound, the default);
* ``flat``: every stored row scored by ``normrank.search.flat.weighted_flat_search`` (FAISS's BLAS
  and heaps) straight from the storage: an HNSW's ``storage`` rows in place; an IVF-Flat's
  inverted lists, one product per list (their float32 codes viewed in place).

    python benchmarks/small_flat.py            # generated 3k / 8.4k / 20k + the cached real set
    python benchmarks/small_flat.py --certified  # the scan's certified fraction on the real set
    python benchmarks/small_flat.py --kinds ivf --nprobe-div 8,4,2 --sizes 20000  # IVF-Flat rule

IVF-Flat rows also time ``normrank``: ``NormIndex.search`` under the current settings (the flat
product over the lists, ``FLAT_BATCH_MIN_PROBED``, where ``plan_search`` chooses it); ``scan``
there is the same search with that setting at 0 (the scan, as before the rule).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import speed  # noqa: I001  (pins the thread pools before numpy / faiss load)

import argparse

import faiss
import numpy as np
from bench_data import real_embeddings, synthetic_like
from bench_exact import unit

from normrank import NormIndex, settings
from normrank.search.faiss_info import flat_storage
from normrank.search.flat import weighted_flat_search

K, NQ = 10, 100


def flat_hnsw(ni: NormIndex, w: np.ndarray):
    storage = flat_storage(faiss.downcast_index(faiss.downcast_index(ni.faiss_index.index).storage))
    return lambda uq: weighted_flat_search(storage, w, uq, K)


def flat_ivf(ni: NormIndex, w: np.ndarray):
    """One product per inverted list, its float32 codes in place, FAISS's heaps over the ids."""
    ivf = faiss.extract_index_ivf(ni.faiss_index)
    lists = ivf.invlists
    d = ivf.d
    views = []
    for lst in range(ivf.nlist):
        m = lists.list_size(lst)
        if m:
            codes = faiss.rev_swig_ptr(lists.get_codes(lst), m * d * 4).view(np.float32).reshape(m, d)
            ids = faiss.rev_swig_ptr(lists.get_ids(lst), m).copy()  # ids = positions here (no removals)
            views.append((codes, w[ids], ids))

    def run(uq):
        nq = uq.shape[0]
        scores = np.empty((nq, K), dtype=np.float32)
        labels = np.empty((nq, K), dtype=np.int64)
        heap = faiss.float_minheap_array_t()
        heap.k, heap.nh = K, nq
        heap.val, heap.ids = faiss.swig_ptr(scores), faiss.swig_ptr(labels)
        heap.heapify()
        for codes, wl, ids in views:
            s = np.ascontiguousarray((uq @ codes.T) * wl)
            heap.addn_with_ids(codes.shape[0], faiss.swig_ptr(s), faiss.swig_ptr(ids), 0, 0, nq)
        heap.reorder()
        return scores, labels

    return run


def scan_only(ni: NormIndex, q: np.ndarray, alpha: float):
    """``ni.search`` with the IVF-Flat flat product turned off (FLAT_BATCH_MIN_PROBED = 0)."""
    keep = settings.FLAT_BATCH_MIN_PROBED
    settings.FLAT_BATCH_MIN_PROBED = 0
    try:
        return ni.search(q, K, alpha=alpha)
    finally:
        settings.FLAT_BATCH_MIN_PROBED = keep


def certified(docs: np.ndarray, queries: np.ndarray) -> None:
    """The share of queries the bound certifies before any scan row (``SearchStats.certified``)
    per alpha, in batches of 10 (below the flat product's batch size: the scan runs)."""
    q, n = queries[:200], docs.shape[0]
    nlist = int(4 * np.sqrt(n))
    for factory in ("HNSW32", f"IVF{nlist},Flat"):
        ni = NormIndex(docs.shape[1], factory=factory)
        if "IVF" in factory:
            ni.train(docs)
            faiss.extract_index_ivf(ni.faiss_index).nprobe = nlist // 4
        else:
            faiss.downcast_index(ni.faiss_index.index).hnsw.efSearch = 64
        ni.add(docs)
        shares = []
        for alpha in (-1.5, -1.0, -0.5, 0.5, 1.0):
            parts = [
                ni.search(q[i : i + 10], K, alpha=alpha, return_stats=True)[2] for i in range(0, len(q), 10)
            ]
            shares.append(f"{alpha:+g}: {sum(p.n_certified for p in parts) / len(q):.2f}")
        print(f"{factory} ({len(q)} queries): certified " + "; ".join(shares), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--sizes", default="3000,8400,20000")
    ap.add_argument("--nq", type=int, default=NQ, help="queries per batch")
    ap.add_argument("--kinds", default="hnsw,ivf")
    ap.add_argument("--ef", type=int, default=64, help="HNSW efSearch")
    ap.add_argument("--nprobe-div", default="4", help="IVF nprobe = nlist / each of these")
    ap.add_argument(
        "--min-probed",
        type=float,
        default=None,
        help="FLAT_BATCH_MIN_PROBED for the normrank column (to measure a threshold)",
    )
    ap.add_argument("--no-real", action="store_true", help="generated sets only")
    ap.add_argument("--certified", action="store_true", help="only the scan's certified fraction, real set")
    args = ap.parse_args()
    faiss.omp_set_num_threads(1)
    if args.min_probed is not None:
        settings.FLAT_BATCH_MIN_PROBED = args.min_probed
    docs, queries, used = real_embeddings(speed.SMALL_REAL, encode_missing=False)
    if args.certified:
        print(f"{'+'.join(used)}: {docs.shape[0]} documents", flush=True)
        certified(docs, queries)
        return
    sets = (
        []
        if args.no_real
        else [(f"real-{docs.shape[0] / 1000:.1f}k ({'+'.join(used)})", docs, queries[: args.nq])]
    )
    for n in map(int, args.sizes.split(",")):
        sets.append((f"generated-{n / 1000:g}k", *synthetic_like(docs, queries, n, args.nq, seed=1)))
    print(f"load {os.getloadavg()}", flush=True)
    for label, x, q in sets:
        n = x.shape[0]
        nlist = int(4 * np.sqrt(n))
        norms = np.linalg.norm(x, axis=1)
        kinds = {"hnsw": "HNSW32", "ivf": f"IVF{nlist},Flat"}
        runs = [
            (kinds[k], div)
            for k in args.kinds.split(",")
            for div in (map(int, args.nprobe_div.split(",")) if k == "ivf" else [0])
        ]
        for factory, div in runs:
            ni = NormIndex(x.shape[1], factory=factory)
            if "IVF" in factory:
                ni.train(x)
                faiss.extract_index_ivf(ni.faiss_index).nprobe = max(1, nlist // div)
            else:
                faiss.downcast_index(ni.faiss_index.index).hnsw.efSearch = args.ef
            ni.add(x)
            uq = unit(q)
            for alpha in (-1.0, -0.5, 0.5, 1.0):
                w = (norms.astype(np.float64) ** alpha).astype(np.float32)
                flat = flat_hnsw(ni, w) if "HNSW" in factory else flat_ivf(ni, w)
                ref = np.argsort(-(uq @ unit(x).T) * w, axis=1)[:, :K]
                got = flat(uq)[1]
                exact = np.mean([len(set(a) & set(b)) / K for a, b in zip(got, ref, strict=True)])
                fns = {
                    "plain": lambda ni=ni, uq=uq: ni.faiss_index.search(uq, K),
                    "scan": lambda a=alpha, ni=ni, q=q: scan_only(ni, q, a),
                    "flat": lambda f=flat, uq=uq: f(uq),
                }
                if "IVF" in factory:
                    fns["normrank"] = lambda a=alpha, ni=ni, q=q: ni.search(q, K, alpha=a)
                t = speed.timed(fns, args.reps, len(q))
                base = t.median("plain")
                breadth = f" ef {args.ef}" if "HNSW" in factory else f" nprobe {max(1, nlist // div)}"
                extra = ""
                if "IVF" in factory:
                    path = ni.search(q, K, alpha=alpha, return_stats=True)[2].path
                    extra = f", normrank ({path}) {t.median('normrank') / base:.2f}x"
                print(
                    f"{label} {factory}{breadth} alpha {alpha:+g}: nq {len(q)} plain {1e6 * base / len(q):.0f} us/q, "
                    f"scan {t.median('scan') / base:.2f}x, flat {t.median('flat') / base:.2f}x{extra} "
                    f"(flat recall vs numpy {exact:.3f}), load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
