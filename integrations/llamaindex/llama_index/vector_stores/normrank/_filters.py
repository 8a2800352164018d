"""Evaluate LlamaIndex ``MetadataFilters`` (nested, AND / OR / NOT) against one metadata dict.

Operator semantics follow llama-index-core's ``SimpleVectorStore``; a missing key matches only
NE, NIN and IS_EMPTY. Nested ``MetadataFilters`` are supported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from normrank.errors import InvalidParameterError


def _match(op: FilterOperator, value: Any, have: Any) -> bool:
    if op == FilterOperator.IS_EMPTY:
        return have is None or have == "" or have == []
    if have is None:
        return op in (FilterOperator.NE, FilterOperator.NIN)
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
        if op == FilterOperator.TEXT_MATCH:
            return isinstance(have, str) and isinstance(value, str) and value in have
        if op == FilterOperator.TEXT_MATCH_INSENSITIVE:
            return isinstance(have, str) and isinstance(value, str) and value.lower() in have.lower()
    except TypeError:
        return False  # e.g. "abc" > 3: the document does not match, as in a database
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
            results.append(_match(f.operator, f.value, metadata.get(f.key)))
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
