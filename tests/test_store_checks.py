"""normrank.store.checks: what the adapters refuse before anything changes."""

from __future__ import annotations

import datetime

import pytest

from normrank.errors import InvalidParameterError
from normrank.store.checks import (
    MAX_METADATA_DEPTH,
    UnknownArgumentError,
    UnstorableMetadataError,
    check_alpha,
    check_json_value,
    reject_unknown,
    reranker_arguments,
)
from normrank.store.keyed_store import KeyedStore


def test_alpha_is_checked_by_the_index_rule():
    for bad in (17, -16.5, float("nan"), "0.5", True, None):
        with pytest.raises(InvalidParameterError):
            KeyedStore(alpha=bad)
    assert KeyedStore(alpha=-16).alpha == -16.0


@pytest.mark.parametrize(
    "value",
    [datetime.date(2024, 5, 1), (1, 2), {1: "a"}, {"s": {1, 2}}, float("inf"), b"x", [[[object()]]]],
)
def test_json_check_refuses_what_json_would_change(value):
    with pytest.raises(UnstorableMetadataError):
        check_json_value({"v": value})


def test_json_check_limits_depth_without_recursion():
    deep: dict = {}
    cur = deep
    for _ in range(5000):  # far beyond Python's recursion limit
        cur["x"] = {}
        cur = cur["x"]
    with pytest.raises(UnstorableMetadataError, match="nested"):
        check_json_value(deep)
    ok: dict = {}
    cur = ok
    for _ in range(MAX_METADATA_DEPTH - 1):
        cur["x"] = {}
        cur = cur["x"]
    check_json_value(ok)


def test_unknown_keyword_names_the_right_one():
    with pytest.raises(UnknownArgumentError, match="'norm_alpha'") as e:
        reject_unknown({"nrom_alpha": 1}, ("norm_alpha", "factory"), "f()")
    assert isinstance(e.value, TypeError)
    with pytest.raises(TypeError, match="use this"):
        reject_unknown({"alpha": 1}, ("norm_alpha",), "f()", {"alpha": "use this"})


def test_check_alpha_names_the_parameter():
    with pytest.raises(InvalidParameterError, match="norm_alpha"):
        check_alpha(20, "norm_alpha")


@pytest.mark.parametrize("top_n", [0, -1, 2.5, True, "3"])
def test_reranker_arguments_refuse_bad_top_n(top_n):
    with pytest.raises(InvalidParameterError):
        reranker_arguments({"alpha": 0.0, "top_n": top_n}, ("alpha", "top_n"), "alpha", "R()")
    assert reranker_arguments({"alpha": -1}, ("alpha", "top_n"), "alpha", "R()") == {"alpha": -1.0}
