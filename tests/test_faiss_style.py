"""FAISS code as its users write it, run against NormIndex: ``index.nprobe = n`` and
``index.efSearch = n`` must change the search (they used to set a plain attribute that did
nothing, while reading it back showed the value)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_same_topk
from conftest import brute_force as reference

from normrank import NormIndex
from normrank.errors import InvalidParameterError


def brute_force(docs: np.ndarray, queries: np.ndarray, alpha: float, k: int) -> np.ndarray:
    norms = np.linalg.norm(docs, axis=1)
    cos = (queries / np.linalg.norm(queries, axis=1, keepdims=True)) @ (docs / norms[:, None]).T
    return np.argsort(-(cos * norms**alpha), axis=1, kind="stable")[:, :k]


def test_ivf_nprobe_assignment_as_in_faiss():
    rng = np.random.default_rng(0)
    docs = rng.normal(size=(2000, 16)).astype("float32")
    queries = rng.normal(size=(20, 16)).astype("float32")
    index = NormIndex(16, alpha=-0.5, factory="IVF32,Flat")
    index.train(docs)
    index.add(docs)
    assert index.nprobe == 1  # FAISS's default
    # (a depth of 20 within the ~62 documents of the probed list: a depth past them would make
    # the search read rows until exact over the whole collection, tests/test_short_answers.py)
    _, narrow = index.search(queries, 10, k_factor=2)
    exact = brute_force(docs, queries, -0.5, 10)
    assert (narrow != exact).any()  # nprobe 1 misses some: the assignment below must matter
    index.nprobe = 32  # every list: exact
    assert index.nprobe == 32 and index.search_params["nprobe"] == 32
    scores, wide = index.search(queries, 10)
    ref_scores, ref_ids = reference(docs, queries, -0.5)
    assert_same_topk(ref_scores, ref_ids, scores, wide, 10)  # exact up to float32 rounding and ties
    with pytest.raises(InvalidParameterError):
        index.nprobe = 33  # more lists than exist; nothing changes
    assert index.nprobe == 32


def test_hnsw_efsearch_assignment_and_flat_refusal():
    docs = np.random.default_rng(1).normal(size=(300, 8)).astype("float32")
    index = NormIndex(8, factory="HNSW16")
    index.add(docs)
    index.efSearch = 128
    assert index.efSearch == 128 and index.search_params["efSearch"] == 128
    flat = NormIndex(8)
    assert not hasattr(flat, "nprobe")
    with pytest.raises(InvalidParameterError, match="IVF"):
        flat.nprobe = 4
    assert "nprobe" not in vars(flat)


def test_a_misspelt_factory_string_says_what_faiss_said_without_its_source_location():
    with pytest.raises(InvalidParameterError) as caught:
        NormIndex(8, factory="Flatt")
    message = str(caught.value)
    assert "could not parse index string Flatt" in message
    assert ".cpp" not in message and "std::" not in message


def test_index_d_and_ntotal_read_as_in_faiss():
    import faiss

    docs = np.random.default_rng(2).normal(size=(50, 12)).astype("float32")
    ours, theirs = NormIndex(12), faiss.IndexFlatIP(12)
    for index in (ours, theirs):
        index.add(docs)
    assert (ours.d, ours.ntotal) == (theirs.d, theirs.ntotal) == (12, 50)
