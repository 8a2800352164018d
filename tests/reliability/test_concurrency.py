"""Concurrency soak: threads search while others add and remove; every result must be one the
index could give in some state it passed through, and nothing deadlocks.

Checkable invariant: a vector's direction and norm are closed-form functions of its id, so any
returned ``(id, score)`` pair can be verified (a torn norms/ids pairing gives a wrong score).
Writers move windows of complete batches: add batch ``hi``, then remove batch ``lo``. A flat
search with ``k`` above the index size returns the whole state at one moment, so its ids must be
the fixed core plus, per writer, a contiguous run of *complete* batches of width W or W + 1.

Nothing depends on the machine's speed: the soak runs until enough searches, full checks and
writes were made (small profile, the default: 40 searches, 10 full checks, 200 writes; full: 30 s
at least and 50 times as many), bounded only by a generous 600 s that a starved or deadlocked
search would reach; it fails only on a wrong result or on too little progress by then.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from normrank import NormIndex

FULL = os.environ.get("NORMRANK_TEST_PROFILE", "small") == "full"
MIN_SECONDS = 30.0 if FULL else 0.0
ENOUGH = {"searches": 40, "full_checks": 10, "writes": 200}
if FULL:
    ENOUGH = {k: 50 * v for k, v in ENOUGH.items()}
BOUND_SECONDS = 600.0  # generous: only starvation or a deadlock runs into it
DIM = 8
BATCH = 16
WINDOW = 4  # batches present per writer between its add and its remove
CORE = np.arange(200, dtype=np.int64)
WRITER_BASE = (1_000_000, 2_000_000)


def vectors(ids: np.ndarray) -> np.ndarray:
    """Raw vector of each id: direction and norm are closed-form in the id."""
    i = ids.astype(np.float64)[:, None]
    freqs = np.arange(1, DIM // 2 + 1, dtype=np.float64)[None, :] * 0.7368
    direction = np.concatenate([np.cos(i * freqs), np.sin(i * freqs)], axis=1)
    direction += 0.05 * (np.arange(DIM) + 1)  # break the symmetry between ids
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    return direction * norm(ids)[:, None]


def norm(ids: np.ndarray) -> np.ndarray:
    return 0.5 + (ids % 17) * 0.25


def expected_scores(q: np.ndarray, ids: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    v = vectors(ids.reshape(-1)).reshape(*ids.shape, DIM)
    u = v / np.linalg.norm(v, axis=-1, keepdims=True)
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    cos = np.einsum("qd,qkd->qk", qn, u)
    return cos * norm(ids) ** alpha[:, None]


def batch_ids(writer: int, b: int) -> np.ndarray:
    return WRITER_BASE[writer] + b * BATCH + np.arange(BATCH, dtype=np.int64)


def check_window(ids: np.ndarray, writer: int) -> None:
    """The writer's ids in one full result are complete, contiguous batches, W or W + 1 of them."""
    mine = np.sort(ids[(ids >= WRITER_BASE[writer]) & (ids < WRITER_BASE[writer] + 10**6)])
    batches, counts = np.unique((mine - WRITER_BASE[writer]) // BATCH, return_counts=True)
    assert (counts == BATCH).all(), (
        f"writer {writer}: a partially added/removed batch {batches[counts < BATCH]}"
    )
    assert batches.size in (WINDOW, WINDOW + 1), f"writer {writer}: {batches.size} batches present"
    assert (np.diff(batches) == 1).all(), f"writer {writer}: batches {batches} are not one window"


@pytest.mark.parametrize("factory", ["Flat", "HNSW16", "IVF4,Flat"])
def test_search_during_add_remove(factory, record_property):
    index = NormIndex(DIM, alpha=0.5, factory=factory, k_factor=1000)
    if not index.is_trained:
        index.train(vectors(np.arange(5000, 6000)))
    if factory.startswith("IVF"):
        faiss_ivf = __import__("faiss").extract_index_ivf(index.faiss_index)
        faiss_ivf.nprobe = 4  # all lists: the IVF search is exhaustive, so results are checkable
    index.add(vectors(CORE), ids=CORE)
    for w in range(2):
        for b in range(WINDOW):
            index.add(vectors(batch_ids(w, b)), ids=batch_ids(w, b))
    exact = factory == "Flat" or factory.startswith("IVF")
    stop = threading.Event()
    errors: list[BaseException] = []
    counts = {"searches": 0, "full_checks": 0, "writes": 0}
    count_lock = threading.Lock()

    def guarded(fn):
        def run():
            try:
                fn()
            except BaseException as e:  # surfaced in the main thread
                errors.append(e)
                stop.set()

        return run

    def writer(w: int):
        lo, hi = 0, WINDOW
        while not stop.is_set():
            index.add(vectors(batch_ids(w, hi)), ids=batch_ids(w, hi))
            hi += 1
            index.remove(batch_ids(w, lo))
            lo += 1
            with count_lock:
                counts["writes"] += 2

    def searcher(seed: int):
        rng = np.random.default_rng(seed)
        total = CORE.size + 2 * (WINDOW + 1) * BATCH
        while not stop.is_set():
            nq = int(rng.integers(1, 4))
            q = rng.normal(size=(nq, DIM))
            alpha = rng.uniform(-1.5, 1.0, size=nq) if rng.random() < 0.5 else float(rng.uniform(-1.5, 1.0))
            full = rng.random() < 0.5
            k = total + 8 if full else int(rng.integers(1, 20))
            scores, ids = index.search(q, k, alpha=alpha)
            alphas = np.broadcast_to(np.asarray(alpha, dtype=np.float64), (nq,))
            found = ids >= 0
            want = expected_scores(q, np.where(found, ids, 0), alphas)
            assert np.allclose(scores[found], want[found], rtol=2e-4, atol=2e-5), "a score not of its id"
            finite = np.where(found, scores, np.float32(-3e38))  # -inf pads would give inf - inf
            assert (np.diff(finite, axis=1)[found[:, 1:]] <= 1e-6).all(), "scores not descending"
            for row in range(nq):
                r = ids[row][found[row]]
                assert np.unique(r).size == r.size, "an id returned twice"
                if full and exact:
                    assert np.isin(CORE, r).all(), "a core id is missing"
                    for w in range(2):
                        check_window(r, w)
                    with count_lock:
                        counts["full_checks"] += 1
            with count_lock:
                counts["searches"] += 1

    threads = [threading.Thread(target=guarded(lambda w=w: writer(w)), daemon=True) for w in range(2)]
    threads += [threading.Thread(target=guarded(lambda s=s: searcher(s)), daemon=True) for s in range(3)]
    for t in threads:
        t.start()
    enough = {k: v for k, v in ENOUGH.items() if k != "full_checks" or exact}
    t0 = time.monotonic()
    while not stop.wait(0.05):
        with count_lock:
            done = all(counts[k] >= v for k, v in enough.items())
        elapsed = time.monotonic() - t0
        if (done and elapsed >= MIN_SECONDS) or elapsed > BOUND_SECONDS:
            break
    stop.set()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a thread did not finish: deadlock"
    if errors:
        raise errors[0]
    record_property("counts", dict(counts))
    short = {k: (counts[k], v) for k, v in enough.items() if counts[k] < v}
    assert not short, f"no progress in {BOUND_SECONDS:.0f} s (starved?): {short}"
    # The final state is itself consistent.
    final = index.ids
    assert np.isin(CORE, final).all()
    for w in range(2):
        mine = final[final >= WRITER_BASE[w]]
        mine = mine[mine < WRITER_BASE[w] + 10**6]
        assert mine.size == WINDOW * BATCH
    assert np.allclose(index.norms, norm(final), rtol=1e-6)
