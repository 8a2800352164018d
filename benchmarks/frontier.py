"""The recall-latency frontier of norm-weighted top-10 search (issue 48, deliverable 1; not a test).

``score(q, d) = cos(q, d) * ||d||**alpha``. For each set, index kind and alpha, every method is run
at its operating points, and each point is one (microseconds per query, recall@10) pair:

* ``plain``: FAISS cosine top-10 (the baseline every ratio divides by; its weighted recall);
* ``normrank``: ``NormIndex`` over the very FAISS index plain searches (``ann="adaptive"``, the
  default, at ``k_factor`` 5 / 10 / 40) and ``ann="overfetch"`` (``k_factor`` 10);
* ``over-fetch``: the peers' method: FAISS cosine search at depth K' (an HNSW beam widened to K'),
  the K' candidates re-scored by ``cos * ||d||**alpha``, best 10 kept;
* ``refine-flat`` (alpha = 1 only): FAISS's ``IndexRefineFlat`` over the raw vectors, whose inner
  product with a unit query is the alpha = 1 score, at ``k_factor = K' / 10``;
* ``baked``: an index of ``d_hat * ||d||**a0`` (a0 = -0.25, benchmarks/speed.py's choice), re-scored
  by ``||d||**(alpha - a0)``: at depth K', and with the bound of ``depth_growing_search``
  (benchmarks/ann_alternatives.py);
* ``brute-force``: numpy, every document scored (the exact reference's own method).

Recall@10 is against the exact weighted top-10 over the whole collection (bench_exact.py, ties
counted). Time is one thread, wall clock (``--clock cpu``: the thread's CPU time, for a shared
machine), the methods interleaved in rounds (speed.py's ``timed`` / ``timed_single``), medians;
single queries (nq = 1) are timed one call each, batches (nq = 100) as one call. Ratios to plain in
the same run are what compare. The committed results come from the first command:

    python benchmarks/frontier.py --clock cpu  # ~30 min on 2 busy cores: results/frontier*.{json,md,png}
    python benchmarks/frontier.py --quick   # a smoke test: small set, two alphas (~1 min)
    python benchmarks/frontier.py --render  # chart and table again from results/frontier.json
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# speed.py sizes the thread pools (1) and the SIMD target before numpy / faiss load: import it first.
import speed  # noqa: I001

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import faiss
import numpy as np
from ann_alternatives import _search, depth_growing_search
from bench_data import real_embeddings, synthetic_like
from bench_exact import exact_top, recall, unit

from normrank import NormIndex
from normrank.search.id_lookup import IdLookup

K = 10
KPRIMES = (10, 20, 50, 100, 200, 500, 1000, 2000, 4096)
ALPHAS = (-1.5, -1.0, -0.5, 0.0, 0.5, 1.0)
BAKED_A0 = -0.25  # speed.py's baked exponent: between the alphas users pick most
TARGET = 0.995
DEFAULT = "normrank kf10"  # NormIndex's default point (ann="adaptive", k_factor 10)
RESULTS = Path(__file__).resolve().parent / "results"
# Methods drawn and tabulated, in this order; a method is a family of operating points.
METHODS = (
    "plain",
    "normrank",
    "normrank/overfetch",
    "over-fetch",
    "refine-flat",
    "baked",
    "baked/bound",
    "brute-force",
)


# -- the methods (pure: each returns positions (nq, K), -1 padded) ------------------------------


def weights(norms: np.ndarray, alpha: float) -> np.ndarray:
    return (norms.astype(np.float64) ** alpha).astype(np.float32)


def top_k(scores: np.ndarray, pos: np.ndarray, k: int = K) -> np.ndarray:
    """Positions of the ``k`` best scores per row (``-inf`` rows are padding)."""
    k = min(k, scores.shape[1])
    cols = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    return np.where(np.isfinite(np.take_along_axis(scores, cols, 1)), np.take_along_axis(pos, cols, 1), -1)


def brute_force(xu: np.ndarray, w: np.ndarray, qu: np.ndarray, k: int = K) -> np.ndarray:
    """Every document scored: the exact top-k of ``cos * w``."""
    s = (qu @ xu.T) * w
    return top_k(s, np.broadcast_to(np.arange(xu.shape[0]), s.shape), k)


def rescore(cos: np.ndarray, pos: np.ndarray, w: np.ndarray, k: int = K) -> np.ndarray:
    """The candidates' best ``k`` by ``cos * w`` (FAISS pads missing candidates with -1)."""
    ok = pos >= 0
    # FAISS pads with -FLT_MAX: zeroed before the product so nothing overflows, then masked.
    return top_k(np.where(ok, np.where(ok, cos, 0) * w[np.maximum(pos, 0)], -np.inf), pos, k)


def over_fetch(index: faiss.Index, qu: np.ndarray, w: np.ndarray, depth: int, k: int = K) -> np.ndarray:
    """The peers' method: cosine top-``depth`` (beam widened to it), re-scored, best ``k`` kept."""
    cos, pos = _search(index, qu, min(depth, index.ntotal))
    return rescore(cos, pos, w, k)


def refine_flat(refine: faiss.IndexRefineFlat, qu: np.ndarray, depth: int, ef: int | None) -> np.ndarray:
    """FAISS's own re-ranking (alpha = 1: its flat store holds the raw vectors)."""
    base = faiss.SearchParametersHNSW(efSearch=max(ef, depth)) if ef else None
    params = faiss.IndexRefineSearchParameters(k_factor=depth / K, base_index_params=base)
    return refine.search(qu, K, params=params)[1]


def recall_at(points: list[dict], target: float = TARGET) -> dict | None:
    """The cheapest point (single-query us) with recall >= ``target``; None if none reaches it."""
    ok = [p for p in points if p["recall"] >= target]
    return min(ok, key=lambda p: p["us_1"]) if ok else None


# -- data and indexes ------------------------------------------------------------------------


def load_sets(quick: bool) -> tuple[list[tuple[str, np.ndarray, np.ndarray]], str]:
    """``[(label, docs, queries)]`` and where the data came from."""
    try:
        docs, queries, used = real_embeddings(speed.SMALL_REAL, encode_missing=False)
        source = f"MiniLM-L6 embeddings of {'+'.join(used)} (cached), their BEIR test queries"
    except FileNotFoundError:
        # No cache: a generated stand-in with a log-normal norm law, said so in the results.
        rng = np.random.default_rng(0)
        cents = rng.normal(size=(64, 384))
        docs = cents[rng.integers(0, 64, 8400)] + rng.normal(size=(8400, 384))
        docs = (unit(docs) * np.exp(rng.normal(0.9, 0.3, (8400, 1)))).astype(np.float32)
        queries = docs[rng.choice(8400, 300, replace=False)] + rng.normal(0, 0.3, (300, 384))
        used, source = [], "GENERATED stand-in (no embedding cache)"
    queries = queries[np.random.default_rng(0).permutation(queries.shape[0])].astype(np.float32)
    if quick:
        x, q = synthetic_like(docs, queries, 3000, 40, seed=2)
        return [("generated-3k", x, q)], source
    x100k, q100k = synthetic_like(docs, queries, 100_000, 100, seed=1)
    return [(f"real-{docs.shape[0] / 1000:.1f}k", docs, queries), ("generated-100k", x100k, q100k)], source


def configs(n: int, quick: bool) -> list[tuple[str, str, int | None]]:
    """``(name, kind, breadth)``: HNSW32 at efSearch 64 and 512, IVF-Flat at nlist 4 sqrt(n) (its
    nprobe found by speed.operating_point: plain cosine recall >= 0.995)."""
    out = [("HNSW32 ef64", "hnsw", 64)] + ([] if quick else [("HNSW32 ef512", "hnsw", 512)])
    return [*out, (f"IVF{int(4 * np.sqrt(n))},Flat", "ivf", None)]


def build_indexes(x: np.ndarray, kind: str) -> tuple[NormIndex, faiss.Index, np.ndarray]:
    """NormIndex (its FAISS index is plain's) and the baked index over the same graph kind."""
    n, d = x.shape
    xu, norms = unit(x), np.linalg.norm(x, axis=1)
    factory = "HNSW32" if kind == "hnsw" else f"IVF{int(4 * np.sqrt(n))},Flat"
    sample = np.random.default_rng(0).choice(n, min(n, 50 * int(4 * np.sqrt(n))), replace=False)
    faiss.omp_set_num_threads(2)  # building is not measured: both cores
    ni = NormIndex(d, factory=factory)
    if kind == "ivf":
        ni.train(x[sample])
    ni.add(x)
    baked = speed.build((xu * norms[:, None] ** BAKED_A0).astype(np.float32), factory, kind, 64, xu[sample])
    faiss.omp_set_num_threads(1)
    return ni, baked, sample


# -- one configuration -----------------------------------------------------------------------


def with_k_factor(ni: NormIndex, kf: int) -> NormIndex:
    """``ni`` set to ``k_factor`` ``kf``: as an attribute, not a search argument, because a search
    call with any argument beyond ``alpha`` leaves normrank's one-query fast path (the default
    that users get would not be the point measured)."""
    if ni.k_factor != kf:
        ni.k_factor = kf
    return ni


def methods_for(ni, plain, baked, refine, x, alpha, ef, quick) -> dict[str, dict]:
    """``{point name: {"method", "knob", "fn": f(queries) -> positions}}`` at one alpha."""
    xu, norms = unit(x), np.linalg.norm(x, axis=1)
    w, res = weights(norms, alpha), weights(norms, alpha - BAKED_A0)
    kps = (10, 100, 1000) if quick else KPRIMES
    lk = IdLookup(np.arange(x.shape[0]))
    over = NormIndex.from_faiss(plain, norms=dict(enumerate(norms.tolist())))
    over.ann = "overfetch"
    pts = {"plain": {"method": "plain", "knob": "", "fn": lambda z: plain.search(unit(z), K)[1]}}
    for kf in (5, 10, 40):
        pts[f"normrank kf{kf}"] = {
            "method": "normrank",
            "knob": f"k_factor {kf}",
            "fn": lambda z, kf=kf: with_k_factor(ni, kf).search(z, K, alpha=alpha)[1],
        }
    pts["normrank/overfetch"] = {
        "method": "normrank/overfetch",
        "knob": "k_factor 10",
        "fn": lambda z: over.search(z, K, alpha=alpha)[1],
    }
    for kp in kps:
        pts[f"over-fetch {kp}"] = {
            "method": "over-fetch",
            "knob": f"K' {kp}",
            "fn": lambda z, kp=kp: over_fetch(plain, unit(z), w, kp),
        }
    if alpha == 1.0 and refine is not None:
        for kp in (100, 1000, 4096):
            pts[f"refine-flat {kp}"] = {
                "method": "refine-flat",
                "knob": f"K' {kp}",
                "fn": lambda z, kp=kp: refine_flat(refine, unit(z), kp, ef),
            }
    for kp in (10, 100, 1000):
        pts[f"baked {kp}"] = {
            "method": "baked",
            "knob": f"K' {kp}",
            "fn": lambda z, kp=kp: over_fetch(baked, unit(z), res, kp),
        }
    pts["baked bound"] = {
        "method": "baked/bound",
        "knob": "bound",
        "fn": lambda z: depth_growing_search(
            baked, unit(z), K, res, lk, start_depth=10 * K, max_depth=x.shape[0]
        )[1],
    }
    pts["brute-force"] = {"method": "brute-force", "knob": "", "fn": lambda z: brute_force(xu, w, unit(z))}
    return pts


def measure(label, x, q, name, kind, ef, args, rows, stats, built: dict) -> None:
    """Every point of every method at every alpha on one (set, index) pair: recall on the batch's
    queries, us per query single and batched, ratios to plain in the same interleaved rounds.
    ``built``: indexes by (set, kind), so that both efSearch values search the same graph."""
    xu, norms = unit(x), np.linalg.norm(x, axis=1)
    if (label, kind) not in built:
        built.clear()  # one set's indexes in memory at a time
        built[label, kind] = build_indexes(x, kind)
    ni, baked, _ = built[label, kind]
    plain = ni.faiss_index
    qb, q1 = q[: args.nq_batch], q[: args.nq_single]
    if kind == "hnsw":
        speed.set_params(plain, kind, ef)
        speed.set_params(baked, kind, ef)
        cos_rec = recall(plain.search(unit(qb), K)[1], exact_top(xu, np.ones_like(norms), unit(qb), 0.0))
        breadth = {"efSearch": ef}
    else:
        nlist = int(4 * np.sqrt(x.shape[0]))
        ladder = [max(8, nlist * f // 8) for f in (1, 2, 4, 6)]
        value, cos_rec = speed.operating_point(plain, kind, xu, unit(qb), ladder)
        speed.set_params(baked, kind, value)
        breadth = {"nprobe": value, "nlist": nlist}
    refine = None
    if kind == "hnsw":  # IndexRefineFlat over the raw vectors: the alpha = 1 score, exactly
        refine = faiss.IndexRefineFlat(plain, faiss.swig_ptr(np.ascontiguousarray(x, dtype=np.float32)))
        refine.own_fields = False  # plain belongs to NormIndex
    print(f"{label} {name}: {breadth}, plain cosine recall {cos_rec:.4f}", flush=True)
    for alpha in args.alphas:
        pts = methods_for(ni, plain, baked, refine, x, alpha, ef if kind == "hnsw" else None, args.quick)
        ref = exact_top(xu, norms, unit(qb), alpha)
        recs = {p: recall(v["fn"](qb), ref) for p, v in pts.items()}
        t1 = speed.timed_single(
            {p: (lambda i, f=v["fn"]: f(q1[i : i + 1])) for p, v in pts.items()}, len(q1), args.reps
        )
        tb = speed.timed({p: (lambda f=v["fn"]: f(qb)) for p, v in pts.items()}, args.reps, len(qb))
        _, _, st = with_k_factor(ni, 10).search(qb, K, alpha=alpha, return_stats=True)
        counts = {f: v for f, v in asdict(st).items() if f not in ("groups", "certified")}
        # The share of the batch's queries whose bound held on the candidates alone (no scan row).
        counts["certified_fraction"] = st.n_certified / len(qb)
        stats.append(dict(set=label, index=name, alpha=alpha, **counts))
        for p, v in pts.items():
            rows.append(
                dict(
                    set=label,
                    index=name,
                    breadth=breadth,
                    plain_cosine_recall=cos_rec,
                    alpha=alpha,
                    point=p,
                    method=v["method"],
                    knob=v["knob"],
                    recall=recs[p],
                    us_1=1e6 * t1.median(p) / len(q1),
                    ratio_1=t1.median(p) / t1.median("plain"),
                    nq_batch=len(qb),  # fewer than asked where the set has fewer queries
                    us_100=1e6 * tb.median(p) / len(qb),
                    ratio_100=tb.median(p) / tb.median("plain"),
                )
            )
        this = {r["point"]: r for r in rows[-len(pts) :]}
        best = recall_at([r for r in this.values() if r["method"] == "normrank"])
        print(
            f"  alpha {alpha:+g}: normrank {recs['normrank kf10']:.4f} {this['normrank kf10']['ratio_1']:.2f}x "
            f"(cheapest >= {TARGET}: {best['point'] if best else '-'}), load {os.getloadavg()[0]:.2f}",
            flush=True,
        )


# -- outputs ---------------------------------------------------------------------------------


def family(r: dict) -> str:
    """The line a point is drawn on: the baked bound apart from baked at fixed depths."""
    return "baked/bound" if r["point"] == "baked bound" else r["method"]


def spread(x: np.ndarray) -> dict:
    p5, p50, p95 = np.percentile(np.linalg.norm(x, axis=1), [5, 50, 95])
    return {"n": int(x.shape[0]), "p5": float(p5), "p50": float(p50), "p95": float(p95)}


def chart(rows: list[dict], label: str, path: Path) -> None:
    """One figure per set: a row of panels per index, a panel per alpha, a line per method
    (recall vs single-query us, log x)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    mine = [r for r in rows if r["set"] == label]
    idxs = list(dict.fromkeys(r["index"] for r in mine))
    alphas = sorted({r["alpha"] for r in mine})
    fig, axes = plt.subplots(
        len(idxs), len(alphas), figsize=(2.6 * len(alphas), 2.3 * len(idxs)), squeeze=False, sharey=True
    )
    style = {
        "plain": ("k", "s"),
        "normrank": ("tab:red", "o"),
        "normrank/overfetch": ("tab:pink", "v"),
        "over-fetch": ("tab:blue", "."),
        "refine-flat": ("tab:cyan", "x"),
        "baked": ("tab:green", "^"),
        "baked/bound": ("tab:olive", "P"),
        "brute-force": ("tab:gray", "D"),
    }
    for i, idx in enumerate(idxs):
        for j, a in enumerate(alphas):
            ax = axes[i][j]
            for m in METHODS:
                # In knob order (K' rising): a line that turns back shows a deeper point ran faster (noise).
                pts = [r for r in mine if r["index"] == idx and r["alpha"] == a and family(r) == m]
                if pts:
                    c, mk = style[m]
                    ax.plot(
                        [p["us_1"] for p in pts],
                        [p["recall"] for p in pts],
                        color=c,
                        marker=mk,
                        ms=4,
                        lw=1,
                        label=m,
                    )
            ax.axhline(TARGET, color="0.6", lw=0.6, ls="--")
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # 2x10^2 ... labels overlap
            ax.set_ylim(0.9, 1.004)  # the region that matters; lower points are in the JSON
            ax.tick_params(labelsize=7)
            ax.set_title(f"{idx}, α={a:g}", fontsize=8)
            if j == 0:
                ax.set_ylabel("recall@10", fontsize=8)
            if i == len(idxs) - 1:
                ax.set_xlabel("µs / query (nq=1)", fontsize=8)
    handles = {
        h.get_label(): h for ax in axes.flat for h in ax.get_lines() if not h.get_label().startswith("_")
    }
    fig.legend(handles.values(), handles.keys(), fontsize=7, loc="lower center", ncol=len(handles))
    fig.suptitle(f"{label}: recall@10 of cos·‖d‖^α vs single-query time (1 thread)", fontsize=9)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=72)
    plt.close(fig)


def cell(p: dict | None, nq: int) -> str:
    return "—" if p is None else f"{p[f'us_{nq}']:.0f} ({p[f'ratio_{nq}']:.2f}×)"


def table(result: dict) -> str:
    rows, meta = result["rows"], result["meta"]
    out = [
        "# Frontier: µs per query at recall@10 ≥ 0.995 (ratio to plain FAISS cosine)",
        "",
        f"Built by `{meta['command']}` on {meta['date']}, {meta['cpu']}, one thread ({meta.get('clock', 'wall')} clock), "
        "load average "
        f"{meta['load_start'][0]:.2f} at the start and {meta['load_end'][0]:.2f} at the end (shared machine: "
        "read the ratios, measured in the same interleaved rounds). Data: "
        f"{meta['source']}. Each cell: the cheapest operating point of the method reaching recall "
        f"0.995 ('—': none does), single queries (nq = 1, {meta['nq_single']} queries) and batches "
        f"(up to nq = {meta['nq_batch']}: the set's queries); recall over the batch's queries; {meta['reps']} rounds, medians.",
        "",
        "Norm spread (‖d‖ p5 / p50 / p95): "
        + "; ".join(
            f"{s}: {v['p5']:.2f} / {v['p50']:.2f} / {v['p95']:.2f} (n = {v['n']})"
            for s, v in meta["norms"].items()
        ),
        "",
    ]
    alphas = sorted({r["alpha"] for r in rows})
    for s, idx in dict.fromkeys((r["set"], r["index"]) for r in rows):
        sub = [r for r in rows if r["set"] == s and r["index"] == idx]
        b = sub[0]
        out += [
            f"## {s}, {idx} ({b['breadth']}, plain cosine recall {b['plain_cosine_recall']:.4f})",
            "",
            "| method | " + " | ".join(f"α={a:g}" for a in alphas) + " |",
            "|---|" + "---|" * len(alphas),
        ]
        for m in ("normrank default", *METHODS):
            for nq in (1, 100):  # 100: the batch row, of meta["nq_batch"] queries
                cells = []
                for a in alphas:
                    pts = [r for r in sub if r["alpha"] == a and (family(r) == m or r["point"] == DEFAULT)]
                    pts = [r for r in pts if (r["point"] == DEFAULT) == (m == "normrank default")]
                    best = recall_at(pts) if nq == 1 else recall_at([{**p, "us_1": p["us_100"]} for p in pts])
                    cells.append(
                        cell(best, nq) + (f" {best['knob']}" if best and best["knob"] else "")
                        if pts
                        else "n/a"
                    )
                if any(c != "n/a" for c in cells):
                    size = 1 if nq == 1 else b["nq_batch"]
                    shown = "normrank k_factor 5 / 40" if m == "normrank" else m  # the default has its row
                    out.append(f"| {shown} nq={size} | " + " | ".join(cells) + " |")
        out.append("")
    out += winners(rows, alphas)
    out += [
        "## normrank's path (SearchStats of one batch of the set's queries, up to 100; default k_factor)",
        "",
    ]
    out += [
        "Certified: the share of the queries whose result the bound proved exact w.r.t. the "
        "index's candidates before any scan row was read (`SearchStats.certified`; docs/guarantees.md).",
        "",
        "| set | index | α | path | depth | scanned (max) | rounds | widened | certified |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for st in result["stats"]:
        cert = st.get("certified_fraction")  # (absent from runs before it was recorded)
        out.append(
            f"| {st['set']} | {st['index']} | {st['alpha']:g} | {st['path']} | {st['depth']} | {st['scanned']} "
            f"| {st['rounds']} | {st['widened']} | {'—' if cert is None else f'{cert:.2f}'} |"
        )
    return "\n".join(out) + "\n"


def winners(rows: list[dict], alphas: list[float]) -> list[str]:
    """Per (set, index, alpha) and nq: the fastest point at recall >= TARGET beside normrank's default."""
    out = [
        "## On the frontier: the fastest point at recall ≥ 0.995, and normrank's default",
        "",
        "Each cell: fastest point (µs, ratio to plain) / normrank default (µs, ratio, recall). "
        "Timing noise on this machine: differences under ~1.3× are not resolved.",
        "",
        "| set, index | nq | " + " | ".join(f"α={a:g}" for a in alphas) + " |",
        "|---|---|" + "---|" * len(alphas),
    ]
    for s, idx in dict.fromkeys((r["set"], r["index"]) for r in rows):
        for nq in (1, 100):
            cells = []
            for a in alphas:
                pts = [r for r in rows if r["set"] == s and r["index"] == idx and r["alpha"] == a]
                best = recall_at([{**p, "us_1": p[f"us_{nq}"]} for p in pts])
                d = next(p for p in pts if p["point"] == DEFAULT)
                win = (
                    "—"
                    if best is None
                    else f"**{best['point']}** {best[f'us_{nq}']:.0f} ({best[f'ratio_{nq}']:.2f}×)"
                )
                cells.append(f"{win} / {d[f'us_{nq}']:.0f} ({d[f'ratio_{nq}']:.2f}×, {d['recall']:.4f})")
            size = 1 if nq == 1 else pts[0]["nq_batch"]
            out.append(f"| {s}, {idx} | {size} | " + " | ".join(cells) + " |")
    return [*out, ""]


def render(result: dict, out_dir: Path, stem: str) -> None:
    (out_dir / f"{stem}.md").write_text(table(result))
    for label in dict.fromkeys(r["set"] for r in result["rows"]):
        chart(result["rows"], label, out_dir / f"{stem}-{label}.png")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--quick", action="store_true", help="a 3k generated set, two alphas, one round (smoke test)"
    )
    ap.add_argument("--render", action="store_true", help="only redraw the chart and table from the JSON")
    ap.add_argument("--out", type=Path, default=RESULTS, help="output folder (default benchmarks/results)")
    ap.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall: latency; cpu: this thread's CPU time (a shared machine: leaves out the time the OS ran others)",
    )
    args = ap.parse_args()
    if args.clock == "cpu":
        speed.CLOCK = time.thread_time  # what speed.timed / timed_single read
    stem = "frontier-quick" if args.quick else "frontier"
    if args.render:
        render(json.loads((args.out / f"{stem}.json").read_text()), args.out, stem)
        return
    args.alphas = (-1.0, 1.0) if args.quick else ALPHAS
    args.reps, args.nq_single, args.nq_batch = (1, 10, 40) if args.quick else (3, 50, 100)
    faiss.omp_set_num_threads(1)
    load_start, t0 = os.getloadavg(), time.time()
    sets, source = load_sets(args.quick)
    rows, stats = [], []
    meta = dict(
        command="python benchmarks/frontier.py"
        + (" --quick" if args.quick else "")
        + (" --clock cpu" if args.clock == "cpu" else ""),
        clock=args.clock,
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        cpu=speed.cpu_model(),
        cores=os.cpu_count(),
        faiss=faiss.__version__,
        source=source,
        load_start=load_start,
        reps=args.reps,
        nq_single=args.nq_single,
        nq_batch=args.nq_batch,
        baked_a0=BAKED_A0,
        norms={label: spread(x) for label, x, _ in sets},
    )
    result = {"meta": meta, "rows": rows, "stats": stats}
    args.out.mkdir(parents=True, exist_ok=True)
    built: dict = {}
    for label, x, q in sets:
        for name, kind, ef in configs(x.shape[0], args.quick):
            measure(label, x, q, name, kind, ef, args, rows, stats, built)
            # Written after every index, so that a run cut short still leaves its data.
            meta.update(load_end=os.getloadavg(), minutes=(time.time() - t0) / 60)
            (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1))
    render(result, args.out, stem)
    print(f"done in {(time.time() - t0) / 60:.1f} min; {args.out / stem}.md", flush=True)


if __name__ == "__main__":
    main()
