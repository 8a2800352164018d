"""normrank.search.mmr against LangChain's own cosine MMR (its relevance is the cosine to the query,
ours whatever the caller ranks by: the cosine here, so the picks must agree) and closed forms."""

from __future__ import annotations

import numpy as np
import pytest

from normrank.search.mmr import maximal_marginal_relevance


@pytest.fixture(scope="module")
def vecs():
    rng = np.random.default_rng(3)
    return rng.normal(size=(60, 16)) * np.exp(rng.normal(0, 0.5, size=(60, 1))), rng.normal(size=16)


@pytest.mark.parametrize("lam", [0.0, 0.3, 0.5, 0.9])
def test_equals_langchain_cosine_mmr(vecs, lam):
    utils = pytest.importorskip("langchain_core.vectorstores.utils")
    x, q = vecs
    cos = (x @ q) / (np.linalg.norm(x, axis=1) * np.linalg.norm(q))
    want = utils.maximal_marginal_relevance(q, x.tolist(), lambda_mult=lam, k=8)
    assert maximal_marginal_relevance(cos, x, lam, 8) == want


def test_lambda_one_is_the_relevance_order_and_norms_do_not_matter(vecs):
    x, _ = vecs
    rel = np.random.default_rng(4).normal(size=len(x))
    assert maximal_marginal_relevance(rel, x, 1.0, 10) == np.argsort(-rel, kind="stable")[:10].tolist()
    scaled = x * np.random.default_rng(5).uniform(0.1, 10, size=(len(x), 1))
    assert maximal_marginal_relevance(rel, scaled, 0.4, 10) == maximal_marginal_relevance(rel, x, 0.4, 10)


def test_edges():
    assert maximal_marginal_relevance(np.zeros(0), np.zeros((0, 3)), 0.5, 4) == []
    assert sorted(maximal_marginal_relevance(np.array([0.1, 0.9]), np.eye(2), 0.5, 10)) == [0, 1]
