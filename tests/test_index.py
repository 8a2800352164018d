"""NormIndex against numpy brute force and against FAISS itself."""

from __future__ import annotations

import faiss
import numpy as np
import pytest
from conftest import assert_same_topk, brute_force, clustered
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import normrank
from normrank import NormIndex
from normrank.errors import (
    CorruptIndexError,
    DimensionMismatchError,
    DuplicateIdError,
    IndexStateError,
    InvalidInputError,
    NonFiniteError,
    NormrankError,
    UnknownIdError,
    UnsupportedIndexError,
    ZeroNormError,
)

ALPHAS = [-1.5, -0.75, 0.0, 0.5, 1.0]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    dim=st.integers(1, 40),
    n=st.integers(1, 300),
    k=st.integers(1, 40),
    alpha=st.floats(-2.0, 1.0, allow_nan=False),
    seed=st.integers(0, 2**31 - 1),
    custom_ids=st.booleans(),
    nq=st.sampled_from([1, 7, 8, 50, 193]),  # each of the flat kernel's three query paths
)
def test_search_equals_numpy_brute_force(dim, n, k, alpha, seed, custom_ids, nq):
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(n, dim)) * rng.lognormal(0, 0.7, size=(n, 1))).astype(np.float32)
    x[np.linalg.norm(x, axis=1) < 1e-3] += 1.0
    q = rng.normal(size=(nq, dim)).astype(np.float32) + 0.01
    ids = rng.choice(10 * n + 5, size=n, replace=False).astype(np.int64) if custom_ids else None
    index = NormIndex(dim, alpha=alpha)
    index.add(x, ids)
    got_s, got_i = index.search(q, k)
    ref, ref_ids = brute_force(x, q, alpha, ids)
    assert got_s.dtype == np.float32 and got_i.dtype == np.int64 and got_s.shape == (nq, k)
    assert_same_topk(ref, ref_ids, got_s, got_i, k, tol=2e-5)


def test_done_when_20k_clustered(rng):
    x = clustered(20_000, 64, rng)
    q = clustered(200, 64, rng)
    index = NormIndex(64)
    index.add(x)
    for a in ALPHAS:
        for qs in (q, q[:100], q[:3]):  # the flat kernel's three paths, over many document blocks
            s, i = index.search(qs, 10, alpha=a)
            ref, ids = brute_force(x, qs, a)
            assert_same_topk(ref, ids, s, i, 10)


def test_alpha_zero_is_faiss_cosine_and_alpha_one_is_faiss_dot(rng):
    x = clustered(3000, 32, rng)
    q = rng.normal(size=(50, 32)).astype(np.float32)
    index = NormIndex(32)
    index.add(x)
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    qu = q / np.linalg.norm(q, axis=1, keepdims=True)
    cos_ref = faiss.IndexFlatIP(32)
    cos_ref.add(unit)
    d0, i0 = cos_ref.search(qu, 10)
    s, i = index.search(q, 10, alpha=0.0)
    # FAISS's scores, and its ids up to ties within float32 rounding (float64 numpy decides those)
    np.testing.assert_allclose(s, d0, rtol=1e-5, atol=1e-6)
    assert_same_topk(*brute_force(x, q, 0.0), s, i, 10)
    assert (i == i0).mean() > 0.99  # the same ranking as FAISS's, not merely a tie-equivalent one
    dot_ref = faiss.IndexFlatIP(32)
    dot_ref.add(x)
    d1, i1 = dot_ref.search(qu, 10)
    s, i = index.search(q, 10, alpha=1.0)
    np.testing.assert_allclose(s, d1, rtol=1e-4)
    assert_same_topk(*brute_force(x, q, 1.0), s, i, 10, tol=1e-4)
    assert (i == i1).mean() > 0.99


def test_per_query_alpha_equals_separate_calls(rng):
    x = clustered(2000, 16, rng)
    q = rng.normal(size=(6, 16)).astype(np.float32)
    alphas = np.array([-1.0, 0.0, 0.5, -1.0, 1.0, -0.3])
    index = NormIndex(16, alpha=0.25)
    index.add(x)
    s, i = index.search(q, 5, alpha=alphas)
    for row, a in enumerate(alphas):
        s1, i1 = index.search(q[row : row + 1], 5, alpha=a)
        # one query and a batch run different BLAS calls: equal up to float32 rounding and ties
        assert_same_topk(*brute_force(x, q[row : row + 1], a), s1, i1, 5)
        np.testing.assert_allclose(s[row], s1[0], rtol=1e-5)
    assert_same_topk(*brute_force(x, q, alphas), s, i, 5)
    # the default alpha is used when none is given
    np.testing.assert_array_equal(index.search(q, 5)[1], index.search(q, 5, alpha=0.25)[1])


def test_padding_when_fewer_than_k(rng):
    index = NormIndex(4)
    index.add(rng.normal(size=(3, 4)))
    s, i = index.search(rng.normal(size=(2, 4)), 5)
    assert (i[:, 3:] == -1).all() and np.isneginf(s[:, 3:]).all()
    assert (i[:, :3] >= 0).all()
    empty = NormIndex(4)
    s, i = empty.search(rng.normal(size=(2, 4)), 3)
    assert (i == -1).all()


def test_add_remove_reconstruct_norms(rng):
    x = clustered(500, 8, rng)
    index = NormIndex(8)
    ids = index.add(x, np.arange(500) * 3)
    assert len(index) == 500 and index.ntotal == 500 and index.dim == 8
    np.testing.assert_allclose(index.norm_of([0, 3, 6]), np.linalg.norm(x[:3], axis=1), rtol=1e-6)
    np.testing.assert_allclose(index.reconstruct(9), x[3], rtol=1e-5, atol=1e-6)
    assert index.remove(ids[:100]) == 100
    _, got = index.search(x[:100], 3)
    assert not np.isin(got, ids[:100]).any()
    with pytest.raises(UnknownIdError):
        index.remove([ids[0], ids[200]])  # one unknown: nothing removed
    assert len(index) == 400 and ids[200] in index
    with pytest.raises(DuplicateIdError):
        index.add(x[:1], [ids[300]])
    # the remaining rows still rank exactly
    ref, ref_ids = brute_force(x[100:], x[:20], -0.5, ids[100:])
    s, i = index.search(x[:20], 10, alpha=-0.5)
    assert_same_topk(ref, ref_ids, s, i, 10)


def test_bad_input_is_rejected_and_changes_nothing(rng):
    index = NormIndex(4)
    index.add(rng.normal(size=(10, 4)))
    before = index.ids, index.norms
    bad_calls = [
        (ZeroNormError, lambda: index.add(np.array([[1.0, 0, 0, 0], [0, 0, 0, 0]]))),
        (NonFiniteError, lambda: index.add(np.array([[np.nan, 0, 0, 1.0]]))),
        (NonFiniteError, lambda: index.add(np.array([[1e300, 0, 0, 1.0]]))),  # float64 beyond float32
        (DimensionMismatchError, lambda: index.add(np.ones((2, 5)))),
        (DuplicateIdError, lambda: index.add(np.ones((2, 4)), [50, 50])),
        (NormrankError, lambda: index.add(np.ones((2, 4)), [-1, 3])),
        (NormrankError, lambda: index.search(np.ones((1, 4)), 0)),
        (NormrankError, lambda: index.search(np.ones((2, 4)), 3, alpha=[0.1, 0.2, 0.3])),
        (NormrankError, lambda: index.search(np.ones((2, 4)), 3, alpha=np.inf)),
        (NormrankError, lambda: index.search(np.ones((2, 4)), 3, alpha=17.0)),  # beyond [-16, 16]
        (NormrankError, lambda: index.search(np.ones((0, 4)), 2**62)),  # huge k, even with no queries
        (ZeroNormError, lambda: index.search(np.zeros((1, 4)), 3)),
    ]
    for err, call in bad_calls:
        with pytest.raises(err):
            call()
    np.testing.assert_array_equal(index.ids, before[0])
    np.testing.assert_array_equal(index.norms, before[1])
    # lists and float16 / float64 are converted, not rejected
    index.add([[1.0, 2.0, 3.0, 4.0]])
    index.add(np.ones((1, 4), dtype=np.float16))
    assert len(index) == 12


def test_save_load_roundtrip_and_flipped_byte(tmp_path, rng):
    x = clustered(1000, 16, rng)
    index = NormIndex(16, alpha=-0.75)
    index.add(x, np.arange(1000) + 7)
    index.save(tmp_path / "ix")
    loaded = NormIndex.load(tmp_path / "ix")
    assert loaded.alpha == -0.75 and len(loaded) == 1000
    q = rng.normal(size=(20, 16))
    for a in ALPHAS:
        np.testing.assert_array_equal(loaded.search(q, 10, alpha=a)[1], index.search(q, 10, alpha=a)[1])
    norms_file = next((tmp_path / "ix").glob("gen-*/norms.npy"))
    data = bytearray(norms_file.read_bytes())
    data[-5] ^= 0x01
    norms_file.write_bytes(bytes(data))
    with pytest.raises(NormrankError):
        NormIndex.load(tmp_path / "ix")
    norms_file.write_bytes(bytes(data[:-8]))
    with pytest.raises(CorruptIndexError):
        NormIndex.load(tmp_path / "ix")


def test_from_faiss_flat_l2_ranks_as_direct_add(rng):
    x = clustered(4000, 24, rng)
    q = rng.normal(size=(50, 24)).astype(np.float32)
    l2 = faiss.IndexFlatL2(24)
    l2.add(x)
    wrapped = NormIndex.from_faiss(l2)
    direct = NormIndex(24)
    direct.add(x)
    assert l2.ntotal == 4000  # the user's index is untouched
    for a in ALPHAS:
        ws, wi = wrapped.search(q, 10, alpha=a)
        ds, _ = direct.search(q, 10, alpha=a)
        # reconstructed and added vectors may differ in the last bit: equal up to rounding and ties
        assert_same_topk(*brute_force(x, q, a), ws, wi, 10)
        np.testing.assert_allclose(ws, ds, rtol=1e-5)


@pytest.mark.parametrize("kind", ["ip", "idmap2", "ivfflat"])
def test_from_faiss_recovers_norms(kind, rng):
    x = clustered(3000, 16, rng)
    ids = np.arange(3000, dtype=np.int64) * 2 + 1
    if kind == "ip":
        src, ids = faiss.IndexFlatIP(16), np.arange(3000)
        src.add(x)
    elif kind == "idmap2":
        src = faiss.IndexIDMap2(faiss.IndexFlatL2(16))
        src.add_with_ids(x, ids)
    else:
        src = faiss.IndexIVFFlat(faiss.IndexFlatL2(16), 16, 8)
        src.train(x)
        src.add_with_ids(x, ids)
    wrapped = NormIndex.from_faiss(src)
    assert len(wrapped) == 3000
    np.testing.assert_allclose(wrapped.norm_of(ids[:50]), np.linalg.norm(x[:50], axis=1), rtol=1e-5)
    if kind != "ivfflat":  # flat results are exact
        q = rng.normal(size=(10, 16))
        ref, ref_ids = brute_force(x, q, -1.0, ids)
        s, i = wrapped.search(q, 10, alpha=-1.0)
        assert_same_topk(ref, ref_ids, s, i, 10)
    else:
        assert not wrapped.is_exact


def test_from_faiss_refuses_what_it_cannot_recover(rng):
    x = clustered(2000, 16, rng)
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    cos_index = faiss.IndexFlatIP(16)
    cos_index.add(unit)
    with pytest.raises(UnsupportedIndexError, match="norms="):
        NormIndex.from_faiss(cos_index)
    pq = faiss.index_factory(16, "PQ4", faiss.METRIC_INNER_PRODUCT)
    pq.train(unit)
    pq.add(unit)
    with pytest.raises(UnsupportedIndexError, match="norms="):
        NormIndex.from_faiss(pq)
    # with the norms passed in, a cosine index is wrapped as is
    wrapped = NormIndex.from_faiss(cos_index, norms=np.linalg.norm(x, axis=1))
    s, i = wrapped.search(x[:5], 10, alpha=-0.5)
    ref, ids = brute_force(x, x[:5], -0.5)
    assert_same_topk(ref, ids, s, i, 10, tol=1e-4)


KINDS_WITH_NORMS = ["ivf", "ivf-custom-ids", "idmap2-custom-ids", "hnsw", "idmap-hnsw-custom-ids",
                    "idmap-ivf-custom-ids", "idmap2-ivf-custom-ids"]  # fmt: skip


@pytest.mark.parametrize("kind", KINDS_WITH_NORMS)
def test_from_faiss_with_norms_matches_them_to_the_right_vectors(kind, rng, tmp_path):
    """A cosine index wrapped with ``norms=``: the norms of ``x`` in the order ``x`` was added.
    IVF lists store the vectors out of that order (by list), so an array read by storage
    position would weight the wrong documents: every search would look plausible and be wrong.
    Every kind must also search at alpha != 0 (the scan reads vectors back by id: an IVF needs
    a direct map, an IndexIDMap cannot) and survive a save and load."""
    x = clustered(3000, 16, rng)
    unit = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    norms = np.linalg.norm(x, axis=1)
    ids = np.arange(3000, dtype=np.int64)
    if "ivf" in kind:
        src = faiss.IndexIVFFlat(faiss.IndexFlatIP(16), 16, 8, faiss.METRIC_INNER_PRODUCT)
        src.train(unit)
        src.nprobe = 8  # every list: the index's cosine ranking is exact
    elif "hnsw" in kind:
        src = faiss.IndexHNSWFlat(16, 16, faiss.METRIC_INNER_PRODUCT)
        src.hnsw.efSearch = 400
    else:
        src = faiss.IndexFlatIP(16)
    if kind.startswith("idmap"):
        src = (faiss.IndexIDMap2 if kind.startswith("idmap2") else faiss.IndexIDMap)(src)
    if kind.endswith("custom-ids"):
        ids = rng.permutation(10**6)[:3000].astype(np.int64)
        src.add_with_ids(unit, ids)
    else:
        src.add(unit)
    if kind in ("ivf", "ivf-custom-ids"):  # list order is not the order added: only the mapping
        with pytest.raises(UnsupportedIndexError, match="norms=\\{id: norm"):
            NormIndex.from_faiss(src, norms=norms)
        wrapped = NormIndex.from_faiss(src, norms=dict(zip(ids.tolist(), norms.tolist(), strict=True)))
    else:
        wrapped = NormIndex.from_faiss(src, norms=norms)
    np.testing.assert_allclose(wrapped.norm_of(ids[:100]), norms[:100], rtol=1e-6)
    q = rng.normal(size=(20, 16))
    for alpha in (-1.0, 1.0):
        ref, ref_ids = brute_force(x, q, alpha, ids)
        s, i = wrapped.search(q, 10, alpha=alpha)
        one = np.vstack([wrapped.search(q[j], 10, alpha=alpha)[1] for j in range(3)])
        if "hnsw" in kind:  # approximate: recall, not equality
            want = np.take(ref_ids, np.argsort(-ref, axis=1)[:, :10])
            assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(i, want, strict=True)]) >= 0.95
        else:
            assert_same_topk(ref, ref_ids, s, i, 10, tol=1e-4)
        if "hnsw" not in kind:  # single queries: the same top-10 up to rounding and ties
            ones = [wrapped.search(q[j], 10, alpha=alpha) for j in range(3)]
            assert_same_topk(ref[:3], ref_ids, np.vstack([o[0] for o in ones]), one, 10, tol=1e-4)
    wrapped.save(tmp_path / "wrapped")
    np.testing.assert_array_equal(NormIndex.load(tmp_path / "wrapped").search(q, 10, alpha=1.0)[1], i)


@pytest.mark.parametrize("idmap", [faiss.IndexIDMap2, faiss.IndexIDMap])
def test_from_faiss_idmap_over_ivf_pairs_each_id_with_its_vector(idmap, rng):
    """Issue 25, item 1: an id map over an IVF holds its ids in the order added and its vectors in
    list order; reading both as they lie paired ids with the wrong vectors (norm_of 0.66 for a
    norm of 4.41, top-10 overlap 0.02 with brute force)."""
    x = clustered(3000, 16, rng)
    ids = rng.permutation(10**6)[:3000].astype(np.int64)
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatL2(16), 16, 16)
    ivf.train(x)
    src = idmap(ivf)
    src.add_with_ids(x, ids)
    wrapped = NormIndex.from_faiss(src)
    np.testing.assert_allclose(wrapped.norm_of(ids), np.linalg.norm(x, axis=1), rtol=1e-5)
    wrapped.set_search_params(nprobe=16)  # every list: the IVF's cosine ranking is exact
    q = rng.normal(size=(20, 16))
    for alpha in (-1.0, 0.0, 1.0):
        ref, ref_ids = brute_force(x, q, alpha, ids)
        s, i = wrapped.search(q, 10, alpha=alpha)
        assert_same_topk(ref, ref_ids, s, i, 10, tol=1e-4)
    _, own = wrapped.search(x[:50], 1, alpha=0.0)  # a document's own vector returns it
    np.testing.assert_array_equal(own[:, 0], ids[:50])


@pytest.mark.parametrize("order", ["reversed", "shuffled", "sequential"])
def test_from_faiss_ivf_refuses_an_array_of_norms_whatever_its_ids(order, rng):
    """Issue 25, item 2: an IVF whose ids are a permutation of 0..n-1 (add_with_ids) looks like one
    filled by add(); reading an array of norms by id weighted the wrong vectors (top-10 overlap
    0.03). No rule over the index can tell the two apart: the mapping is required, and matched."""
    x = clustered(2000, 16, rng)
    unit = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    norms = np.linalg.norm(x, axis=1)
    ids = {
        "reversed": np.arange(2000)[::-1],
        "shuffled": rng.permutation(2000),
        "sequential": np.arange(2000),
    }
    ids = ids[order].astype(np.int64)
    src = faiss.IndexIVFFlat(faiss.IndexFlatIP(16), 16, 8, faiss.METRIC_INNER_PRODUCT)
    src.train(unit)
    src.add_with_ids(unit, ids)
    src.nprobe = 8
    with pytest.raises(UnsupportedIndexError, match=r"norms=\{id: norm.*dict\(enumerate"):
        NormIndex.from_faiss(src, norms=norms)
    wrapped = NormIndex.from_faiss(src, norms=dict(zip(ids.tolist(), norms.tolist(), strict=True)))
    q = rng.normal(size=(20, 16))
    ref, ref_ids = brute_force(x, q, -1.0, ids)
    s, i = wrapped.search(q, 10, alpha=-1.0)
    assert_same_topk(ref, ref_ids, s, i, 10, tol=1e-4)


def test_from_faiss_messages_name_the_real_problem(rng):
    """Issue 25, item 13: an empty index is said to be empty (not 'already unit length'); an IVF
    whose nprobe exceeds nlist is clamped as FAISS clamps it (not refused citing efSearch)."""
    with pytest.raises(UnsupportedIndexError, match="the index is empty"):
        NormIndex.from_faiss(faiss.IndexFlatL2(8))
    x = clustered(500, 8, rng)
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatL2(8), 8, 4)
    ivf.train(x)
    ivf.add(x)
    ivf.nprobe = 10
    assert NormIndex.from_faiss(ivf).nprobe == 4
    assert ivf.nprobe == 10  # the user's index is left as it was
    unit = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    cos = faiss.IndexIVFFlat(faiss.IndexFlatIP(8), 8, 4, faiss.METRIC_INNER_PRODUCT)
    cos.train(unit)
    cos.add(unit)
    cos.nprobe = 10
    wrapped = NormIndex.from_faiss(cos, norms=dict(enumerate(np.linalg.norm(x, axis=1).tolist())))
    assert wrapped.nprobe == 4


@pytest.mark.parametrize("kind", ["flat", "idmap2", "ivf", "hnsw"])
def test_from_faiss_with_norms_refuses_raw_vectors(kind, rng):
    """norms= says the index holds unit vectors; one holding raw vectors would be scored
    raw inner product x weight, every result plausible and wrong: refused, saying what to do."""
    x = clustered(500, 16, rng)
    if kind == "ivf":
        src = faiss.IndexIVFFlat(faiss.IndexFlatIP(16), 16, 4, faiss.METRIC_INNER_PRODUCT)
        src.train(x)
    elif kind == "hnsw":
        src = faiss.IndexHNSWFlat(16, 8, faiss.METRIC_INNER_PRODUCT)
    else:
        src = faiss.IndexFlatIP(16) if kind == "flat" else faiss.IndexIDMap2(faiss.IndexFlatIP(16))
    if kind == "idmap2":
        src.add_with_ids(x, np.arange(500) * 7)
    else:
        src.add(x)
    norms = np.linalg.norm(x, axis=1)
    with pytest.raises(InvalidInputError, match=r"must hold unit vectors.*normalize_L2"):
        NormIndex.from_faiss(src, norms=dict(enumerate(norms.tolist())) if kind == "ivf" else norms)
    if kind == "hnsw":  # without norms=, the raw vectors' norms are read (HNSW: graph rebuilt)
        with pytest.warns(UserWarning, match="rebuilding the HNSW graph"):
            wrapped = NormIndex.from_faiss(src)
    else:
        wrapped = NormIndex.from_faiss(src)
    np.testing.assert_allclose(np.sort(wrapped.norms), np.sort(np.linalg.norm(x, axis=1)), rtol=1e-5)


def test_from_faiss_norms_mapping_must_cover_every_id(rng):
    x = clustered(200, 8, rng)
    src = faiss.IndexFlatIP(8)
    src.add((x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32))
    norms = {i: float(v) for i, v in enumerate(np.linalg.norm(x, axis=1))}
    with pytest.raises(InvalidInputError, match="missing ids \\[7\\]"):
        NormIndex.from_faiss(src, norms={i: v for i, v in norms.items() if i != 7})
    with pytest.raises(InvalidInputError, match="201 entries"):
        NormIndex.from_faiss(src, norms={**norms, 999: 1.0})
    with pytest.raises(InvalidInputError, match="numbers"):
        NormIndex.from_faiss(src, norms={**norms, 3: "long"})
    with pytest.raises(InvalidInputError, match="200 values"):
        NormIndex.from_faiss(src, norms=list(norms.values())[:-1])
    wrapped = NormIndex.from_faiss(src, norms=norms)
    np.testing.assert_allclose(wrapped.norms, list(norms.values()), rtol=1e-6)


def test_wrap_empty_user_index_and_ivf_needs_training(rng):
    x = clustered(2000, 16, rng)
    index = NormIndex(faiss.IndexFlatIP(16), alpha=-1.0)
    index.add(x)
    assert index.is_exact
    with pytest.raises(UnsupportedIndexError):
        NormIndex(faiss.IndexFlatL2(16))
    ivf = NormIndex(16, factory="IVF8,Flat")
    with pytest.raises(IndexStateError):
        ivf.add(x)
    ivf.train(x)
    ivf.add(x)
    assert len(ivf) == 2000
    with pytest.raises(NormrankError):
        NormIndex(16, factory="NoSuchIndex")


def test_custom_weights_replace_norms(rng):
    x = clustered(1000, 8, rng)
    w = rng.lognormal(0, 1, size=1000)
    index = NormIndex(8)
    index.add(x)
    index.set_bases(w)
    q = rng.normal(size=(10, 8))
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    cos = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ unit.T
    ref = cos * w**-0.8
    s, i = index.search(q, 10, alpha=-0.8)
    assert_same_topk(ref, np.arange(1000), s, i, 10)
    index.clear_bases()
    ref, ids = brute_force(x, q, -0.8)
    assert_same_topk(ref, ids, *index.search(q, 10, alpha=-0.8), 10)


def test_weights_names_are_deprecated_aliases_of_bases(rng):
    """The index side's old names (``weights`` / ``set_weights`` / ``clear_weights`` /
    ``add(weights=)``) still work, each with a DeprecationWarning, and do what the new ones do."""
    x = clustered(300, 8, rng)
    b = rng.lognormal(0, 1, size=300).astype(np.float32)
    new, old = NormIndex(8), NormIndex(8)
    new.add(x[:200])
    old.add(x[:200])
    new.set_bases(b[:200])
    with pytest.warns(DeprecationWarning, match="set_bases"):
        old.set_weights(b[:200])
    new.add(x[200:], bases=b[200:])
    with pytest.warns(DeprecationWarning, match="bases="):
        old.add(x[200:], weights=b[200:])
    with pytest.warns(DeprecationWarning, match="NormIndex.bases"):
        np.testing.assert_array_equal(old.weights, new.bases)
    np.testing.assert_array_equal(new.bases, b)
    q = rng.normal(size=(5, 8))
    for got, want in zip(old.search(q, 10, alpha=0.7), new.search(q, 10, alpha=0.7), strict=True):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(InvalidInputError, match="bases= only"):
        new.add(x[:1], ids=[999], bases=b[:1], weights=b[:1])
    new.clear_bases()
    with pytest.warns(DeprecationWarning, match="clear_bases"):
        old.clear_weights()
    np.testing.assert_array_equal(old.bases, new.bases)
    np.testing.assert_array_equal(new.bases, new.norms)


def test_scoring_functions(rng):
    cos = rng.uniform(-1, 1, size=(3, 5))
    norms = rng.lognormal(size=5)
    np.testing.assert_allclose(normrank.norm_weighted(cos, norms, -0.5), cos * norms**-0.5, rtol=1e-6)
    per_q = np.array([0.0, 1.0, -1.0])
    np.testing.assert_allclose(
        normrank.norm_weighted(cos, norms, per_q), cos * norms[None] ** per_q[:, None], rtol=1e-6
    )
    qn = rng.lognormal(size=3)
    np.testing.assert_allclose(
        normrank.symmetric_score(cos, qn, norms, 0.3), cos * qn[:, None] ** -0.3 * norms**-0.3, rtol=1e-6
    )
    _, pos = normrank.topk(np.array([[0.1, 0.9, 0.5]], np.float32), 2)
    np.testing.assert_array_equal(pos, [[1, 2]])


def test_cli_build_and_search(tmp_path, rng):
    import json

    from typer.testing import CliRunner

    from normrank.cli import app

    x = clustered(300, 8, rng)
    q = rng.normal(size=(3, 8)).astype(np.float32)
    np.save(tmp_path / "emb.npy", x)
    np.save(tmp_path / "q.npy", q)
    runner = CliRunner()
    res = runner.invoke(
        app, ["index", "build", str(tmp_path / "emb.npy"), "--out", str(tmp_path / "ix"), "--alpha", "-1"]
    )
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["index", "search", str(tmp_path / "ix"), str(tmp_path / "q.npy"), "-k", "4"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.stdout.strip().splitlines()]
    ref, _ = brute_force(x, q, -1.0)
    assert [r["ids"] for r in rows] == np.argsort(-ref, axis=1)[:, :4].tolist()
    res = runner.invoke(app, ["index", "search", str(tmp_path / "nope"), str(tmp_path / "q.npy")])
    assert res.exit_code == 2 and "error" in res.output


# -- reliability round two (issue #12) ----------------------------------------------------------


def _state(ix: NormIndex):
    return ix.ids, ix.norms, ix.bases, len(ix)


def _unchanged(before, ix: NormIndex) -> bool:
    return all(np.array_equal(a, b) for a, b in zip(before, _state(ix), strict=True))


@pytest.mark.parametrize(
    "call",
    [
        lambda ix: ix.add(np.array([[3e38, 3e38, 0, 0]], np.float32)),  # norm overflows float32
        lambda ix: ix.add(np.ones((1, 4)), bases=[1e39]),
        lambda ix: ix.set_bases([1e39] * len(ix)),
        lambda ix: ix.set_bases([1e-50] * len(ix)),  # would be stored as 0: every score 0
        lambda ix: ix.set_bases([[1.0], [2.0, 3.0], [1.0]]),
        lambda ix: ix.set_bases(["a"] * len(ix)),
    ],
)
def test_values_float32_cannot_store_are_refused_and_change_nothing(call):
    ix = NormIndex(4)
    ix.add(np.ones((3, 4)))
    before = _state(ix)
    with pytest.raises(normrank.InvalidInputError):
        call(ix)
    assert _unchanged(before, ix)


@pytest.mark.parametrize("factory", ["Flat", "HNSW8", "IVF1,Flat"])
@pytest.mark.parametrize(("norm", "alpha"), [(1e20, 2.0), (1e-25, -2.0), (3e38, 16.0), (1e-25, -16.0)])
def test_every_document_is_returnable_whatever_its_score(factory, norm, alpha):
    """A weight that saturates at cos = -1 once scored exactly -FLT_MAX, FAISS's empty-slot value,
    and the flat search dropped the document (ids [2, 1, 3, -1])."""
    x = np.array([[norm, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0.5, 0.5, 0, 0]], np.float64)
    ix = NormIndex(4, factory=factory)
    if not ix.is_trained:
        ix.train(np.eye(4))
    ix.add(x)
    scores, ids = ix.search([[-1.0, 0, 0, 0]], 4, alpha=alpha)
    assert sorted(ids[0].tolist()) == [0, 1, 2, 3]
    assert np.isfinite(scores).all()
    assert ids[0, -1] == 0  # the heavy document at cos = -1 ranks last, but it is there


def test_huge_k_costs_what_ntotal_does_and_keeps_faiss_shape():
    ix = NormIndex(4)
    x = np.random.default_rng(0).normal(size=(10, 4))
    ix.add(x)
    scores, ids = ix.search(x[:2], 1 << 23)
    assert scores.shape == ids.shape == (2, 1 << 23)
    assert (ids[:, :10] >= 0).all() and (ids[:, 10:] == -1).all() and np.isneginf(scores[:, 10:]).all()
    with pytest.raises(normrank.InvalidParameterError, match="smaller batches"):
        ix.search(x[:1], 1 << 28)


@pytest.mark.parametrize("bad", [[3.7], [np.nan], ["a"], [[1], [2, 3]], "3", None, [True]])
def test_one_id_parser_everywhere(bad):
    """norm_of([3.7]) and reconstruct(3.9) / reconstruct('3') once silently truncated to id 3."""
    ix = NormIndex(4)
    ix.add(np.random.default_rng(0).normal(size=(5, 4)))
    before = _state(ix)
    calls = [ix.norm_of, ix.reconstruct, ix.remove]
    if bad is not None:  # add(ids=None) means default ids
        calls.append(lambda v: ix.add(np.ones((1, 4)), ids=v))
    for call in calls:
        with pytest.raises(normrank.InvalidInputError):
            call(bad[0] if call is ix.reconstruct and isinstance(bad, list) else bad)
    with pytest.raises(normrank.InvalidInputError):
        ix.reconstruct(3.9)
    assert _unchanged(before, ix)
    assert ix.norm_of([3.0]).tolist() == ix.norm_of([3]).tolist()


@pytest.mark.parametrize("bad", ["x", np.nan, [1], 0, 1.5])
def test_k_factor_typed(bad):
    ix = NormIndex(4, factory="HNSW8")
    ix.add(np.eye(4))
    with pytest.raises(normrank.InvalidParameterError):
        ix.search(np.eye(4)[:1], 2, k_factor=bad)
    with pytest.raises(normrank.InvalidParameterError):
        ix.k_factor = bad


def test_a_user_ivf_whose_quantizer_is_l2_is_refused_at_construction():
    """Load checks the metric at every level; so does the constructor, or a save could not load."""
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatL2(4), 4, 2, faiss.METRIC_INNER_PRODUCT)
    with pytest.raises(UnsupportedIndexError, match="inner product"):
        NormIndex(ivf)


@pytest.mark.parametrize("factory", ["HNSW32,PQ8", "HNSW16_PQ8x4"])
def test_an_hnsw_pq_factory_is_refused_with_what_to_use_instead(factory):
    """FAISS's factory builds HNSW-PQ over L2 whatever metric it is asked for; before, the
    refusal named an id map's metric, which said nothing of why or what to use."""
    with pytest.raises(UnsupportedIndexError, match="HNSW32,SQ8"):
        NormIndex(32, factory=factory)


def test_state_round_trip():
    ix = NormIndex(4, alpha=0.5, factory="HNSW8")
    ix.add(np.random.default_rng(0).normal(size=(20, 4)))
    ix.remove([3])
    state = ix.to_state()
    assert state.tombstones.tolist() == [3] and state.next_id == 20
    copy = NormIndex.from_state(state)
    q = np.random.default_rng(1).normal(size=(3, 4))
    for a, b in zip(ix.search(q, 5), copy.search(q, 5), strict=True):
        np.testing.assert_array_equal(a, b)


# -- FAISS's own knobs and HNSW / IVF migration (issue #13, items 6 and 7) ---------------------


def _recall(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.mean([len(set(g) & set(w)) / len(w) for g, w in zip(got, want, strict=True)]))


def _data(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return clustered(n, d, rng), rng.normal(size=(20, d))


def _exact(x, q, alpha, got, k=10) -> None:
    ref_scores, ref_ids = brute_force(x, q, alpha)
    assert_same_topk(ref_scores, ref_ids, got[0], got[1], k)


def _top_ids(x, q, alpha, k=10) -> np.ndarray:
    ref_scores, ref_ids = brute_force(x, q, alpha)
    return np.take_along_axis(
        np.broadcast_to(ref_ids, ref_scores.shape), np.argsort(-ref_scores, axis=1)[:, :k], 1
    )


@pytest.mark.parametrize("factory", ["HNSW16,Flat", "HNSW16"])
def test_from_faiss_hnsw_recovers_norms_and_rebuilds_for_cosine(factory):
    """IndexHNSWFlat keeps the raw vectors in its storage (reconstruct_n returns them): the norms
    come back, and the graph, built for L2 over raw vectors, is rebuilt over unit vectors."""
    x, q = _data(800, 16, 11)
    src = faiss.index_factory(16, factory)  # L2, as users build it
    src.hnsw.efConstruction = 64
    src.hnsw.efSearch = 200
    src.add(x.astype(np.float32))
    with pytest.warns(UserWarning, match="rebuilding the HNSW graph"):
        ix = NormIndex.from_faiss(src, alpha=0.5)
    np.testing.assert_allclose(ix.norms, np.linalg.norm(x, axis=1), rtol=1e-5)
    inner = faiss.downcast_index(ix.faiss_index.index)
    assert isinstance(inner, faiss.IndexHNSW) and inner.metric_type == faiss.METRIC_INNER_PRODUCT
    assert (inner.hnsw.nb_neighbors(1), inner.hnsw.efConstruction, inner.hnsw.efSearch) == (16, 64, 200)
    assert ix.search_params == {"efSearch": 200}
    for alpha in (-1.0, 0.0, 1.0):
        _, ids = ix.search(q, 10, alpha=alpha)
        assert _recall(ids, _top_ids(x, q, alpha)) > 0.97


def test_from_faiss_ivf_reuses_the_users_centroids():
    x, q = _data(1000, 16, 12)
    quantizer = faiss.IndexFlatL2(16)
    src = faiss.IndexIVFFlat(quantizer, 16, 8)
    src.train(x.astype(np.float32))
    src.add(x.astype(np.float32))
    src.nprobe = 8
    ix = NormIndex.from_faiss(src)
    ivf = faiss.extract_index_ivf(ix.faiss_index)
    theirs = src.quantizer.reconstruct_n(0, 8)
    np.testing.assert_allclose(
        ivf.quantizer.reconstruct_n(0, 8), theirs / np.linalg.norm(theirs, axis=1, keepdims=True), rtol=1e-5
    )
    assert ix.search_params == {"nprobe": 8, "nlist": 8}
    for alpha in (-1.0, 0.5):  # every list probed: exact
        _exact(x, q, alpha, ix.search(q, 10, alpha=alpha))


def test_ann_knobs_reach_faiss_and_persist(tmp_path):
    x, q = _data(600, 8, 13)
    ix = NormIndex(8, factory="IVF16,Flat", nprobe=4)
    ix.train(x)
    ix.add(x)
    assert ix.search_params["nprobe"] == 4
    full = ix.search(q, 10, alpha=0.5, nprobe=16)  # every list: exact
    _exact(x, q, 0.5, full)
    assert ix.search_params["nprobe"] == 4  # a per-call value does not stick
    same = ix.search(q, 10, alpha=0.5, params=faiss.SearchParametersIVF(nprobe=16))
    np.testing.assert_array_equal(same[1], full[1])
    ix.set_search_params(nprobe=16)
    ix.save(tmp_path / "ix")
    loaded = NormIndex.load(tmp_path / "ix")
    assert loaded.search_params["nprobe"] == 16
    np.testing.assert_array_equal(loaded.search(q, 10, alpha=0.5)[1], full[1])
    for bad in ({"nprobe": 0}, {"nprobe": 17}, {"ef_search": 8}, {"nprobe": "4"}, {"params": object()}):
        with pytest.raises(normrank.InvalidParameterError):
            ix.search(q, 10, **bad)
    h = NormIndex(8, factory="HNSW8", ef_search=24)
    h.add(x)
    assert h.search_params == {"efSearch": 24}
    h.search(q, 5, ef_search=64)
    assert h.search_params == {"efSearch": 24}
    with pytest.raises(normrank.InvalidParameterError):
        NormIndex(8).search(q, 5, nprobe=2)  # flat: no such knob, refused rather than ignored


def test_largest_ids_save_load_and_default_ids_stop_typed(tmp_path):
    """Found by the full fuzz profile: an id of 2**62 was accepted and the save refused; an id of
    2**63 - 1 was accepted and the next default id overflowed (untyped OverflowError)."""
    top = (1 << 63) - 2
    ix = NormIndex(4)
    ix.add(np.ones((2, 4)), ids=[1 << 62, top])
    ix.save(tmp_path / "ix")
    assert NormIndex.load(tmp_path / "ix").ids.tolist() == [1 << 62, top]
    before = _state(ix)
    with pytest.raises(normrank.InvalidInputError, match="pass ids="):
        ix.add(np.ones((1, 4)))
    with pytest.raises(normrank.InvalidInputError):
        ix.add(np.ones((1, 4)), ids=[top + 1])
    assert _unchanged(before, ix)


@pytest.mark.parametrize(
    ("attr", "bad"),
    [("ann", "overfetsh"), ("ann", None), ("n_tail", -1), ("n_tail", 2.5), ("max_depth", True)],
)
def test_search_option_set_after_construction_is_checked(tmp_path, attr, bad):
    # A misspelt method used to search the default way, then make the next save refuse.
    x = clustered(300, 16, np.random.default_rng(2))
    index = NormIndex(16, factory="IVF4,Flat", alpha=-0.5)
    index.train(x)
    index.add(x)
    before = getattr(index, attr)
    with pytest.raises(normrank.InvalidParameterError, match=attr):
        setattr(index, attr, bad)
    assert getattr(index, attr) == before
    index.save(tmp_path / "ix")  # what was accepted can be saved
    with pytest.raises(normrank.InvalidParameterError, match=attr):
        NormIndex(16, factory="IVF4,Flat", **{attr: bad})
