"""GPU check for ``NormIndex(..., device="cuda")`` (not a test; < 5 minutes on one GPU).

1. Correctness: the CUDA path returns the same ids as the CPU path (FAISS kernel) and scores
   within float tolerance, for several alphas, per-query alphas and k > n padding.
2. Speed: normrank on CUDA vs plain cosine search on the same GPU: a torch matmul + topk over the
   same unit vectors, and faiss-gpu ``GpuIndexFlatIP`` when faiss-gpu is installed (it is not
   installable on the project's CPU machine, so that row is skipped there).

Writes JSON (``--json``) and prints a table. Exits non-zero on a correctness failure or when no
CUDA device is present (it never silently measures the CPU).

    python benchmarks/gpu_check.py --json gpu_check.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def clustered(n: int, nq: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Clustered directions with log-normal norms (MiniLM-like spread; no real data needed)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(256, d)).astype(np.float32)
    x = centers[rng.integers(256, size=n)] + rng.normal(size=(n, d)).astype(np.float32)
    x *= (rng.lognormal(0.8, 0.2, size=(n, 1)) / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    q = centers[rng.integers(256, size=nq)] + 1.2 * rng.normal(size=(nq, d)).astype(np.float32)
    return x.astype(np.float32), q.astype(np.float32)


def median_time(fn, sync, reps: int) -> float:
    fn()
    sync()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import torch

    from normrank import NormIndex

    if not torch.cuda.is_available():
        print("no CUDA device visible to torch: nothing to check (refusing to run on the CPU)")
        return 2
    out: dict = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": []}
    sync = torch.cuda.synchronize
    t_start = time.time()

    # 1. correctness on 200k (the CPU reference must stay quick)
    x, q = clustered(200_000, 500, args.dim, 0)
    cpu, gpu = NormIndex(args.dim), NormIndex(args.dim, device="cuda")
    cpu.add(x)
    gpu.add(x)
    ok = True
    for a in (-1.5, -0.75, 0.0, 0.5, 1.0):
        s0, i0 = cpu.search(q, 10, alpha=a)
        s1, i1 = gpu.search(q, 10, alpha=a)
        same = float((i0 == i1).mean())
        err = float(np.max(np.abs(s0 - s1)))
        ok &= same > 0.999 and err < 1e-4  # ids may differ only at exact float ties
        out["rows"].append({"check": "ids_vs_cpu", "alpha": a, "same_ids": same, "max_abs_score_diff": err})
    alphas = np.linspace(-1.5, 1.0, q.shape[0])
    same = float((cpu.search(q, 10, alpha=alphas)[1] == gpu.search(q, 10, alpha=alphas)[1]).mean())
    ok &= same > 0.999
    out["rows"].append({"check": "per_query_alpha", "same_ids": same})
    small = NormIndex(args.dim, device="cuda")
    small.add(x[:5])
    s, i = small.search(q[:3], 8)
    ok &= bool((i[:, 5:] == -1).all() and np.isneginf(s[:, 5:]).all())
    del cpu, gpu, small

    # 2. speed on n vectors
    x, q = clustered(args.n, 1000, args.dim, 1)
    gpu = NormIndex(args.dim, device="cuda")
    gpu.add(x)
    store_docs = torch.from_numpy(x / np.linalg.norm(x, axis=1, keepdims=True)).cuda()
    qu_all = q / np.linalg.norm(q, axis=1, keepdims=True)
    try:
        import faiss

        res = faiss.StandardGpuResources()
        fg = faiss.GpuIndexFlatIP(res, args.dim)
        fg.add(store_docs.cpu().numpy())
    except (ImportError, AttributeError):
        fg = None
    for nq in (1, 100, 1000):
        qu = qu_all[:nq]
        qt = torch.from_numpy(qu)

        def plain_torch(qt=qt):
            torch.topk(qt.cuda() @ store_docs.T, 10, dim=1)[1].cpu()

        for a in (-1.0, 0.5):
            t_nr = median_time(lambda a=a, qq=q[:nq]: gpu.search(qq, 10, alpha=a), sync, 9)
            t_pt = median_time(plain_torch, sync, 9)
            row = {
                "check": "speed",
                "n": args.n,
                "nq": nq,
                "alpha": a,
                "normrank_ms": 1e3 * t_nr,
                "plain_torch_ms": 1e3 * t_pt,
                "ratio_vs_torch": t_nr / t_pt,
            }
            if fg is not None:
                t_fg = median_time(lambda qu=qu: fg.search(qu, 10), sync, 9)
                row.update(faiss_gpu_ms=1e3 * t_fg, ratio_vs_faiss_gpu=t_nr / t_fg)
            out["rows"].append(row)
            print(json.dumps(row), flush=True)
    out["ok"] = bool(ok)
    out["minutes"] = (time.time() - t_start) / 60
    for r in out["rows"]:
        print(json.dumps(r))
    print("correctness:", "OK" if ok else "FAILED", f"({out['minutes']:.1f} min)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
