"""The null's NDCG@10 from relevant-document ranks (null.RelevantRanks) against a brute-force full
ranking: float32 scores ``cos * w``, every document sorted (score descending, position ascending),
NDCG@10 from the top 10. Cases built to break shortcuts: exact score ties (duplicate documents,
norms taking three values), relevant documents with negative cosines, few candidates (so many
relevant documents are decided outside them), a non-uniform α grid, the cosine matrix not kept
(then without exact ties: recomputed cosines may differ from the matrix's in the last bit)."""

from __future__ import annotations

import numpy as np
import pytest

from normrank.sweep import null
from normrank.sweep.metrics import QrelsMatrix


def brute_ndcg(cos: np.ndarray, w: np.ndarray, qm: QrelsMatrix) -> np.ndarray:
    """(nq,) NDCG@10 of the float32 scores ``cos * w`` by sorting every document."""
    scores = cos * w[None, :]
    n = cos.shape[1]
    out = np.zeros(cos.shape[0])
    idcg = qm.idcg(10)
    disc = 1.0 / np.log2(np.arange(2, 12))
    pq, pd, rel = qm.pairs()
    gains = {(int(q), int(d)): float(r) for q, d, r in zip(pq, pd, rel, strict=True)}
    for i in range(cos.shape[0]):
        top = np.lexsort((np.arange(n), -scores[i]))[: min(10, n)]
        dcg = sum(gains.get((i, int(d)), 0.0) * disc[r] for r, d in enumerate(top))
        out[i] = dcg / idcg[i] if idcg[i] > 0 else 0.0
    return out


def case(seed: int, n: int = 400, nq: int = 15, dim: int = 12, ties: bool = True):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((nq, dim)).astype(np.float32)
    d = rng.standard_normal((n, dim)).astype(np.float32)
    if ties:
        d[: n // 8] = d[n // 8 : n // 4]  # duplicate documents: bit-equal cosines
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    dn = d / np.linalg.norm(d, axis=1, keepdims=True)
    cos = (qn @ dn.T).astype(np.float32)
    # three values: equal weights, hence exact score ties
    norms = rng.choice([1.0, 1.5, 2.25], n) if ties else rng.lognormal(0, 0.4, n)
    qrels = []
    for i in range(nq):
        rel = set(rng.choice(n, 3, replace=False).tolist())
        rel |= {int(np.argmin(cos[i])), int(rng.integers(0, n // 8)), int(np.argsort(-cos[i])[12])}
        qrels.append({f"d{j}": int(rng.integers(1, 3)) for j in rel})
    qm = QrelsMatrix(qrels, {f"d{j}": j for j in range(n)})
    return qn, dn, cos, norms, qm


def candidates(cos: np.ndarray, c: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((np.broadcast_to(np.arange(cos.shape[1]), cos.shape), -cos), axis=1)[:, :c]
    return order, np.take_along_axis(cos, order, 1)


@pytest.mark.parametrize("few", [0, 4, 100])  # queries ranked by top-10 (0), mixed, or pair by pair
@pytest.mark.parametrize("keep", [True, False])
@pytest.mark.parametrize("alphas", [[-2.0, -1.0, -0.5, 0.5, 1.0], [-3.0, -0.3, 0.1, 2.5]])
@pytest.mark.parametrize("n_cand,high", [(40, 1024), (12, 1024), (12, 5)])
def test_relevant_ranks_equal_a_full_ranking(monkeypatch, few, keep, alphas, n_cand, high) -> None:
    monkeypatch.setattr(null, "HIGH_WEIGHT_DOCS", high)
    monkeypatch.setattr(null, "_FEW_PAIRS", few)
    # Without the matrix, cosines outside the candidates are recomputed and may differ from the
    # matrix's in the last bit: exact ties are then not reproducible, so that case has none.
    qn, dn, cos, norms, qm = case(seed=n_cand + high, ties=keep)
    pos, cc = candidates(cos, n_cand)
    ranks = null.RelevantRanks(qm, pos, cc, cos if keep else None, qn, dn)
    perms = null.permutations(len(norms), 6, seed=3)
    perms[0] = np.arange(len(norms))  # the real norms too
    got = ranks.ndcg_powers(norms, alphas, perms)  # all α in one pass
    for k, alpha in enumerate(alphas):
        wa = np.power(norms, alpha).astype(np.float32)
        one = ranks.ndcg(wa, ranks.sources(perms))  # one α at a time
        for b in range(perms.shape[0]):
            ref = brute_ndcg(cos, wa[perms[b]], qm)
            np.testing.assert_allclose(got[b, k], ref, atol=1e-12, err_msg=f"alpha={alpha} perm={b}")
            np.testing.assert_allclose(one[b], ref, atol=1e-12, err_msg=f"alpha={alpha} perm={b}")
    if high == 5:
        assert ranks.full_rows > 0  # the ranks counted over all documents were exercised


@pytest.mark.parametrize(("n", "k", "seed"), [(5183, 7, 0), (1, 3, 2), (0, 2, 1), (40, 99, 12345)])
def test_permutations_are_the_seeded_generators(n: int, k: int, seed: int) -> None:
    """Row j is what the documented generator gives: the null's p-values stay reproducible."""
    got = null.permutations(n, k, seed)
    want = np.array([np.random.default_rng([seed, j]).permutation(n) for j in range(k)]).reshape(k, n)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


def test_ties_are_really_there() -> None:
    """The case above does contain equal float32 scores among relevant documents' competitors."""
    _, _, cos, norms, qm = case(seed=1)
    pq, pd, _ = qm.pairs()
    scores = cos * np.power(norms, -1.0).astype(np.float32)[None]
    tied = sum(int(np.sum(scores[q] == scores[q, d])) - 1 for q, d in zip(pq, pd, strict=True))
    assert tied > 0


@pytest.mark.parametrize("few", [0, 100])
def test_controls_weights_equal_a_full_ranking(monkeypatch, few) -> None:
    """B = 1, weights as they are (the length and residual controls)."""
    monkeypatch.setattr(null, "_FEW_PAIRS", few)
    qn, dn, cos, norms, qm = case(seed=9)
    pos, cc = candidates(cos, 20)
    ranks = null.RelevantRanks(qm, pos, cc, cos, qn, dn)
    rng = np.random.default_rng(0)
    w = rng.lognormal(0, 1, len(norms)).astype(np.float32)
    np.testing.assert_allclose(ranks.ndcg(w)[0], brute_ndcg(cos, w, qm), atol=1e-12)
