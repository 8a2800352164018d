"""The Qdrant Edge rows of the recall-latency frontier (issue 48, deliverable 1; not a test).

``score(q, d) = cos(q, d) * ||d||**alpha`` over one Qdrant Edge shard (qdrant-edge-py, Qdrant's
engine embedded; m = 16, ef_construct = 100, built once and kept in ``$NORMRANK_CACHE/bench-edge``
by qdrant_edge_bench.open_or_build). Per ``hnsw_ef`` and alpha, each method is a set of points
(microseconds per query, recall@10):

* ``plain``: Edge's nearest top-10 at ``hnsw_ef`` (the denominator of every ratio);
* ``normrank``: ``QdrantEdgeNormIndex.search(q, 10, alpha=a)`` at its defaults, ``hnsw_ef`` set
  (64, 128, 512); also ``n_tail=0``;
* ``formula K'`` (Edge's own way, the peers' method): one request, a ``Prefetch`` of the K'
  nearest by cosine (``hnsw_ef = max(ef, K')``: the beam widened to K') and the query
  ``Formula($score * norm**alpha)`` over it, ``limit 10``; the payload key ``"norm"`` is the one
  the normrank backend stores (and indexes) for every point;
* ``client K'``: the same K' nearest re-scored in numpy (what the formula itself costs).

An untimed pass then times normrank's engine calls one by one (``breakdown``: calls, first and
later rounds, the Python between them, widened share; "engine alone / plain": the engine calls'
time over the plain query's, the ratio normrank would have with no Python at all).

Recall@10 is against numpy's exact weighted top-10 over every point (bench_exact.py, ties
counted). Time is the process's CPU time (``--clock wall``: wall clock) per query, one search
thread (``max_search_threads=1``), methods interleaved in rounds (their order rotates every round),
medians over rounds. Single queries: one call per query; batch: one ``query_batch`` (normrank: one
``search``) of ``--batch`` queries. Results: results/edge_frontier.{json,md}.

    python benchmarks/edge_frontier.py           # 20k generated like the cached MiniLM set (~11 min)
    python benchmarks/edge_frontier.py --quick   # 3k, two alphas, one ef: a smoke test
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import argparse
import json
import time
from pathlib import Path

import numpy as np
import qdrant_edge as qe
from bench_data import real_embeddings, synthetic_like
from bench_exact import exact_top, recall, unit
from qdrant_edge_bench import open_or_build

from normrank.backends.edge_shard import NORM

K = 10
KPRIMES = (10, 40, 100, 200, 400, 1000, 4000)
ALPHAS = (-1.0, -0.5, 0.5, 1.0)
EFS = (64, 128, 512)  # the brief's 64 / 128, and 512 where the plain query costs more
CLIENT_KPRIMES = (100, 400, 1000, 4000)  # Nearest K' re-scored in numpy: the formula's own cost
TARGETS = (0.99, 0.995)
RESULTS = Path(__file__).resolve().parent / "results"


def _loadavg() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return float("nan")


def plain_req(v: list[float], ef: int):
    return qe.QueryRequest(limit=K, query=qe.Query.Nearest(v), params=qe.SearchParams(hnsw_ef=ef))


def formula_req(v: list[float], ef: int, kp: int, formula):
    pre = qe.Prefetch(limit=kp, query=qe.Query.Nearest(v), params=qe.SearchParams(hnsw_ef=max(ef, kp)))
    return qe.QueryRequest(limit=K, query=formula, prefetches=[pre])


def make_formula(alpha: float):
    ex = qe.Expression
    return qe.Formula(ex.Mult([ex.Variable("$score"), ex.Pow(ex.Variable(NORM), ex.Constant(alpha))]))


def ids_of(points_lists) -> np.ndarray:
    out = np.full((len(points_lists), K), -1, dtype=np.int64)
    for i, pts in enumerate(points_lists):
        got = [int(p.id) for p in pts][:K]
        out[i, : len(got)] = got
    return out


def client_top(points_lists, w: np.ndarray) -> np.ndarray:
    """Nearest K' re-scored here: ``cos * w[id]`` (ids are storage positions), best K kept."""
    out = np.full((len(points_lists), K), -1, dtype=np.int64)
    for i, pts in enumerate(points_lists):
        pid = np.fromiter((p.id for p in pts), np.int64, len(pts))
        sc = np.fromiter((p.score for p in pts), np.float64, len(pts)) * w[pid]
        top = pid[np.argsort(-sc, kind="stable")[:K]]
        out[i, : top.size] = top
    return out


def methods(ei, shard, qs: np.ndarray, ef: int, alpha: float, batch: bool, w: np.ndarray) -> dict:
    """``{name: (run() -> ids (nq, K))}`` for one ef, alpha and query set; ``w``: norm**alpha."""
    vecs = [v.tolist() for v in unit(qs)]
    formula = make_formula(alpha)

    def engine(build, post=ids_of):
        if batch:
            return lambda: post(shard.query_batch(qe.QueryBatchRequest([build(v) for v in vecs])))
        return lambda: post([shard.query(build(v)) for v in vecs])

    def nr(n_tail=None):
        def f():
            ei.hnsw_ef, ei.n_tail = ef, n_tail
            if batch:
                return ei.search(qs, K, alpha=alpha)[1]
            return np.concatenate([ei.search(qs[i], K, alpha=alpha)[1] for i in range(qs.shape[0])])

        return f

    out = {"plain": engine(lambda v: plain_req(v, ef)), "normrank": nr(), "normrank n_tail=0": nr(0)}
    for kp in KPRIMES:
        out[f"formula K'={kp}"] = engine(lambda v, kp=kp: formula_req(v, ef, kp, formula))
    for kp in CLIENT_KPRIMES:
        out[f"client K'={kp}"] = engine(
            lambda v, kp=kp: plain_req_k(v, ef, kp), post=lambda pl: client_top(pl, w)
        )
    return out


def plain_req_k(v: list[float], ef: int, kp: int):
    return qe.QueryRequest(limit=kp, query=qe.Query.Nearest(v), params=qe.SearchParams(hnsw_ef=max(ef, kp)))


def breakdown(ei, qs: np.ndarray, ef: int, alpha: float, clock) -> dict:
    """normrank's single queries taken apart (untimed pass, after the timed ones): engine calls
    per query, engine us in the first round and in the later ones, the rest (Python), and the
    share of queries whose band was widened. Wraps the instance's ``_query`` (no library change)."""
    calls: list[tuple[int, float]] = []
    orig = ei._query

    def timed_query(reqs):
        t0 = clock()
        try:
            return orig(reqs)
        finally:
            calls.append((len(reqs), clock() - t0))

    ei.hnsw_ef, ei.n_tail = ef, None
    ei._query = timed_query
    first = later = total = 0.0
    n_calls = widened = 0
    try:
        for i in range(qs.shape[0]):
            calls.clear()
            t0 = clock()
            ei.search(qs[i], K, alpha=alpha)
            total += clock() - t0
            widened += ei.last_widened
            n_calls += len(calls)
            first += calls[0][1]
            later += sum(c[1] for c in calls[1:])
    finally:
        del ei._query
    nq = qs.shape[0]
    return {
        "calls_per_query": n_calls / nq,
        "widened_share": widened / nq,
        "us_first_round": 1e6 * first / nq,
        "us_later_rounds": 1e6 * later / nq,
        "us_python": 1e6 * (total - first - later) / nq,
        "us_total": 1e6 * total / nq,
    }


def timed(fns: dict, rounds: int, nq: int, clock) -> dict[str, list[float]]:
    """Per method, the us per query of each round (methods interleaved, order rotating)."""
    names = list(fns)
    for n in names:
        fns[n]()  # warm-up
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            t0 = clock()
            fns[n]()
            out[n].append(1e6 * (clock() - t0) / nq)
    return out


def run(args) -> dict:
    docs, queries, used = real_embeddings(("scifact", "cacm"), encode_missing=False)
    queries = queries[np.random.default_rng(0).permutation(queries.shape[0])].astype(np.float32)
    x, q = synthetic_like(docs, queries, args.n, max(args.single, args.batch), seed=1)
    norms = np.linalg.norm(x, axis=1)
    label = f"edgefront-gen{args.n // 1000}k"
    t0 = time.perf_counter()
    ei, build_s = open_or_build(x, label)
    print(
        f"shard {label}: {f'built in {build_s:.0f} s' if build_s else 'opened'}; load {_loadavg()}",
        flush=True,
    )
    xu = unit(x)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    alphas = (-1.0, 1.0) if args.quick else ALPHAS
    efs = (64,) if args.quick else tuple(args.efs)
    sets = (("single", q[: args.single], False), ("batch", q[: args.batch], True))
    rows, parts = [], []
    for ef in efs:
        for alpha in alphas:
            for kind, qs, batch in sets:
                ref = exact_top(xu, norms, unit(qs), alpha)
                cos_ref = exact_top(xu, np.ones_like(norms), unit(qs), 0.0)
                fns = methods(ei, ei.shard, qs, ef, alpha, batch, norms.astype(np.float64) ** alpha)
                rec = {n: recall(f(), ref) for n, f in fns.items()}
                load0 = _loadavg()
                t = timed(fns, args.rounds if not batch else args.rounds * 2, qs.shape[0], clock)
                load1 = _loadavg()
                plain_us = float(np.median(t["plain"]))
                # Ratio per round (the methods of a round ran side by side), then the median.
                for n in fns:
                    ratios = np.array(t[n]) / np.array(t["plain"])
                    rows.append(
                        dict(
                            ef=ef,
                            alpha=alpha,
                            nq=kind,
                            method=n,
                            recall=rec[n],
                            us=float(np.median(t[n])),
                            ratio=float(np.median(ratios)),
                            ratio_min=float(ratios.min()),
                            ratio_max=float(ratios.max()),
                            plain_us=plain_us,
                            plain_cos_recall=recall(fns["plain"](), cos_ref) if n == "plain" else None,
                            load=[load0, load1],
                        )
                    )
                    r = rows[-1]
                    print(
                        f"ef {ef} a {alpha:+} {kind:6} {n:16} rec {r['recall']:.4f} {r['us']:9.0f} us "
                        f"x{r['ratio']:.2f} load {load0:.2f}-{load1:.2f}",
                        flush=True,
                    )
                if not batch:
                    parts.append(
                        dict(ef=ef, alpha=alpha, load=_loadavg(), **breakdown(ei, qs, ef, alpha, clock))
                    )
                    print(json.dumps(parts[-1]), flush=True)
    ei.close()
    return dict(
        source=f"synthetic_like of MiniLM-L6 {'+'.join(used)} (cached): {args.n} docs, seed 1",
        n=args.n,
        norms_p5_p50_p95=[float(v) for v in np.percentile(norms, [5, 50, 95])],
        build_s=build_s,
        clock=args.clock,
        rounds=args.rounds,
        single=args.single,
        batch=args.batch,
        shard={"m": 16, "ef_construct": 100, "max_search_threads": 1},
        qdrant_edge_py=_version(),
        cpu=_cpu(),
        seconds=time.perf_counter() - t0,
        rows=rows,
        normrank_breakdown=parts,
    )


def _version() -> str:
    from importlib.metadata import version

    try:
        return version("qdrant-edge-py")
    except Exception:
        return "?"


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} x{os.cpu_count()}"
    except OSError:
        pass
    return "?"


def cheapest(rows: list[dict], method_prefix: str, target: float) -> dict | None:
    ok = [r for r in rows if r["method"].startswith(method_prefix) and r["recall"] >= target]
    if method_prefix == "normrank":  # the default point alone
        ok = [r for r in ok if r["method"] == "normrank"]
    return min(ok, key=lambda r: r["us"]) if ok else None


def render(result: dict) -> str:
    rows = result["rows"]
    lines = [
        "# Qdrant Edge frontier (benchmarks/edge_frontier.py)",
        "",
        f"{result['source']}; norms p5/p50/p95 "
        + " / ".join(f"{v:.2f}" for v in result["norms_p5_p50_p95"])
        + f"; qdrant-edge-py {result['qdrant_edge_py']}; {result['cpu']}; clock {result['clock']}; "
        f"{result['single']} single queries, a batch of {result['batch']}; {result['rounds']} rounds "
        f"(batches {2 * result['rounds']}); {result['seconds']:.0f} s.",
        "",
        "## us per query at recall >= 0.99 / 0.995 (ratio to plain Edge at the same hnsw_ef)",
        "",
        "| hnsw_ef | nq | alpha | plain us (cos recall) | normrank [its recall] | normrank n_tail=0 "
        "| formula (cheapest K') | client re-score (cheapest K') | load |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    keys = sorted(
        {(r["ef"], r["nq"], r["alpha"]) for r in rows}, key=lambda t: (t[0], t[1] != "single", t[2])
    )
    for ef, nq, a in keys:
        sel = [r for r in rows if (r["ef"], r["nq"], r["alpha"]) == (ef, nq, a)]
        plain = next(r for r in sel if r["method"] == "plain")

        def cell(prefix: str, sel=sel) -> str:
            parts = []
            for t in TARGETS:
                c = cheapest(sel, prefix, t)
                if c is None:
                    parts.append("—")
                else:
                    kp = c["method"].split("=")[1] + " " if "K'=" in c["method"] else ""
                    parts.append(f"{kp}{c['us']:.0f} ({c['ratio']:.2f})")
            return " / ".join(parts)

        nr = next(r for r in sel if r["method"] == "normrank")
        lo = min(min(r["load"]) for r in sel)
        hi = max(max(r["load"]) for r in sel)
        lines.append(
            f"| {ef} | {nq} | {a:+} | {plain['us']:.0f} ({plain['plain_cos_recall']:.3f}) | "
            f"{cell('normrank')} [{nr['recall']:.4f}] | {cell('normrank n_tail')} | {cell('formula')} | "
            f"{cell('client')} | {lo:.1f}–{hi:.1f} |"
        )
    lines += [
        "",
        "## normrank's single queries taken apart (untimed pass: engine calls timed one by one)",
        "",
        "| hnsw_ef | alpha | engine calls / query | widened share | first round us | later rounds us "
        "| Python us | total us | engine alone / plain | load |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for b in result.get("normrank_breakdown", []):
        plain = next(
            (
                r["us"]
                for r in rows
                if (r["ef"], r["nq"], r["alpha"], r["method"]) == (b["ef"], "single", b["alpha"], "plain")
            ),
            float("nan"),
        )
        floor = (b["us_first_round"] + b["us_later_rounds"]) / plain
        lines.append(
            f"| {b['ef']} | {b['alpha']:+} | {b['calls_per_query']:.2f} | {b['widened_share']:.2f} | "
            f"{b['us_first_round']:.0f} | {b['us_later_rounds']:.0f} | {b['us_python']:.0f} | "
            f"{b['us_total']:.0f} | {floor:.2f} | {b['load']:.2f} |"
        )
    lines += [
        "",
        "## Every point",
        "",
        "| hnsw_ef | nq | alpha | method | recall@10 | us | ratio (min–max) | load |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['ef']} | {r['nq']} | {r['alpha']:+} | {r['method']} | {r['recall']:.4f} | {r['us']:.0f} | "
            f"{r['ratio']:.2f} ({r['ratio_min']:.2f}–{r['ratio_max']:.2f}) | "
            f"{r['load'][0]:.2f}–{r['load'][1]:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--single", type=int, default=60)
    p.add_argument("--batch", type=int, default=50)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    p.add_argument("--efs", type=int, nargs="+", default=list(EFS))
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=str(RESULTS / "edge_frontier"))
    args = p.parse_args()
    if args.quick:
        args.n, args.single, args.batch, args.rounds = 3000, 20, 20, 2
    result = run(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(render(result))
    print(render(result).split("## Every point")[0])


if __name__ == "__main__":
    main()
