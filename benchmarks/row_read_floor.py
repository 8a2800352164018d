"""Why one IVF query at alpha > 0 costs what it does: the rows the bound needs, and the least a
row can cost (issue 48, deliverable 3's "or show why"; not a test).

    python benchmarks/row_read_floor.py          # results/row_read_floor.{md,json}, ~3 min
    python benchmarks/row_read_floor.py --render # the markdown again from the JSON

The set and index are speed.py's 100k row: ``synthetic_like`` of the cached real MiniLM
embeddings (seed 2), IVF1264,Flat at nprobe 316 (plain cosine recall >= 0.995), one thread, k =
10. For each alpha, per query (interleaved with plain FAISS, wall clock, medians of 3 passes):
normrank's time and the rows its weight-order scan read (``SearchStats.scanned``). Then what a
row costs, each way the scan could read it, on the ranks it reads past its int8 codes (blocks of
2,048, each after a plain search, as a query's scan follows its search):

* ``reconstruct``: what normrank does (FAISS's ``reconstruct_batch`` from the lists, then its
  inner-product kernel);
* ``in place``: a compiled kernel (numba, in this benchmark only) reading each row where FAISS
  keeps it, no copy: the floor of a random row read on this machine;
* ``codes``: the int8 scan codes (FAISS's scanner over a contiguous run);
* ``sequential``: plain FAISS's own list scan, its search time over the rows it probes.

The floor of a query is plain + its coded rows at the codes' cost + the rest at the in-place
cost: no reader of these rows does better without holding more of them (memory the goal bounds).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import speed  # noqa: I001 - sizes the thread pools (1) before numpy / faiss load

import argparse
import json
import time
from pathlib import Path

import faiss
import numpy as np
from bench_data import real_embeddings, synthetic_like
from bench_exact import unit

from normrank import NormIndex

RESULTS = Path(__file__).resolve().parent / "results"
BLOCK = 2048
ALPHAS = (0.5, 1.0)


def compiled_reader():
    """``inner(q, addresses, out)``: ``q . row`` for rows at raw addresses (numba), or None."""
    try:
        import numba
        from numba.core import cgutils, types
        from numba.extending import intrinsic
    except ImportError:
        return None

    @intrinsic
    def as_pointer(typingctx, src):
        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], cgutils.voidptr_t)

        return types.voidptr(src), codegen

    @numba.njit(fastmath=True)
    def inner(q, addresses, out):
        d = q.size
        for j in range(addresses.size):
            row = numba.carray(as_pointer(addresses[j]), (d,), dtype=np.float32)
            s = np.float32(0)
            for i in range(d):
                s += q[i] * row[i]
            out[j] = s

    return inner


def per_query(fns: dict, nq: int, passes: int = 3) -> dict[str, np.ndarray]:
    """Wall seconds per query of each function (``fn(i)``), interleaved, median over passes."""
    got = {name: np.empty((passes, nq)) for name in fns}
    for i in range(nq):  # warm
        for fn in fns.values():
            fn(i)
    for p in range(passes):
        for i in range(nq):
            for name, fn in fns.items():
                t0 = time.perf_counter()
                fn(i)
                got[name][p, i] = time.perf_counter() - t0
    return {name: np.median(t, axis=0) for name, t in got.items()}


def row_costs(ni: NormIndex, plain, qu: np.ndarray, order, inner) -> dict[str, float]:
    """ns a row each way (module docstring), on the ranks past the order's codes."""
    rows, il = ni._cache.rows, faiss.extract_index_ivf(plain).invlists
    coded = order._scan_codes.rows if order._scan_codes is not None else 0
    n, d = order.positions.size, qu.shape[1]
    # Each document's address in FAISS's lists (for the compiled reader).
    starts = np.array([int(il.get_codes(i)) for i in range(il.nlist)], dtype=np.int64)
    lists = faiss.vector_to_array(rows._reader.direct_map.array)
    address = starts[lists >> 32] + (lists & 0xFFFFFFFF) * 4 * d
    spans = [(lo, lo + BLOCK) for lo in range(coded, min(n, coded + 16 * BLOCK) - BLOCK + 1, BLOCK)]
    took = {"reconstruct": [], "in place": []}
    out = np.empty(BLOCK, dtype=np.float32)
    for r, (lo, hi) in enumerate(spans * 3):
        q = qu[r % qu.shape[0]]
        pos = order.positions[lo:hi]
        for name in took:
            plain.search(q[None], 10)  # the caches a query's own search leaves
            t0 = time.perf_counter()
            if name == "reconstruct":
                rows.inner(q, pos)
            elif inner is not None:
                inner(q, address[pos], out)
            took[name].append(time.perf_counter() - t0)
    ns = {name: 1e9 * float(np.median(t)) / BLOCK for name, t in took.items() if t}
    if inner is None:
        ns.pop("in place")
    if coded:  # FAISS's scanner over the codes, a threshold nothing passes (what most chunks see)
        from normrank.search.scan_codes import CHUNK, QueryCodes

        codes, t = order._scan_codes, []
        for r in range(30):
            query = QueryCodes(qu[r % qu.shape[0]])
            t0 = time.perf_counter()
            for lo in range(0, coded, CHUNK):
                query.scan(faiss.cast_integer_to_uint8_ptr(codes._addr + lo * d), CHUNK, 1e9)
            t.append(time.perf_counter() - t0)
            query.close()
        ns["codes"] = 1e9 * float(np.median(t)) / coded
    return ns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--render", action="store_true", help="only the markdown again, from the JSON")
    args = ap.parse_args()
    if args.render:
        result = json.loads((args.out / "row_read_floor.json").read_text())
        (args.out / "row_read_floor.md").write_text(markdown(result))
        return
    docs, queries, used = real_embeddings(encode_missing=False)
    queries = queries[np.random.default_rng(0).permutation(queries.shape[0])]  # speed.py's order
    x, q = synthetic_like(docs, queries, 100_000, 1000, seed=2)
    n, d = x.shape
    nlist = int(4 * np.sqrt(n))
    sample = np.random.default_rng(0).choice(n, 50 * nlist, replace=False)
    ni = NormIndex(d, factory=f"IVF{nlist},Flat")
    ni.train(x[sample])
    ni.add(x)
    plain = ni.faiss_index
    faiss.extract_index_ivf(plain).nprobe = nlist // 4
    q = q[: args.queries]
    qu = unit(q)
    sizes = np.array([plain.invlists.list_size(i) for i in range(nlist)])
    _, probed_lists = plain.quantizer.search(qu, nlist // 4)
    probed_rows = sizes[probed_lists].sum(axis=1)
    inner = compiled_reader()
    meta = dict(
        command="python benchmarks/row_read_floor.py",
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        cpu=speed.cpu_model(),
        cores=os.cpu_count(),
        faiss=faiss.__version__,
        load_start=os.getloadavg(),
        corpora=used,
        index=f"IVF{nlist},Flat nprobe {nlist // 4}",
        n=n,
        queries=int(q.shape[0]),
        block=BLOCK,
    )
    rows = []
    for alpha in ALPHAS:
        t = per_query(
            {
                "plain": lambda i: plain.search(qu[i : i + 1], 10),
                "normrank": lambda i, a=alpha: ni.search(q[i : i + 1], 10, alpha=a),
            },
            q.shape[0],
        )
        scanned = np.array(
            [
                ni.search(q[i : i + 1], 10, alpha=alpha, return_stats=True)[-1].scanned
                for i in range(q.shape[0])
            ]
        )
        order = ni._cache.orders[1]
        coded = order._scan_codes.rows if order._scan_codes is not None else 0
        ns = row_costs(ni, plain, qu, order, inner)
        ns["sequential"] = 1e9 * float(t["plain"].sum() / probed_rows.sum())
        past = np.maximum(scanned - coded, 0)
        floor_s = t["plain"] + 1e-9 * (
            ns.get("codes", 0.0) * np.minimum(scanned, coded) + ns.get("in place", 0) * past
        )
        now_rows = 1e-9 * ns["reconstruct"] * past
        row = dict(
            alpha=alpha,
            plain_us=1e6 * float(t["plain"].mean()),
            normrank_us=1e6 * float(t["normrank"].mean()),
            ratio=float(t["normrank"].sum() / t["plain"].sum()),
            ratio_p50=float(np.median(t["normrank"]) / np.median(t["plain"])),
            scanned_p50=int(np.median(scanned)),
            scanned_p90=int(np.percentile(scanned, 90)),
            scanned_mean=float(scanned.mean()),
            scanned_max=int(scanned.max()),
            coded_rows=int(coded),
            probed_rows_mean=float(probed_rows.mean()),
            ns_per_row=ns,
            past_codes_us=1e6 * float(now_rows.mean()),
            floor_ratio=float(floor_s.sum() / t["plain"].sum()) if "in place" in ns else None,
            codes_bytes_for_p90=int(max(0, np.percentile(scanned, 90) - coded) * d),
        )
        rows.append(row)
        print(json.dumps(row), flush=True)
    meta["load_end"] = os.getloadavg()
    result = {"meta": meta, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "row_read_floor.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "row_read_floor.md").write_text(markdown(result))


def markdown(result: dict) -> str:
    m = result["meta"]
    lines = [
        "# The rows one IVF query at alpha > 0 needs, and what a row costs",
        "",
        f"`{m['command']}`, {m['date']}, {m['cpu']}, {m['cores']} cores, faiss {m['faiss']}, load "
        f"{m['load_start'][0]:.2f} at the start, {m['load_end'][0]:.2f} at the end. speed.py's 100k "
        f"generated set, {m['index']}, {m['queries']} single queries, k = 10, one thread, wall clock "
        "(medians of 3 interleaved passes per query). Row costs on the weight ranks past the int8 "
        f"codes, blocks of {m['block']:,}, each after a plain search (benchmarks/row_read_floor.py's docstring).",
        "",
        "| alpha | plain us | normrank us | ratio (p50) | rows scanned p50 / p90 / max | rows with codes |"
        " ns a row: reconstruct / in place / codes / sequential | floor ratio |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        ns = r["ns_per_row"]
        cost = " / ".join(
            f"{ns[k]:.0f}" if k in ns else "-" for k in ("reconstruct", "in place", "codes", "sequential")
        )
        floor = f"{r['floor_ratio']:.2f}" if r["floor_ratio"] is not None else "-"
        lines.append(
            f"| {r['alpha']:g} | {r['plain_us']:.0f} | {r['normrank_us']:.0f} | {r['ratio']:.2f} ({r['ratio_p50']:.2f}) | "
            f"{r['scanned_p50']:,} / {r['scanned_p90']:,} / {r['scanned_max']:,} | {r['coded_rows']:,} | {cost} | {floor} |"
        )
    lines += [
        "",
        "*Floor ratio*: plain, plus each query's coded rows at the codes' cost and the rest at the in-place "
        "cost, over plain: what a scan reading exactly these rows could reach without holding more of them.",
        "",
    ]
    for r in result["rows"]:
        ns = r["ns_per_row"]
        if "in place" not in ns:
            continue
        lines.append(
            f"- alpha {r['alpha']:g}: the scan reads {r['scanned_mean']:,.0f} rows a query (mean) where plain "
            f"reads {r['probed_rows_mean']:,.0f} in list order; out of order a row costs "
            f"{ns['in place'] / ns['sequential']:.1f}x a row of FAISS's own list scan even read in place by "
            f"compiled code, and {ns['reconstruct'] / ns['in place']:.1f}x that through FAISS's reconstruct. "
            f"Codes for the 90th percentile's scan would take {r['codes_bytes_for_p90'] / 2**20:.1f} MiB more "
            f"({r['codes_bytes_for_p90'] / m['n']:.0f} B a document), past the cache budget."
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
