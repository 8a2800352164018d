"""LangChain metadata filters with the semantics of ``langchain_community``'s FAISS store.

A filter is a callable ``(metadata) -> bool`` or a dict:

- ``{"src": "a"}``: equality; ``{"src": ["a", "b"]}``: the value is any of the list;
- ``{"year": {"$gte": 2000, "$lt": 2010}}``: MongoDB-style comparisons, all of them must hold
  (``$eq $neq $gt $gte $lt $lte``, and ``$in`` / ``$nin`` with a list);
- ``{"$and": [f, ...]}``, ``{"$or": [f, ...]}``, ``{"$not": f}`` combine filters;
- several keys in one dict must all hold.

Where FAISS would match nothing silently or crash, this refuses or decides, and says so: an
unknown operator, a logical operator mixed with field keys (FAISS ignores the field keys), or
``$in`` with a non-list raise :class:`~normrank.errors.InvalidParameterError`; a comparison
with a missing or incomparable value (``None > 3``) does not match, where FAISS raises.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

from normrank.errors import InvalidParameterError

__all__ = ["MetadataFilter", "metadata_predicate"]

#: ``dict`` as above, or a callable taking the metadata dict and returning a bool.
MetadataFilter = Mapping[str, Any] | Callable[[dict[str, Any]], bool]

_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "$eq": operator.eq,
    "$neq": operator.ne,
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
    "$in": lambda have, want: have in want,
    "$nin": lambda have, want: have not in want,
}
_LOGICAL = ("$and", "$or", "$not")


def _unknown(op: str) -> InvalidParameterError:
    return InvalidParameterError(
        f"filter contains unsupported operator {op!r}: use {', '.join([*_COMPARE, *_LOGICAL])}"
    )


def _condition(field: str, cond: Any) -> Callable[[dict[str, Any]], bool]:
    if isinstance(cond, Mapping):
        tests = []
        for op, want in cond.items():
            if op not in _COMPARE:
                raise _unknown(op)
            if op in ("$in", "$nin") and not isinstance(want, (list, tuple, set, frozenset)):
                raise InvalidParameterError(f"{op} takes a list of values, got {want!r}")
            tests.append((op, _COMPARE[op], want))

        def passes(meta: dict[str, Any]) -> bool:
            have = meta.get(field)  # a missing key compares as None, as in FAISS
            try:
                return all(test(have, want) for _, test, want in tests)
            except TypeError:  # None > 3, "a" < 1: no match (FAISS raises here)
                return False

        return passes
    if isinstance(cond, list):
        return lambda meta: meta.get(field) in cond
    return lambda meta: meta.get(field) == cond


def _compile(spec: Any) -> Callable[[dict[str, Any]], bool]:
    if not isinstance(spec, Mapping):
        raise InvalidParameterError(f"a filter must be a dict, got {spec!r}")
    logical = [k for k in spec if k in _LOGICAL]
    if logical:
        if len(spec) != 1:
            raise InvalidParameterError(
                f"{logical[0]} must be the only key of its dict (got {sorted(spec)}): "
                f"put the other conditions inside it, e.g. {{'$and': [{{...}}, {{...}}]}}"
            )
        op, arg = logical[0], spec[logical[0]]
        if op == "$not":
            inner = _compile(arg)
            return lambda meta: not inner(meta)
        if not isinstance(arg, list):
            raise InvalidParameterError(f"{op} takes a list of filters, got {arg!r}")
        parts = [_compile(s) for s in arg]
        if op == "$and":
            return lambda meta: all(p(meta) for p in parts)
        return lambda meta: any(p(meta) for p in parts)
    for key in spec:
        if isinstance(key, str) and key.startswith("$"):
            raise _unknown(key)
    parts = [_condition(field, cond) for field, cond in spec.items()]
    return lambda meta: all(p(meta) for p in parts)


def metadata_predicate(filter: MetadataFilter | None) -> Callable[[dict[str, Any]], bool] | None:
    """The filter as a predicate on a metadata dict (``None`` for no filter); checked at once."""
    if filter is None:
        return None
    if callable(filter):
        return filter
    if isinstance(filter, Mapping):
        return _compile(filter)
    raise InvalidParameterError(
        f"filter must be a dict of metadata conditions or a callable(metadata) -> bool, got {type(filter)}"
    )
