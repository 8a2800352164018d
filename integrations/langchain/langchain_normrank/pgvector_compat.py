"""What ``langchain_postgres.PGVector`` users pass, read for ``NormRankVectorStore.from_postgres``:
its connection URL, its cosine ``distance_strategy`` and the keywords of its class constructors
(``from_texts(..., connection=, collection_name=)``, ``from_existing_index``). Each is accepted
where it means what it means in PGVector, and refused, saying why, where it does not."""

from __future__ import annotations

from typing import Any

from normrank.errors import InvalidParameterError
from normrank.store.checks import reject_unknown

__all__ = ["DEFAULT_COLLECTION", "check_distance_strategy", "libpq_url", "pgvector_options"]

#: PGVector's collection when none is named (``langchain_postgres``'s default).
DEFAULT_COLLECTION = "langchain"
_TAKEN = ("connection", "collection_name", "distance_strategy", "use_jsonb", "pre_delete_collection")
_TAKEN += ("embedding_length",)


def libpq_url(connection: Any) -> Any:
    """PGVector's SQLAlchemy URL ``postgresql+psycopg://...`` as psycopg's ``postgresql://...``."""
    if isinstance(connection, str) and connection.startswith("postgresql+psycopg://"):
        return "postgresql://" + connection.split("://", 1)[1]
    return connection


def check_distance_strategy(strategy: Any) -> None:
    """PGVector's ``distance_strategy``: cosine (its default) is this store's ranking at alpha = 0."""
    if strategy is not None and str(getattr(strategy, "value", strategy)).lower() != "cosine":
        raise InvalidParameterError(
            f"distance_strategy={strategy!r}: this store ranks by cos(q, d)·‖d‖^α (PGVector's "
            "cosine at alpha=0); for inner product use alpha=1.0, for Euclidean distance there is no equivalent"
        )


def pgvector_options(kwargs: dict[str, Any], where: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    """``from_postgres``'s arguments from PGVector's constructor keywords (popped from ``kwargs``;
    anything else left there must be one of ``allowed``)."""
    taken = {k: kwargs.pop(k) for k in _TAKEN if k in kwargs}
    reject_unknown(kwargs, (*allowed, *_TAKEN), where)
    check_distance_strategy(taken.get("distance_strategy"))
    if taken.get("use_jsonb", True) is not True:
        raise InvalidParameterError("use_jsonb=False: metadata is kept as JSON here, as use_jsonb=True does")
    if taken.get("pre_delete_collection", False):
        raise InvalidParameterError(
            "pre_delete_collection=True is not offered: open the store and call store.delete() "
            "(no ids: every document) before adding"
        )
    options: dict[str, Any] = {
        "connection": libpq_url(taken["connection"]),
        "table": taken.get("collection_name", DEFAULT_COLLECTION),
    }
    if taken.get("embedding_length") is not None:
        options["dim"] = taken["embedding_length"]
    return options
