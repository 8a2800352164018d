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

On a store kept in PostgreSQL (``NormRankVectorStore.from_postgres``) :func:`sql_filter` turns a
dict filter into the SQL backend's filter tree, with these very semantics (Python's ``==`` and
order: ``True == 1``, code-point order of strings, a comparison across kinds false); what the tree
cannot say as Python would (a callable, list or dict values, sets, NaN) stays in Python.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

from normrank.errors import InvalidParameterError

__all__ = ["MetadataFilter", "metadata_predicate", "sql_filter"]

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


_SQL_OPS = {"$eq": "eq", "$neq": "ne", "$gt": "gt", "$gte": "gte", "$lt": "lt", "$lte": "lte"}
_SCALARS = (str, int, float, bool, type(None))


def _scalar(v: Any) -> bool:
    return isinstance(v, _SCALARS) and not (isinstance(v, float) and not math.isfinite(v))


def _sql_condition(field: Any, cond: Any) -> tuple | None:
    if not isinstance(field, str):
        return None
    path = ("metadata", field)
    if isinstance(cond, Mapping):
        parts = []
        for op, want in cond.items():
            if op in ("$in", "$nin"):
                if not isinstance(want, (list, tuple)) or not all(_scalar(w) for w in want):
                    return None  # sets hash (TypeError on a list value), lists compare as lists
                parts.append(("cmp", path, op[1:], list(want)))
            elif _scalar(want):
                parts.append(("cmp", path, _SQL_OPS[op], want))
            else:
                return None
        return ("and", parts)
    if isinstance(cond, list):
        return ("cmp", path, "in", list(cond)) if all(_scalar(w) for w in cond) else None
    return ("cmp", path, "eq", cond) if _scalar(cond) else None


def _sql(spec: Mapping[str, Any]) -> tuple | None:
    logical = [k for k in spec if k in _LOGICAL]
    if logical:
        op, arg = logical[0], spec[logical[0]]
        if op == "$not":
            inner = _sql(arg)
            return None if inner is None else ("not", inner)
        parts = [_sql(s) for s in arg]
        return None if any(p is None for p in parts) else (op[1:], parts)
    parts = [_sql_condition(field, cond) for field, cond in spec.items()]
    return None if any(p is None for p in parts) else ("and", parts)


def sql_filter(filter: MetadataFilter | None) -> tuple | None:
    """The dict filter as a :data:`normrank.backends.pgvector_records.Where` tree over the
    record's ``metadata``, or ``None`` when it must run in Python (a callable, or values SQL
    would compare otherwise). Checks the filter first (:func:`metadata_predicate`'s errors)."""
    if metadata_predicate(filter) is None or callable(filter):
        return None
    return _sql(filter)
