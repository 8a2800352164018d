"""Searches per second on one NormIndex while 0, 1 or 2 threads write to it continuously (add a
batch, remove the oldest), the searches and the writers sharing the index's lock.

    python benchmarks/lock_fairness.py [--seconds 5] [--n 2000] [--dim 16]
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np

from normrank import NormIndex


def run(writers: int, seconds: float, n: int, dim: int) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    index = NormIndex(dim, alpha=0.5)
    index.add(rng.normal(size=(n, dim)), ids=np.arange(n))
    q = rng.normal(size=(1, dim))
    index.search(q, 10)  # compiles the kernels (numba) before the clock starts
    stop = threading.Event()
    writes = [0] * writers

    def writer(w: int) -> None:
        base, lo, hi, batch = (w + 1) * 10**7, 0, 0, 16
        x = np.random.default_rng(w).normal(size=(batch, dim))
        for _ in range(8):
            index.add(x, ids=base + hi * batch + np.arange(batch))
            hi += 1
        while not stop.is_set():
            index.add(x, ids=base + hi * batch + np.arange(batch))
            hi += 1
            index.remove(base + lo * batch + np.arange(batch))
            lo += 1
            writes[w] += 2

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    searches, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        index.search(q, 10)
        searches += 1
    elapsed = time.perf_counter() - t0
    stop.set()
    for t in threads:
        t.join()
    return searches / elapsed, sum(writes) / elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--n", type=int, default=2_000)
    ap.add_argument("--dim", type=int, default=16)
    a = ap.parse_args()
    for w in (0, 1, 2):
        s, wr = run(w, a.seconds, a.n, a.dim)
        print(f"writers={w}: searches/s={s:.1f} writes/s={wr:.1f}", flush=True)


if __name__ == "__main__":
    main()
