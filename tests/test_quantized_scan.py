"""Compressed codes (PQ, SQ) stay compressed: the weight-order scan reads them through FAISS's
own decoding, a block at a time, and the result is exact with respect to the codes' own cosine
estimates (numpy over FAISS's reconstructions), single queries and batches alike; nothing of
the vectors is kept beside the index (issue 36)."""

from __future__ import annotations

import faiss
import numpy as np
import pytest
from conftest import assert_same_topk, clustered

from normrank import NormIndex, settings
from normrank.search import ann
from normrank.search.scan_codes import CHUNK
from normrank.settings import SCAN_CODES_BYTES, SCAN_PREFIX_BYTES

D = 32
KINDS = ["IVF8,PQ8", "IVF8,SQ8", "HNSW32,SQ8", "HNSW32", "IVF8,Flat"]


def _index(factory: str, x: np.ndarray, **options) -> NormIndex:
    # ann="scan": the scan itself, also where the default would over-fetch on PQ codes
    # (tests/test_lossy_overfetch.py)
    idx = NormIndex(D, factory=factory, ann="scan", **options)
    if not idx.is_trained:
        idx.train(x)
    idx.add(x)
    ivf = faiss.extract_index_ivf(idx.faiss_index) if "IVF" in factory else None
    if ivf is not None:
        ivf.nprobe = ivf.nlist  # every list: the codes' own cosine ranking, exactly
    else:
        faiss.downcast_index(idx.faiss_index.index).hnsw.efSearch = 1000
    return idx


def _reference(idx: NormIndex, q: np.ndarray, alpha: float) -> np.ndarray:
    """Every score over FAISS's reconstructions of the stored codes, float64 (FAISS's own
    ``reconstruct_n``: an IVF's ids 0 .. n - 1 from its lists, an HNSW's storage in order)."""
    index = idx.faiss_index
    if isinstance(index, faiss.IndexIDMap):  # storage order, removed vectors included
        stored = faiss.vector_to_array(index.id_map)
        at = {int(i): p for p, i in enumerate(stored)}
        recon = index.index.reconstruct_n(0, stored.size)[[at[int(i)] for i in idx.ids]]
    else:
        recon = index.reconstruct_n(0, int(idx.ids.max()) + 1)[idx.ids]
    recon = recon.astype(np.float64)
    unit_q = q / np.linalg.norm(q, axis=1, keepdims=True)
    return (unit_q @ recon.T) * idx.norms.astype(np.float64) ** alpha


@pytest.mark.parametrize("factory", KINDS)
@pytest.mark.parametrize("alpha", [-1.5, 0.5, 2.0])
def test_exact_against_the_codes_reconstructions(monkeypatch, factory, alpha):
    """max_depth = k: a shallow cosine cut, so that most of the top-k comes from the scan;
    single queries through the scan's int8 codes from the first row of a block."""
    monkeypatch.setattr(ann, "MIN_ROWS", 0)
    monkeypatch.setattr(settings, "CACHE_FRACTION", float("inf"))  # (the caps alone: codes in a small index)
    rng = np.random.default_rng(1)
    x = clustered(1500, D, rng).astype(np.float32)
    q = clustered(12, D, rng).astype(np.float32)
    for max_depth in (None, 10):
        idx = _index(factory, x, max_depth=max_depth, n_tail=32)
        ref = _reference(idx, q, alpha)
        s, ids, stats = idx.search(q, 10, alpha=alpha, return_stats=True)
        assert_same_topk(ref, idx.ids, s, ids, 10, tol=2e-5)
        singles = [idx.search(q[i], 10, alpha=alpha) for i in range(q.shape[0])]
        assert_same_topk(ref, idx.ids, *(np.vstack(v) for v in zip(*singles, strict=True)), 10, tol=2e-5)
        assert stats.path == "scan" and stats.depth <= max(10, stats.depth)
    # The search cache holds an int32 order, a 1/64 weight sample, the weights in use, of the
    # rows only the scan's prefix, within its fixed budget, and for an IVF each document's
    # (list, offset) in its row reader's array direct map (IVF-Flat, SQ, PQ: an int64; the
    # index's own direct map stays off: FAISS's index holds nothing for normrank).
    n = idx.ntotal
    prefix = sum(o._prefix.nbytes for o in idx._cache.orders.values() if o._prefix is not None)
    assert prefix <= SCAN_PREFIX_BYTES
    # the single queries' int8 codes of the scan's first rows: within their own fixed budget
    codes = sum(o._scan_codes.nbytes for o in idx._cache.orders.values() if o._scan_codes is not None)
    assert 0 < codes <= SCAN_CODES_BYTES + 24 * (SCAN_CODES_BYTES // D // CHUNK + 2)
    prefix += codes
    rows = idx._cache.rows.nbytes
    per_doc = 8  # IVF-Flat / SQ / PQ readers: FAISS's (list, offset) array
    assert rows == (
        per_doc * n + 8 * (faiss.extract_index_ivf(idx.faiss_index).nlist + 1) if "IVF" in factory else 0
    )
    heads = 2 * 4 * min(n, 8192) * len(idx._cache.powers)  # first weights in order, bounded
    assert idx._cache.nbytes - prefix - rows <= 4 * n + 4 * n * len(idx._cache.powers) + n + heads
    ivf = faiss.extract_index_ivf(idx.faiss_index) if "IVF" in factory else None
    assert ivf is None or ivf.direct_map.type == faiss.DirectMap.NoMap
    assert ivf is not None or type(idx.faiss_index) is faiss.IndexIDMap  # no rev_map


def test_single_queries_with_tombstones_and_few_documents():
    """HNSW keeps removed vectors in its graph and storage: the scan reads the live rows only
    (FAISS positions of the live documents), and a k past the documents pads."""
    rng = np.random.default_rng(2)
    x = clustered(600, D, rng).astype(np.float32)
    q = clustered(6, D, rng).astype(np.float32)
    for factory in ("HNSW32,SQ8", "HNSW32"):
        idx = _index(factory, x, max_depth=10, n_tail=8)
        gone = idx.search(q, 3, alpha=1.0)[1].ravel()
        idx.remove(np.unique(gone))
        for alpha in (-1.0, 1.0):
            ref = _reference(idx, q, alpha)
            singles = [idx.search(q[i], 10, alpha=alpha) for i in range(q.shape[0])]
            got_s, got_ids = (np.vstack(v) for v in zip(*singles, strict=True))
            assert not np.isin(got_ids, gone).any()
            assert_same_topk(ref, idx.ids, got_s, got_ids, 10, tol=2e-5)
        _, ids = idx.search(q[0], 5000, alpha=0.5)
        assert (ids[0, idx.ntotal :] == -1).all() and (ids[0, : idx.ntotal] >= 0).all()
