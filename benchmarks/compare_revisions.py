"""Old vs new, interleaved: one workload run on two source trees of normrank, in alternating fresh
subprocesses, and the results compared (ids equal, scores equal) with the speed ratio of each case.

    python benchmarks/compare_revisions.py --old /tmp/old-tree --new . [--rounds 3] [--out result.md]
        [--kinds Flat HNSW32] [--alphas 0 0.5] [--n 20000] [--n-single 100]

Each subprocess imports normrank from one tree only (``PYTHONPATH=<tree>``, checked through
``normrank.__file__``), generates the same data from the same seed (clustered unit directions with
log-normal norms, as benchmarks/bench_data.py's synthetic set), builds each FAISS kind (Flat,
IVF256,Flat at nprobe 32, HNSW32 at efSearch 64), and writes to a JSON file: per case (kind,
alpha, single queries or one batch) the ids and scores returned and the median microseconds per
call. Rounds alternate the order (old then new, new then old, ...) so that a drift in the
machine's load falls on both sides alike. Only the public API that both trees offer is used:
``NormIndex(dim, factory=..., nprobe=..., ef_search=...)``, ``train``, ``add``, ``search(q, k,
alpha=...)``.

Threads: one (OMP/BLAS) in every subprocess, so that FAISS's builds (k-means, HNSW insertion)
are deterministic and the two trees index the very same structure; a difference in ids is then a
difference in the search, not in the build.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

KINDS = ("Flat", "IVF256,Flat", "HNSW32")
ALPHAS = (-1.0, -0.5, 0.0, 0.5, 1.0)
BREADTH = {"IVF": {"nprobe": 32}, "HNSW": {"ef_search": 64}}
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def generate(n: int, dim: int, nq: int, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(docs (n, dim), queries (nq, dim))``, float32: unit directions around 64 cluster centres,
    documents with log-normal norms whose mean log-norm differs by cluster (as real embeddings'
    do), queries drawn from the same clusters."""
    rng = np.random.default_rng(seed)
    n_clusters = 64
    centres = rng.standard_normal((n_clusters, dim))
    log_mean = rng.normal(0.0, 0.3, n_clusters)

    def draw(m: int, spread: float) -> tuple[np.ndarray, np.ndarray]:
        cluster = rng.integers(0, n_clusters, m)
        x = centres[cluster] + rng.standard_normal((m, dim)) * spread
        return x / np.linalg.norm(x, axis=1, keepdims=True), cluster

    unit, cluster = draw(n, 1.2)
    docs = unit * rng.lognormal(log_mean[cluster], 0.4)[:, None]
    queries, _ = draw(nq, 1.5)
    return docs.astype(np.float32), queries.astype(np.float32)


def _breadth(kind: str) -> dict[str, int]:
    return next((v for key, v in BREADTH.items() if kind.startswith(key)), {})


def _median_us(calls: list[Any]) -> float:
    """Median wall time of the ``calls`` in microseconds (each timed alone)."""
    times = []
    for call in calls:
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def workload(
    *,
    n: int = 20_000,
    dim: int = 384,
    n_single: int = 100,
    batch: int = 100,
    k: int = 10,
    kinds: tuple[str, ...] = KINDS,
    alphas: tuple[float, ...] = ALPHAS,
    batch_repeats: int = 5,
    seed: int = 0,
) -> dict[str, Any]:
    """Run every case on the normrank that ``import normrank`` finds. Returns ``{"normrank":
    its path, "cases": {case name: {"ids", "scores", "us"}}}``; ``us`` is the median per call
    (of the ``n_single`` single queries, each timed once after a first untimed pass, or of
    ``batch_repeats`` searches of one batch of ``batch`` queries); a kind's build time is its
    own case (``"<kind> build"``, no ids)."""
    import normrank
    from normrank import NormIndex

    docs, queries = generate(n, dim, max(n_single, batch), seed=seed)
    cases: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        t0 = time.perf_counter()
        index = NormIndex(dim, factory=kind, **_breadth(kind))
        if "IVF" in kind:
            index.train(docs)
        index.add(docs)
        cases[f"{kind} build"] = {"us": (time.perf_counter() - t0) * 1e6}
        for alpha in alphas:
            singles = [index.search(q, k, alpha=alpha) for q in queries[:n_single]]
            cases[f"{kind} alpha={alpha:+.1f} single"] = {
                "ids": np.concatenate([i for _, i in singles]).tolist(),
                "scores": np.concatenate([s for s, _ in singles]).tolist(),
                "us": _median_us([partial(index.search, q, k, alpha=alpha) for q in queries[:n_single]]),
            }
            block = queries[:batch]
            s, i = index.search(block, k, alpha=alpha)
            cases[f"{kind} alpha={alpha:+.1f} batch{batch}"] = {
                "ids": i.tolist(),
                "scores": s.tolist(),
                "us": _median_us([partial(index.search, block, k, alpha=alpha)] * batch_repeats),
            }
    return {"normrank": str(Path(normrank.__file__).resolve().parent), "cases": cases}


def compare_results(old: dict[str, Any], new: dict[str, Any]) -> tuple[list[str], list[str]]:
    """``(differences, within_ulp)`` between two workloads' results. Differences: a case missing
    on one side, ids not equal (rows compared whole), or scores further apart than one float32
    ulp (of the larger magnitude). ``within_ulp``: the cases whose ids are equal and whose
    scores are not bit for bit equal but within that ulp."""
    differences, within_ulp = [], []
    for name in sorted(set(old["cases"]) | set(new["cases"])):
        a, b = old["cases"].get(name), new["cases"].get(name)
        if a is None or b is None:
            differences.append(f"{name}: only in {'new' if a is None else 'old'}")
            continue
        if "ids" not in a:
            continue
        if a["ids"] != b["ids"]:
            rows = sum(x != y for x, y in zip(a["ids"], b["ids"], strict=True))
            differences.append(f"{name}: ids differ in {rows} of {len(a['ids'])} queries")
            continue
        sa = np.asarray(a["scores"], dtype=np.float32)
        sb = np.asarray(b["scores"], dtype=np.float32)
        if np.array_equal(sa, sb):
            continue
        with np.errstate(invalid="ignore"):  # (-inf padding on both sides: equal, skipped below)
            gap = np.where(sa == sb, 0.0, np.abs(sa.astype(np.float64) - sb))
        ulp = np.spacing(np.maximum(np.abs(sa), np.abs(sb)))
        label = f"{name}: {int((sa != sb).sum())} scores"
        (within_ulp if (gap <= ulp).all() else differences).append(label)
    return differences, within_ulp


def _run_tree(tree: Path, out: Path, args: argparse.Namespace, settings: list[str]) -> dict[str, Any]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(dict.fromkeys(_THREAD_VARS, "1"), PYTHONPATH=str(tree))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(out), "--n", str(args.n)]
    cmd += [f"--set={item}" for item in settings]
    cmd += ["--n-single", str(args.n_single), "--seed", str(args.seed)]
    cmd += ["--kinds", *args.kinds, "--alphas", *map(str, args.alphas)]
    subprocess.run(cmd, env=env, check=True, cwd=tempfile.gettempdir())
    got = json.loads(out.read_text())
    if Path(got["normrank"]) != (tree / "normrank").resolve():
        raise RuntimeError(f"the subprocess for {tree} imported normrank from {got['normrank']}")
    return got


def _spread(values: list[float]) -> str:
    return f"{min(values):.0f}..{max(values):.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path)
    parser.add_argument("--new", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--n-single", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", nargs="+", default=list(KINDS))
    parser.add_argument("--alphas", nargs="+", type=float, default=list(ALPHAS))
    parser.add_argument("--out", type=Path, help="write the table (markdown) here too")
    parser.add_argument(
        "--new-setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set normrank.settings.NAME in the new tree's runs (e.g. CACHE_FRACTION=inf, "
        "FLAT_BATCH_ROWS_PER_EF=0: its methods as the old tree's, to compare a refactor alone)",
    )
    parser.add_argument("--set", action="append", default=[], help=argparse.SUPPRESS)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        from normrank import settings

        for item in args.set:
            name, _, value = item.partition("=")
            if not hasattr(settings, name):
                parser.error(f"normrank.settings has no {name} in this tree")
            setattr(settings, name, type(getattr(settings, name))(float(value)))
        got = workload(
            n=args.n,
            n_single=args.n_single,
            kinds=tuple(args.kinds),
            alphas=tuple(args.alphas),
            seed=args.seed,
        )
        args.child.write_text(json.dumps(got))
        return 0
    if args.old is None or args.new is None:
        parser.error("--old and --new are required")
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    runs: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for side in ("old", "new") if r % 2 == 0 else ("new", "old"):
                runs[side].append(
                    _run_tree(
                        trees[side],
                        Path(tmp) / f"{side}-{r}.json",
                        args,
                        args.new_setting if side == "new" else [],
                    )
                )
    # Each side against its own first round (the runs are deterministic), then old against new.
    pairs = [(f"old round {r}", runs["old"][0], got) for r, got in enumerate(runs["old"][1:], 1)]
    pairs += [(f"new round {r}", runs["new"][0], got) for r, got in enumerate(runs["new"][1:], 1)]
    pairs.append(("old vs new", runs["old"][0], runs["new"][0]))
    differ, ulp = [], []
    for label, a, b in pairs:
        d, u = compare_results(a, b)
        differ += [f"{label}: {x}" for x in d]
        ulp += [f"{label}: {x} within one float32 ulp" for x in u]
    if differ:
        verdict = "DIFFERENT (listed below)"
    elif ulp:
        verdict = "ids identical; scores identical or within one float32 ulp (listed below)"
    else:
        verdict = "ids and scores identical, bit for bit, in every case and round"
    lines = [
        f"old: {trees['old']}  new: {trees['new']}  rounds: {args.rounds} (alternating)  n: {args.n}  "
        f"single queries: {args.n_single}  wall: {time.perf_counter() - t_start:.0f} s",
        "",
        f"Results: {verdict}",
        *[f"- {x}" for x in differ + ulp],
        "",
        "| case | old µs (min..max) | new µs (min..max) | new/old (medians) |",
        "|---|---|---|---|",
    ]
    for name in runs["old"][0]["cases"]:
        old_us = [run["cases"][name]["us"] for run in runs["old"]]
        new_us = [run["cases"][name]["us"] for run in runs["new"]]
        ratio = statistics.median(new_us) / statistics.median(old_us)
        lines.append(f"| {name} | {_spread(old_us)} | {_spread(new_us)} | {ratio:.2f} |")
    ratios = [
        statistics.median([run["cases"][name]["us"] for run in runs["new"]])
        / statistics.median([run["cases"][name]["us"] for run in runs["old"]])
        for name in runs["old"][0]["cases"]
        if "build" not in name
    ]
    lines += ["", f"Search cases: geometric mean of new/old {float(np.exp(np.mean(np.log(ratios)))):.3f}"]
    text = "\n".join(lines)
    sys.stdout.write(text + "\n")
    if args.out:
        args.out.write_text(text + "\n")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
