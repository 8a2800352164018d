"""``NormRankRetriever``: LlamaIndex's ``VectorIndexRetriever`` that takes ``norm_alpha`` and
``mmr_threshold`` and refuses every keyword it would drop.

LlamaIndex's ``index.as_retriever(**kwargs)`` builds a ``VectorIndexRetriever``, which passes only
``vector_store_kwargs`` to the store and drops every other keyword it does not know, for every
store: ``as_retriever(norm_alpha=0)`` or ``as_retriever(nrom_alpha=0)`` would search at the
store's default alpha without a word. Nothing here changes LlamaIndex's classes (importing a
vector store must not change retrieval over every other store in the process); instead:

- ``index.as_retriever(vector_store_kwargs={"norm_alpha": 0})`` is LlamaIndex's own route to the
  store, and the store refuses a misspelt key there (``nrom_alpha`` -> "did you mean");
- ``NormRankRetriever(index, similarity_top_k=5, norm_alpha=0)`` takes ``norm_alpha`` and ``mmr_threshold`` directly and
  raises :class:`~normrank.store.checks.UnknownArgumentError` for any keyword the plain retriever
  would drop. ``RetrieverQueryEngine.from_args(retriever, llm=...)`` makes a query engine of it.
"""

from __future__ import annotations

import inspect
from typing import Any

from llama_index.core.indices.vector_store.retrievers.retriever import VectorIndexRetriever

from normrank.store.checks import UnknownArgumentError, reject_unknown

__all__ = ["NormRankRetriever"]

_ROUTED = ("norm_alpha", "mmr_threshold")


def _retriever_names() -> set[str]:
    names = set(inspect.signature(VectorIndexRetriever.__init__).parameters)
    return names - {"self", "index", "args", "kwargs"}


class NormRankRetriever(VectorIndexRetriever):
    """A ``VectorIndexRetriever`` over an index whose store is a ``NormRankVectorStore``.

    Takes every ``VectorIndexRetriever`` argument, ``vector_store_kwargs``, and ``norm_alpha`` /
    ``mmr_threshold`` (moved into ``vector_store_kwargs``, so they reach the store's ``query``);
    any other keyword raises ``UnknownArgumentError`` naming the closest one it takes.
    """

    def __init__(self, index: Any, *args: Any, **kwargs: Any) -> None:
        from llama_index.vector_stores.normrank.base import NormRankVectorStore

        if not isinstance(getattr(index, "vector_store", None), NormRankVectorStore):
            raise UnknownArgumentError(
                "NormRankRetriever needs an index over a NormRankVectorStore; over any other store "
                "use index.as_retriever()"
            )
        known = _retriever_names() | set(_ROUTED) | {"vector_store_kwargs"}
        reject_unknown({k: v for k, v in kwargs.items() if k not in known}, known, "NormRankRetriever()")
        moved = {k: kwargs.pop(k) for k in _ROUTED if k in kwargs}
        store_kwargs = dict(kwargs.pop("vector_store_kwargs", None) or {})
        both = sorted(set(moved) & set(store_kwargs))
        if both:
            raise UnknownArgumentError(
                f"{both[0]} given both directly and in vector_store_kwargs: give it once"
            )
        if "node_ids" not in kwargs and len(args) < 4:  # as index.as_retriever() passes them
            kwargs["node_ids"] = list(index.index_struct.nodes_dict.values())
        kwargs.setdefault("callback_manager", index._callback_manager)
        kwargs.setdefault("object_map", index._object_map)
        super().__init__(index, *args, vector_store_kwargs={**store_kwargs, **moved}, **kwargs)
