"""Single queries at the cheapest HNSW breadth: where normrank's added time goes, and the floor of
any scan exact w.r.t. the trusted depth (issue 48, deliverable 3).

    python benchmarks/single_query_floor.py                     # 20k generated + the cached 8.4k real set
    python benchmarks/single_query_floor.py --save before.json  # also keep ids / scores per alpha
    python benchmarks/single_query_floor.py --compare before.json

HNSW32 at efSearch 64 (or the cheapest ef on the ladder whose plain recall@10 against numpy is
>= 0.995), 200 single queries, one thread, this thread's CPU time; every timed function runs
over all queries once per pass, the functions interleaved, medians of the passes. Per alpha:

* plain: FAISS cosine top-10; whole: ``NormIndex.search`` of one query;
* its stages on the same inputs: FAISS at the plan's depth, the re-score of those candidates,
  the weight-order scan (``ann._scan_one``), rows scanned (``return_stats``); the fixed
  overhead is whole minus the three;
* the floor: the fewest rows any scan exact w.r.t. the trusted depth must read, the count of
  weights above ``weight_limit(final k-th score, trusted cosine)`` (the prefix length at which
  :func:`normrank.search.bound.unseen_can_beat` first holds), in numpy per query; and what an
  oracle reading exactly those rows costs: a float32 product over a contiguous copy of the
  prefix (numpy/BLAS sgemv and FAISS's row kernel, the faster per query), and the int8 codes'
  scan (:mod:`normrank.search.scan_codes`, the query's codes made included).

Writes ``results/single_query_floor.json`` (numbers) and prints a markdown table. Not a test.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import faiss  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import speed  # noqa: E402
from bench_data import real_embeddings, synthetic_like  # noqa: E402

from normrank import NormIndex  # noqa: E402
from normrank.search import ann  # noqa: E402
from normrank.search.bound import cosine_slack, unseen_can_beat, weight_limit  # noqa: E402
from normrank.search.faiss_info import ann_params  # noqa: E402
from normrank.search.plan import SearchOptions, SearchStats, plan_search  # noqa: E402
from normrank.search.scan_codes import (  # noqa: E402
    CHUNK,
    BytePool,
    QueryCodes,
    ScanCodes,
)
from normrank.search.searcher import _ann_inputs  # noqa: E402

ALPHAS = (-1.0, -0.5, 0.5, 1.0)
K = 10
CLOCK = time.thread_time
LADDER = (64, 96, 128, 192, 256)
ROOT = Path(__file__).resolve().parent


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)).astype(np.float32)


def top_ids(scores: np.ndarray, k: int = K) -> np.ndarray:
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


def recall(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / ref.shape[1] for a, b in zip(got, ref, strict=True)]))


def interleaved(fns: dict, nq: int, passes: int) -> dict[str, np.ndarray]:
    """Per function, this thread's CPU seconds per query ``(passes, nq)``; one warm pass first,
    then the functions in turn within every pass (what the machine's load does to one, it does
    to the others)."""
    for fn in fns.values():
        for i in range(nq):
            fn(i)
    out = {name: np.zeros((passes, nq)) for name in fns}
    for p in range(passes):
        for name, fn in fns.items():
            t = out[name][p]
            for i in range(nq):
                t0 = CLOCK()
                fn(i)
                t[i] = CLOCK() - t0
    return out


def us(t: np.ndarray) -> float:
    """Median over passes of the mean per query, microseconds."""
    return 1e6 * float(np.median(t.mean(axis=1)))


def build(x: np.ndarray, uq: np.ndarray, ef_forced: int | None) -> tuple[NormIndex, int, float]:
    ni = NormIndex(x.shape[1], factory="HNSW32")
    ni.add(x)
    hnsw = faiss.downcast_index(ni.faiss_index.index)
    ref = top_ids(uq @ unit(x).T)
    for ef in LADDER if ef_forced is None else (ef_forced,):
        hnsw.hnsw.efSearch = ef
        rec = recall(ni.faiss_index.search(uq, K)[1], ref)
        if rec >= 0.995:
            return ni, ef, rec
    return ni, ef, rec


def measure(label: str, x: np.ndarray, q: np.ndarray, passes: int, ef_forced: int | None) -> dict:
    n = x.shape[0]
    uq = unit(q)
    ni, ef, plain_recall = build(x, uq, ef_forced)
    ux = unit(x)
    cos_all = uq.astype(np.float64) @ ux.T.astype(np.float64)  # the reference's cosines
    norms = np.linalg.norm(x.astype(np.float64), axis=1)
    result = {"set": label, "n": n, "ef": ef, "plain_recall": plain_recall, "alphas": {}}
    print(
        f"{label}: n {n}, efSearch {ef}, plain recall {plain_recall:.4f}, load {os.getloadavg()}", flush=True
    )
    target = ni._target()
    for a in ALPHAS:
        result["alphas"][str(a)] = alpha_row(ni, target, ux, q, uq, cos_all, norms, a, passes)
    return result


def floor_rows(w_sorted: np.ndarray, kth: float, c_t: float, d: int) -> int:
    """Rows in decreasing weight order (``w_sorted``) a scan must read before
    :func:`~normrank.search.bound.unseen_can_beat` holds for ``kth`` and trusted cosine ``c_t``."""
    if c_t + cosine_slack(d) > 0:
        return int(np.count_nonzero(w_sorted > weight_limit(kth, c_t, d)))
    return w_sorted.size if unseen_can_beat(kth, c_t, w_sorted[0], w_sorted[-1], d) else 0


def simulated_scan(
    scores: np.ndarray, cand: np.ndarray, by_weight: np.ndarray, w_sorted: np.ndarray, c_t: float, d: int
) -> tuple[np.ndarray, int]:
    """``(top-k positions, rows read)`` of a scan exact w.r.t. the trusted cosine ``c_t``, in numpy:
    the candidates ``cand``, then documents in weight order (``by_weight``) 512 at a time until
    the bound holds for the k-th score so far; ``scores``: the reference's scores of every document."""
    seen = np.unique(cand[cand >= 0])
    scanned = 0
    while True:
        kth = np.sort(scores[seen])[-K] if seen.size >= K else -np.inf
        need = floor_rows(w_sorted, float(kth), c_t, d)
        if need <= scanned:
            top = seen[np.argsort(-scores[seen], kind="stable")[:K]]
            return top, scanned
        hi = min(need, scanned + 512)
        seen = np.union1d(seen, by_weight[scanned:hi])
        scanned = hi


def alpha_row(ni, target, ux, q, uq, cos_all, norms, a: float, passes: int) -> dict:
    """One alpha's timings, rows and floor (see the module docstring); ``ux``: the unit documents."""
    n, d = ux.shape
    plain = ni.faiss_index
    plan = plan_search(SearchOptions(K, a, ni.k_factor, breadth=ann_params(target.inner)), target.n_stored)
    weights, lookup, order = _ann_inputs(target, plan, a)
    # The stages' inputs, per query, as the whole call makes them.
    cands = [ann._search(target.index, uq[i : i + 1], plan.depth, plan.ef) for i in range(len(uq))]
    trust = min(plan.depth, max(K, plan.trust))
    stats_all = [SearchStats() for _ in uq]
    got = [ni.search(q[i : i + 1], K, alpha=a, return_stats=True) for i in range(len(q))]
    scores = np.concatenate([g[0] for g in got])
    ids = np.concatenate([g[1] for g in got])
    scanned = np.array([g[2].scanned for g in got])
    certified = np.array([bool(g[2].n_certified) for g in got])
    # Reference: numpy's exact weighted top-10 over the whole collection (ids are positions).
    w64 = norms**a
    ref = top_ids(cos_all * w64)
    weighted_recall = recall(ids, ref)
    tops = []
    for i in range(len(uq)):
        cos, cand = cands[i]
        pos = lookup(cand[0])
        rescored = cos[0] * weights[pos]
        top = np.argsort(-rescored, kind="stable")[:K]
        tops.append(((rescored[top], pos[top]), pos, float(cos[0, trust - 1])))
    # The floor: weights above the limit the final k-th score and the trusted cosine set.
    w_sorted = np.sort(weights.astype(np.float64))[::-1]
    floor = np.zeros(len(uq), dtype=np.int64)
    floor_depth = np.zeros(len(uq), dtype=np.int64)
    for i in range(len(uq)):
        floor[i] = floor_rows(w_sorted, float(scores[i, -1]), tops[i][2], d)
        # the same with the whole depth trusted (its last cosine): what the trusted rank costs
        floor_depth[i] = floor_rows(w_sorted, float(scores[i, -1]), float(cands[i][0][0, -1]), d)
    # The recall a scan trusting the whole depth would reach (simulated; the plan's trust beside it).
    by_weight = np.argsort(-weights, kind="stable")
    sims = {}
    for name, rank in (("trust", trust), ("depth", plan.depth)):
        sim = [simulated_scan(cos_all[i] * w64, lookup(cands[i][1][0]), by_weight, w_sorted,
                              float(cands[i][0][0, rank - 1]), d) for i in range(len(uq))]  # fmt: skip
        sims[name] = (recall(np.array([t for t, _ in sim]), ref), float(np.mean([r for _, r in sim])))
    prefix = np.ascontiguousarray(ux[by_weight])
    deepest = int(floor.max())
    codes = ScanCodes(d, n, (deepest // CHUNK + 1) * CHUNK * d)
    codes.grow(deepest, lambda lo, hi: prefix[lo:hi])
    out = np.empty(n, dtype=np.float32)

    def sgemv(i: int) -> None:
        if floor[i]:
            prefix[: floor[i]] @ uq[i]

    def row_kernel(i: int) -> None:
        if floor[i]:
            faiss.fvec_inner_products_ny(
                faiss.swig_ptr(out), faiss.swig_ptr(uq[i]), faiss.swig_ptr(prefix), d, int(floor[i])
            )

    def int8(i: int) -> None:
        if not floor[i]:
            return
        qc = QueryCodes(uq[i])
        kth = float(scores[i, -1])
        for lo in range(0, int(floor[i]), CHUNK):
            w_a = float(w_sorted[lo])
            codes.contenders(qc, lo, min(int(floor[i]), lo + CHUNK), kth / w_a if w_a > 0 else np.inf)
        qc.close()

    def stages(i: int) -> None:  # the three stages back to back: the whole call's cache contents
        cos, cand = ann._search(target.index, uq[i : i + 1], plan.depth, plan.ef)
        ann._rerank_one(cos[0], cand[0], uq[i], plan, weights=weights, lookup=lookup, order=order,
                        stats=stats_all[i])  # fmt: skip

    def whole_rows_only(i: int) -> None:  # the same call, its scan reading float rows, no int8 codes
        pool, order._codes_pool = order._codes_pool, BytePool(0)
        try:
            ni.search(q[i : i + 1], K, alpha=a)
        finally:
            order._codes_pool = pool

    fns = {
        "plain": lambda i: plain.search(uq[i : i + 1], K),
        "whole": lambda i: ni.search(q[i : i + 1], K, alpha=a),
        "whole_rows_only": whole_rows_only,
        "stages": stages,
        "faiss_depth": lambda i: ann._search(target.index, uq[i : i + 1], plan.depth, plan.ef),
        "rescore": lambda i: ann._rerank_one(
            cands[i][0][0],
            cands[i][1][0],
            uq[i],
            plan,
            weights=weights,
            lookup=lookup,
            order=None,
            stats=stats_all[i],
        ),
        "scan": lambda i: ann._scan_one(
            uq[i],
            tops[i][0],
            tops[i][1],
            tops[i][2],
            weights=weights,
            order=order,
            band=plan.band,
            stats=stats_all[i],
        ),
        "oracle_sgemv": sgemv,
        "oracle_row_kernel": row_kernel,
        "oracle_int8": int8,
    }
    t = interleaved(fns, len(uq), passes)
    oracle_float = np.minimum(t["oracle_sgemv"], t["oracle_row_kernel"])
    row = {name: us(v) for name, v in t.items()}
    row["oracle_float"] = us(oracle_float)
    row["oracle_best"] = us(np.minimum(oracle_float, t["oracle_int8"]))
    row["overhead"] = row["whole"] - row["stages"]  # the call's own cost: checks, plan, lookups, ids
    big = floor >= 1024  # per-row costs where the fixed cost of a call is small beside the rows
    for name in ("oracle_sgemv", "oracle_row_kernel", "oracle_int8"):
        per_q = np.median(t[name], axis=0)
        row[f"{name}_ns_per_row"] = float(1e9 * per_q[big].sum() / max(floor[big].sum(), 1))
    row.update(
        depth=plan.depth, trust=trust, band=plan.band, rows_scanned=float(scanned.mean()),
        rows_floor=float(floor.mean()), floor_p50=float(np.median(floor)), floor_max=deepest,
        floor_trust_depth=float(floor_depth.mean()),
        simulated_recall=sims["trust"][0], simulated_rows=sims["trust"][1],
        simulated_recall_depth=sims["depth"][0], simulated_rows_depth=sims["depth"][1],
        certified=float(certified.mean()), recall=weighted_recall,
        ids=ids.tolist(), scores=scores.tolist(),
    )  # fmt: skip
    print(
        f"  alpha {a:+g}: plain {row['plain']:.0f} whole {row['whole']:.0f} (faiss@{plan.depth} "
        f"{row['faiss_depth']:.0f}, rescore {row['rescore']:.0f}, scan {row['scan']:.0f}, overhead "
        f"{row['overhead']:.0f}; stages fused {row['stages']:.0f}, rows only {row['whole_rows_only']:.0f}) "
        f"rows {row['rows_scanned']:.0f} floor {row['rows_floor']:.0f} oracle "
        f"{row['oracle_best']:.0f} (sgemv {row['oracle_sgemv']:.0f}, kernel {row['oracle_row_kernel']:.0f}, "
        f"int8 {row['oracle_int8']:.0f}) recall {weighted_recall:.4f} (simulated: "
        f"{sims['trust'][0]:.4f} in {sims['trust'][1]:.0f} rows; the depth trusted {sims['depth'][0]:.4f} in "
        f"{sims['depth'][1]:.0f} rows) load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    return row


def table(results: list[dict]) -> list[str]:
    lines = [
        "| set | ef | alpha | plain us | whole us | ratio | added us | FAISS at depth us | re-score us | "
        "scan us alone / in the call | fixed overhead us | rows read | floor rows (p50) | floor, depth trusted | "
        "oracle scan us | "
        "oracle added us | whole, rows only us | recall |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for a, v in r["alphas"].items():
            in_call = v["stages"] - v["faiss_depth"] - v["rescore"]
            oracle_added = v["whole"] - v["plain"] - in_call + v["oracle_best"]
            lines.append(
                f"| {r['set']} | {r['ef']} | {float(a):+g} | {v['plain']:.0f} | {v['whole']:.0f} | "
                f"{v['whole'] / v['plain']:.2f} | {v['whole'] - v['plain']:.0f} | {v['faiss_depth']:.0f} "
                f"(depth {v['depth']}) | {v['rescore']:.0f} | {v['scan']:.0f} / {in_call:.0f} | {v['overhead']:.0f} | "
                f"{v['rows_scanned']:.0f} | {v['rows_floor']:.0f} ({v['floor_p50']:.0f}) | "
                f"{v['floor_trust_depth']:.0f} | {v['oracle_best']:.0f} | "
                f"{oracle_added:.0f} | {v['whole_rows_only']:.0f} | {v['recall']:.4f} |"
            )
    lines += [
        "",
        "| set | ef | alpha | trusted rank / depth | rows read | recall | "
        "simulated at the plan's trust: recall, rows | simulated with the whole depth trusted: recall, rows |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for a, v in r["alphas"].items():
            lines.append(
                f"| {r['set']} | {r['ef']} | {float(a):+g} | {v['trust']} / {v['depth']} | {v['rows_scanned']:.0f} | "
                f"{v['recall']:.4f} | {v['simulated_recall']:.4f}, {v['simulated_rows']:.0f} | "
                f"{v['simulated_recall_depth']:.4f}, {v['simulated_rows_depth']:.0f} |"
            )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nq", type=int, default=200)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--no-real", action="store_true")
    ap.add_argument("--ef", type=int, help="this efSearch whatever its plain recall (default: the ladder's)")
    ap.add_argument(
        "--json", type=Path, default=ROOT / "results" / "single_query_floor.json", help="the numbers"
    )
    ap.add_argument("--save", type=Path, help="write the numbers with ids / scores here")
    ap.add_argument("--compare", type=Path, help="check ids / scores against a saved run")
    args = ap.parse_args()
    faiss.omp_set_num_threads(1)
    docs, queries, _ = real_embeddings(speed.SMALL_REAL, encode_missing=False)
    rng = np.random.default_rng(0)
    sets = [("generated-20k", *synthetic_like(docs, queries, 20_000, args.nq, seed=1))]
    if not args.no_real:
        sets.append(
            (f"real-{docs.shape[0] / 1000:.1f}k", docs, queries[rng.permutation(len(queries))][: args.nq])
        )
    results = [measure(label, x, q, args.passes, args.ef) for label, x, q in sets]
    lines = table(results)
    print("\n".join(lines))
    if args.compare:
        old = {r["set"]: r for r in json.loads(args.compare.read_text())}
        for r in results:
            for a, v in r["alphas"].items():
                o = old[r["set"]]["alphas"][a]
                same = o["ids"] == v["ids"] and o["scores"] == v["scores"]
                print(f"{r['set']} alpha {a}: ids and scores {'identical' if same else 'DIFFER'}")
    for path in filter(None, (args.save, args.json)):
        slim = path != args.save
        path.write_text(json.dumps(
            [{**r, "alphas": {a: {k: v for k, v in row.items() if not (slim and k in ("ids", "scores"))}
                              for a, row in r["alphas"].items()}} for r in results], indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
