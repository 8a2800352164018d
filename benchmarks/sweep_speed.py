"""The sweep's whole wall time against one plain cosine evaluation with ranx (issue 17, item 3).

    python benchmarks/sweep_speed.py                       # scifact, all-MiniLM-L6-v2, 3 repetitions
    python benchmarks/sweep_speed.py --data nfcorpus-test-preprocessed --repeat 5

Each repetition starts a FRESH process for `normrank sweep DATA --model M` on cached embeddings
(every α ranked exactly, all metrics, CV, the paired test, the controls) and reads the stage
times it records in sweep.json; the process wall time (imports, reading the collection and the
cached embeddings included) is measured around it. The baseline runs in its own fresh process:
exact top-100 by cosine + ranx's metrics on that run, timed after one untimed call (ranx and
numba loaded), as a user evaluating cosine would see it in steady state. Writes
benchmarks/results/sweep_speed.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "results"
BASELINE = """
import json, sys, time
from normrank.data import load_dataset
from normrank.embedding_cache import EmbeddingCache
from normrank.sweep import embed_dataset
from normrank.sweep.ranx_check import time_cosine_eval
from ranx import Qrels
ds = load_dataset(sys.argv[1]); qids, qt = ds.judged()
q, d = embed_dataset(ds, sys.argv[2], EmbeddingCache(), {}, 64, False, None, qids, qt)
qrels = Qrels({x: ds.qrels[x] for x in qids})
m = ["ndcg@10", "recall@100", "mrr@10"]
first = time_cosine_eval(q, d, 100, qids, qrels, ds.doc_ids, m)  # loads ranx / numba
print(json.dumps({"first": first, "steady": [time_cosine_eval(q, d, 100, qids, qrels, ds.doc_ids, m) for _ in range(3)]}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="scifact")
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    py = sys.executable
    rows = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            cmd = [py, "-c", "from normrank.cli import main; main()", "sweep", args.data, "-m", args.model]
            subprocess.run([*cmd, "--out", tmp, "--quiet"], check=True, env=env, capture_output=True)
            wall = time.perf_counter() - t
            (run,) = json.loads((Path(tmp) / "sweep.json").read_text())["runs"]
        rows.append({"process_wall_s": wall, **run["timing_s"]})
    base = json.loads(
        subprocess.run(
            [py, "-c", BASELINE, args.data, args.model], check=True, env=env, capture_output=True, text=True
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    cos = statistics.median(base["steady"])

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rows)

    summary = {
        "data": args.data, "model": args.model, "repeat": args.repeat,
        "cosine_eval_s": cos, "cosine_eval_first_call_s": base["first"],
        **{f"{k}_s": med(k) for k in ("alpha_sweep", "sweep_norm", "controls", "controls_null", "sweep_total")},
        "process_wall_s": med("process_wall_s"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared), Python {platform.python_version()}",
        "load_average": os.getloadavg(),
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sweep_speed.json").write_text(json.dumps({"summary": summary, "runs": rows}, indent=1))
    md = [
        f"# Sweep wall time: {args.data} · {args.model} (embeddings cached, fresh process, median of {args.repeat})\n",
        "| stage | seconds | × one cosine evaluation with ranx |",
        "|---|---:|---:|",
        f"| one cosine evaluation (exact top-100 + ranx metrics, ranx loaded) | {cos:.3f} | 1.00× |",
        f"| α-sweep (13 α ranked exactly + all metrics) | {summary['alpha_sweep_s']:.3f} | "
        f"{summary['alpha_sweep_s'] / cos:.2f}× |",
        f"| norm total (α-sweep + 5-fold CV + paired t-test) | {summary['sweep_norm_s']:.3f} | "
        f"{summary['sweep_norm_s'] / cos:.2f}× |",
        f"| controls (lengths, length + residual grids, 99 shuffles; of which the null "
        f"{summary['controls_null_s']:.3f}) | {summary['controls_s']:.3f} | {summary['controls_s'] / cos:.2f}× |",
        f"| everything (norm + controls) | {summary['sweep_total_s']:.3f} | {summary['sweep_total_s'] / cos:.2f}× |",
        f"| whole `normrank sweep` process (imports, reading data and embeddings, reports) | "
        f"{summary['process_wall_s']:.3f} | {summary['process_wall_s'] / cos:.2f}× |",
        "",
        f"ranx's first call in a fresh process (numba loading its cached kernels): {base['first']:.2f} s; the sweep "
        f"no longer pays it (its metrics and t-test are computed without ranx and equal ranx's, see tests). "
        f"Machine: {summary['machine']}, load average {summary['load_average'][0]:.1f} during the run.",
    ]
    (args.out / "sweep_speed.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
