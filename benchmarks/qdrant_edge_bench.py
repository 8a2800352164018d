"""Qdrant Edge rows of benchmarks/speed.py (``--only qdrant-edge``): QdrantEdgeNormIndex against
a plain Qdrant Edge nearest query on the same shard (same HNSW graph, same ``hnsw_ef``), in the
same run. Not a test.

Per dataset (real MiniLM BEIR embeddings; a >= 100k set generated to match them) one shard is
built (m = 16, ef_construct = 100, Qdrant's defaults) and kept in ``$NORMRANK_CACHE/bench-edge``
so that a re-run does not rebuild its graph. ``hnsw_ef`` is the narrowest of 64/128/.../1024 at
which the plain query's cosine recall@10 reaches 0.995 (as the FAISS HNSW rows choose
efSearch). Both sides run on one search thread (``max_search_threads=1``). Timing alternates the
two sides within each repetition (their order flips every repetition); rows give the median
and the spread (min-max of the per-repetition ratio). nq = 1 times ``SINGLE_QUERIES`` queries
one call each; batches send 100 queries in one ``query_batch``.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np

EF_LADDER = (64, 128, 256, 512, 1024)
BATCH = 100


def _shard_dir(x: np.ndarray, label: str) -> Path:
    from normrank.encoders.resolve import cache_root

    digest = hashlib.sha256(x[:: max(1, x.shape[0] // 512)].tobytes()).hexdigest()[:12]
    return cache_root() / "bench-edge" / f"{label}-{x.shape[0]}-m16-efc100-{digest}"


def open_or_build(x: np.ndarray, label: str):
    """The benchmark shard for ``x`` (built once, HNSW graph included), and its build seconds."""
    from normrank.backends.qdrant_edge import QdrantEdgeNormIndex

    path = _shard_dir(x, label)
    t0 = time.perf_counter()
    if path.exists():
        ei = QdrantEdgeNormIndex(path, max_search_threads=1)
        if len(ei) == x.shape[0] and ei.shard.info().indexed_vectors_count >= x.shape[0]:
            return ei, None
        ei.close()
        import shutil

        shutil.rmtree(path)
    ei = QdrantEdgeNormIndex(
        path, x.shape[1], m=16, ef_construct=100, indexing_threshold_kb=1, max_search_threads=1
    )
    for i0 in range(0, x.shape[0], 20_000):  # one engine update per 20k: bounded memory
        ei.add(x[i0 : i0 + 20_000], ids=np.arange(i0, min(x.shape[0], i0 + 20_000)))
    ei.optimize()
    return ei, time.perf_counter() - t0


def _plain(shard, qu: np.ndarray, ef: int, batch: bool):
    import qdrant_edge as qe

    def req(v):
        return qe.QueryRequest(
            limit=10, query=qe.Query.Nearest(v.tolist()), params=qe.SearchParams(hnsw_ef=ef)
        )

    if batch:
        return lambda: shard.query_batch(qe.QueryBatchRequest([req(v) for v in qu]))
    return lambda: [shard.query(req(v)) for v in qu]


def _plain_ids(shard, qu: np.ndarray, ef: int) -> np.ndarray:
    import qdrant_edge as qe

    out = np.full((qu.shape[0], 10), -1, dtype=np.int64)
    for i, v in enumerate(qu):
        r = shard.query(
            qe.QueryRequest(limit=10, query=qe.Query.Nearest(v.tolist()), params=qe.SearchParams(hnsw_ef=ef))
        )
        out[i, : len(r)] = [int(p.id) for p in r]
    return out


def timed_pair(plain, nr, reps: int) -> dict[str, float]:
    """Interleaved timing: each repetition runs both (order flipped every repetition)."""
    plain(), nr()  # warm-up
    tp, tn = [], []
    for r in range(reps):
        for name in ("plain", "nr") if r % 2 == 0 else ("nr", "plain"):
            t0 = time.perf_counter()
            (plain if name == "plain" else nr)()
            (tp if name == "plain" else tn).append(time.perf_counter() - t0)
    ratios = np.array(tn) / np.array(tp)
    return {
        "t_plain_ms": 1e3 * float(np.median(tp)),
        "t_ms": 1e3 * float(np.median(tn)),
        "latency_ratio": float(np.median(ratios)),
        "ratio_min": float(ratios.min()),
        "ratio_max": float(ratios.max()),
        "reps": reps,
    }


def bench_edge(x, q, alphas, reps: int, rows: list, label: str, *, single_queries: int) -> None:
    """Rows ``"backend": "qdrant-edge"`` for one dataset (see the module docstring)."""
    try:
        import qdrant_edge  # noqa: F401
    except ImportError:
        print("qdrant-edge-py not installed: skipping qdrant-edge rows", flush=True)
        return
    from bench_exact import exact_top, recall, unit

    xu, norms = unit(x), np.linalg.norm(x, axis=1)
    ei, build_s = open_or_build(x, label)
    q_single, q_batch = q[:single_queries], q[:BATCH]
    # Operating point: the narrowest hnsw_ef at which plain cosine recall@10 >= 0.995.
    cos_ref = exact_top(xu, np.ones(x.shape[0]), unit(q_batch), 0.0)
    for ef in EF_LADDER:
        plain_rec = recall(_plain_ids(ei.shard, unit(q_batch), ef), cos_ref)
        if plain_rec >= 0.995:
            break
    ei.hnsw_ef = ef
    print(f"{label} qdrant-edge: hnsw_ef {ef} (plain cosine recall {plain_rec:.3f})", flush=True)
    for nq, qs in ((1, q_single), (BATCH, q_batch)):
        qu = unit(qs)
        for a in alphas:
            ref = exact_top(xu, norms, qu, a)
            if nq == 1:
                got = np.concatenate([ei.search(qs[i], 10, alpha=a)[1] for i in range(qs.shape[0])])
                widened = 0
                for i in range(qs.shape[0]):
                    ei.search(qs[i], 10, alpha=a)
                    widened += ei.last_widened
                nr = lambda a=a, qs=qs: [ei.search(qs[i], 10, alpha=a) for i in range(qs.shape[0])]  # noqa: E731
            else:
                got = ei.search(qs, 10, alpha=a)[1]
                widened = ei.last_widened
                nr = lambda a=a, qs=qs: ei.search(qs, 10, alpha=a)  # noqa: E731
            t = timed_pair(_plain(ei.shard, qu, ef, nq > 1), nr, reps)
            rows.append(
                dict(
                    backend="qdrant-edge",
                    alpha=a,
                    nq=nq,
                    recall_at_10=recall(got, ref),
                    dataset=label,
                    n=x.shape[0],
                    params={"m": 16, "ef_construct": 100, "hnsw_ef": ef, "max_search_threads": 1},
                    plain_cosine_recall=plain_rec,
                    widened_share=widened / qs.shape[0],
                    build_s=build_s,
                    **t,
                )
            )
            print(json.dumps(rows[-1]), flush=True)
    ei.close()
