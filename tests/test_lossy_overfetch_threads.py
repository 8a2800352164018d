"""The over-fetch the default picks on PQ codes (issue 48, deliverable 2) beside a writer: what
it derives lazily per index state (whether the index's codes are lossy, the norm spread of its
documents) is derived from that state only, so readers racing a writer that adds documents get
k distinct stored ids, best first, by the method the spread picks (the norms' spread is the
same law before and after each add: over-fetch throughout). After the writer stops, searches
equal FAISS's own candidates re-scored in numpy."""

from __future__ import annotations

import threading

import faiss
import numpy as np

from normrank import NormIndex, settings

D, K = 16, 10


def test_the_over_fetch_on_pq_codes_beside_a_writer():
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((6000, D)) * rng.lognormal(0.0, 0.3, (6000, 1))).astype(np.float32)
    q = rng.standard_normal((24, D)).astype(np.float32)
    index = NormIndex(D, factory="IVF32,PQ4", nprobe=8)
    index.train(x[:4000])
    index.add(x[:3000])
    norms = np.linalg.norm(x.astype(np.float64), axis=1)
    unit_q = (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)
    errors: list[str] = []

    def check(scores, ids, stats):
        if stats.path != "overfetch":
            errors.append(f"path {stats.path}")
        for s, i in zip(scores, ids, strict=True):
            if (i < 0).any() or (i >= 6000).any() or np.unique(i).size != K:
                errors.append(f"ids {i}")
            elif not (np.diff(s) <= 1e-6).all():
                errors.append(f"order {s}")

    def reader(alpha):
        for _ in range(12):
            check(*index.search(q, K, alpha=alpha, return_stats=True))
            check(*index.search(q[0], K, alpha=alpha, return_stats=True))

    def writer():
        for lo in range(3000, 6000, 500):
            index.add(x[lo : lo + 500])

    threads = [threading.Thread(target=reader, args=(a,)) for a in (-0.5, 0.5, -1.0)]
    threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
    assert index.ntotal == 6000
    depth = K * index.k_factor * settings.LOSSY_OVERFETCH_DEPTH_SCALE
    for alpha in (-0.5, 0.5):
        cos, cand = index.faiss_index.search(unit_q, depth)
        want = np.where(cand >= 0, cos * norms[np.maximum(cand, 0)] ** alpha, -np.inf)
        best = np.argsort(-want, axis=1, kind="stable")[:, :K]
        _, ids = index.search(q, K, alpha=alpha)
        np.testing.assert_array_equal(ids, np.take_along_axis(cand, best, axis=1))
    assert faiss.extract_index_ivf(index.faiss_index).ntotal == 6000
