"""Framework hooks for indexes over a :class:`NormRankVectorStore` (and only those).

``index.as_retriever(norm_alpha=...)``: LlamaIndex's ``VectorIndexRetriever`` passes only
``vector_store_kwargs`` to the vector store and drops every other keyword it does not know, so
``as_retriever(similarity_top_k=2, norm_alpha=0)`` would search at the store's default alpha
without a word, and so would ``nrom_alpha=`` or ``filter=`` (for ``filters=``). Importing this
package wraps ``VectorIndexRetriever.__init__`` once: for an index over a NormRankVectorStore,
``norm_alpha`` and ``mmr_threshold`` move into ``vector_store_kwargs``, and a keyword the
retriever would drop that reads as a misspelling of one it or the store takes raises
:class:`~normrank.store.checks.UnknownArgumentError` (other names pass on: ``as_query_engine`` and
``as_chat_engine`` forward their own arguments to the retriever).

``VectorStoreIndex(..., storage_context=<over a NormRankVectorStore>)``: ``store_nodes_override``
defaults to ``True``, so the index's docstore and ``ref_doc_info`` are filled as for
``SimpleVectorStore`` (pass ``store_nodes_override=False`` to keep the nodes in the store alone).
Retrievers and indexes over any other store are built exactly as before.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from typing import Any

from normrank.store.checks import UnknownArgumentError

__all__ = ["install"]

_ROUTED = ("norm_alpha", "mmr_threshold")


def _parameter_names(*targets: Any) -> set[str]:
    names: set[str] = set()
    for target in targets:
        try:
            names |= set(inspect.signature(target).parameters)
        except (TypeError, ValueError):
            continue
    return names - {"self", "cls", "args", "kwargs"}


def _forwarded_names() -> set[str]:
    """Arguments of the query and chat engines whose factories forward theirs to ``as_retriever``."""
    targets: list[Any] = []
    try:
        from llama_index.core.chat_engine import (
            CondensePlusContextChatEngine,
            CondenseQuestionChatEngine,
            ContextChatEngine,
            SimpleChatEngine,
        )
        from llama_index.core.indices.base import BaseIndex
        from llama_index.core.query_engine import RetrieverQueryEngine
        from llama_index.core.response_synthesizers import get_response_synthesizer

        targets += [RetrieverQueryEngine.from_args, get_response_synthesizer, BaseIndex.as_chat_engine]
        targets += [BaseIndex.as_query_engine, ContextChatEngine.from_defaults]
        targets += [CondensePlusContextChatEngine.from_defaults, CondenseQuestionChatEngine.from_defaults]
        targets += [SimpleChatEngine.from_defaults]
    except ImportError:  # an older LlamaIndex: fewer names pass, misspellings still raise
        pass
    return _parameter_names(*targets)


def _route(kwargs: dict[str, Any], retriever_names: set[str], forwarded: set[str]) -> dict[str, Any]:
    dropped = [
        k for k in kwargs if k not in retriever_names and k not in _ROUTED and k != "vector_store_kwargs"
    ]
    for name in sorted(dropped):
        if name in forwarded:
            continue
        known = retriever_names | set(_ROUTED) | {"vector_store_kwargs"}
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
        if close:
            raise UnknownArgumentError(
                f"as_retriever() got {name}=, which LlamaIndex's VectorIndexRetriever would drop without "
                f"a word: did you mean {close[0]!r}?"
            )
    moved = {k: kwargs.pop(k) for k in _ROUTED if k in kwargs}
    if not moved:
        return kwargs
    store_kwargs = dict(kwargs.get("vector_store_kwargs") or {})
    both = sorted(set(moved) & set(store_kwargs))
    if both:
        raise UnknownArgumentError(f"{both[0]} given both directly and in vector_store_kwargs: give it once")
    kwargs["vector_store_kwargs"] = {**store_kwargs, **moved}
    return kwargs


def _ours(store: Any) -> bool:
    from llama_index.vector_stores.normrank.base import NormRankVectorStore

    return isinstance(store, NormRankVectorStore)


def install() -> None:
    """Wrap ``VectorIndexRetriever.__init__`` and ``VectorStoreIndex.__init__`` (idempotent)."""
    from llama_index.core.indices.vector_store.base import VectorStoreIndex
    from llama_index.core.indices.vector_store.retrievers.retriever import VectorIndexRetriever

    original = VectorIndexRetriever.__init__
    if not getattr(original, "_normrank_routes", False):
        retriever_names = _parameter_names(original) - {"index"}
        forwarded = _forwarded_names()

        @functools.wraps(original)
        def __init__(self: Any, index: Any, *args: Any, **kwargs: Any) -> None:
            if _ours(getattr(index, "vector_store", None)):
                kwargs = _route(dict(kwargs), retriever_names, forwarded)
            original(self, index, *args, **kwargs)

        __init__._normrank_routes = True  # type: ignore[attr-defined]
        VectorIndexRetriever.__init__ = __init__  # type: ignore[method-assign]

    index_init = VectorStoreIndex.__init__
    if not getattr(index_init, "_normrank_routes", False):
        positional = list(inspect.signature(index_init).parameters)[1:]  # after self

        @functools.wraps(index_init)
        def index_init_(self: Any, *args: Any, **kwargs: Any) -> None:
            given = dict(zip(positional, args, strict=False)) | kwargs
            ctx = given.get("storage_context")
            if "store_nodes_override" not in given and _ours(getattr(ctx, "vector_store", None)):
                kwargs["store_nodes_override"] = True  # fill docstore and ref_doc_info, as SimpleVectorStore
            index_init(self, *args, **kwargs)

        index_init_._normrank_routes = True  # type: ignore[attr-defined]
        VectorStoreIndex.__init__ = index_init_  # type: ignore[method-assign]
