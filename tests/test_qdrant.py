"""QdrantNormIndex on qdrant-client's local mode: the same top-10 as NormIndex (flat, exact)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_same_topk

from normrank import NormIndex
from normrank.errors import DuplicateIdError, IndexStateError, UnknownIdError

qdrant_client = pytest.importorskip("qdrant_client")


def clustered(n: int, nq: int, d: int, seed: int):
    """Clustered directions, log-normal norms (as tests/test_ann.py)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(8, d))
    u = centers[rng.integers(8, size=n)] + 0.7 * rng.normal(size=(n, d))
    x = u / np.linalg.norm(u, axis=1, keepdims=True) * rng.lognormal(0.0, 0.45, size=(n, 1))
    q = centers[rng.integers(8, size=nq)] + 0.9 * rng.normal(size=(nq, d))
    return x.astype(np.float32), q.astype(np.float32)


@pytest.fixture(scope="module")
def pair():
    x, q = clustered(700, 8, d=16, seed=3)
    client = qdrant_client.QdrantClient(":memory:")
    qi = pytest.importorskip("normrank.backends.qdrant").QdrantNormIndex(
        dim=16, alpha=0.0, client=client, collection="docs", k_factor=2, n_tail=20
    )
    ids = np.arange(700, dtype=np.int64) * 3 + 1
    qi.add(x, ids)
    ref = NormIndex(16)
    ref.add(x, ids)
    return qi, ref, q


def assert_matches_normindex(ref, q, alpha, s, ids, k: int = 10) -> None:
    """The same top-k as NormIndex up to float32 rounding and ties (Qdrant's engine and FAISS's
    BLAS round differently, so equal ids would hold only where no two scores come that close)."""
    rs, ri = ref.search(q, len(ref), alpha=alpha)  # every score, as NormIndex computes it
    pos = {int(v): j for j, v in enumerate(ref.ids)}
    dense = np.full((len(q), len(ref)), -np.inf)
    for r in range(len(q)):
        dense[r, [pos[int(v)] for v in ri[r]]] = rs[r]
    assert_same_topk(dense, ref.ids, s, ids, k)


@pytest.mark.parametrize("alpha", [-1.5, -0.5, 0.0, 0.5, 1.0])
def test_same_top10_as_normindex(pair, alpha):
    qi, ref, q = pair
    s, ids = qi.search(q, 10, alpha=alpha)
    rs, _ = ref.search(q, 10, alpha=alpha)
    assert_matches_normindex(ref, q, alpha, s, ids)
    np.testing.assert_allclose(s, rs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("alpha", [-1.5, 1.0])
def test_band_widens_until_the_bound_holds(pair, alpha, monkeypatch):
    """A shallow prefetch and a tiny first band: the bound fails, the band is widened to where
    it holds (a count query), and the answer is still NormIndex's exact top-10."""
    _, ref, q = pair
    x, _ = clustered(700, 8, d=16, seed=3)  # the fixture's documents
    qmod = pytest.importorskip("normrank.backends.qdrant")
    client = qdrant_client.QdrantClient(":memory:")
    qi = qmod.QdrantNormIndex(dim=16, client=client, collection="d", k_factor=5, n_tail=2)
    qi.add(x, ref.ids)
    widened = []
    size = qmod.QdrantNormIndex._band_size
    monkeypatch.setattr(
        qmod.QdrantNormIndex, "_band_size", lambda self, t, a: widened.append(t) or size(self, t, a)
    )
    s, ids = qi.search(q, 10, alpha=alpha)
    rs, _ = ref.search(q, 10, alpha=alpha)
    assert_matches_normindex(ref, q, alpha, s, ids)
    np.testing.assert_allclose(s, rs, rtol=1e-5, atol=1e-6)
    # Widened where needed, and once: the edge read off the bound is where it holds.
    assert q.shape[0] // 2 <= len(widened) <= q.shape[0]


def test_per_query_alpha(pair):
    qi, ref, q = pair
    alphas = np.linspace(-1.5, 1.0, q.shape[0])
    s, ids = qi.search(q, 10, alpha=alphas)
    assert_matches_normindex(ref, q, alphas, s, ids)


def test_add_remove_errors_and_padding():
    x, q = clustered(30, 2, d=8, seed=1)
    qi = pytest.importorskip("normrank.backends.qdrant").QdrantNormIndex(
        dim=8, client=qdrant_client.QdrantClient(":memory:"), collection="c"
    )
    got = qi.add(x[:20])
    np.testing.assert_array_equal(got, np.arange(20))
    with pytest.raises(DuplicateIdError):
        qi.add(x[20:22], ids=[3, 100])
    with pytest.raises(UnknownIdError):
        qi.remove([5, 999])
    assert qi.remove([5]) == 1 and len(qi) == 19
    s, ids = qi.search(q, 25, alpha=-1.0)
    assert (ids[:, :19] >= 0).all() and (ids[:, 19:] == -1).all() and np.isneginf(s[:, 19:]).all()
    assert 5 not in ids


def test_requests_are_the_servers_rest_models(pair):
    """A client by URL sends exactly these objects: qdrant-client's REST models (the classes
    its HTTP transport serialises), with the prefetches and the formula in the JSON body."""
    from qdrant_client.http import models as rest

    qi, _, q = pair
    req = qi._request(q[0], 10, -1.0, depth=100, tau=0.9, band=20)
    assert isinstance(req, rest.QueryRequest)
    assert all(isinstance(p, rest.Prefetch) for p in req.prefetch)
    assert isinstance(req.query, rest.FormulaQuery)
    body = rest.QueryRequestBatch(searches=[req]).model_dump_json(exclude_none=True)
    assert '"formula"' in body and '"prefetch"' in body and '"pow"' in body
    assert rest.QueryRequestBatch.model_validate_json(body).searches[0] == req


@pytest.mark.parametrize(
    ("attr", "bad"), [("k_factor", 0), ("k_factor", 2.5), ("n_tail", -1), ("n_tail", "20")]
)
def test_option_set_after_construction_is_checked(pair, attr, bad):
    from normrank.errors import InvalidParameterError

    qi, _ref, _q = pair
    before = getattr(qi, attr)
    with pytest.raises(InvalidParameterError, match=attr):
        setattr(qi, attr, bad)
    assert getattr(qi, attr) == before


# -- issue 25: the core's guarantees on the client backend ------------------------------------

SATURATING = [
    pytest.param(lambda rng, n: np.full(n, 1e20), 2.0, id="1e20-a2"),
    pytest.param(lambda rng, n: np.full(n, 1e-3), -16.0, id="1e-3-a-16"),
    pytest.param(lambda rng, n: 10.0 ** rng.uniform(-30, 30, n), 16.0, id="spread-a16"),
    pytest.param(lambda rng, n: 10.0 ** rng.uniform(-30, 30, n), -16.0, id="spread-a-16"),
    pytest.param(lambda rng, n: np.r_[np.full(20, 1e20), rng.lognormal(0, 0.4, n - 20)], 2.0, id="some-a2"),
]


@pytest.mark.parametrize(("norms", "alpha"), SATURATING)
def test_powers_beyond_float32_saturate_as_in_normindex(norms, alpha):
    """Item 8: a norm whose alpha-power leaves float32's range made Qdrant refuse the formula
    ("as f32 = inf") and the band's edge overflow; scored as NormIndex's saturation instead."""
    from normrank.backends.qdrant import QdrantNormIndex

    rng = np.random.default_rng(int(abs(alpha)))
    n = 300
    u = rng.normal(size=(n, 8))
    x = u / np.linalg.norm(u, axis=1, keepdims=True) * norms(rng, n)[:, None]
    q = rng.normal(size=(4, 8))
    qi = QdrantNormIndex(8, client=qdrant_client.QdrantClient(":memory:"), collection="s", n_tail=5)
    qi.add(x)
    ref = NormIndex(8)
    ref.add(x)
    s, ids = qi.search(q, 10, alpha=alpha)
    rs, rids = ref.search(q, 10, alpha=alpha)
    np.testing.assert_allclose(s, rs, rtol=1e-5, atol=1e-6)
    assert (ids >= 0).all()
    same = ids == rids
    assert np.isclose(s[~same], rs[~same], rtol=1e-5, atol=1e-6).all()  # only ties may differ


@pytest.mark.parametrize("bad", [[3.7], ["3"], [None], [np.nan], [[1]], [True], [-1]])
def test_ids_are_parsed_by_the_core_parser(pair, bad):
    """Item 10: the client backend parses ids with the core's as_id_list (nothing removed)."""
    from normrank.errors import InvalidInputError

    qi, _ref, _q = pair
    with pytest.raises(InvalidInputError):
        qi.remove(bad)
    with pytest.raises(InvalidInputError):
        qi.add(np.ones((1, 16)), ids=bad)
    assert len(qi) == 700


def test_options_have_the_core_bounds():
    """Item 11: the option table's bounds (validation.OPTION_BOUNDS), as NormIndex's."""
    from normrank.backends.qdrant import QdrantNormIndex
    from normrank.errors import InvalidParameterError

    client = qdrant_client.QdrantClient(":memory:")
    for bad in ({"k_factor": 2**21}, {"n_tail": -1}, {"dim": 0}, {"dim": 2**64}):
        kw = {"dim": 8, **bad}
        with pytest.raises(InvalidParameterError):
            QdrantNormIndex(client=client, collection="o", **kw)


def test_default_ids_never_reuse_a_removed_id(tmp_path):
    """As NormIndex and the Edge backend: a removed id is never a default id again, in this
    object and in a new one over the same collection (another process, a reopened store: the
    next id is kept in the collection's metadata, written before the points go)."""
    from normrank.backends.qdrant import QdrantNormIndex

    x, _ = clustered(12, 1, d=8, seed=4)
    client = qdrant_client.QdrantClient(path=str(tmp_path / "store"))
    qi = QdrantNormIndex(dim=8, client=client, collection="c")
    np.testing.assert_array_equal(qi.add(x[:5]), np.arange(5))
    qi.remove([3, 4])  # the largest ids go
    np.testing.assert_array_equal(qi.add(x[5:6]), [5])  # this object remembers
    qi.remove([5])
    client.close()
    client = qdrant_client.QdrantClient(path=str(tmp_path / "store"))
    again = QdrantNormIndex(dim=8, client=client, collection="c")
    assert len(again) == 3
    np.testing.assert_array_equal(again.add(x[6:8]), [6, 7])  # not 3: the collection remembers
    again.add(x[8:9], ids=[40])
    again.refresh()
    np.testing.assert_array_equal(again.add(x[9:10]), [41])  # after the largest present, too
    client.update_collection("c", metadata={"normrank_next_id": "soon"})
    with pytest.raises(IndexStateError, match="normrank_next_id"):
        QdrantNormIndex(dim=8, client=client, collection="c").add(x[10:11])
    client.close()


def test_a_server_without_collection_metadata_is_said(monkeypatch):
    """A server that keeps no collection metadata cannot hold the next id: remove still works
    and warns that a later opener may give removed ids again."""
    from normrank.backends.qdrant import QdrantNormIndex

    x, _ = clustered(6, 1, d=8, seed=5)
    client = qdrant_client.QdrantClient(":memory:")
    qi = QdrantNormIndex(dim=8, client=client, collection="c")
    qi.add(x)
    monkeypatch.setattr(client, "update_collection", lambda *a, **kw: True)  # accepted, not kept
    with pytest.warns(RuntimeWarning, match="removed ids"):
        assert qi.remove([5]) == 1
    assert len(qi) == 5
    np.testing.assert_array_equal(qi.add(x[:1]), [6])  # this object still remembers
