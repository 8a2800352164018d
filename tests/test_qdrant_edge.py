"""QdrantEdgeNormIndex on Qdrant's own engine (qdrant-edge-py): the formula, the band filter and
HNSW run in the engine; the reference is NormIndex's exact search (flat, numpy-checked)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from normrank import NormIndex
from normrank.errors import (
    DimensionMismatchError,
    DuplicateIdError,
    IndexStateError,
    InvalidInputError,
    InvalidParameterError,
    NonFiniteError,
    UnknownIdError,
    ZeroNormError,
)

pytest.importorskip("qdrant_edge")
from normrank.backends.qdrant_edge import QdrantEdgeNormIndex

ALPHAS = [-1.5, -0.75, 0.0, 0.5, 1.0]
ROOT = Path(__file__).resolve().parents[1]


def clustered(n: int, nq: int, d: int, seed: int):
    """Clustered directions, log-normal norms (as tests/test_ann.py)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(8, d))
    u = centers[rng.integers(8, size=n)] + 0.7 * rng.normal(size=(n, d))
    x = u / np.linalg.norm(u, axis=1, keepdims=True) * rng.lognormal(0.0, 0.45, size=(n, 1))
    q = centers[rng.integers(8, size=nq)] + 0.9 * rng.normal(size=(nq, d))
    return x.astype(np.float32), q.astype(np.float32)


def assert_same_top(got_s, got_ids, ref_s, ref_ids, rtol=1e-5):
    """Same ids as the exact reference, except where two documents tie (equal exact scores:
    the corpora hold duplicates), and the same scores."""
    np.testing.assert_allclose(got_s, ref_s, rtol=rtol, atol=1e-6)
    differ = got_ids != ref_ids
    assert np.all(np.isclose(got_s[differ], ref_s[differ], rtol=rtol, atol=1e-6)), "different ids, not ties"
    # A tie may swap two ids; it may not bring in a document the reference does not have there.
    for row in np.flatnonzero(differ.any(axis=1)):
        assert set(got_ids[row]) - set(ref_ids[row]) <= set(got_ids[row][differ[row]])


def recall_vs_exact(got_ids, ref: NormIndex, q, alpha) -> float:
    """Recall@10 with ties counted: a result is right when its exact score reaches the 10th."""
    ref_s, _ = ref.search(q, 10, alpha=alpha)
    hits = 0
    x_ids = ref.ids
    pos = {int(i): j for j, i in enumerate(x_ids)}
    norms = ref.norms.astype(np.float64)
    unit = np.stack([ref.reconstruct(int(i)) for i in x_ids]).astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    qu = q / np.linalg.norm(q, axis=1, keepdims=True)
    for r, row in enumerate(got_ids):
        p = np.array([pos[int(i)] for i in np.unique(row[row >= 0])], dtype=np.int64)
        s = (unit[p] @ qu[r]) * norms[p] ** alpha
        kth = ref_s[r, 9]
        hits += min(10, int(np.sum(s >= kth - 1e-6 * abs(kth))))
    return hits / (10 * len(got_ids))


# -- real MiniLM embeddings of a shared collection --------------------------------------------


@pytest.fixture(scope="module")
def cacm():
    """Raw all-MiniLM-L6-v2 embeddings of BEIR cacm (3,204 documents, 52 judged queries),
    through the embedding cache the sweep and the benchmarks use (encoded once)."""
    pytest.importorskip("torch")
    from normrank.corpus.beir import load_dataset
    from normrank.corpus.embedding_cache import EmbeddingCache
    from normrank.errors import NormrankError
    from normrank.sweep import embed_dataset

    try:
        ds = load_dataset("cacm")
    except (NormrankError, OSError) as e:
        pytest.skip(f"BEIR cacm not available: {e}")
    qids, qtexts = ds.judged()
    q, d = embed_dataset(ds, "all-MiniLM-L6-v2", EmbeddingCache(), {}, 64, False, None, qids, qtexts)
    return d.astype(np.float32), q.astype(np.float32)


@pytest.fixture(scope="module")
def real_pair(cacm, tmp_path_factory):
    x, q = cacm
    ids = np.arange(x.shape[0], dtype=np.int64) * 7 + 3
    ref = NormIndex(x.shape[1])
    ref.add(x, ids)
    exact = QdrantEdgeNormIndex(tmp_path_factory.mktemp("cacm") / "exact", x.shape[1], exact=True)
    exact.add(x, ids)
    yield exact, ref, q
    exact.close()


@pytest.mark.models
@pytest.mark.parametrize("alpha", ALPHAS)
def test_real_exact_top10_equals_normindex(real_pair, alpha):
    exact, ref, q = real_pair
    s, ids = exact.search(q, 10, alpha=alpha)
    rs, rids = ref.search(q, 10, alpha=alpha)
    assert_same_top(s, ids, rs, rids)


@pytest.mark.models
def test_real_per_query_alpha(real_pair):
    exact, ref, q = real_pair
    alphas = np.resize(np.array(ALPHAS), q.shape[0])
    s, ids = exact.search(q, 10, alpha=alphas)
    rs, rids = ref.search(q, 10, alpha=alphas)
    assert_same_top(s, ids, rs, rids)


@pytest.mark.models
def test_real_hnsw_recall(cacm, tmp_path):
    """With the HNSW graph built (and searched at hnsw_ef = 128), recall@10 >= 0.99 against the
    exact norm-weighted top-10 at every alpha, single queries and a batch alike."""
    x, q = cacm
    ref = NormIndex(x.shape[1])
    ref.add(x)
    hnsw = QdrantEdgeNormIndex(
        tmp_path / "hnsw", x.shape[1], m=16, ef_construct=100, hnsw_ef=128, indexing_threshold_kb=1
    )
    hnsw.add(x)
    hnsw.optimize()
    assert hnsw.shard.info().indexed_vectors_count == x.shape[0]  # the graph exists
    for a in ALPHAS:
        batch = hnsw.search(q, 10, alpha=a)[1]
        single = np.concatenate([hnsw.search(q[i], 10, alpha=a)[1] for i in range(q.shape[0])])
        # (A batch is planned as a whole by the engine: its ties may come in another order.)
        assert recall_vs_exact(batch, ref, q, a) >= 0.99, a
        assert recall_vs_exact(single, ref, q, a) >= 0.99, a
    hnsw.close()


# -- the band and its widening (synthetic, fast) ----------------------------------------------


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    x, q = clustered(2000, 16, d=16, seed=3)
    ids = np.arange(2000, dtype=np.int64) * 3 + 1
    ref = NormIndex(16)
    ref.add(x, ids)
    # A shallow cosine prefetch and a tiny first band: the bound fails and the band is widened.
    ei = QdrantEdgeNormIndex(tmp_path_factory.mktemp("syn") / "s", 16, exact=True, k_factor=2, n_tail=4)
    ei.add(x, ids)
    yield ei, ref, q, x
    ei.close()


@pytest.mark.parametrize("alpha", [-1.5, 1.0])
def test_band_widens_until_the_bound_holds(syn, alpha):
    ei, ref, q, _ = syn
    s, ids = ei.search(q, 10, alpha=alpha)
    assert_same_top(s, ids, *ref.search(q, 10, alpha=alpha))
    assert q.shape[0] // 2 <= ei.last_widened <= q.shape[0]  # the widening path ran


@pytest.mark.parametrize("alpha", [-1.5, 1.0])
def test_without_widening_the_answer_is_wrong(syn, alpha, monkeypatch):
    """The mutation the test above guards against: a search that trusts the first band."""
    ei, ref, q, _ = syn
    monkeypatch.setattr(QdrantEdgeNormIndex, "_band_needed", lambda self, *a, **kw: None)
    _, ids = ei.search(q, 10, alpha=alpha)
    _, rids = ref.search(q, 10, alpha=alpha)
    assert (ids != rids).any()


@pytest.mark.parametrize("alpha", [-1.5, 1.0])
def test_widened_ranges_are_asked_again_while_full(syn, alpha, monkeypatch):
    """Ranges of the widened band that return their whole (here tiny) limit are asked again,
    deeper, until the bound holds; without that the answer is wrong."""
    from normrank.backends import edge_requests, qdrant_edge

    ei, ref, q, _ = syn
    monkeypatch.setattr(edge_requests, "_PART_LIMIT", 1)
    calls = []
    query = QdrantEdgeNormIndex._query
    monkeypatch.setattr(QdrantEdgeNormIndex, "_query", lambda self, r: calls.append(len(r)) or query(self, r))
    assert_same_top(*ei.search(q, 10, alpha=alpha), *ref.search(q, 10, alpha=alpha))
    assert len(calls) > 3  # deeper and deeper
    monkeypatch.setattr(qdrant_edge, "unseen_can_beat", lambda *a: False)
    _, ids = ei.search(q, 10, alpha=alpha)
    assert (ids != ref.search(q, 10, alpha=alpha)[1]).any()


def test_band_sizes_agree_with_the_engine_count(syn):
    """The mirrored norms give the band size without a count query: the engine agrees."""
    import qdrant_edge as qe

    ei, _, _, _ = syn
    for alpha in (-1.0, 0.5):
        for t in (0, 1, 17, 500, 1999, 2000):
            size, edge = ei._band(alpha, t)
            flt = ei._band_filter(alpha, edge)
            assert ei.shard.count(qe.CountRequest(exact=True, filter=flt)) == size
            assert size <= t


def test_per_query_alpha_and_single_queries(syn):
    ei, ref, q, _ = syn
    alphas = np.linspace(-1.5, 1.0, q.shape[0])
    s, ids = ei.search(q, 10, alpha=alphas)
    assert_same_top(s, ids, *ref.search(q, 10, alpha=alphas))
    _s1, i1 = ei.search(q[3], 10, alpha=float(alphas[3]))
    np.testing.assert_array_equal(i1[0], ids[3])


@pytest.mark.parametrize("alpha", [-1.0, 0.5])
def test_max_depth_caps_the_cosine_prefetch_as_normindex(syn, alpha, monkeypatch):
    """``max_depth`` caps the first round's cosine prefetch at the plan's depth, as NormIndex's
    (issue 47: the Edge backend did not pass it); the bound widens the band over what the
    shallower prefetch leaves, and the answer stays exact."""
    from normrank.search.plan import ANY_WEIGHTED_ALPHA, SearchOptions, plan_search

    ei, ref, q, _ = syn
    depths = []
    request = QdrantEdgeNormIndex._request
    monkeypatch.setattr(
        QdrantEdgeNormIndex,
        "_request",
        lambda self, v, k, a, depth: depths.append(depth) or request(self, v, k, a, depth),
    )
    ei.k_factor, ei.max_depth = 10, 12
    try:
        s, ids = ei.search(q, 10, alpha=alpha)
    finally:
        ei.k_factor, ei.max_depth = 2, None
    want = plan_search(SearchOptions(10, ANY_WEIGHTED_ALPHA, 10, max_depth=12), len(ei)).depth
    assert want == 12 and depths == [want] * q.shape[0]
    assert_same_top(s, ids, *ref.search(q, 10, alpha=alpha))


def test_hnsw_parameters_reach_the_engine(tmp_path):
    x, q = clustered(600, 4, d=8, seed=5)
    ei = QdrantEdgeNormIndex(tmp_path / "h", 8, m=8, ef_construct=40, hnsw_ef=32, indexing_threshold_kb=1)
    ei.add(x)
    ei.optimize()
    ei.close()
    cfg = (tmp_path / "h" / "edge_config.json").read_text()
    assert '"m":8' in cfg and '"ef_construct":40' in cfg
    again = QdrantEdgeNormIndex(tmp_path / "h", hnsw_ef=32)
    assert again.shard.info().indexed_vectors_count == 600
    for req in (again._request(q[0].tolist(), 10, -1.0, 100), again._band_request(q[0].tolist(), -1.0, 1.0)):
        assert req.params.hnsw_ef == 32 and not req.params.exact
    again.close()


# -- storage: the shard folder -----------------------------------------------------------------


def test_reopen_after_close_returns_points_norms_and_weights(tmp_path):
    x, q = clustered(500, 6, d=12, seed=7)
    ei = QdrantEdgeNormIndex(tmp_path / "p", 12, exact=True)
    ids = ei.add(x)
    ei.remove([3, 4])
    before = ei.search(q, 10, alpha=-0.75)
    ei.close()
    with pytest.raises(IndexStateError):
        ei.search(q, 10)
    again = QdrantEdgeNormIndex(tmp_path / "p", exact=True)
    assert len(again) == 498 and again.dim == 12
    keep = np.setdiff1d(ids, [3, 4])
    norms64 = np.linalg.norm(x[keep].astype(np.float64), axis=1)
    np.testing.assert_array_equal(again.norm_of(keep), norms64.astype(np.float32))
    for a, b in zip(before, again.search(q, 10, alpha=-0.75), strict=True):
        np.testing.assert_array_equal(a, b)
    w = np.random.default_rng(0).uniform(0.5, 2.0, len(again)).astype(np.float32)
    again.set_bases(w)
    again.close()
    third = QdrantEdgeNormIndex(tmp_path / "p", exact=True)
    ref = NormIndex(12)
    ref.add(x[keep], keep)
    ref.set_bases(w, keep)
    assert_same_top(*third.search(q, 10, alpha=1.0), *ref.search(q, 10, alpha=1.0))
    third.clear_bases()
    assert_same_top(*third.search(q, 10, alpha=1.0), *exact_search(x[keep], keep, q, 1.0))
    third.close()


def exact_search(x, ids, q, alpha):
    ref = NormIndex(x.shape[1])
    ref.add(x, ids)
    return ref.search(q, 10, alpha=alpha)


_CHILD = textwrap.dedent(
    """
    import sys, numpy as np
    from normrank.backends.qdrant_edge import QdrantEdgeNormIndex
    ei = QdrantEdgeNormIndex(sys.argv[1], 16)
    for b in range(10_000):
        x = np.random.default_rng(b).normal(size=(3000, 16)) * (1 + b % 5)
        ei.add(x, ids=np.arange(b * 3000, (b + 1) * 3000))
        print(b, flush=True)
    """
)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sigkill_during_add_keeps_every_acknowledged_point(tmp_path, seed):
    """A process killed (SIGKILL) at a random moment while adding: reopening returns every
    batch whose add had returned, with its norms, and batches are whole (one add is one engine
    update)."""
    path = tmp_path / "k"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path)], stdout=subprocess.PIPE, text=True, env=env
    )
    acked, times = -1, []
    try:
        for line in child.stdout:
            acked, times = int(line), [*times, time.perf_counter()]
            if acked >= 3:
                # Somewhere inside the next add (an add takes about one ack interval).
                time.sleep(np.random.default_rng(seed).uniform(0, times[-1] - times[-2]))
                break
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    # Acks printed while this side slept (a busy machine may let several adds finish): the last
    # one the child printed is what counts, whatever the timing.
    acked = max([acked, *(int(line) for line in child.stdout.read().split())])
    assert acked >= 3
    ei = QdrantEdgeNormIndex(path)
    batches = len(ei) // 3000
    assert len(ei) % 3000 == 0 and acked + 1 <= batches <= acked + 2
    for b in range(batches):
        x = np.random.default_rng(b).normal(size=(3000, 16)) * (1 + b % 5)
        ids = np.arange(b * 3000, (b + 1) * 3000)
        np.testing.assert_allclose(ei.norm_of(ids), np.linalg.norm(x, axis=1), rtol=1e-6)
    ei.close()


def test_opening_refuses_what_is_not_a_shard(tmp_path):
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("x")
    with pytest.raises(IndexStateError):
        QdrantEdgeNormIndex(tmp_path / "junk", 8)
    with pytest.raises(InvalidParameterError):
        QdrantEdgeNormIndex(tmp_path / "nothing")  # no dim, no shard
    QdrantEdgeNormIndex(tmp_path / "d8", 8).close()
    with pytest.raises(DimensionMismatchError):
        QdrantEdgeNormIndex(tmp_path / "d8", 16)


# -- fuzz classes of the core: typed errors, and a rejected call changes nothing -------------


@pytest.fixture
def small(tmp_path):
    x, q = clustered(60, 3, d=8, seed=11)
    ei = QdrantEdgeNormIndex(tmp_path / "f", 8, exact=True)
    ei.add(x)
    yield ei, x, q
    ei.close()


def _bad_rows(x, what):
    bad = x[:4].copy()
    if what == "nan":
        bad[2, 1] = np.nan
    elif what == "inf":
        bad[1, 0] = np.inf
    elif what == "zero":
        bad[3] = 0.0
    elif what == "huge":
        bad = bad.astype(np.float64)
        bad[0, 0] = 1e300
    return bad


@pytest.mark.parametrize(
    ("what", "error"),
    [("nan", NonFiniteError), ("inf", NonFiniteError), ("huge", NonFiniteError), ("zero", ZeroNormError)],
)
def test_bad_vectors_are_refused_whole(small, what, error):
    ei, x, q = small
    before = ei.search(q, 5, alpha=-1.0)
    with pytest.raises(error):
        ei.add(_bad_rows(x, what), ids=[100, 101, 102, 103])
    assert len(ei) == 60 and 100 not in ei
    with pytest.raises(error):
        ei.search(_bad_rows(x, what), 5)
    for a, b in zip(before, ei.search(q, 5, alpha=-1.0), strict=True):
        np.testing.assert_array_equal(a, b)


def test_wrong_shapes_ids_and_parameters(small):
    ei, x, q = small
    with pytest.raises(DimensionMismatchError):
        ei.add(np.ones((2, 9), np.float32))
    with pytest.raises(DimensionMismatchError):
        ei.search(np.ones((2, 7), np.float32), 5)
    with pytest.raises(DuplicateIdError):
        ei.add(x[:2], ids=[200, 200])
    with pytest.raises(DuplicateIdError):
        ei.add(x[:2], ids=[300, 5])  # 5 is in the shard
    with pytest.raises(InvalidInputError):
        ei.add(x[:2], ids=[-1, 400])
    with pytest.raises(InvalidInputError):
        ei.add(x[:2], ids=[1.5, 400])
    with pytest.raises(InvalidInputError):
        ei.add(x[:2], ids=[400])
    assert len(ei) == 60 and 300 not in ei and 200 not in ei
    for k in (0, -1, 2.5, True):
        with pytest.raises(InvalidParameterError):
            ei.search(q, k)
    for a in (np.nan, 100.0, [0.5, 1.0]):
        with pytest.raises(InvalidParameterError):
            ei.search(q, 5, alpha=a)
    with pytest.raises(UnknownIdError):
        ei.remove([1, 999])
    assert len(ei) == 60 and 1 in ei
    with pytest.raises(UnknownIdError):
        ei.norm_of([999])
    with pytest.raises(InvalidInputError):
        ei.set_bases(np.ones(59))
    with pytest.raises(InvalidInputError):
        ei.set_bases(np.r_[np.ones(59), 0.0])
    with pytest.raises(InvalidInputError):
        ei.add(x[:1], ids=[500], bases=[1.0])  # no custom bases set
    for bad in ({"hnsw_ef": 0}, {"k_factor": 0}, {"m": True}, {"n_tail": -1}):
        with pytest.raises(InvalidParameterError):
            QdrantEdgeNormIndex(ei.path, **bad)


def test_padding_and_empty(tmp_path, small):
    ei, _x, q = small
    s, ids = ei.search(q, 70, alpha=-1.0)
    assert (ids[:, :60] >= 0).all() and (ids[:, 60:] == -1).all() and np.isneginf(s[:, 60:]).all()
    empty = QdrantEdgeNormIndex(tmp_path / "e", 8)
    s, ids = empty.search(q, 3)
    assert (ids == -1).all() and np.isneginf(s).all()
    assert empty.search(np.empty((0, 8), np.float32), 3)[1].shape == (0, 3)
    empty.close()


def test_opening_a_shard_written_by_something_else(tmp_path):
    """A point without a norm (written straight to the shard) is refused with a typed error."""
    import qdrant_edge as qe

    ei = QdrantEdgeNormIndex(tmp_path / "o", 4)
    ei.add(np.eye(4, dtype=np.float32) + 0.1)
    ei.shard.update(qe.UpdateOperation.upsert_points([qe.Point(id=99, vector=[1.0, 0, 0, 0], payload={})]))
    ei.close()
    with pytest.raises(IndexStateError):
        QdrantEdgeNormIndex(tmp_path / "o")


@pytest.fixture(scope="module")
def syn_cosine_first(tmp_path_factory):
    """The default path (no first band): a cosine round, then the formula over the top-k by id
    plus whatever band the bound asks for, in one request per query."""
    x, q = clustered(2000, 16, d=16, seed=3)
    ids = np.arange(2000, dtype=np.int64) * 3 + 1
    ref = NormIndex(16)
    ref.add(x, ids)
    ei = QdrantEdgeNormIndex(tmp_path_factory.mktemp("cf") / "s", 16, exact=True, k_factor=2, n_tail=0)
    ei.add(x, ids)
    yield ei, ref, q
    ei.close()


@pytest.mark.parametrize("alpha", [-1.5, -0.75, 0.5, 1.0])
def test_cosine_first_round_then_formula_is_exact(syn_cosine_first, alpha):
    ei, ref, q = syn_cosine_first
    s, ids = ei.search(q, 10, alpha=alpha)
    assert_same_top(s, ids, *ref.search(q, 10, alpha=alpha))
    assert ei.last_widened > 0  # the band path ran too
    s1, i1 = ei.search(q[5], 10, alpha=alpha)
    assert_same_top(s1, i1, *ref.search(q[5:6], 10, alpha=alpha))


@pytest.mark.parametrize("alpha", [-1.5, 1.0])
def test_first_band_seen_in_part_is_searched_again(syn_cosine_first, alpha, monkeypatch):
    """The first band returns only its best cosines (here 3 of 300): where the bound does not
    clear the rest, the band is searched again with the ranges of the second round."""
    from normrank.backends import edge_requests

    ei, ref, q = syn_cosine_first
    monkeypatch.setattr(edge_requests, "FIRST_LIMIT", 3)
    monkeypatch.setattr(ei, "n_tail", 300)
    reqs = []
    query = QdrantEdgeNormIndex._query
    monkeypatch.setattr(QdrantEdgeNormIndex, "_query", lambda self, r: reqs.append(r) or query(self, r))
    s, ids = ei.search(q, 10, alpha=alpha)
    assert_same_top(s, ids, *ref.search(q, 10, alpha=alpha))
    assert len(reqs[0]) == 2 * q.shape[0]  # each query's cosine request and its band's


def numpy_top(x, ids, q, alpha, k=10):
    """Brute force in float64 over the raw vectors: ``cos(q, d) * ||d||**alpha``, the best ``k``."""
    norms = np.linalg.norm(x.astype(np.float64), axis=1)
    qu = q.astype(np.float64) / np.linalg.norm(q.astype(np.float64), axis=1, keepdims=True)
    s = (qu @ (x / norms[:, None]).T) * norms**alpha
    order = np.argsort(-s, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(s, order, axis=1), ids[order]


@pytest.fixture(scope="module")
def syn_default(tmp_path_factory):
    """An exact shard at the default first band and depth: the bound holds after the first
    round for some queries, not for others."""
    x, q = clustered(3000, 60, d=16, seed=11)
    ids = np.arange(3000, dtype=np.int64) * 5 + 2
    ei = QdrantEdgeNormIndex(tmp_path_factory.mktemp("dflt") / "s", 16, exact=True)
    ei.add(x, ids)
    yield ei, x, ids, q
    ei.close()


@pytest.mark.parametrize("alpha", [-1.0, -0.5, 0.5, 1.0])
def test_queries_with_and_without_a_widened_band_equal_numpy(syn_default, alpha, monkeypatch):
    """Both paths of the second request: a query whose bound holds after the first round gets
    the engine's formula over its top-k alone (one prefetch); one whose bound fails gets the
    widened band's ranges too. Either way two engine calls, and numpy's brute-force top-10."""
    ei, x, ids, q = syn_default
    ref_s, ref_ids = numpy_top(x, ids, q, alpha)
    sent = []
    query = QdrantEdgeNormIndex._query
    monkeypatch.setattr(QdrantEdgeNormIndex, "_query", lambda self, r: sent.append(r) or query(self, r))
    widened = []
    for i in range(q.shape[0]):
        sent.clear()
        s, got = ei.search(q[i], 10, alpha=alpha)
        assert_same_top(s, got, ref_s[i : i + 1], ref_ids[i : i + 1])
        assert len(sent) == 2 and len(sent[1]) == 1, [len(r) for r in sent]
        prefetches = len(sent[1][0].prefetches)
        assert (prefetches > 1) == bool(ei.last_widened), (prefetches, ei.last_widened)
        widened.append(ei.last_widened)
    assert 0 < sum(widened) < q.shape[0], widened  # both paths ran
    # A batch sends one engine call per round for all its queries, with the same answers.
    sent.clear()
    s, got = ei.search(q, 10, alpha=alpha)
    assert_same_top(s, got, ref_s, ref_ids)
    assert len(sent) == 2 and len(sent[1]) == q.shape[0]
    assert ei.last_widened == sum(widened)


def test_top_unique_keeps_each_id_once_in_score_order():
    """The first round's top-k (the cosine depth and the first band may share points): each id
    once, at its first place in decreasing score (ties in input order), as a plain loop does."""
    from normrank.backends.edge_requests import top_unique

    rng = np.random.default_rng(0)
    for trial in range(300):
        m, k = int(rng.integers(1, 40)), int(rng.integers(1, 15))
        pid = rng.integers(0, 12 if trial % 2 else 1000, m).astype(np.int64)
        sc = rng.integers(0, 6, m).astype(np.float64) if trial % 3 == 0 else rng.normal(size=m)
        sc = np.array([sc[list(pid).index(p)] for p in pid])  # a repeated id has one score
        want, seen = [], set()
        for j in sorted(range(m), key=lambda j: (-sc[j], j)):
            if pid[j] not in seen:
                seen.add(pid[j])
                want.append(j)
        got_ids, got_s = top_unique(pid, sc, k)
        np.testing.assert_array_equal(got_ids, pid[want[:k]])
        np.testing.assert_array_equal(got_s, sc[want[:k]])


def test_concurrent_searches_return_what_one_thread_does(syn_default):
    """Searches from several threads at once (the index's caches are filled under its lock)
    return what the same searches return one after another."""
    from concurrent.futures import ThreadPoolExecutor

    ei, _, _, q = syn_default
    alphas = [-1.0, 0.5, 1.0, -0.5, 0.0]
    jobs = [(i % q.shape[0], alphas[i % len(alphas)]) for i in range(80)]
    want = [ei.search(q[i], 10, alpha=a) for i, a in jobs]
    ei._set_mirror(ei._ids, ei._norms, ei._weights)  # caches emptied: the threads fill them
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda job: ei.search(q[job[0]], 10, alpha=job[1]), jobs))
    for (ws, wi), (gs, gi) in zip(want, got, strict=True):
        np.testing.assert_array_equal(gi, wi)
        np.testing.assert_array_equal(gs, ws)


@pytest.mark.parametrize(
    ("attr", "bad"),
    [("hnsw_ef", 0), ("hnsw_ef", -1), ("hnsw_ef", 2.5), ("hnsw_ef", "64"), ("k_factor", 0),
     ("k_factor", 2.5), ("n_tail", -5), ("n_tail", 1.5), ("max_depth", -1), ("max_depth", 2.5),
     ("exact", "no"), ("exact", 2)],
)  # fmt: skip
def test_option_set_after_construction_is_checked(small, attr, bad):
    ei, _x, _q = small
    before = getattr(ei, attr)
    with pytest.raises(InvalidParameterError, match=attr):
        setattr(ei, attr, bad)
    assert getattr(ei, attr) == before  # refused, not stored
    with pytest.raises(InvalidParameterError, match=attr):
        QdrantEdgeNormIndex(ei.path, **{attr: bad})  # the constructor says the same


# -- issue 25: the core's guarantees on the Edge backend ---------------------------------------


def test_default_ids_never_reuse_a_removed_id(tmp_path):
    """Item 3: add 5, remove id 4, add 1 gave id 4 (NormIndex gives 5); after a reopen too."""
    x, _ = clustered(10, 1, d=8, seed=3)
    ref = NormIndex(8)
    ref.add(x[:5])
    ref.remove([4])
    ei = QdrantEdgeNormIndex(tmp_path / "r", 8, exact=True)
    ei.add(x[:5])
    ei.remove([4])
    assert ei.add(x[5:6]).tolist() == ref.add(x[5:6]).tolist() == [5]
    ei.remove([5])
    ei.close()
    again = QdrantEdgeNormIndex(tmp_path / "r")
    assert again.add(x[6:7]).tolist() == [6]  # the removed 5 is not handed out after a reopen
    again.add(x[7:8], ids=[40])
    again.remove([40])
    assert again.add(x[8:9]).tolist() == [41]
    again.close()


@pytest.mark.parametrize("bad", [1e-50, 1e-40, 1e39, 0.0, -1.0, np.nan, np.inf])
def test_set_weights_runs_the_core_weight_check(small, bad):
    """Item 7: 1e-50 was stored as 0.0 (then alpha < 0 failed and the shard no longer opened),
    subnormals were stored, 1e39 raised the engine's untyped ValueError. Refused as NormIndex
    refuses them, and nothing changes."""
    ei, x, q = small
    w = np.ones(len(ei))
    w[7] = bad
    ref = NormIndex(8)
    ref.add(x)
    with pytest.raises(InvalidInputError):
        ref.set_bases(w)
    before = ei.search(q, 5, alpha=-1.0)
    with pytest.raises(InvalidInputError):
        ei.set_bases(w)
    with pytest.raises(InvalidInputError):
        ei.add(x[:1], bases=[bad])
    for a, b in zip(before, ei.search(q, 5, alpha=-1.0), strict=True):
        np.testing.assert_array_equal(a, b)


def test_clear_weights_clears_every_weight_and_the_shard_reopens(tmp_path):
    """Item 7: clear_weights (now clear_bases) filtered on weight > 0 and left a stored 0.0 behind;
    it now deletes the base of every point, and a shard holding bases set_bases refuses is a typed error."""
    import qdrant_edge as qe

    x, q = clustered(40, 3, d=8, seed=5)
    ei = QdrantEdgeNormIndex(tmp_path / "w", 8, exact=True)
    ids = ei.add(x)
    ei.set_bases(np.r_[np.full(20, np.finfo(np.float32).tiny), np.full(20, 3e38)])  # the edges
    assert_same_top(*ei.search(q, 10, alpha=-16.0), *_weighted_ref(x, ids, ei._weights, q, -16.0))
    ei.shard.update(qe.UpdateOperation.set_payload([int(ids[0])], {"weight": 0.0}))  # as the old bug
    ei.clear_bases()
    assert not any("weight" in (r.payload or {}) for r in ei.shard.retrieve(ids.tolist(), True, False))
    ei.close()
    again = QdrantEdgeNormIndex(tmp_path / "w", exact=True)
    assert again._weights is None
    assert_same_top(*again.search(q, 10, alpha=-1.0), *exact_search(x, ids, q, -1.0))
    again.shard.update(qe.UpdateOperation.upsert_points([qe.Point(id=int(i), vector=[1.0] * 8,
                       payload={"norm": 1.0, "weight": 0.0}) for i in ids]))  # fmt: skip
    again.close()
    with pytest.raises(IndexStateError, match="custom bases"):
        QdrantEdgeNormIndex(tmp_path / "w")


def test_weights_names_are_deprecated_aliases_of_bases(tmp_path):
    """The old names (``set_weights`` / ``clear_weights`` / ``add(weights=)``) still work, each
    with a DeprecationWarning, and do what the new ones do."""
    x, q = clustered(120, 3, d=8, seed=13)
    b = np.random.default_rng(14).lognormal(0, 1, 120).astype(np.float32)
    new = QdrantEdgeNormIndex(tmp_path / "new", 8, exact=True)
    old = QdrantEdgeNormIndex(tmp_path / "old", 8, exact=True)
    new.add(x[:80])
    old.add(x[:80])
    new.set_bases(b[:80])
    with pytest.warns(DeprecationWarning, match="QdrantEdgeNormIndex.set_bases"):
        old.set_weights(b[:80])
    new.add(x[80:], bases=b[80:])
    with pytest.warns(DeprecationWarning, match="QdrantEdgeNormIndex.add\\(bases=\\)"):
        old.add(x[80:], weights=b[80:])
    np.testing.assert_array_equal(old.bases, new.bases)
    np.testing.assert_array_equal(new.bases, b)
    for got, want in zip(old.search(q, 10, alpha=0.7), new.search(q, 10, alpha=0.7), strict=True):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(InvalidInputError, match="bases= only"):
        new.add(x[:1], ids=[999], bases=b[:1], weights=b[:1])
    new.clear_bases()
    with pytest.warns(DeprecationWarning, match="QdrantEdgeNormIndex.clear_bases"):
        old.clear_weights()
    np.testing.assert_array_equal(old.bases, new.bases)
    assert old._weights is None and new._weights is None
    new.close()
    old.close()


def _weighted_ref(x, ids, w, q, alpha):
    ref = NormIndex(x.shape[1])
    ref.add(x, ids)
    ref.set_bases(w, ids)
    return ref.search(q, 10, alpha=alpha)


SATURATING = [
    pytest.param(lambda rng, n: np.full(n, 1e20), 2.0, id="1e20-a2"),
    pytest.param(lambda rng, n: np.full(n, 1e-3), -16.0, id="1e-3-a-16"),
    pytest.param(lambda rng, n: np.full(n, 1e10), 4.0, id="1e10-a4"),
    pytest.param(lambda rng, n: 10.0 ** rng.uniform(-30, 30, n), 16.0, id="spread-a16"),
    pytest.param(lambda rng, n: 10.0 ** rng.uniform(-30, 30, n), -16.0, id="spread-a-16"),
    pytest.param(lambda rng, n: np.r_[np.full(20, 1e20), rng.lognormal(0, 0.4, n - 20)], 2.0, id="some-a2"),
    pytest.param(
        lambda rng, n: np.r_[np.full(20, 1e-20), rng.lognormal(0, 0.4, n - 20)], -3.0, id="some-a-3"
    ),
]


@pytest.mark.parametrize("exact", [True, False])
@pytest.mark.parametrize(("norms", "alpha"), SATURATING)
def test_powers_beyond_float32_saturate_as_in_normindex(tmp_path, norms, alpha, exact):
    """Item 8: norms whose alpha-power leaves float32's range made the engine cancel the query
    ("Operation cancelled") or the band's ranges divide by zero. NormIndex saturates w**alpha at
    WEIGHT_CAP and returns every document: the engine's formula now saturates the same way."""
    rng = np.random.default_rng(int(abs(alpha)))
    n = 300
    u = rng.normal(size=(n, 8))
    x = u / np.linalg.norm(u, axis=1, keepdims=True) * norms(rng, n)[:, None]
    q = rng.normal(size=(5, 8))
    ei = QdrantEdgeNormIndex(tmp_path / "s", 8, exact=exact)
    ids = ei.add(x)
    ref = exact_search(x, ids, q, alpha)
    assert_same_top(*ei.search(q, 10, alpha=alpha), *ref)
    s, got = ei.search(q, n, alpha=alpha)  # every document returned, with a real score
    assert (got >= 0).all() and np.isfinite(s).all()
    ei.set_bases(norms(rng, n).astype(np.float32).clip(np.finfo(np.float32).tiny, 3e38))
    s, got = ei.search(q, n, alpha=alpha)
    assert (got >= 0).all() and np.isfinite(s).all()
    ei.close()


_SECOND_OPENER = textwrap.dedent(
    """
    import sys
    from normrank.backends.qdrant_edge import QdrantEdgeNormIndex
    from normrank.errors import IndexStateError
    try:
        QdrantEdgeNormIndex(sys.argv[1])
    except IndexStateError as e:
        print("typed:", e)
    else:
        print("opened")
    """
)


def test_a_second_opener_is_refused_and_the_first_is_untouched(tmp_path):
    """Item 9: a second process opening an open shard raised the WAL's untyped WouldBlock, and
    every later flush / close of the first failed. The folder's lock is checked before the
    engine is touched: a typed "in use" error, here or in another process, and the first goes on."""
    x, q = clustered(50, 3, d=8, seed=9)
    ei = QdrantEdgeNormIndex(tmp_path / "l", 8, exact=True)
    ei.add(x)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", _SECOND_OPENER, str(tmp_path / "l")], env=env,
                         capture_output=True, text=True, timeout=120).stdout  # fmt: skip
    assert out.startswith("typed:") and "in use" in out, out
    with pytest.raises(IndexStateError, match="in use"):
        QdrantEdgeNormIndex(tmp_path / "l")  # this process too
    ei.add(clustered(3, 1, d=8, seed=10)[0])  # (not copies of x: ties could come back swapped)
    ei.flush()
    before = ei.search(q, 10, alpha=-1.0)
    ei.close()
    again = QdrantEdgeNormIndex(tmp_path / "l", exact=True)  # closed: the lock is released
    assert len(again) == 53
    for a, b in zip(before, again.search(q, 10, alpha=-1.0), strict=True):
        np.testing.assert_array_equal(a, b)
    del again  # dropped without close: the lock goes with it
    QdrantEdgeNormIndex(tmp_path / "l").close()


@pytest.mark.parametrize("bad", [[3.7], ["3"], [None], [np.nan], [[1]], [True], 2**70, [-1]])
def test_ids_are_parsed_by_the_core_parser(small, bad):
    """Item 10: norm_of([3.7]) and norm_of(['3']) returned id 3's norm; [None], [nan], [[1]]
    raised TypeError / ValueError. The core's as_id_list refuses them all, as NormIndex does."""
    ei, x, _q = small
    ref = NormIndex(8)
    ref.add(x)
    with pytest.raises(InvalidInputError):
        ref.norm_of(bad)
    with pytest.raises(InvalidInputError):
        ei.norm_of(bad)
    with pytest.raises(InvalidInputError):
        ei.remove(bad)
    assert len(ei) == 60
    np.testing.assert_array_equal(ei.norm_of(np.array([3.0])), ref.norm_of([3]))  # 3.0 is an id


@pytest.mark.parametrize(
    "bad",
    [{"hnsw_ef": 2**64}, {"hnsw_ef": 65_537}, {"max_search_threads": -1}, {"max_search_threads": 2**64},
     {"indexing_threshold_kb": -5}, {"indexing_threshold_kb": 2**64}, {"ef_construct": 2**64}, {"m": 2**40},
     {"max_search_threads": True}],
)  # fmt: skip
def test_options_have_the_core_bounds(tmp_path, bad):
    """Item 11: hnsw_ef = 2**64 was accepted (then every search raised OverflowError), and
    max_search_threads = -1 / indexing_threshold_kb = -5 raised OverflowError. The bounds are
    the one table of validation.OPTION_BOUNDS (efSearch <= 65,536, as NormIndex's)."""
    with pytest.raises(InvalidParameterError, match=next(iter(bad))):
        QdrantEdgeNormIndex(tmp_path / "o", 8, **bad)
    assert not (tmp_path / "o").exists()  # refused before anything was created
    ei = QdrantEdgeNormIndex(tmp_path / "p", 8, hnsw_ef=65_536, max_search_threads=2, indexing_threshold_kb=0)
    with pytest.raises(InvalidParameterError, match="hnsw_ef"):
        ei.hnsw_ef = 2**64
    ni = NormIndex(8, factory="HNSW8")
    with pytest.raises(InvalidParameterError):
        ni.efSearch = 65_537  # the same bound
    ei.close()
