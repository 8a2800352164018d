"""Benchmark data: real all-MiniLM-L6-v2 raw embeddings of the BEIR corpora in ../shared/data/beir,
and a larger synthetic set generated to match their statistics (clusters, spread, norms).

The real embeddings are exactly the sweep's: ``normrank.sweep.embed_dataset`` with the same
embedding cache (``$NORMRANK_CACHE``, default ~/.cache/normrank), documents as
``title + " " + text`` and the judged test queries, so a sweep run first means nothing is
encoded twice. Not a test; imported by ``speed.py`` and ``gpu_check.py``.
"""

from __future__ import annotations

import numpy as np

CORPORA = ("scifact", "nfcorpus-test-preprocessed", "cranfield", "cisi", "medline", "cacm", "npl", "adi")
MODEL = "all-MiniLM-L6-v2"


def real_embeddings(
    corpora: tuple[str, ...] = CORPORA, *, encode_missing: bool = True
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Raw MiniLM embeddings ``(docs (n, 384), queries (m, 384), corpora used)``, concatenated.

    With ``encode_missing=False`` corpora not in the embedding cache are skipped (and left out of
    the list); otherwise they are encoded once and cached.
    """
    from normrank.corpus.beir import load_dataset
    from normrank.corpus.embedding_cache import EmbeddingCache
    from normrank.errors import NormrankError
    from normrank.sweep import embed_dataset, model_key

    cache, encoders = EmbeddingCache(), {}
    docs, queries, used = [], [], []
    for name in corpora:
        try:
            ds = load_dataset(name)
        except (NormrankError, OSError):
            continue
        qids, qtexts = ds.judged()
        if encode_missing:
            q, d = embed_dataset(ds, MODEL, cache, encoders, 64, False, None, qids, qtexts)
        else:  # the same cache entries embed_dataset reads, without encoding on a miss
            key = model_key(MODEL, None)
            d = cache.load(key, ds.doc_ids, "title+text", texts=ds.doc_texts)
            q = None if d is None else cache.load(key, qids, "text", texts=qtexts)
            if q is None:
                continue
        docs.append(d)
        queries.append(q)
        used.append(name)
    if not used:
        raise FileNotFoundError("no cached or encodable BEIR corpora (set NORMRANK_DATA)")
    return np.concatenate(docs), np.concatenate(queries), used


def synthetic_like(
    docs: np.ndarray, queries: np.ndarray, n: int, nq: int, *, n_clusters: int = 256, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` documents and ``nq`` queries drawn to match ``docs``' statistics.

    k-means on the unit directions; each synthetic vector picks a cluster (by its share), adds a
    residual drawn from that cluster's real residuals rescaled by a random factor and mixed with
    a second real residual (so vectors are new, not copies), and takes a log-normal norm with
    the cluster's mean and spread of log-norm. Queries are drawn the same way from the real
    queries' clusters, so the query/document geometry stays realistic.
    """
    import faiss

    rng = np.random.default_rng(seed)
    d = docs.shape[1]

    def fit(x: np.ndarray, c: int):
        norms = np.linalg.norm(x, axis=1)
        unit = (x / norms[:, None]).astype(np.float32)
        km = faiss.Kmeans(d, c, niter=15, seed=seed, spherical=True, verbose=False)
        km.train(unit)
        _, assign = km.index.search(unit, 1)
        return unit, np.log(norms), km.centroids, assign[:, 0]

    def draw(x: np.ndarray, c: int, m: int) -> np.ndarray:
        unit, lognorm, cents, assign = fit(x, c)
        lo, hi = lognorm.min(), lognorm.max()
        resid = unit - cents[assign]
        sizes = np.bincount(assign, minlength=c).astype(np.float64)
        pick = rng.choice(c, size=m, p=sizes / sizes.sum())
        members = [np.flatnonzero(assign == j) for j in range(c)]
        stats = np.array(
            [(lognorm[mm].mean(), lognorm[mm].std() + 1e-3) if mm.size else (0, 1) for mm in members]
        )
        out = np.empty((m, d), dtype=np.float32)
        for j in np.unique(pick):
            rows = np.flatnonzero(pick == j)
            mm = members[j]
            a = resid[rng.choice(mm, rows.size)]
            b = resid[rng.choice(mm, rows.size)]
            t = rng.uniform(0, 1, (rows.size, 1))
            r = (np.sqrt(t) * a + np.sqrt(1 - t) * b) * rng.uniform(0.8, 1.2, (rows.size, 1))
            v = cents[j] + r + rng.normal(0, 0.01, (rows.size, d))
            v /= np.linalg.norm(v, axis=1, keepdims=True)
            mu, sd = stats[j]
            # Clipped to the real range: a log-normal tail would invent norms no real text has.
            out[rows] = v * np.exp(np.clip(rng.normal(mu, sd, (rows.size, 1)), lo, hi))
        return out

    n_clusters = min(n_clusters, max(8, docs.shape[0] // 40))  # >= ~40 real points per cluster
    return draw(docs, n_clusters, n), draw(queries, max(4, min(n_clusters, queries.shape[0] // 40)), nq)


if __name__ == "__main__":
    import time

    t0 = time.time()
    x, q, used = real_embeddings()
    print(used)
    nx = np.linalg.norm(x, axis=1)
    print(
        f"docs {x.shape} queries {q.shape} in {time.time() - t0:.0f}s; doc norms min {nx.min():.3f} "
        f"p50 {np.median(nx):.3f} max {nx.max():.3f}"
    )
