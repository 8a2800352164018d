"""Old vs new for the Qdrant Edge backend: one Edge shard searched by two source trees of normrank,
in alternating fresh subprocesses, and the results compared (ids equal, scores bit for bit) with
the speed ratio of each case. The Edge counterpart of compare_revisions.py (which builds FAISS
indexes); a refactor of ``QdrantEdgeNormIndex.search`` must return the same answers.

    python benchmarks/edge_compare_revisions.py --old /tmp/old-tree --new . [--rounds 3]
        [--n 20000] [--nq 300] [--out result.md]

The shards are built once, by the old tree (``--old``'s own ``add`` and ``optimize``: the same
HNSW graph for both sides, so that a difference in ids is a difference in the search): the data of
compare_revisions.generate (clustered directions, log-normal norms; seed 0), ``m`` 16,
``ef_construct`` 100, one search thread; a second, smaller shard carries custom bases
(``set_bases``). Cases: ``hnsw_ef`` 64 and 128 and an exact search, ``n_tail`` default and 0,
alpha in {-1, -0.5, 0, 0.5, 1} and one alpha per query (mixed), ``--nq`` single queries (one
``search`` each) and one batch of ``--nq``. Each subprocess opens the shard (one opener at a
time), runs every case and writes ids, scores and median microseconds per query to a JSON file.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from compare_revisions import compare_results, generate

ALPHAS = (-1.0, -0.5, 0.0, 0.5, 1.0)
# (name, index attributes): hnsw_ef / exact / n_tail as the user sets them between searches.
CONFIGS = (
    ("ef64", {"hnsw_ef": 64, "exact": False, "n_tail": None}),
    ("ef128", {"hnsw_ef": 128, "exact": False, "n_tail": None}),
    ("ef64 n_tail=0", {"hnsw_ef": 64, "exact": False, "n_tail": 0}),
    ("exact", {"hnsw_ef": 128, "exact": True, "n_tail": None}),
)
K = 10
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _data(n: int, nq: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    docs, queries = generate(n, 384, nq, seed=0)
    bases = np.random.default_rng(1).lognormal(0.0, 0.5, n // 4).astype(np.float32)
    return docs, queries, bases


def build(folder: Path, n: int, nq: int) -> None:
    """The two shards (run by the old tree): ``plain`` (n documents) and ``bases`` (n / 4, custom
    bases set)."""
    from normrank.backends.qdrant_edge import QdrantEdgeNormIndex

    docs, _, bases = _data(n, nq)
    for name, x in (("plain", docs), ("bases", docs[: n // 4])):
        ei = QdrantEdgeNormIndex(
            folder / name, x.shape[1], m=16, ef_construct=100, indexing_threshold_kb=1, max_search_threads=1
        )
        ei.add(x)
        if name == "bases":
            ei.set_bases(bases)
        ei.optimize()
        ei.close()


def workload(folder: Path, n: int, nq: int) -> dict[str, Any]:
    """Every case on the normrank that ``import normrank`` finds: ``{"normrank": its path, "cases":
    {name: {"ids", "scores", "us"}}}`` (``us``: median per query of a second, timed pass)."""
    import normrank
    from normrank.backends.qdrant_edge import QdrantEdgeNormIndex

    _, queries, _ = _data(n, nq)
    mixed = np.resize(np.array(ALPHAS), nq)
    cases: dict[str, dict[str, Any]] = {}
    for shard in ("plain", "bases"):
        ei = QdrantEdgeNormIndex(folder / shard, max_search_threads=1)
        configs = CONFIGS if shard == "plain" else CONFIGS[:1] + CONFIGS[-1:]
        for cname, attrs in configs:
            for key, value in attrs.items():
                setattr(ei, key, value)
            for alpha in (*ALPHAS, "mixed"):
                a = mixed if alpha == "mixed" else alpha
                label = f"{shard} {cname} alpha={alpha if alpha == 'mixed' else f'{alpha:+.1f}'}"
                per_q = [a if np.ndim(a) == 0 else float(a[i]) for i in range(nq)]
                singles = [ei.search(queries[i], K, alpha=per_q[i]) for i in range(nq)]
                times = []
                for i in range(nq):
                    t0 = time.perf_counter()
                    ei.search(queries[i], K, alpha=per_q[i])
                    times.append(time.perf_counter() - t0)
                cases[f"{label} single"] = {
                    "ids": np.concatenate([i for _, i in singles]).tolist(),
                    "scores": np.concatenate([s for s, _ in singles]).tolist(),
                    "us": statistics.median(times) * 1e6,
                }
                s, i = ei.search(queries, K, alpha=a)
                t0 = time.perf_counter()
                ei.search(queries, K, alpha=a)
                cases[f"{label} batch{nq}"] = {
                    "ids": i.tolist(),
                    "scores": s.tolist(),
                    "us": (time.perf_counter() - t0) * 1e6 / nq,
                }
        ei.close()
    return {"normrank": str(Path(normrank.__file__).resolve().parent), "cases": cases}


def _child(tree: Path, args: list[str]) -> None:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(dict.fromkeys(_THREAD_VARS, "1"), PYTHONPATH=str(tree))
    subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], env=env, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path)
    parser.add_argument("--new", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--nq", type=int, default=300)
    parser.add_argument("--out", type=Path, help="write the table (markdown) here too")
    parser.add_argument("--build", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child", type=Path, nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.build:
        build(args.build, args.n, args.nq)
        return 0
    if args.child:
        folder, out = args.child
        out.write_text(json.dumps(workload(folder, args.n, args.nq)))
        return 0
    if args.old is None or args.new is None:
        parser.error("--old and --new are required")
    sizes = ["--n", str(args.n), "--nq", str(args.nq)]
    with tempfile.TemporaryDirectory(prefix="edge-revisions-") as tmp:
        folder = Path(tmp) / "shards"
        _child(args.old.resolve(), ["--build", str(folder), *sizes])
        runs: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
        for r in range(args.rounds):
            order = ("old", "new") if r % 2 == 0 else ("new", "old")
            for side in order:
                tree = (args.old if side == "old" else args.new).resolve()
                out = Path(tmp) / f"{side}-{r}.json"
                _child(tree, ["--child", str(folder), str(out), *sizes])
                got = json.loads(out.read_text())
                if Path(got["normrank"]) != (tree / "normrank").resolve():
                    raise RuntimeError(f"the subprocess for {tree} imported normrank from {got['normrank']}")
                runs[side].append(got)
    differences, within_ulp = compare_results(runs["old"][0], runs["new"][0])
    for side in ("old", "new"):  # each tree agrees with itself across rounds (a deterministic engine)
        for other in runs[side][1:]:
            differences += [f"{side} round-to-round: {d}" for d in compare_results(runs[side][0], other)[0]]
    lines = [
        f"old {args.old} vs new {args.new}: {args.n} documents, {args.nq} queries, {args.rounds} rounds",
        "",
        "| case | old us/query | new us/query | new/old |",
        "|---|---|---|---|",
    ]
    for name in runs["old"][0]["cases"]:
        old = statistics.median(run["cases"][name]["us"] for run in runs["old"])
        new = statistics.median(run["cases"][name]["us"] for run in runs["new"])
        lines.append(f"| {name} | {old:.0f} | {new:.0f} | {new / old:.2f} |")
    lines += ["", f"differences: {differences or 'none'}", f"within one float32 ulp: {within_ulp or 'none'}"]
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out:
        args.out.write_text(text)
    return 1 if differences else 0


if __name__ == "__main__":
    raise SystemExit(main())
