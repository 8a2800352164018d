"""Per-document memory beside FAISS's own (issue 36, item 1): new indexes carry no id -> row
hash (no ``IndexIDMap2`` rev_map, no IVF direct map), rows are read by storage position, and
indexes saved with the former layout (IDMap2, hash-table direct map) load and search as before.
Scores are checked against numpy over the raw vectors, or over FAISS's own reconstructions."""

from __future__ import annotations

import tracemalloc

import faiss
import numpy as np
import pytest
from conftest import assert_same_topk, brute_force, clustered

from normrank import NormIndex
from normrank.index.state import IndexState
from normrank.validation import split_norms

D = 16
KINDS = ["Flat", "HNSW16", "HNSW16,SQ8", "IVF8,Flat", "IVF8,PQ4", "IVF8,SQ8"]


def _built(factory: str, x: np.ndarray, ids: np.ndarray) -> NormIndex:
    idx = NormIndex(D, factory=factory)
    if not idx.is_trained:
        idx.train(x)
    idx.add(x, ids=ids)
    _widest(idx)
    return idx


def _widest(idx: NormIndex) -> None:
    """Every list / a wide beam: the ranking is then the codes' own, exactly."""
    index = idx.faiss_index
    if isinstance(index, faiss.IndexIDMap | faiss.IndexIDMap2):
        index = faiss.downcast_index(index.index)
    if isinstance(index, faiss.IndexHNSW):
        index.hnsw.efSearch = 1000
    elif isinstance(index, faiss.IndexIVF):
        index.nprobe = index.nlist


def _decoded(idx: NormIndex) -> np.ndarray:
    """FAISS's own reconstruction of every live document, in ``idx.ids`` order (float64)."""
    index = idx.faiss_index
    if isinstance(index, faiss.IndexIDMap | faiss.IndexIDMap2):
        stored = faiss.vector_to_array(index.id_map)
        at = {int(i): p for p, i in enumerate(stored)}
        recon = faiss.downcast_index(index.index).reconstruct_n(0, stored.size)
        return recon[[at[int(i)] for i in idx.ids]].astype(np.float64)
    ivf = faiss.extract_index_ivf(index)  # every list entry by FAISS's reconstruct_from_offset
    rows = {}
    for lst in range(ivf.nlist):
        size = ivf.invlists.list_size(lst)
        for offset, i in enumerate(faiss.rev_swig_ptr(ivf.invlists.get_ids(lst), size)):
            row = np.empty(D, dtype=np.float32)
            ivf.reconstruct_from_offset(lst, offset, faiss.swig_ptr(row))
            rows[int(i)] = row
    return np.array([rows[int(i)] for i in idx.ids], dtype=np.float64)


def _check_exact(idx: NormIndex, q: np.ndarray) -> None:
    """Every search equals numpy over FAISS's reconstructions (exact storage: the raw rows)."""
    recon = _decoded(idx)
    unit_q = q / np.linalg.norm(q, axis=1, keepdims=True)
    for alpha in (-1.0, 0.0, 0.7):
        ref = (unit_q @ recon.T) * idx.norms.astype(np.float64) ** alpha
        s, got = idx.search(q, 8, alpha=alpha)
        assert_same_topk(ref, idx.ids, s, got, 8, tol=2e-5)


@pytest.mark.parametrize("factory", KINDS)
def test_new_indexes_keep_no_id_hash(factory):
    """IndexIDMap (no rev_map) around flat / HNSW indexes, no direct map on an IVF; the scan
    and reconstruct read rows by position and stay exact (custom ids, after removals)."""
    rng = np.random.default_rng(3)
    x = clustered(600, D, rng)
    ids = rng.permutation(10_000)[:600].astype(np.int64)
    idx = _built(factory, x, ids)
    index = idx.faiss_index
    if "IVF" in factory:
        assert faiss.extract_index_ivf(index).direct_map.type == faiss.DirectMap.NoMap
    else:
        assert type(index) is faiss.IndexIDMap
    q = clustered(6, D, rng)
    _check_exact(idx, q)
    idx.remove(ids[::7])  # IVF: FAISS moves each list's last entry into the hole
    idx.add(clustered(50, D, rng), ids=np.arange(20_000, 20_050))
    _widest(idx)
    _check_exact(idx, q)
    if factory in ("Flat", "HNSW16", "IVF8,Flat"):  # raw rows kept: reconstruct is exact
        keep = np.isin(ids, ids[::7], invert=True)
        for i, row in zip(ids[keep][::37], x[keep][::37], strict=True):
            np.testing.assert_allclose(idx.reconstruct(int(i)), row, rtol=1e-5, atol=1e-5)


def _old_layout(factory: str, x: np.ndarray, ids: np.ndarray) -> IndexState:
    """The state an index had before issue 36: IndexIDMap2 around flat / HNSW, an IVF with a
    hash-table direct map."""
    base = faiss.index_factory(D, factory, faiss.METRIC_INNER_PRODUCT)
    unit, norms = split_norms(x)
    if not base.is_trained:
        base.train(unit)
    if "IVF" in factory:
        faiss.extract_index_ivf(base).set_direct_map_type(faiss.DirectMap.Hashtable)
        index = base
    else:
        index = faiss.IndexIDMap2(base)
    index.add_with_ids(unit, ids)
    return IndexState(index, ids, norms, next_id=int(ids.max()) + 1)


# (IVF-PQ is left out: a saved IVF8,PQ4 of 16-d vectors, old or new, is refused at load by FAISS's
# deserialization byte limit on its precomputed table; a separate matter.)
@pytest.mark.parametrize("factory", [k for k in KINDS if "PQ" not in k])
def test_old_layout_saves_load_and_search(factory, tmp_path):
    rng = np.random.default_rng(4)
    x = clustered(500, D, rng)
    ids = np.arange(100, 600, dtype=np.int64)
    old = NormIndex.from_state(_old_layout(factory, x, ids))
    old.save(tmp_path / "old")
    loaded = NormIndex.load(tmp_path / "old")
    index = loaded.faiss_index
    if "IVF" in factory:  # the saved direct map is kept (rebuilt from the lists)
        assert faiss.extract_index_ivf(index).direct_map.type == faiss.DirectMap.Hashtable
    else:
        assert type(index) is faiss.IndexIDMap2
    _widest(loaded)
    q = clustered(6, D, rng)
    _check_exact(loaded, q)
    if factory in ("Flat", "IVF8,Flat"):  # against the raw vectors themselves
        ref, _ = brute_force(x, q, 0.7)
        s, got = loaded.search(q, 8, alpha=0.7)
        assert_same_topk(ref, ids, s, got, 8)
    loaded.remove(ids[:40])
    loaded.add(clustered(30, D, rng))
    _widest(loaded)
    _check_exact(loaded, q)


def test_from_faiss_with_norms_keeps_the_users_id_map_and_adds_no_hash():
    """A user's IndexIDMap is wrapped as it is (formerly re-wrapped in an IndexIDMap2), a bare
    HNSW gets an IndexIDMap, a user's IVF no direct map; all search exactly."""
    rng = np.random.default_rng(5)
    x = clustered(400, D, rng)
    unit, norms = split_norms(x)
    q = clustered(5, D, rng)
    user = faiss.IndexIDMap(faiss.IndexFlatIP(D))
    user.add_with_ids(unit, np.arange(1000, 1400))
    idx = NormIndex.from_faiss(user, norms=norms)
    assert idx.faiss_index is user
    _check_exact(idx, q)
    hnsw = faiss.IndexHNSWFlat(D, 16, faiss.METRIC_INNER_PRODUCT)
    hnsw.add(unit)
    idx = NormIndex.from_faiss(hnsw, norms=norms)
    assert type(idx.faiss_index) is faiss.IndexIDMap
    _widest(idx)
    _check_exact(idx, q)
    ivf = faiss.index_factory(D, "IVF8,Flat", faiss.METRIC_INNER_PRODUCT)
    ivf.train(unit)
    ivf.add(unit)
    idx = NormIndex.from_faiss(ivf, norms=dict(enumerate(norms)))
    assert faiss.extract_index_ivf(idx.faiss_index).direct_map.type == faiss.DirectMap.NoMap
    _widest(idx)
    _check_exact(idx, q)


def test_split_norms_keeps_no_float64_copy_of_the_batch():
    """The float64 work runs in bounded blocks (a whole-batch float64 copy and quotient, freed,
    left heap pages touched that FAISS's growing arrays reused: ~220 bytes a document of
    resident memory on HNSW32,SQ8); the result is bit for bit the whole-batch computation's."""
    rng = np.random.default_rng(6)
    x = (rng.normal(size=(6000, 384)) * rng.lognormal(size=(6000, 1))).astype(np.float32)
    tracemalloc.start()
    try:
        unit, norms = split_norms(x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Norms and a few blocks only: the unit rows are mapped apart from malloc's heap (a freed
    # batch there left touched pages that FAISS's growing arrays reused: ~100 bytes a document
    # resident on HNSW32), so they do not show in tracemalloc either.
    assert peak <= 2 * 6000 * 8 + 3 * (1 << 18) * 8
    assert unit.flags.writeable and unit.flags.c_contiguous and unit.dtype == np.float32
    x64 = x.astype(np.float64)
    whole = np.sqrt(np.einsum("ij,ij->i", x64, x64))
    assert np.array_equal(norms, whole.astype(np.float32))
    assert np.array_equal(unit, (x64 / whole[:, None]).astype(np.float32))


@pytest.mark.parametrize("factory", ["Flat", "HNSW16", "IVF8,Flat"])
def test_default_ids_are_not_stored(factory):
    """Ids ``0 .. n - 1`` in order (add's default) cost nothing beside FAISS's own structures:
    what normrank keeps after ``add`` is the norm, 4 bytes a document (12 with an int64 id
    array). Custom ids, a removal in the middle, and a save / load keep every answer exact."""
    rng = np.random.default_rng(8)
    n = 40_000
    x = clustered(n, D, rng)
    idx = NormIndex(D, factory=factory)
    if not idx.is_trained:
        idx.train(x[:4000])
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for s in range(0, n, 10_000):
            idx.add(x[s : s + 10_000])
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held <= 4 * n + 64 * 1024, held / n
    assert np.array_equal(idx.ids, np.arange(n))
    _widest(idx)
    q = clustered(5, D, rng)
    _check_exact(idx, q)
    idx.add(clustered(30, D, rng), ids=np.arange(10**6, 10**6 + 30))  # custom ids: now stored
    idx.remove(np.arange(100, 200))
    _widest(idx)
    _check_exact(idx, q)
    assert idx.ids[99] == 99 and idx.ids[100] == 200 and idx.ids[-1] == 10**6 + 29


@pytest.mark.parametrize("with_norms", [True, False])
def test_a_wrapped_ivf_keeps_its_documents_by_id(with_norms):
    """A bare IVF lists its documents out of the order they were added; wrapped, they are kept
    by id, so ids 0 .. n - 1 need no id array, and every norm stays with its own vector."""
    rng = np.random.default_rng(9)
    x = clustered(3000, D, rng)
    unit, norms = split_norms(x)
    ivf = faiss.index_factory(D, "IVF8,Flat", faiss.METRIC_INNER_PRODUCT)
    ivf.train(unit)
    if with_norms:
        ivf.add(unit)
        idx = NormIndex.from_faiss(ivf, norms=dict(enumerate(norms)))
    else:
        ivf.add(x)  # raw vectors: rebuilt over units
        idx = NormIndex.from_faiss(ivf)
    assert np.array_equal(idx.ids, np.arange(3000))
    np.testing.assert_allclose(idx.norms, norms, rtol=1e-6)
    assert idx._docs.doc_ids.identity  # (the 8 bytes a document this test is about)
    _widest(idx)
    _check_exact(idx, clustered(5, D, rng))


@pytest.mark.parametrize(
    "factory", ["IVF8,Flat", "IVF8,SQ8", "IVF8,SQfp16", "IVF8,SQ4", "IVF8,PQ4", "IVF8,PQ4x4", "IVF8,PQ4x4fs"]
)
@pytest.mark.parametrize("by_residual", [True, False])
def test_ivf_row_readers_decode_what_the_lists_hold(factory, by_residual):
    """The private reader of an IVF-Flat / SQ / PQ (FAISS's reconstruct_batch through a direct
    map of (list, offset)) returns bit for bit what FAISS's own reconstruct_from_offset gives for
    each document; other kinds (fast-scan PQ) are read list by list, the same rows."""
    from normrank.search.doc_ids import DocIds
    from normrank.search.rows import ListRows, _list_positions

    rng = np.random.default_rng(10)
    x, _ = split_norms(clustered(1200, D, rng))
    built = faiss.index_factory(D, factory, faiss.METRIC_INNER_PRODUCT)
    ivf = faiss.downcast_index(built)  # (``built`` owns the C++ index: kept alive below)
    if "Flat" not in factory:  # (IVF-Flat has no residual mode)
        ivf.by_residual = by_residual
    ivf.train(x)
    ivf.add_with_ids(x, np.arange(1200))
    rows = ListRows(ivf, _list_positions(ivf, DocIds(None, 1200)))
    assert (rows._reader is not None) == ("fs" not in factory)
    want = _decoded_ivf(ivf)
    pos = rng.permutation(1200)[:700]
    np.testing.assert_array_equal(rows.gather(pos), want[pos])
    assert built.ntotal == 1200


def _decoded_ivf(ivf) -> np.ndarray:
    """Each stored vector by FAISS's reconstruct_from_offset, in id order."""
    out = np.empty((ivf.ntotal, ivf.d), dtype=np.float32)
    for lst in range(ivf.nlist):
        size = ivf.invlists.list_size(lst)
        for offset, i in enumerate(faiss.rev_swig_ptr(ivf.invlists.get_ids(lst), size)):
            ivf.reconstruct_from_offset(lst, offset, faiss.swig_ptr(out[int(i)]))
    return out


def test_ivf_fast_scan_reads_its_packed_lists():
    """An IVF fast scan (codes packed in blocks, no code per row) is read row by row through
    FAISS's reconstruct_from_offset (it raised numpy's "Maximum allowed dimension exceeded"
    at the first scan). FAISS ranks its candidates by 8-bit lookup tables, the scan by decoded
    rows, so scores agree with numpy over the decoded vectors to ~1e-2, not to float32."""
    rng = np.random.default_rng(11)
    x = clustered(1500, D, rng)
    idx = _built("IVF8,PQ4x4fs", x, np.arange(1500))
    idx.ann = "scan"  # the scan itself (the default would over-fetch on these PQ codes)
    recon, q = _decoded(idx), clustered(6, D, rng)
    unit_q = q / np.linalg.norm(q, axis=1, keepdims=True)
    for alpha in (-1.0, 0.7):
        ref = (unit_q @ recon.T) * idx.norms.astype(np.float64) ** alpha
        s, got, stats = idx.search(q, 8, alpha=alpha, return_stats=True)
        assert stats.scanned > 0
        np.testing.assert_allclose(s, np.take_along_axis(ref, got, 1), rtol=3e-2, atol=3e-2)
        top = np.argsort(-ref, axis=1)[:, :8]
        hits = np.mean([len(set(a) & set(b)) / 8 for a, b in zip(top, got, strict=True)])
        assert hits >= 0.8
