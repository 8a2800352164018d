"""The IVF paths added in issue 48 (the flat product over the lists of a small IVF-Flat batch,
and short answers completed by the scan) beside a writer: threads search while another adds
documents; every answer has k results, no id twice, and each score is the exact weighted score
of its id (numpy), and after the writer stops, searches equal a single-threaded search."""

from __future__ import annotations

import threading

import numpy as np

from normrank import NormIndex

D, K = 16, 10


def test_ivf_flat_and_short_answers_beside_a_writer():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((6000, D)) * rng.lognormal(0.0, 0.5, (6000, 1))).astype(np.float32)
    q = rng.standard_normal((24, D)).astype(np.float32)
    index = NormIndex(D, factory="IVF64,Flat", nprobe=32)
    index.train(x[:4000])
    index.add(x[:3000])
    norms = np.linalg.norm(x, axis=1)
    unit_x, unit_q = x / norms[:, None], q / np.linalg.norm(q, axis=1, keepdims=True)
    errors: list[str] = []

    def check(scores, ids, alpha):
        for i in ids:
            if (i < 0).any() or np.unique(i).size != K:
                errors.append(f"ids {i}")
                return
        for r in range(ids.shape[0]):
            want = (unit_q[r] @ unit_x[ids[r]].T) * norms[ids[r]] ** alpha
            if not np.allclose(scores[r], want, rtol=1e-4, atol=1e-5):
                errors.append(f"scores {r}")

    def reader(alpha, nprobe):
        for _ in range(15):
            s, i = index.search(q, K, alpha=alpha, nprobe=nprobe)  # 24 queries: the flat product at nprobe 32
            check(s, i, alpha)
            s1, i1 = index.search(q[:1], K, alpha=alpha, nprobe=nprobe)
            check(s1, i1, alpha)

    def writer():
        for lo in range(3000, 6000, 500):
            index.add(x[lo : lo + 500])

    threads = [threading.Thread(target=reader, args=(a, p)) for a, p in ((0.5, 32), (-1.0, 1), (1.0, 1))]
    threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
    assert index.ntotal == 6000
    assert index.search(q, K, alpha=0.5, nprobe=32, return_stats=True)[2].path == "flat"
    for alpha in (0.5, -1.0):
        got = [index.search(q, K, alpha=alpha) for _ in range(2)]
        np.testing.assert_array_equal(got[0][1], got[1][1])
