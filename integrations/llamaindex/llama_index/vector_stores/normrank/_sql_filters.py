"""LlamaIndex ``MetadataFilters`` (and ``node_ids`` / ``doc_ids``) as the SQL backend's filter tree.

For a store kept in PostgreSQL (``NormRankVectorStore.from_postgres``): the tree
(:data:`normrank.backends.pgvector_records.Where`) says what :mod:`._filters` decides in Python,
operator by operator (a missing key matches only NE, NIN and IS_EMPTY; Python's ``==`` and
order otherwise). CONTAINS, ANY, ALL, TEXT_MATCH and list or NaN values give ``None``: that
query stays in Python, exact all the same. A filter across kinds (``GT 1`` on a string field)
never reaches SQL: the store raises ``FilterTypeError`` first, having looked at every node's
value in Python (:func:`._filters.check_kinds`), where SQL would compare JSON and match nothing.
"""

from __future__ import annotations

import math
from typing import Any

from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from normrank.errors import InvalidParameterError

_ORDER = {
    FilterOperator.GT: "gt",
    FilterOperator.GTE: "gte",
    FilterOperator.LT: "lt",
    FilterOperator.LTE: "lte",
}


def _scalar(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool, type(None))) and not (
        isinstance(v, float) and not math.isfinite(v)
    )


def _one(f: MetadataFilter) -> tuple | None:
    path, op, v = ("data", f.key), f.operator, f.value
    if not isinstance(f.key, str):
        return None
    if op == FilterOperator.IS_EMPTY:
        return ("empty", path)
    present = ("not", ("null", path))
    if op in (FilterOperator.IN, FilterOperator.NIN):
        if not isinstance(v, list) or not all(_scalar(x) for x in v):
            return None
        if op == FilterOperator.IN:
            return ("and", [present, ("cmp", path, "in", list(v))])
        return ("or", [("null", path), ("cmp", path, "nin", list(v))])
    if not _scalar(v):
        return None
    if op == FilterOperator.EQ:
        return ("and", [present, ("cmp", path, "eq", v)])
    if op == FilterOperator.NE:
        return ("or", [("null", path), ("cmp", path, "ne", v)])
    if op in _ORDER:
        return ("and", [present, ("cmp", path, _ORDER[op], v)])
    return None


def _tree(filters: MetadataFilters) -> tuple | None:
    parts = []
    for f in filters.filters:
        if isinstance(f, MetadataFilters):
            part = ("and", []) if not f.filters else _tree(f)  # an empty nested list passes
        elif isinstance(f, MetadataFilter):
            part = _one(f)
        else:
            raise InvalidParameterError(f"not a MetadataFilter: {f!r}")
        if part is None:
            return None
        parts.append(part)
    cond = filters.condition or FilterCondition.AND
    if cond == FilterCondition.AND:
        return ("and", parts)
    if cond == FilterCondition.OR:
        return ("or", parts)
    if cond == FilterCondition.NOT:
        return ("not", ("or", parts))
    raise InvalidParameterError(f"unsupported filter condition: {cond!r}")


def sql_where(
    filters: MetadataFilters | None, node_ids: list[str] | None, doc_ids: list[str] | None
) -> tuple | None:
    """The tree of a query's restrictions (all of them must hold), or ``None`` when one of them
    must run in Python."""
    parts: list[tuple] = []
    if filters is not None and filters.filters:
        tree = _tree(filters)
        if tree is None:
            return None
        parts.append(tree)
    if node_ids:
        if not all(isinstance(i, str) for i in node_ids):
            return None
        parts.append(("sid_in", list(node_ids)))
    if doc_ids:
        if not all(isinstance(i, str) for i in doc_ids):
            return None
        parts.append(("cmp", ("ref_doc_id",), "in", list(doc_ids)))
    return ("and", parts)
