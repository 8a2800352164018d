"""LangChain metadata filters: the operators of ``langchain_community``'s FAISS store and of
``langchain_postgres``'s ``PGVector``, with one meaning on every store of this adapter.

A filter is a callable ``(metadata) -> bool`` or a dict:

- ``{"src": "a"}``: equality; ``{"src": ["a", "b"]}``: the value is any of the list;
- ``{"year": {"$gte": 2000, "$lt": 2010}}``: comparisons, all of them must hold: ``$eq``,
  ``$ne`` (FAISS spells it ``$neq``: the same operator), ``$gt $gte $lt $lte``, ``$in`` / ``$nin``
  with a list, ``$between`` with ``[low, high]`` (both included), ``$like`` / ``$ilike`` with a SQL
  ``LIKE`` pattern (``%`` any text, ``_`` one character, ``\\`` escapes; ``$ilike`` ignores case)
  on string values, ``$exists`` with ``True`` (the key is there, even holding ``None``) or ``False``;
- ``{"$and": [f, ...]}``, ``{"$or": [f, ...]}``, ``{"$not": f}`` (``{"$not": [f, ...]}``: none of
  them, as PGVector) combine filters; several keys in one dict must all hold.

Values compare as Python compares them (FAISS's semantics): a missing key is ``None``, so it
matches ``$ne`` / ``$nin`` and ``{"k": None}`` and no ordering; ``True == 1``; a list value is one
value (``{"tags": "x"}`` does not match ``["x", "y"]``). PGVector's SQL differs there (see the
Postgres migration notes in docs/langchain.md).

Where a store would match nothing silently or crash, this refuses, saying so: an unknown
operator, a logical operator mixed with field keys, a malformed operand (``$in`` without a list,
``$between`` without two bounds...) raise :class:`~normrank.errors.InvalidParameterError` when
the filter is read; an ordering (``$gt``... ``$between``, ``$like``) of a number or string against
a field where some document holds another kind (``"2001"`` against ``2000``) raises
:class:`FilterTypeError` (:func:`check_kinds`), never an empty result. A missing or ``None``
value does not match an ordering.

On a store kept in PostgreSQL (``NormRankVectorStore.from_postgres``) :func:`sql_filter` turns a
dict filter into the SQL backend's filter tree, with these very semantics (Python's ``==`` and
order: ``True == 1``, code-point order of strings); what the tree cannot say as Python would
(a callable, list or dict values, sets, NaN) stays in Python.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from normrank.errors import FilterTypeError, InvalidParameterError

__all__ = ["FilterTypeError", "MetadataFilter", "check_kinds", "metadata_predicate", "sql_filter"]

#: ``dict`` as above, or a callable taking the metadata dict and returning a bool.
MetadataFilter = Mapping[str, Any] | Callable[[dict[str, Any]], bool]


_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "$eq": operator.eq,
    "$ne": operator.ne,
    "$neq": operator.ne,  # FAISS's spelling of $ne
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
    "$in": lambda have, want: have in want,
    "$nin": lambda have, want: have not in want,
    "$between": lambda have, want: want[0] <= have <= want[1],
    "$like": lambda have, want: isinstance(have, str) and want.fullmatch(have) is not None,
    "$ilike": lambda have, want: isinstance(have, str) and want.fullmatch(have) is not None,
}
_LOGICAL = ("$and", "$or", "$not")
_ORDERING = ("$gt", "$gte", "$lt", "$lte", "$between", "$like", "$ilike")
_LISTS = (list, tuple, set, frozenset)


def _unknown(op: str) -> InvalidParameterError:
    ops = [*_COMPARE, "$exists", *_LOGICAL]
    return InvalidParameterError(f"filter contains unsupported operator {op!r}: use {', '.join(ops)}")


def _like(pattern: Any, op: str) -> re.Pattern[str]:
    """SQL ``LIKE``'s pattern as a regular expression (``\\`` escapes, as PostgreSQL's default)."""
    if not isinstance(pattern, str):
        raise InvalidParameterError(f"{op} takes a pattern string, got {pattern!r}")
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            if i + 1 == len(pattern):
                raise InvalidParameterError(f"{op} pattern {pattern!r} ends with the escape character \\")
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if c == "%" else "." if c == "_" else re.escape(c))
        i += 1
    return re.compile("".join(out), re.DOTALL | (re.IGNORECASE if op == "$ilike" else 0))


def _operand(op: str, want: Any) -> Any:
    """The operand checked (and compiled for ``$like``), as the test of ``op`` takes it."""
    if op in ("$in", "$nin") and not isinstance(want, _LISTS):
        raise InvalidParameterError(f"{op} takes a list of values, got {want!r}")
    if op == "$between" and not (isinstance(want, (list, tuple)) and len(want) == 2):
        raise InvalidParameterError(f"$between takes [low, high], got {want!r}")
    if op in ("$like", "$ilike"):
        return _like(want, op)
    return want


def _condition(field: str, cond: Any) -> Callable[[dict[str, Any]], bool]:
    if isinstance(cond, Mapping):
        tests, exists = [], None
        for op, want in cond.items():
            if op == "$exists":
                if not isinstance(want, bool):
                    raise InvalidParameterError(f"$exists takes True or False, got {want!r}")
                exists = want
                continue
            if op not in _COMPARE:
                raise _unknown(op)
            tests.append((_COMPARE[op], _operand(op, want)))

        def passes(meta: dict[str, Any]) -> bool:
            if exists is not None and (field in meta) is not exists:
                return False
            have = meta.get(field)  # a missing key compares as None, as in FAISS
            try:
                return all(test(have, want) for test, want in tests)
            except TypeError:  # None > 3: no match (other kinds raised in check_kinds first)
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
        if op == "$not" and not isinstance(arg, list):
            inner = _compile(arg)
            return lambda meta: not inner(meta)
        if not isinstance(arg, list):
            raise InvalidParameterError(f"{op} takes a list of filters, got {arg!r}")
        parts = [_compile(s) for s in arg]
        if op == "$and":
            return lambda meta: all(p(meta) for p in parts)
        if op == "$not":  # PGVector's list form: none of them
            return lambda meta: not any(p(meta) for p in parts)
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


# -- kinds: an ordering across kinds raises instead of matching nothing ------------------------


def _kind(v: Any) -> str | None:
    return _kind_of_type(type(v))


def _kind_of_type(t: type) -> str | None:
    """number (bools order as 0 and 1, as in Python), string, list, dict...; ``None`` for None."""
    if t is type(None):
        return None
    if issubclass(t, (bool, int, float)):
        return "number"
    if issubclass(t, str):
        return "string"
    if issubclass(t, (list, tuple)):
        return "list"
    return "dict" if issubclass(t, Mapping) else t.__name__


def _orderings(spec: Any, out: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """(field, operator, kind of its operand) of every number or string ordering in ``spec``."""
    for key, cond in spec.items():
        if key in _LOGICAL:
            for sub in cond if isinstance(cond, list) else [cond]:
                _orderings(sub, out)
        elif isinstance(cond, Mapping):
            for op, want in cond.items():
                if op not in _ORDERING:
                    continue
                for w in want if op == "$between" else [want]:
                    if (kind := _kind(w)) in ("number", "string"):
                        out.append((key, op, kind))
    return out


def check_kinds(filter: MetadataFilter | None, metadatas: Iterable[Mapping[str, Any]]) -> None:
    """Raise :class:`FilterTypeError` when ``filter`` orders a number or a string against a field
    where one of ``metadatas`` holds another kind (missing and ``None`` values excepted): every
    document is looked at, not only those a search reaches, so the answer does not depend on
    the query."""
    if filter is None or callable(filter):
        return
    wanted = _orderings(filter, [])
    if not wanted:
        return
    metadatas = list(metadatas)
    for f in {f for f, _, _ in wanted}:
        types = {type(meta.get(f)) for meta in metadatas}  # a set of types: one pass, no calls
        kinds = {k for t in types if (k := _kind_of_type(t)) is not None}
        for field, op, kind in wanted:
            other = next((k for k in sorted(kinds) if k != kind), None) if field == f else None
            if other is not None:
                example = next(m[f] for m in metadatas if _kind(m.get(f)) == other)
                raise FilterTypeError(
                    f"filter on {f!r}: {op} compares a {kind} with a {other} value (a document "
                    f"holds {example!r}); compare with a {other}, or store one kind in {f!r}"
                )


# -- the same filters as SQL -------------------------------------------------------------------

_SQL_OPS = {"$eq": "eq", "$ne": "ne", "$neq": "ne", "$gt": "gt", "$gte": "gte", "$lt": "lt", "$lte": "lte"}
_SCALARS = (str, int, float, bool, type(None))


def _scalar(v: Any) -> bool:
    return isinstance(v, _SCALARS) and not (isinstance(v, float) and not math.isfinite(v))


def _sql_op(path: tuple[str, str], op: str, want: Any) -> tuple | None:
    if op in ("$in", "$nin"):
        if not isinstance(want, (list, tuple)) or not all(_scalar(w) for w in want):
            return None  # sets hash (TypeError on a list value), lists compare as lists
        return ("cmp", path, op[1:], list(want))
    if op == "$between":
        lo, hi = want
        return (
            ("and", [("cmp", path, "gte", lo), ("cmp", path, "lte", hi)])
            if _scalar(lo) and _scalar(hi)
            else None
        )
    if op in ("$like", "$ilike"):
        return ("like", path, want, op == "$ilike")
    if op == "$exists":
        return ("exists", path) if want else ("not", ("exists", path))
    return ("cmp", path, _SQL_OPS[op], want) if _scalar(want) else None


def _sql_condition(field: Any, cond: Any) -> tuple | None:
    if not isinstance(field, str):
        return None
    path = ("metadata", field)
    if isinstance(cond, Mapping):
        parts = [_sql_op(path, op, want) for op, want in cond.items()]
        return None if any(p is None for p in parts) else ("and", parts)
    if isinstance(cond, list):
        return ("cmp", path, "in", list(cond)) if all(_scalar(w) for w in cond) else None
    return ("cmp", path, "eq", cond) if _scalar(cond) else None


def _sql(spec: Mapping[str, Any]) -> tuple | None:
    logical = [k for k in spec if k in _LOGICAL]
    if logical:
        op, arg = logical[0], spec[logical[0]]
        if op == "$not" and not isinstance(arg, list):
            inner = _sql(arg)
            return None if inner is None else ("not", inner)
        parts = [_sql(s) for s in arg]
        if any(p is None for p in parts):
            return None
        return ("not", ("or", parts)) if op == "$not" else (op[1:], parts)
    parts = [_sql_condition(field, cond) for field, cond in spec.items()]
    return None if any(p is None for p in parts) else ("and", parts)


def sql_filter(filter: MetadataFilter | None) -> tuple | None:
    """The dict filter as a :data:`normrank.backends.pgvector_records.Where` tree over the
    record's ``metadata``, or ``None`` when it must run in Python (a callable, or values SQL
    would compare otherwise). Checks the filter first (:func:`metadata_predicate`'s errors)."""
    if metadata_predicate(filter) is None or callable(filter):
        return None
    return _sql(filter)
