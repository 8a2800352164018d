"""Where a single ANN query's extra time goes, stage by stage, under one SIMD target (issue 30).

    python benchmarks/ann_breakdown.py                # native
    python benchmarks/ann_breakdown.py --simd avx2    # FAISS AVX2, numba haswell, OpenBLAS Haswell

On the real MiniLM embeddings (the 8.4k SciFact + CACM set and all cached corpora), HNSW and IVF
at the operating point speed.py uses (plain cosine recall >= 0.995), 100 queries one at a time,
this thread's CPU time, medians over 5 passes. Per alpha: plain search (k = 10); the index
searched at normrank's cosine depth (the plan's); the rest of a call (re-scoring and the
weight-order scan, rows read from FAISS's storage) as the whole call minus that; rows scanned
(``return_stats``). Writes
``results/ann_breakdown_<target>.md``. Not a test.
"""

from __future__ import annotations

import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simd_target  # noqa: E402 - no numpy: sets the SIMD target before numpy / faiss load

SIMD = simd_target.target_from_argv(sys.argv)
simd_target.apply(SIMD)

import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from bench_data import real_embeddings  # noqa: E402
from bench_exact import unit  # noqa: E402
from speed import operating_point  # noqa: E402

from normrank import NormIndex  # noqa: E402
from normrank.search import ann  # noqa: E402
from normrank.search.faiss_info import ann_params  # noqa: E402
from normrank.search.plan import SearchOptions, plan_search  # noqa: E402

ALPHAS = (-1.5, -0.75, 0.5, 1.0)
CLOCK = time.thread_time


def per_query_us(fn, nq: int, passes: int = 5) -> float:
    for i in range(nq):
        fn(i)
    runs = []
    for _ in range(passes):
        t0 = CLOCK()
        for i in range(nq):
            fn(i)
        runs.append(CLOCK() - t0)
    return 1e6 * float(np.median(runs)) / nq


def breakdown(docs: np.ndarray, queries: np.ndarray, kind: str, label: str) -> list[str]:
    n = docs.shape[0]
    q = queries[:100]
    qu = unit(q)
    if kind == "hnsw":
        ni = NormIndex(docs.shape[1], factory="HNSW32")
        ladder = [64, 128, 256, 512]
    else:
        nlist = int(4 * np.sqrt(n))
        ni = NormIndex(docs.shape[1], factory=f"IVF{nlist},Flat")
        ni.train(docs[np.random.default_rng(0).choice(n, min(n, 50 * nlist), replace=False)])
        ladder = [max(8, nlist * f // 8) for f in (1, 2, 4, 6)]
    ni.add(docs)
    plain = ni.faiss_index
    value, _ = operating_point(plain, kind, unit(docs), qu, ladder)
    knob = "efSearch" if kind == "hnsw" else "nprobe"
    t_plain = per_query_us(lambda i: plain.search(qu[i : i + 1], 10), len(q))
    t_cos = per_query_us(lambda i: ni.search(q[i : i + 1], 10, alpha=0.0), len(q))
    out = [
        f"| {label} | {kind} {knob} {value} | 0 | {t_plain:.0f} | {t_plain:.0f} | | {t_cos:.0f} | "
        f"{t_cos / t_plain:.2f} | |"
    ]
    for a in ALPHAS:
        stats = [ni.search(q[i : i + 1], 10, alpha=a, return_stats=True)[2] for i in range(len(q))]
        plan = plan_search(SearchOptions(10, a, ni.k_factor, breadth=ann_params(plain)), ni.ntotal)
        depth, trust = plan.depth, plan.trust
        t_index = per_query_us(lambda i, d=depth, p=plan: ann._search(plain, qu[i : i + 1], d, p.ef), len(q))
        scanned = [st.scanned for st in stats]
        t_all = per_query_us(lambda i, a=a: ni.search(q[i : i + 1], 10, alpha=a), len(q))
        out.append(
            f"| {label} | {kind} {knob} {value} | {a:g} | {t_plain:.0f} | {t_index:.0f} (depth {depth}) | "
            f"{t_all - t_index:.0f} ({np.mean(scanned):.0f} rows) | "
            f"{t_all:.0f} | {t_all / t_plain:.2f} | trust {trust} |"
        )
    return out


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--simd", choices=tuple(simd_target.TARGETS), default="native")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = ap.parse_args()
    info = simd_target.describe()
    # The queries in speed.py's order (the same generator, the full set permuted first), so that
    # the operating points are speed.py's.
    rng = np.random.default_rng(0)
    full = real_embeddings(encode_missing=False)
    full = (full[0], full[1][rng.permutation(full[1].shape[0])], full[2])
    small = real_embeddings(("scifact", "cacm"), encode_missing=False)
    small = (small[0], small[1][rng.permutation(small[1].shape[0])], small[2])
    lines = [
        f"# Single ANN queries, stage by stage: SIMD target {SIMD}",
        "",
        f"FAISS {info['faiss_simd_level']} ({info['faiss_compile_options']}), numba {info['numba_cpu']} "
        f"({info['numba_cpu_features']} features); this thread's CPU time, microseconds per query, "
        "median of 5 passes over 100 queries; each stage timed on its own (they need not add up to the "
        "whole call: each meets other cache contents than inside it). `python benchmarks/ann_breakdown.py --simd "
        f"{SIMD}`.",
        "",
        "| data | index | alpha | plain us | index at normrank's depth us | weight-order scan us | "
        "whole call us | ratio | |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for docs, queries, used in (small, full):
        label = f"{docs.shape[0] // 1000}k real ({len(used)} corpora)"
        for kind in ("hnsw", "ivf"):
            lines += breakdown(docs, queries, kind, label)
            print(lines[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"ann_breakdown_{SIMD}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
