"""Evaluate LlamaIndex ``MetadataFilters`` (nested, AND / OR / NOT) against one metadata dict.

Operator semantics follow llama-index-core's ``SimpleVectorStore``; a missing key matches only
NE, NIN and IS_EMPTY. Nested ``MetadataFilters`` are supported.

Where ``SimpleVectorStore`` raises ``TypeError`` (``GT 1`` on a field holding strings, CONTAINS
on a number, TEXT_MATCH on a list) and PGVectorStore's SQL a ``DataError``, this raises
:class:`FilterTypeError` naming the field and both kinds, never an empty result: :func:`check_kinds`
looks at every node the store holds before a filtered search (in memory and on PostgreSQL alike),
so the answer does not depend on which nodes the search reaches.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from normrank.errors import FilterTypeError, InvalidParameterError

__all__ = ["FilterTypeError", "check_kinds", "matches"]


def _kind(v: Any) -> str:
    if isinstance(v, (bool, int, float)):
        return "number"  # bools order as 0 and 1, as in Python
    if isinstance(v, str):
        return "string"
    if isinstance(v, (list, tuple)):
        return "list"
    return "dict" if isinstance(v, Mapping) else type(v).__name__


def _kind_error(f: MetadataFilter, have: Any) -> FilterTypeError:
    want, held = _kind(f.value), _kind(have)
    return FilterTypeError(
        f"filter on {f.key!r}: {f.operator.name} compares a {want} with a {held} value (a node holds "
        f"{have!r}); compare with a {held}, or store one kind in {f.key!r}"
    )


def _ordering_across_kinds(op: FilterOperator, value: Any, have: Any) -> bool:
    # Python orders bools with numbers and lists elementwise; a database compares jsonb across
    # kinds without an error: both would hide the mismatch that SimpleVectorStore raises on.
    orders = (FilterOperator.GT, FilterOperator.GTE, FilterOperator.LT, FilterOperator.LTE)
    return op in orders and _kind(value) != _kind(have)


def _leaves(filters: MetadataFilters) -> Iterable[MetadataFilter]:
    for f in filters.filters:
        if isinstance(f, MetadataFilters):
            yield from _leaves(f)
        elif isinstance(f, MetadataFilter):
            yield f


def check_kinds(filters: MetadataFilters | None, metadatas: Iterable[Mapping[str, Any]]) -> None:
    """Raise :class:`FilterTypeError` when a filter of ``filters`` cannot compare its value with
    the value one of ``metadatas`` holds for its key (missing and ``None`` values excepted)."""
    if filters is None or not filters.filters:
        return
    leaves = [f for f in _leaves(filters) if f.operator not in (FilterOperator.IS_EMPTY, FilterOperator.EQ)]
    leaves = [f for f in leaves if f.operator != FilterOperator.NE and isinstance(f.key, str)]
    if not leaves:
        return
    keys = {f.key for f in leaves}
    seen: dict[str, dict[tuple, Any]] = {k: {} for k in keys}  # one example per type of value
    for meta in metadatas:
        for k in keys:
            have = meta.get(k)
            if have is not None:
                inner = sorted({type(x).__name__ for x in have}) if isinstance(have, list) else []
                seen[k].setdefault((type(have).__name__, *inner), have)
    for f in leaves:
        for have in seen[f.key].values():
            _match(f.operator, f.value, have, f)


def _match(op: FilterOperator, value: Any, have: Any, f: MetadataFilter | None = None) -> bool:
    if op == FilterOperator.IS_EMPTY:
        return have is None or have == "" or have == []
    if have is None:
        return op in (FilterOperator.NE, FilterOperator.NIN)
    if f is not None and _ordering_across_kinds(op, value, have):
        raise _kind_error(f, have)
    try:
        if op == FilterOperator.EQ:
            return have == value
        if op == FilterOperator.NE:
            return have != value
        if op == FilterOperator.GT:
            return have > value
        if op == FilterOperator.GTE:
            return have >= value
        if op == FilterOperator.LT:
            return have < value
        if op == FilterOperator.LTE:
            return have <= value
        if op == FilterOperator.IN:
            return have in value
        if op == FilterOperator.NIN:
            return have not in value
        if op == FilterOperator.CONTAINS:
            return value in have
        if op == FilterOperator.ANY:
            return any(v in have for v in value)
        if op == FilterOperator.ALL:
            return all(v in have for v in value)
        if op in (FilterOperator.TEXT_MATCH, FilterOperator.TEXT_MATCH_INSENSITIVE):
            if not (isinstance(have, str) and isinstance(value, str)):
                raise TypeError("TEXT_MATCH compares strings")  # as SimpleVectorStore
            if op == FilterOperator.TEXT_MATCH:
                return value in have
            return value.lower() in have.lower()
    except TypeError as e:  # e.g. "abc" > 3, CONTAINS on a number: SimpleVectorStore raises too
        if f is None:
            raise
        raise _kind_error(f, have) from e
    raise InvalidParameterError(f"unsupported filter operator: {op!r}")


def matches(filters: MetadataFilters | None, metadata: Mapping[str, Any]) -> bool:
    """Whether ``metadata`` passes ``filters`` (``None`` or an empty filter list passes)."""
    if filters is None or not filters.filters:
        return True
    results = []
    for f in filters.filters:
        if isinstance(f, MetadataFilters):
            results.append(matches(f, metadata))
        elif isinstance(f, MetadataFilter):
            results.append(_match(f.operator, f.value, metadata.get(f.key), f))
        else:
            raise InvalidParameterError(f"not a MetadataFilter: {f!r}")
    cond = filters.condition or FilterCondition.AND
    if cond == FilterCondition.AND:
        return all(results)
    if cond == FilterCondition.OR:
        return any(results)
    if cond == FilterCondition.NOT:
        return not any(results)
    raise InvalidParameterError(f"unsupported filter condition: {cond!r}")
