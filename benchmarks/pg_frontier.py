"""The PostgreSQL rows of the recall-latency frontier (issue 48, deliverable 1; not a test).

One real server (pgserver's PostgreSQL + pgvector, benchmarks/pgvector_bench.py's, data kept in
``$NORMRANK_CACHE/bench-pg``), one table (HNSW m 32, ef_construction 64), three ways to answer the
norm-weighted top-10 ``cos(q, d) * coalesce(weight, norm)**alpha``:

* ``normrank``: ``PgVectorNormIndex.search(q, 10, alpha=a, ef_search=ef, return_stats=True)`` at
  its defaults (client band scan, bounded client cache), at each ``ef_search``;
* ``pgvector`` (the peers' method, pgvector's own): one SQL statement per query, the HNSW index
  read by the iterative scan (``hnsw.iterative_scan = relaxed_order``, pgvector >= 0.8) for the
  cosine top-K', re-ordered by ``cos * power(coalesce(weight, norm), alpha)`` in SQL, best 10;
* ``plain``: pgvector's cosine top-10 (``ORDER BY embedding <#> q LIMIT 10``, no iterative scan)
  at the same ``ef_search``: the denominator of every ratio (and its weighted recall).

Recall@10 against numpy's exact weighted top-10 over every row (bench_exact.py, ties counted).
Time: wall microseconds per query, each method on its own connection over the Unix socket, the
methods interleaved by repetition (order rotated), medians; also CPU (the client thread plus that
connection's server backend, which a shared machine inflates less). Single queries one statement
or call each; one batch of ``--batch`` queries (normrank: one call; pgvector: one LATERAL
statement over the unnested queries; plain: the same).

    python benchmarks/pg_frontier.py               # results/pg_frontier.{json,md}
    python benchmarks/pg_frontier.py --quick       # smoke test
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
from bench_data import real_embeddings, synthetic_like
from bench_exact import exact_top, recall, unit
from pgvector_bench import EF_CONSTRUCTION, M, backend_cpu, open_or_build, server

K = 10
ALPHAS = (-1.0, -0.5, 0.5, 1.0)
KPRIMES = (10, 40, 100, 400, 1000, 4000)
EFS = (64, 200)
TARGET = 0.995
RESULTS = Path(__file__).resolve().parent / "results"


def peer_sql(table: str, kp: int, batch: bool) -> str:
    """pgvector's own way: the cosine top-K' by the (iterative) index scan, re-ordered in SQL."""
    inner = (
        "SELECT id, s FROM (SELECT id, -(embedding <#> {v}) * power(coalesce(weight, norm)::float8, {a}) AS s "
        f"FROM {table} ORDER BY embedding <#> {{v}} LIMIT {kp}) c ORDER BY s DESC LIMIT {K}"
    )
    if not batch:
        return inner.format(v="%(v)b", a="%(a)s")
    return (
        "SELECT r.ids FROM unnest(%(v)b::vector[]) WITH ORDINALITY AS q(v, qi), LATERAL (SELECT "
        f"array_agg(id ORDER BY s DESC) AS ids FROM ({inner.format(v='q.v', a='%(a)s')}) x) r ORDER BY q.qi"
    )


def plain_sql(table: str, batch: bool) -> str:
    if not batch:
        return f"SELECT id FROM {table} ORDER BY embedding <#> %(v)b LIMIT {K}"
    return (
        "SELECT r.ids FROM unnest(%(v)b::vector[]) WITH ORDINALITY AS q(v, qi), LATERAL (SELECT "
        f"array_agg(id ORDER BY d) AS ids FROM (SELECT id, embedding <#> q.v AS d FROM {table} "
        f"ORDER BY embedding <#> q.v LIMIT {K}) x) r ORDER BY q.qi"
    )


def sql_runner(conn, sql: str, qu: np.ndarray, alpha: float, batch: bool):
    """A function running ``sql`` over every query of ``qu`` (one statement each, or one in all)
    and returning the ids ``(nq, K)``, -1 padded."""

    def run() -> np.ndarray:
        out = np.full((qu.shape[0], K), -1, dtype=np.int64)
        if batch:
            rows = conn.execute(sql, {"v": list(qu), "a": alpha}).fetchall()
            for i, (ids,) in enumerate(rows):
                out[i, : len(ids or [])] = (ids or [])[:K]
        else:
            for i, v in enumerate(qu):
                ids = [r[0] for r in conn.execute(sql, {"v": v, "a": alpha}).fetchall()]
                out[i, : len(ids)] = ids
        return out

    return run


def settings(conn, ef: int, iterative: str) -> None:
    conn.execute(f"SET hnsw.ef_search = {ef}")
    conn.execute(f"SET hnsw.iterative_scan = {iterative}")


def plan_uses_index(conn, sql: str, v: np.ndarray, alpha: float) -> bool:
    return "hnsw" in "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, {"v": v, "a": alpha}))


def timed(fns: dict, reps: int, cpu: dict, nq: int) -> dict:
    """Interleaved by repetition (order rotated each time): medians of wall and CPU us per query."""
    names = list(fns)
    for f in fns.values():
        f()  # warm-up
    wall = {n: [] for n in names}
    cpus = {n: [] for n in names}
    for r in range(reps):
        order = names[r % len(names) :] + names[: r % len(names)]
        for n in order if r % 2 == 0 else order[::-1]:
            s0, c0, t0 = cpu[n](), time.thread_time(), time.perf_counter()
            fns[n]()
            wall[n].append((time.perf_counter() - t0) / nq * 1e6)
            cpus[n].append((time.thread_time() - c0 + cpu[n]() - s0) / nq * 1e6)
    return {n: (float(np.median(wall[n])), float(np.median(cpus[n]))) for n in names}


def load(quick: bool, n: int, nq: int):
    docs, queries, used = real_embeddings(("scifact", "cacm"), encode_missing=False)
    queries = queries[np.random.default_rng(0).permutation(queries.shape[0])].astype(np.float32)
    if quick:
        n, nq = 3000, 20
    x, q = synthetic_like(docs, queries, n, nq, seed=1)
    return (
        f"generated-{n / 1000:g}k",
        x,
        q,
        f"synthetic_like of MiniLM-L6 {'+'.join(used)} ({docs.shape[0]} docs)",
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--single", type=int, default=60, help="single queries")
    ap.add_argument("--batch", type=int, default=50, help="queries in the one batch")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--efs", default=",".join(map(str, EFS)))
    ap.add_argument("--kprimes", default=",".join(map(str, KPRIMES)))
    ap.add_argument("--alphas", default=",".join(map(str, ALPHAS)))
    ap.add_argument("--out", default=str(RESULTS / "pg_frontier"))
    ap.add_argument("--render", action="store_true", help="the table again from --out's .json")
    args = ap.parse_args()
    if args.render:
        Path(args.out + ".md").write_text(render(json.loads(Path(args.out + ".json").read_text())))
        return
    import psycopg
    from pgvector.psycopg import register_vector

    from normrank import settings as nr_settings

    label, x, q, source = load(args.quick, args.n, max(args.single, args.batch))
    efs = [int(e) for e in args.efs.split(",")]
    kps = [int(v) for v in args.kprimes.split(",")]
    alphas = [float(a) for a in args.alphas.split(",")]
    xu, norms = unit(x), np.linalg.norm(x, axis=1)
    load0 = os.getloadavg()
    print(f"{label}: {x.shape}, load {load0}", flush=True)
    srv = server()
    uri = srv.get_uri()
    idx, build_s = open_or_build(uri, x, label.replace(".", "_"))
    table = idx.table
    conns = {}
    for name in ("plain", "pgvector"):
        conns[name] = psycopg.connect(uri, autocommit=True)
        register_vector(conns[name])
    version = (
        conns["plain"].execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]
    )
    server_version = conns["plain"].execute("SHOW server_version").fetchone()[0]
    try:
        conns["pgvector"].execute("SET hnsw.iterative_scan = relaxed_order")
        iterative = "relaxed_order"
    except psycopg.Error:
        iterative = "off"
    cpu = {"plain": backend_cpu(conns["plain"]), "pgvector": backend_cpu(conns["pgvector"])}
    cpu["normrank"] = backend_cpu(idx._connection())
    print(
        f"pgvector {version}, PostgreSQL {server_version}, iterative scan {iterative}, build {build_s}",
        flush=True,
    )
    points, problems = [], []
    for nq, batch in ((args.single, False), (args.batch, True)):
        qs = q[:nq]
        qu, nq = unit(qs), qs.shape[0]
        for ef in efs:
            settings(conns["plain"], ef, "off")
            settings(conns["pgvector"], ef, iterative)
            plain_fn = sql_runner(conns["plain"], plain_sql(table, batch), qu, 0.0, batch)
            plain_ids = plain_fn()
            cos_rec = recall(plain_ids, exact_top(xu, np.ones(x.shape[0]), qu, 0.0))
            for a in alphas:
                ref = exact_top(xu, norms, qu, a)
                fns = {"plain": plain_fn}
                meta = {
                    "plain": {
                        "method": "plain", "recall": recall(plain_ids, ref), "cosine_recall": cos_rec,
                        "plan_uses_hnsw": plan_uses_index(conns["plain"], plain_sql(table, False), qu[0], 0.0),
                    }
                }  # fmt: skip
                stats_seen = []

                def nr_single(a=a, qs=qs, ef=ef, stats_seen=stats_seen):
                    out = np.full((qs.shape[0], K), -1, dtype=np.int64)
                    for i in range(qs.shape[0]):
                        _, ids, st = idx.search(qs[i], K, alpha=a, ef_search=ef, return_stats=True)
                        out[i] = ids[0]
                        stats_seen.append(st)
                    return out

                def nr_batch(a=a, qs=qs, ef=ef, stats_seen=stats_seen):
                    _, ids, st = idx.search(qs, K, alpha=a, ef_search=ef, return_stats=True)
                    stats_seen.append(st)
                    return ids

                fns["normrank"] = nr_batch if batch else nr_single
                try:
                    got = fns["normrank"]()
                    st = stats_seen[-1]
                    paths = sorted({s.path for s in stats_seen})
                    meta["normrank"] = {
                        "method": "normrank", "recall": recall(got, ref), "path": ",".join(paths),
                        "depth_max": max(s.depth for s in stats_seen),
                        "scanned_max": max(s.scanned for s in stats_seen),
                        "widened": sum(s.widened for s in stats_seen),
                        "cache_bytes": st.cache_bytes, "cache_budget_bytes": st.cache_budget_bytes,
                    }  # fmt: skip
                except Exception as e:  # report, never fix normrank/ here
                    problems.append(f"normrank nq={nq} ef={ef} alpha={a}: {type(e).__name__}: {e}")
                    del fns["normrank"]
                for kp in kps:
                    name = f"pgvector K'={kp}"
                    sql = peer_sql(table, kp, batch)
                    fns[name] = sql_runner(conns["pgvector"], sql, qu, a, batch)
                    cpu[name] = cpu["pgvector"]
                    got = fns[name]()
                    short = int(np.sum(got < 0))
                    meta[name] = {
                        "method": "pgvector", "kprime": kp, "recall": recall(got, ref), "short_ids": short,
                        "plan_uses_hnsw": plan_uses_index(conns["pgvector"], peer_sql(table, kp, False), qu[0], a),
                    }  # fmt: skip
                stats_seen.clear()
                t = timed(fns, args.reps, cpu, nq)
                la = os.getloadavg()[0]
                for name, (us, cus) in t.items():
                    p = dict(
                        meta[name], name=name, nq=nq, ef_search=ef, alpha=a, us=us, cpu_us=cus,
                        ratio=us / t["plain"][0], cpu_ratio=cus / t["plain"][1], load1=la,
                    )  # fmt: skip
                    points.append(p)
                print(
                    f"nq={nq} ef={ef} a={a:+} load {la:.2f} plain {t['plain'][0]:.0f}us  "
                    + "  ".join(
                        f"{n.replace('pgvector ', '')}: {meta[n]['recall']:.3f}/{t[n][0] / t['plain'][0]:.2f}x"
                        for n in t
                        if n != "plain"
                    ),
                    flush=True,
                )
    for c in conns.values():
        c.close()
    idx.close()
    out = {
        "set": label, "n": int(x.shape[0]), "dim": int(x.shape[1]), "source": source,
        "norms_p5_p50_p95": [float(v) for v in np.percentile(norms, [5, 50, 95])],
        "pgvector": version, "postgres": server_version, "iterative_scan": iterative,
        "m": M, "ef_construction": EF_CONSTRUCTION, "build_s": build_s,
        "pg_client_cache_bytes": nr_settings.PG_CLIENT_CACHE_BYTES, "reps": args.reps,
        "load_start": list(load0), "load_end": list(os.getloadavg()), "cpus": os.cpu_count(),
        "problems": problems, "points": points,
    }  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out + ".json").write_text(json.dumps(out, indent=1))
    Path(args.out + ".md").write_text(render(out))
    print(render(out))


def render(out: dict) -> str:
    """The table: the cheapest point of each method at recall >= TARGET, per nq, ef_search and alpha."""
    pts = out["points"]
    lines = [
        f"# PostgreSQL frontier: {out['set']} ({out['n']} x {out['dim']}), pgvector {out['pgvector']}, "
        f"PostgreSQL {out['postgres']}",
        "",
        f"Source: {out['source']}; norms p5/p50/p95 "
        + " / ".join(f"{v:.2f}" for v in out["norms_p5_p50_p95"])
        + f". HNSW m {out['m']}, ef_construction {out['ef_construction']}; pgvector's own way: "
        f"iterative scan `{out['iterative_scan']}` + ORDER BY in SQL. {out['cpus']} cores, load "
        f"{out['load_start'][0]:.2f} at the start, {out['load_end'][0]:.2f} at the end; {out['reps']} reps.",
        "",
        f"## µs per query at recall ≥ {TARGET} (wall; ratio to plain pgvector cosine at the same ef_search)",
        "",
        "| nq | ef_search | α | plain µs (weighted recall) | normrank µs (ratio, recall, path) | "
        "pgvector iterative + ORDER BY: cheapest K' ≥ 0.995 µs (ratio, recall) | load |",
        "|---|---|---|---|---|---|---|",
    ]
    keys = sorted({(p["nq"], p["ef_search"], p["alpha"]) for p in pts})
    for nq, ef, a in keys:
        g = [p for p in pts if (p["nq"], p["ef_search"], p["alpha"]) == (nq, ef, a)]
        plain = next(p for p in g if p["method"] == "plain")
        nr = next((p for p in g if p["method"] == "normrank"), None)
        peers = [p for p in g if p["method"] == "pgvector" and p["recall"] >= TARGET]
        best = min(peers, key=lambda p: p["us"]) if peers else None
        top = max((p for p in g if p["method"] == "pgvector"), key=lambda p: p["recall"])
        nr_s = (
            "error" if nr is None else f"{nr['us']:.0f} ({nr['ratio']:.2f}, {nr['recall']:.4f}, {nr['path']})"
        )
        peer_s = (
            f"K' {best['kprime']}: {best['us']:.0f} ({best['ratio']:.2f}, {best['recall']:.4f})"
            if best
            else f"none (best K' {top['kprime']}: {top['recall']:.4f} at {top['ratio']:.2f})"
        )
        lines.append(
            f"| {nq} | {ef} | {a:+g} | {plain['us']:.0f} ({plain['recall']:.3f}) | {nr_s} | {peer_s} | "
            f"{plain['load1']:.2f} |"
        )
    lines += [
        "",
        f"## The frontier across ef_search: cheapest µs at recall ≥ {TARGET} per method (any ef_search, any K')",
        "",
        "| nq | α | normrank µs (ef, recall) | pgvector iterative + ORDER BY µs (ef, K', recall) | faster |",
        "|---|---|---|---|---|",
    ]
    for nq, a in sorted({(p["nq"], p["alpha"]) for p in pts}):
        best = {}
        for m in ("normrank", "pgvector"):
            ok = [
                p for p in pts if (p["nq"], p["alpha"], p["method"]) == (nq, a, m) and p["recall"] >= TARGET
            ]
            best[m] = min(ok, key=lambda p: p["us"]) if ok else None
        nr, pg = best["normrank"], best["pgvector"]
        cells = [
            "none" if nr is None else f"{nr['us']:.0f} (ef {nr['ef_search']}, {nr['recall']:.4f})",
            "none"
            if pg is None
            else f"{pg['us']:.0f} (ef {pg['ef_search']}, K' {pg['kprime']}, {pg['recall']:.4f})",
        ]
        win = "normrank" if pg is None or (nr is not None and nr["us"] < pg["us"]) else "pgvector"
        if nr and pg:
            win += f" ({max(nr['us'], pg['us']) / min(nr['us'], pg['us']):.2f}x)"
        lines.append(f"| {nq} | {a:+g} | {cells[0]} | {cells[1]} | {win} |")
    lines += ["", "## Every point", "", "| nq | ef | α | method | recall | µs | ratio | CPU ratio | notes |"]
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for p in pts:
        note = ""
        if p["method"] == "normrank":
            note = f"path {p['path']}, cache {p['cache_bytes'] / 1e6:.1f} / {p['cache_budget_bytes'] / 1e6:.0f} MB"
        elif p["method"] == "pgvector":
            note = f"hnsw plan {p['plan_uses_hnsw']}, short ids {p['short_ids']}"
        elif p["method"] == "plain":
            note = f"cosine recall {p['cosine_recall']:.3f}, hnsw plan {p['plan_uses_hnsw']}"
        lines.append(
            f"| {p['nq']} | {p['ef_search']} | {p['alpha']:+g} | {p['name']} | {p['recall']:.4f} | {p['us']:.0f} | "
            f"{p['ratio']:.2f} | {p['cpu_ratio']:.2f} | {note} |"
        )
    if out["problems"]:
        lines += ["", "## Problems", ""] + [f"- {s}" for s in out["problems"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
