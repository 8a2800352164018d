"""Peak resident memory of ``NormIndex.save`` (and ``NormIndex.load``) beyond the index itself
(not a test; issue 36: a 1M HNSW peaked at 5.4 GB RSS while saving).

In a fresh process: a Flat NormIndex of ``n x d`` random float32 vectors (log-normal norms) is
built, the data dropped, the heap trimmed (``gc`` + glibc's ``malloc_trim``); then the kernel's
peak-RSS mark is reset (``echo 5 > /proc/self/clear_refs``, Linux) and the index saved to a
temporary folder; **save peak** = VmHWM after the save minus VmRSS before it. The same for a load
of that folder, the index dropped first. Usage:

    nice -n 10 python benchmarks/save_memory.py --n 200000 --d 384 [--factory Flat]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import tempfile
from pathlib import Path

import numpy as np

from normrank import NormIndex


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _settle() -> int:
    """RSS in KiB once freed memory is given back, with the peak mark reset to it."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")
    return _status_kib("VmRSS")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--d", type=int, default=384)
    ap.add_argument("--factory", default="Flat")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.n, args.d), dtype=np.float32)
    x *= rng.lognormal(size=(args.n, 1)).astype(np.float32)
    index = NormIndex(args.d, factory=args.factory)
    if not index.is_trained:
        index.train(x[: min(args.n, 50_000)])
    index.add(x)
    del x
    with tempfile.TemporaryDirectory() as tmp:
        before = _settle()
        index.save(Path(tmp) / "ix")
        save_peak = _status_kib("VmHWM") - before
        files = sum(p.stat().st_size for p in Path(tmp).rglob("*") if p.is_file())
        del index
        before = _settle()
        loaded = NormIndex.load(Path(tmp) / "ix")
        load_peak = _status_kib("VmHWM") - before
        assert len(loaded) == args.n
    mib = 1 << 20
    print(
        json.dumps(
            {
                "factory": args.factory,
                "n": args.n,
                "d": args.d,
                "files_mib": round(files / mib, 1),
                "save_peak_above_rss_mib": round(save_peak / 1024, 1),
                "load_peak_above_rss_mib": round(load_peak / 1024, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
