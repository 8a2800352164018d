"""A refine stage (FAISS's ``IndexRefineFlat``: factory suffix ``,RFlat`` / ``,Refine(Flat)``) for
users who keep the raw vectors beside compressed codes (issue 36, item 2): candidates from the
base index (IVF-PQ, IVF-SQ8, HNSW-SQ8, PQ) at the plan's depth, re-scored on the refine index's
flat storage, and the weight-order scan reading its rows in place, so that ``cos * w**alpha`` is
exact on the raw unit vectors: numpy brute force over the vectors added, single queries and
batches, after removals, saved and loaded, and wrapped by ``from_faiss``.

Before, an IVF base was refused at the first ``add`` (FAISS: ``add_with_ids not implemented``),
and an HNSW base took the plan of an exact cosine source (its efSearch unseen, ``ef_search=``
refused: "applies to HNSW indexes; this one is IndexRefineFlat")."""

from __future__ import annotations

import warnings

import faiss
import numpy as np
import pytest
from conftest import assert_same_topk, brute_force, clustered

from normrank import NormIndex
from normrank.errors import UnsupportedIndexError
from normrank.index.state import IndexState
from normrank.search.faiss_info import flat_storage

D, N = 32, 1200
KINDS = ["IVF8,PQ8x4,RFlat", "IVF8,SQ8,Refine(Flat)", "HNSW16,SQ8,RFlat", "PQ8x4,RFlat"]
ALPHAS = [-1.0, 0.0, 0.5, 1.0]
TOL = 2e-5  # float32 rows and scores against numpy's float64


def refine_of(index: faiss.Index) -> faiss.IndexRefine:
    """The refine stage inside ``index`` (beneath its id map), found without normrank."""
    found = [faiss.downcast_index(index)]
    while not isinstance(found[-1], faiss.IndexRefine):
        found.append(faiss.downcast_index(found[-1].index))
    return found[-1]


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    return clustered(N, D, rng), clustered(9, D, rng)


def _whole(idx: NormIndex) -> NormIndex:
    """The base index at a breadth that returns every document (every IVF list, an HNSW beam past
    the collection, a refine k_factor whose base fetch covers it): the result must be exact."""
    if "nprobe" in idx.search_params:
        idx.nprobe = idx.search_params["nlist"]
    if "efSearch" in idx.search_params:
        idx.efSearch = 2 * N
    refine_of(idx.faiss_index).k_factor = 1000.0  # FAISS's largest (10 x 1000 >= N)
    return idx


def _built(factory: str, x: np.ndarray, **options) -> NormIndex:
    idx = NormIndex(D, factory=factory, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FAISS's clustering warns on few training points
        idx.train(x)
    idx.add(x, ids=np.arange(x.shape[0]) * 3 + 5)
    return _whole(idx)


def _check(idx: NormIndex, x: np.ndarray, ids: np.ndarray, q: np.ndarray, alpha: float, k: int = 10) -> None:
    """Batch and single queries against numpy over the raw vectors ``x`` (ids ``ids``)."""
    ref, ref_ids = brute_force(x, q, alpha, ids)
    assert_same_topk(ref, ref_ids, *idx.search(q, k, alpha=alpha), k, tol=TOL)
    singles = [idx.search(q[i], k, alpha=alpha) for i in range(q.shape[0])]
    assert_same_topk(ref, ref_ids, *(np.vstack(v) for v in zip(*singles, strict=True)), k, tol=TOL)


@pytest.mark.parametrize("factory", KINDS)
def test_exact_on_the_raw_vectors_single_and_batch(factory, data):
    """max_depth = k and a first band of 32: most of the top-k comes from the scan, which must
    read the refine index's raw rows (the codes' estimates differ from numpy's by ~1e-2)."""
    x, q = data
    idx = _built(factory, x, max_depth=10, n_tail=32)
    ids = idx.ids
    for alpha in ALPHAS:
        _check(idx, x, ids, q, alpha)
    refine = refine_of(idx.faiss_index)
    rows = idx._cache.rows
    assert np.shares_memory(rows.x, flat_storage(faiss.downcast_index(refine.refine_index)))


@pytest.mark.parametrize("factory", ["IVF8,PQ8x4,RFlat", "HNSW16,SQ8,RFlat"])
def test_removals_saving_and_loading(factory, data, tmp_path):
    """Removed documents (tombstones: a refine stage cannot delete) never come back, the best
    ones of each alpha included; the index saved by FAISS's write_index and loaded answers the same."""
    x, q = data
    idx = _built(factory, x)
    ids = idx.ids
    gone = set()
    for alpha in (-1.0, 1.0):  # remove each alpha's current best documents
        gone |= set(idx.search(q, 3, alpha=alpha)[1].ravel().tolist())
    gone_ids = np.array(sorted(gone))
    assert idx.remove(gone_ids) == gone_ids.size
    keep = ~np.isin(ids, gone_ids)
    for alpha in ALPHAS:
        _check(idx, x[keep], ids[keep], q, alpha)
    idx.save(tmp_path / "refine")
    back = _whole(NormIndex.load(tmp_path / "refine"))
    assert isinstance(refine_of(back.faiss_index), faiss.IndexRefineFlat)
    for alpha in ALPHAS:
        _check(back, x[keep], ids[keep], q, alpha)
        assert_same_topk(
            *brute_force(x[keep], q, alpha, ids[keep]), *back.search(q, 10, alpha=alpha), 10, tol=TOL
        )


def test_an_hnsw_base_takes_its_breadth_and_widens_through_the_refine(data):
    """ef_search is the base HNSW's (set and per call); a fetch deeper than the beam reaches the
    base through FAISS's refine parameters (an HNSW parameter object alone is refused)."""
    x, q = data
    idx = NormIndex(D, factory="HNSW16,SQ8,RFlat", ef_search=24)
    idx.train(x)
    idx.add(x)
    base = faiss.downcast_index(refine_of(idx.faiss_index).base_index)
    assert idx.efSearch == base.hnsw.efSearch == 24
    s, i, stats = idx.search(q, 50, alpha=0.5, ef_search=16, return_stats=True)
    assert stats.depth == 50 > 16 and base.hnsw.efSearch == 24  # widened for that call only
    assert (i >= 0).all() and np.isfinite(s).all()
    refine_of(idx.faiss_index).k_factor = 1000.0
    idx.efSearch = 2 * N
    _check(idx, x, idx.ids, q, 0.5, k=50)


def test_from_faiss_wraps_or_rebuilds_a_refine_index(data):
    """A refine index of unit vectors with ``norms=`` is wrapped as is (adds work after it); one of
    raw vectors is retrained over their unit directions by FAISS's reverse factory (a warning)."""
    x, q = data
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    for factory in ("IVF8,PQ8x4,RFlat", "HNSW16,SQ8,RFlat"):
        faiss_unit = faiss.index_factory(D, factory, faiss.METRIC_INNER_PRODUCT)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            faiss_unit.train(unit)
        faiss_unit.add(unit[:1000])
        norms = dict(enumerate(np.linalg.norm(x[:1000], axis=1)))
        idx = _whole(NormIndex.from_faiss(faiss_unit, norms=norms))
        idx.add(x[1000:])
        for alpha in ALPHAS:
            _check(idx, x, np.arange(N), q, alpha)
        faiss_raw = faiss.index_factory(D, factory, faiss.METRIC_L2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            faiss_raw.train(x)
        faiss_raw.add(x)
        with pytest.warns(UserWarning, match="retraining"):
            idx = _whole(NormIndex.from_faiss(faiss_raw))
        assert isinstance(refine_of(idx.faiss_index), faiss.IndexRefine)
        for alpha in ALPHAS:
            _check(idx, x, np.arange(N), q, alpha)


def test_a_refine_stage_whose_counts_disagree_is_refused(data):
    x, _ = data
    idx = _built("PQ8x4,RFlat", x[:200])
    state = idx.to_state()
    refine_of(state.faiss_index).refine_index.add(np.ones((1, D), np.float32) / np.sqrt(D))
    with pytest.raises(UnsupportedIndexError, match="disagree"):
        NormIndex.from_state(IndexState(**{**state.__dict__}))


def test_a_refine_factor_faiss_cannot_read_back_is_refused_before_saving(data, tmp_path):
    """FAISS writes a refine k_factor above 1,000 but its read_index refuses the file: save says
    so first and writes no index (before: saved, then load raised CorruptIndexError)."""
    x, _ = data
    idx = _built("PQ8x4,RFlat", x[:200])
    refine_of(idx.faiss_index).k_factor = 1200.0
    with pytest.raises(UnsupportedIndexError, match="k_factor"):
        idx.save(tmp_path / "far")
    assert {p.name for p in (tmp_path / "far").iterdir()} <= {".normrank.lock"}  # (the save lock)
