"""``NormRankRetriever``: a ``VectorStoreRetriever`` with ``k``, ``alpha`` and ``filter`` as fields."""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.vectorstores import VectorStoreRetriever

from normrank.store.checks import reject_unknown

# What a search call and a retriever's search_kwargs may hold (the store checks the same lists).
_SEARCH_ARGS = ("k", "filter", "fetch_k", "alpha", "score_threshold")
_MMR_ARGS = ("k", "filter", "fetch_k", "lambda_mult", "alpha")


def search_arguments(search_type: str) -> tuple[str, ...]:
    """The keyword arguments a retriever's ``search_kwargs`` may hold for ``search_type``."""
    return _MMR_ARGS if search_type == "mmr" else _SEARCH_ARGS


__all__ = ["NormRankRetriever"]


class NormRankRetriever(VectorStoreRetriever):
    """Retriever over a :class:`~langchain_normrank.NormRankVectorStore`.

    Search arguments are merged with increasing precedence: the fields ``k`` / ``alpha`` /
    ``filter``, then ``search_kwargs``, then keyword arguments of ``invoke``. So both
    ``NormRankRetriever(vectorstore=store, k=3, alpha=-0.5)`` and
    ``store.as_retriever(search_kwargs={"k": 4, "alpha": -0.75})`` work, and
    ``retriever.invoke(query, k=1)`` overrides per call. ``alpha=None`` means the store's default.
    """

    k: int = 4
    alpha: float | None = None
    filter: Any = None

    def __init__(self, **data: Any) -> None:
        # pydantic would drop unknown fields silently; search_kwargs are checked now, not at invoke
        fields = type(self).model_fields
        reject_unknown({k: v for k, v in data.items() if k not in fields}, fields, "NormRankRetriever()")
        allowed = search_arguments(data.get("search_type", "similarity"))
        extra = {k: v for k, v in (data.get("search_kwargs") or {}).items() if k not in allowed}
        reject_unknown(extra, allowed, "search_kwargs")
        super().__init__(**data)

    def _merged(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        base: dict[str, Any] = {"k": self.k}
        if self.alpha is not None:
            base["alpha"] = self.alpha
        if self.filter is not None:
            base["filter"] = self.filter
        return base | self.search_kwargs | kwargs

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        return super()._get_relevant_documents(query, run_manager=run_manager, **self._merged(kwargs))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        return await super()._aget_relevant_documents(query, run_manager=run_manager, **self._merged(kwargs))
