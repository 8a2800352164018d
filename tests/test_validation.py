"""normrank.validation: every input check, against hand-written expectations."""

from __future__ import annotations

import numpy as np
import pytest

from normrank.errors import DuplicateIdError, InvalidInputError, InvalidParameterError, NormrankError
from normrank.validation import (
    MAX_RESULT_ENTRIES,
    as_alpha,
    as_id_list,
    as_ids,
    as_k,
    as_k_factor,
    as_one_id,
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
