"""``index.as_retriever(norm_alpha=...)``: route the store's query options to the store.

LlamaIndex's ``VectorIndexRetriever`` passes only ``vector_store_kwargs`` to the vector store
and drops every other keyword it does not know, so ``as_retriever(similarity_top_k=2,
norm_alpha=0)`` would search at the store's default alpha without a word. Importing this
package wraps ``VectorIndexRetriever.__init__`` once: for an index over a
:class:`NormRankVectorStore` (only), ``norm_alpha`` and ``mmr_threshold`` move into
``vector_store_kwargs``. Retrievers over any other store are built exactly as before.
"""

from __future__ import annotations

import functools
from typing import Any

from normrank.store.checks import UnknownArgumentError

__all__ = ["install"]

_ROUTED = ("norm_alpha", "mmr_threshold")


def _route(kwargs: dict[str, Any]) -> dict[str, Any]:
    moved = {k: kwargs.pop(k) for k in _ROUTED if k in kwargs}
    if not moved:
        return kwargs
    store_kwargs = dict(kwargs.get("vector_store_kwargs") or {})
    both = sorted(set(moved) & set(store_kwargs))
    if both:
        raise UnknownArgumentError(f"{both[0]} given both directly and in vector_store_kwargs: give it once")
    kwargs["vector_store_kwargs"] = {**store_kwargs, **moved}
    return kwargs


def install() -> None:
    """Wrap ``VectorIndexRetriever.__init__`` (idempotent)."""
    from llama_index.core.indices.vector_store.retrievers.retriever import VectorIndexRetriever

    original = VectorIndexRetriever.__init__
    if getattr(original, "_normrank_routes", False):
        return

    @functools.wraps(original)
    def __init__(self: Any, index: Any, *args: Any, **kwargs: Any) -> None:
        from llama_index.vector_stores.normrank.base import NormRankVectorStore

        if isinstance(getattr(index, "vector_store", None), NormRankVectorStore):
            kwargs = _route(dict(kwargs))
        original(self, index, *args, **kwargs)

    __init__._normrank_routes = True  # type: ignore[attr-defined]
    VectorIndexRetriever.__init__ = __init__  # type: ignore[method-assign]
