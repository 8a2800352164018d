"""normrank.validation: every input check, against hand-written expectations."""

from __future__ import annotations

import numpy as np
import pytest

from normrank.errors import DuplicateIdError, InvalidInputError, InvalidParameterError, NormrankError
from normrank.validation import (
    MAX_RESULT_ENTRIES,
    OPTION_BOUNDS,
    as_alpha,
    as_id_list,
    as_ids,
    as_k,
    as_k_factor,
    as_one_id,
    as_option,
    as_positive_int,
    as_weights,
    split_norms,
)

F32 = np.finfo(np.float32)


@pytest.mark.parametrize(
    "ids", [[3], [3.0], np.array([3], np.int32), np.array([3], np.uint64), 3, np.int64(3)]
)
def test_one_id_parser_accepts_integers_and_whole_floats(ids):
    assert as_id_list(ids).tolist() == [3]
    assert as_one_id(ids) == 3


@pytest.mark.parametrize(
    "ids",
    [[3.7], 3.9, "3", ["a"], [np.nan], [np.inf], None, [True], True, [[1], [2, 3]], [[1, 2]], [2**64],
     np.array([2**63], np.uint64), [-1], [1e30], [object()]],
)  # fmt: skip
def test_one_id_parser_refuses_what_it_would_have_to_truncate(ids):
    """norm_of([3.7]) once gave id 3's norm: nothing is truncated or coerced, all is refused typed."""
    with pytest.raises(InvalidInputError):
        as_id_list(ids)


def test_as_ids_counts_and_duplicates():
    assert as_ids([5, 1], 2).tolist() == [5, 1]
    with pytest.raises(InvalidInputError, match="2 ids for 3"):
        as_ids([5, 1], 3)
    with pytest.raises(DuplicateIdError):
        as_ids([1, 1])
    with pytest.raises(InvalidInputError, match="one id"):
        as_one_id([1, 2])


@pytest.mark.parametrize(
    ("w", "ok"),
    [
        ([1.0, 2.0], True),
        ([float(F32.max), float(F32.tiny)], True),  # the ends of the float32 normal range
        ([1e39, 1.0], False),  # fits float64, overflows float32: would be stored as inf
        ([1e-50, 1.0], False),  # would be stored as 0 (every score 0)
        ([1e-40, 1.0], False),  # subnormal in float32
        ([0.0, 1.0], False),
        ([-1.0, 1.0], False),
        ([np.nan, 1.0], False),
        ([np.inf, 1.0], False),
        ([[1.0], [2.0, 3.0]], False),  # ragged
        (["a", "b"], False),
        ([1.0], False),  # wrong length
    ],
)
def test_as_weights_accepts_exactly_what_float32_stores(w, ok):
    if ok:
        out = as_weights(w, 2)
        assert out.dtype == np.float32 and np.isfinite(out).all() and (out > 0).all()
        np.testing.assert_array_equal(out, np.asarray(w, np.float32))
    else:
        with pytest.raises(InvalidInputError):
            as_weights(w, 2)


def test_split_norms_refuses_norms_beyond_float32():
    x = np.array([[3e38, 3e38, 0, 0]], np.float32)  # each entry fits; the norm (4.2e38) does not
    with pytest.raises(InvalidInputError, match="float32"):
        split_norms(x)
    unit, norms = split_norms(np.array([[3.0, 4.0]], np.float32))
    np.testing.assert_allclose(unit, [[0.6, 0.8]], rtol=1e-6)
    assert norms.tolist() == [5.0]


@pytest.mark.parametrize("bad", ["x", np.nan, [1], 0, -1, 1.5, True, None, 2**21])
def test_k_factor(bad):
    assert as_k_factor(3) == 3
    with pytest.raises(InvalidParameterError):
        as_k_factor(bad)


def test_k_bound_is_on_the_result_size():
    assert as_k(MAX_RESULT_ENTRIES, 1) == MAX_RESULT_ENTRIES
    with pytest.raises(InvalidParameterError, match="smaller batches"):
        as_k(MAX_RESULT_ENTRIES + 1, 1)
    with pytest.raises(InvalidParameterError):
        as_k(MAX_RESULT_ENTRIES // 2 + 1, 2)


@pytest.mark.parametrize("bad", [17, -16.5, np.nan, np.inf, 10**400, "x", [1.0, 2.0]])
def test_alpha_range(bad):
    assert as_alpha(-16, 1).tolist() == [-16.0]
    with pytest.raises(NormrankError):
        as_alpha(bad, 1)


# -- the one option-bounds table and the one saturation rule (issue 25, items 8 and 11) ---------


@pytest.mark.parametrize("name", sorted(OPTION_BOUNDS))
def test_every_option_is_bounded_on_both_sides(name):
    lo, hi = OPTION_BOUNDS[name]
    assert as_option(lo, name) == lo and as_option(hi, name) == hi
    assert as_option(np.int64(hi), name) == hi
    for bad in (lo - 1, hi + 1, 2**64, -(2**64), True, 1.5, "3", None, np.nan):
        with pytest.raises(InvalidParameterError, match=name):
            as_option(bad, name)
    assert as_option(None, name, allow_none=True) is None


def test_the_beam_has_one_bound_everywhere():
    """FAISS's efSearch, Qdrant's hnsw_ef and pgvector's ef_search: one bound, 65,536."""
    from normrank.search.faiss_info import MAX_EF_SEARCH

    assert OPTION_BOUNDS["ef_search"] == OPTION_BOUNDS["hnsw_ef"] == (1, MAX_EF_SEARCH) == (1, 65_536)
    with pytest.raises(InvalidParameterError, match=r"hnsw_ef must be an integer in \[1, 65536\]"):
        as_positive_int(2**64, "hnsw_ef")
    assert as_positive_int(10**9, "unlisted") == 10**9  # a name outside the table: >= 1 only


@pytest.mark.parametrize("alpha", [-16.0, -3.0, -0.5, 0.0, 0.5, 2.0, 4.0, 16.0])
def test_backend_powers_follow_the_cores_saturation(alpha):
    """norm_band.powered is scoring.norm_weight in float64: the cap, underflow to 0, no inf/NaN."""
    from normrank.scoring import WEIGHT_CAP, norm_weight
    from normrank.search.norm_band import powered, saturates

    base = np.array([F32.tiny, 1e-30, 1e-20, 1e-3, 0.5, 1.0, 7.0, 1e10, 1e20, 1e30, F32.max], np.float32)
    got = powered(base, alpha)
    assert np.isfinite(got).all() and (got >= 0).all() and (got <= WEIGHT_CAP).all()
    np.testing.assert_allclose(got.astype(np.float32), norm_weight(base, alpha), rtol=1e-6, atol=1e-44)
    with np.errstate(over="ignore"):
        beyond = (base.astype(np.float64) ** alpha > WEIGHT_CAP).any()
    assert saturates(float(base.min()), float(base.max()), alpha) == beyond
    assert not saturates(0.5, 2.0, alpha)  # ordinary norms: the plain power, one operation
