"""Regression tests for the defects of issue 46 (each fails on the code before its fix).

Defect 3 (the lock under interrupts) is in tests/test_fair_lock.py; 9 and 10 with the store's
contract tests. Threads here wait on events and counts, never on the clock.
"""

from __future__ import annotations

import threading
import time

import faiss
import numpy as np
import pytest
from conftest import assert_same_topk, brute_force, clustered

import normrank
from normrank import NormIndex
from normrank.errors import (
    DuplicateIdError,
    InvalidInputError,
    InvalidParameterError,
    UnsupportedIndexError,
)

D = 16


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _ivf(x_unit: np.ndarray, nlist: int = 4, *, pca: bool = False) -> faiss.Index:
    if pca:
        ivf = faiss.index_factory(D, f"RR{D},IVF{nlist},Flat", faiss.METRIC_INNER_PRODUCT)
    else:
        ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(D), D, nlist, faiss.METRIC_INNER_PRODUCT)
    ivf.train(x_unit)
    return ivf


# -- defect 1: an id map over an IVF, then remove ------------------------------------------------


@pytest.mark.parametrize("idmap", [faiss.IndexIDMap, faiss.IndexIDMap2])
@pytest.mark.parametrize("pca", [False, True])
def test_remove_through_a_wrapped_idmap_over_ivf_keeps_ids_exact(idmap, pca) -> None:
    rng = np.random.default_rng(1)
    x = clustered(300, D, rng)
    ids = rng.choice(10**6, size=300, replace=False).astype(np.int64)
    inner = _ivf(_unit(x), pca=pca)
    wrapped = idmap(inner)
    wrapped.add_with_ids(_unit(x), ids)
    index = NormIndex.from_faiss(
        wrapped, norms=dict(zip(ids.tolist(), np.linalg.norm(x, axis=1).tolist(), strict=True))
    )
    index.set_search_params(nprobe=4)  # every list: the oracle is exact
    gone = ids[rng.choice(300, size=60, replace=False)]
    assert index.remove(gone) == 60
    keep = ~np.isin(ids, gone)
    q = rng.normal(size=(7, D)).astype(np.float32)
    for alpha in (0.0, -1.0, 0.5):
        scores, got = index.search(q, 10, alpha=alpha)
        ref, ref_ids = brute_force(x[keep], q, alpha, ids[keep])
        assert_same_topk(ref, ref_ids, scores, got, 10)
    for i in ids[keep][:20]:  # reconstruct by id too: positions agree with the id map
        np.testing.assert_allclose(index.reconstruct(int(i)), x[ids == i][0], rtol=1e-5, atol=1e-6)


def test_an_idmap_over_ivf_that_faiss_removed_from_is_refused_typed() -> None:
    """Defect 2 (and 1's other half): the positions inside the IVF are stale after FAISS's own
    ``remove_ids``; wrapping it must say so, never return shifted ids or a bare RuntimeError."""
    rng = np.random.default_rng(2)
    x = clustered(200, D, rng)
    for idmap in (faiss.IndexIDMap, faiss.IndexIDMap2):
        wrapped = idmap(_ivf(_unit(x)))
        ids = np.arange(1000, 1200, dtype=np.int64)
        wrapped.add_with_ids(_unit(x), ids)
        wrapped.remove_ids(faiss.IDSelectorBatch(ids[:50:3]))
        norms = dict(zip(ids[50:].tolist(), np.linalg.norm(x[50:], axis=1).tolist(), strict=True))
        with pytest.raises(UnsupportedIndexError, match="Rebuild"):
            NormIndex.from_faiss(wrapped, norms=norms)


def test_removal_faiss_refuses_on_an_ivf_is_typed_not_a_silent_tombstone() -> None:
    """An IVF whose direct map is an array cannot remove: that is an error to report, not a
    tombstone that would leave the vector searchable by FAISS forever."""
    rng = np.random.default_rng(3)
    x = clustered(100, D, rng)
    ivf = _ivf(_unit(x))
    ivf.add(_unit(x))
    ivf.set_direct_map_type(faiss.DirectMap.Array)
    index = NormIndex.from_faiss(ivf, norms=dict(enumerate(np.linalg.norm(x, axis=1).tolist())))
    with pytest.raises(UnsupportedIndexError):
        index.remove([3])
    assert 3 in index and len(index) == 100


# -- defect 4: membership beside writers -----------------------------------------------------------


def test_membership_readers_never_hide_an_add_nor_admit_a_duplicate() -> None:
    index = NormIndex(4)
    rng = np.random.default_rng(4)
    n = 100_000  # a table that takes a while to build: the readers' window is wide
    index.add(rng.normal(size=(n, 4)).astype(np.float32), ids=np.arange(n) * 7)
    n_adds, stop = 300, threading.Event()
    wrong: list[str] = []
    reads = [0, 0]

    def prober(slot: int) -> None:
        while not stop.is_set():
            _ = (int(rng.integers(0, 7 * n)) in index, len(index))
            reads[slot] += 1

    probers = [threading.Thread(target=prober, args=(i,)) for i in range(2)]
    for t in probers:
        t.start()
    deadline = time.monotonic() + 120  # only a hung prober gets here
    while min(reads) == 0:  # the probers run beside the adds from the first one (counts, not time)
        assert time.monotonic() < deadline, "a prober never ran"
        time.sleep(0.001)
    try:
        for j in range(n_adds):
            new_id = 10**6 + j
            index.add(rng.normal(size=(1, 4)).astype(np.float32), ids=[new_id])
            if new_id not in index:
                wrong.append(f"{new_id} absent right after its add")
            with pytest.raises(DuplicateIdError):
                index.add(rng.normal(size=(1, 4)).astype(np.float32), ids=[new_id])
            index.norm_of([new_id])  # no UnknownIdError
    finally:
        stop.set()
        for t in probers:
            t.join(60)
    assert not wrong, wrong[:5]
    ids = index.ids
    assert ids.size == n + n_adds == np.unique(ids).size
    assert min(reads) > 0  # the probers really ran beside the adds


def test_a_lookup_built_from_replaced_ids_is_never_used() -> None:
    """The race of defect 4, made deterministic: a reader builds the id table from the ids it
    read, a writer replaces them meanwhile, the reader stores its table last."""
    from normrank.index.doc_table import DocTable
    from normrank.search.id_lookup import IdLookup

    table = DocTable(np.array([5, 9, 11]), np.ones(3), None, [], 0)
    read = table.doc_ids
    stale = IdLookup(read)  # the reader builds from what it read ...
    table.append(np.array([42]), np.ones(1, np.float32), None)  # ... a writer adds ...
    table._lookup = (read, stale)  # ... and the reader stores its table last
    assert table.has(42)
    with pytest.raises(DuplicateIdError):
        table.check_new(np.array([42]), None)


# -- defect 5: a per-call breadth stays the caller's -------------------------------------------------


def test_a_per_call_nprobe_is_never_seen_by_other_threads() -> None:
    rng = np.random.default_rng(5)
    x = clustered(2000, D, rng)
    index = NormIndex(D, factory="IVF16,Flat")
    index.train(x)
    index.add(x)
    index.set_search_params(nprobe=2)
    q = rng.normal(size=(64, D)).astype(np.float32)
    stop, seen, searches = threading.Event(), set(), [0]

    def searcher() -> None:
        while not stop.is_set():
            index.search(q, 10, alpha=-0.5, nprobe=16)
            searches[0] += 1

    t = threading.Thread(target=searcher)
    t.start()
    reads = 0
    try:
        while searches[0] < 30 or reads < 2000:
            seen.add(index.nprobe)
            seen.add(index.search_params["nprobe"])
            reads += 1
    finally:
        stop.set()
        t.join(60)
    assert seen == {2}


# -- defect 6: re-adding an id a graph keeps ----------------------------------------------------


@pytest.mark.parametrize("factory", ["HNSW8", "IVF4,Flat,RFlat"])
def test_readding_a_tombstoned_id_says_why_and_what_to_do(factory) -> None:
    rng = np.random.default_rng(6)
    x = clustered(200, D, rng)
    index = NormIndex(D, factory=factory)
    if not index.is_trained:
        index.train(x)
    index.add(x)
    index.remove([3])
    assert 3 not in index
    with pytest.raises(DuplicateIdError, match=r"removed earlier.*new id"):
        index.add(x[:1], ids=[3])
    index.add(x[:1], ids=[10**6])  # a new id is fine
    assert 10**6 in index


# -- defect 7: numbers are numbers, flags are bools ----------------------------------------------


@pytest.mark.parametrize("alpha", ["1", True, np.bool_(True), ["1", "0"], [True, False], b"1"])
def test_alpha_that_is_not_a_number_is_refused(alpha) -> None:
    index = NormIndex(4)
    index.add(np.eye(4, dtype=np.float32))
    q = np.ones((2, 4), dtype=np.float32)
    with pytest.raises(InvalidParameterError, match="alpha"):
        index.search(q, 2, alpha=alpha)
    with pytest.raises(InvalidParameterError, match="alpha"):
        index.search(q[0], 2, alpha=alpha)  # the one-query fast path too
    with pytest.raises(InvalidParameterError):
        NormIndex(4, alpha=alpha)
    with pytest.raises(InvalidParameterError):
        index.alpha = alpha
    assert index.alpha == 0.0
    with pytest.raises(InvalidParameterError):
        normrank.norm_weighted(np.ones(4), np.ones(4), alpha)


def test_return_stats_is_a_flag_and_topk_refuses_what_it_cannot_rank() -> None:
    index = NormIndex(4)
    index.add(np.eye(4, dtype=np.float32))
    for bad in ("no", 1, None):
        with pytest.raises(InvalidParameterError, match="return_stats"):
            index.search(np.ones(4, dtype=np.float32), 2, return_stats=bad)
    assert len(index.search(np.ones(4, dtype=np.float32), 2, return_stats=np.True_)) == 3
    with pytest.raises(InvalidParameterError):
        normrank.topk(np.ones((1, 3), np.float32), True)
    with pytest.raises(InvalidInputError, match="NaN"):
        normrank.topk(np.array([[0.5, np.nan, 0.1]], np.float32), 2)
    with pytest.raises(InvalidParameterError):
        normrank.topk(np.array([["a", "b"]]), 1)


@pytest.mark.parametrize("norms", [[1.0, -2.0], [1.0, 0.0], [1.0, np.inf], [1.0, np.nan]])
def test_norm_weighted_refuses_norms_that_are_not_lengths(norms) -> None:
    with pytest.raises(InvalidInputError, match="> 0"):
        normrank.norm_weighted(np.ones(2), norms, -0.5)
    with pytest.raises(InvalidInputError, match="> 0"):
        normrank.symmetric_score(np.ones((1, 2)), [1.0], norms, 0.5)


# -- defect 8: stats of a call with several alphas -----------------------------------------------


def test_stats_describe_the_whole_call() -> None:
    rng = np.random.default_rng(8)
    x = clustered(3000, D, rng)
    q = rng.normal(size=(6, D)).astype(np.float32)
    flat = NormIndex(D)
    flat.add(x)
    *_, st = flat.search(q, 10, alpha=-1.0, return_stats=True)
    assert (st.path, st.rounds, st.scanned) == ("flat", 1, 3000) and not st.groups
    hnsw = NormIndex(D, factory="HNSW16")
    hnsw.add(x)
    alphas = np.array([0.0, -1.0, 0.0, -1.0, 0.0, -1.0])
    *_, st = hnsw.search(q, 10, alpha=alphas, return_stats=True)
    assert set(st.groups) == {0.0, -1.0}
    assert st.groups[0.0].path == "cosine" and st.groups[-1.0].path == "scan"
    assert st.path == "mixed"
    assert st.rounds == max(g.rounds for g in st.groups.values())
    assert st.scanned == max(g.scanned for g in st.groups.values())
    assert st.depth == max(g.depth for g in st.groups.values())
    *_, one = hnsw.search(q[1::2], 10, alpha=-1.0, return_stats=True)  # the same group alone
    assert (one.path, one.depth, one.scanned, one.rounds) == (
        "scan", st.groups[-1.0].depth, st.groups[-1.0].scanned, st.groups[-1.0].rounds,
    )  # fmt: skip
