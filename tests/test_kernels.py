"""The search's kernels are FAISS's and numpy's: the flat search equals FAISS's heap of the
multiplied scores, the ANN batch scan equals brute force, and a search loads no compiled kernel
of its own (numba's LLVM runtime cost ~125 MiB per process at the first search, issue 36)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import faiss
import numpy as np
import pytest
from conftest import assert_same_topk

from normrank.search.flat import weighted_flat_search


def _heap(nq: int, k: int):
    vals = np.empty((nq, k), dtype=np.float32)
    ids = np.empty((nq, k), dtype=np.int64)
    heap = faiss.float_minheap_array_t()
    heap.k, heap.nh, heap.val, heap.ids = k, nq, faiss.swig_ptr(vals), faiss.swig_ptr(ids)
    heap.heapify()
    return heap, vals, ids


@pytest.mark.parametrize("nq", [1, 3, 40])
def test_flat_search_equals_faiss_heap_of_the_multiplied_scores(nq):
    """Coarse scores and weights in {0.5, 1, 2}: ties everywhere. The flat search returns what
    FAISS's own heap keeps of ``(q . x) * w`` (ids and scores; scores up to the float32
    rounding of where the weight is multiplied in)."""
    rng = np.random.default_rng(nq)
    x = (rng.integers(-2, 3, (3000, 8)) / 2).astype(np.float32)
    q = (rng.integers(-2, 3, (nq, 8)) / 2).astype(np.float32)
    w = rng.choice(np.array([0.5, 1.0, 2.0], dtype=np.float32), 3000)
    s, p = weighted_flat_search(x, w, q, 10)
    ref = (q.astype(np.float64) @ x.T.astype(np.float64)) * w
    assert_same_topk(ref, np.arange(3000), s, p, 10)
    heap, vals, _ = _heap(nq, 10)
    multiplied = np.ascontiguousarray((q @ x.T) * w, dtype=np.float32)
    heap.addn(3000, faiss.swig_ptr(multiplied), 0, 0, nq)
    heap.reorder()
    np.testing.assert_allclose(s, vals, rtol=1e-6)


@pytest.mark.parametrize("alpha", [-1.5, 1.0])
def test_ann_batch_scan_equals_brute_force(alpha):
    """The ANN batch scan (numpy multiply, repeats masked, FAISS's heaps) equals brute force on an
    index that returns the true cosine order, and each single query equals its batch row."""
    from normrank import NormIndex

    rng = np.random.default_rng(3)
    x = (rng.standard_normal((4000, 24)) * rng.lognormal(0, 0.4, (4000, 1))).astype(np.float32)
    q = rng.standard_normal((40, 24)).astype(np.float32)
    idx = NormIndex(24, factory="IVF8,Flat", max_depth=10, n_tail=64)  # the scan does the work
    idx.train(x)
    faiss.extract_index_ivf(idx.faiss_index).nprobe = 8
    idx.add(x)
    norms = np.linalg.norm(x.astype(np.float64), axis=1)
    ref = ((q / np.linalg.norm(q, axis=1, keepdims=True)) @ (x / norms[:, None]).T) * norms**alpha
    s, p = idx.search(q, 10, alpha=alpha)
    assert_same_topk(ref, np.arange(4000), s, p, 10)
    singles = [idx.search(q[i], 10, alpha=alpha) for i in range(q.shape[0])]
    assert_same_topk(ref, np.arange(4000), *(np.vstack(v) for v in zip(*singles, strict=True)), 10)


_FIRST_SEARCH = textwrap.dedent(
    """
    import ctypes, gc, json, sys
    import numpy as np
    from normrank import NormIndex

    def rss():
        gc.collect()
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    rng = np.random.default_rng(0)
    x = rng.standard_normal((3000, 64)).astype(np.float32)
    before = rss()
    for factory in ("Flat", "HNSW16", "IVF16,Flat", "HNSW16,SQ8", "IVF16,PQ8"):
        idx = NormIndex(64, factory=factory)
        if not idx.is_trained:
            idx.train(x)
        idx.add(x)
        for alpha in (0.0, -0.5, 0.5):
            idx.search(x[0], 10, alpha=alpha)
            idx.search(x[:20], 10, alpha=alpha)
        del idx
    print(json.dumps({"numba": "numba" in sys.modules, "grew": rss() - before}))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and glibc")
def test_a_search_loads_no_compiled_kernel():
    """Every kind of index searched at every sign of alpha, single and batched, in a fresh
    process: numba is never imported, and the process grows by less than the issue's 40 MiB
    (FAISS's own pools included; numba alone cost ~125 MiB)."""
    out = subprocess.run([sys.executable, "-c", _FIRST_SEARCH], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert not got["numba"]
    assert got["grew"] < 40 * 2**20
