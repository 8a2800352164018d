"""``NormRankVectorStore``: a LangChain vector store that keeps the norm and ranks by cos·‖d‖^α.

A drop-in for ``langchain_community``'s ``FAISS``: the same constructors, search methods,
``filter`` / ``fetch_k`` / ``score_threshold`` arguments and ``save_local`` / ``load_local``,
plus ``alpha``. Scores returned by ``similarity_search_with_score`` are the norm-weighted
similarity ``s = cos(q, d) * ||d||**alpha`` (higher is better; not a distance); with
``alpha = 0`` they are cosine similarities. The store itself is :class:`normrank.store.keyed_store.KeyedStore`.
"""

from __future__ import annotations

import copy
import uuid
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, NoReturn

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from langchain_normrank.aio import AsyncFaissMethods
from langchain_normrank.faiss_compat import (
    DocstoreView,
    MigrationWarning,
    check_faiss_options,
    faiss_constructor_index,
    faiss_contents,
    refuse_faiss_folder,
)
from langchain_normrank.filters import MetadataFilter, check_kinds, metadata_predicate, sql_filter
from langchain_normrank.pgvector_compat import check_distance_strategy, libpq_url, pgvector_options
from langchain_normrank.retrievers import _MMR_ARGS, _SEARCH_ARGS, NormRankRetriever
from normrank.errors import InvalidInputError, InvalidParameterError
from normrank.store.checks import UnsupportedOperationError, refuse_untrained_factory, reject_unknown
from normrank.store.contract import IndexBackend, SavingBackend
from normrank.store.keyed_store import Hit, KeyedStore, StoreBacked, StoreNotFoundError

__all__ = [
    "MigrationWarning",
    "NormRankVectorStore",
    "ScoreThresholdWarning",
    "StoreNotFoundError",
    "relevance_from_cosine",
]

_RAW_HINT = (
    "wrap a normrank encoder with langchain_normrank.NormRankEmbeddings('<model name or path>'), or "
    "turn normalisation off (e.g. HuggingFaceEmbeddings(encode_kwargs={'normalize_embeddings': False}) "
    "with a model without a Normalize module)."
)
_HEADER = {"format": "langchain-normrank", "version": 2}
_FAISS_HINTS = {
    "norm_alpha": "this store's exponent is called alpha (norm_alpha is the LlamaIndex adapter's name)",
    "docstore": "NormRankVectorStore keeps its own documents; migrate a FAISS store with NormRankVectorStore.from_faiss(store)",
    "index_to_docstore_id": "NormRankVectorStore keeps its own ids; migrate a FAISS store with NormRankVectorStore.from_faiss(store)",
}
_CONSTRUCTOR_ARGS = ("alpha", "factory", "relevance_score_fn", "normalize_L2", "distance_strategy")
_COSINE = "COSINE"


class ScoreThresholdWarning(UserWarning):
    """A ``score_threshold`` no similarity here can reach: it reads like a FAISS L2 distance."""


def _cosine_strategy() -> Any:
    """``DistanceStrategy.COSINE`` where langchain_community is installed, else the string
    (``DistanceStrategy`` is a ``str`` enum, so both compare equal to ``"COSINE"``)."""
    try:
        from langchain_community.vectorstores.utils import DistanceStrategy
    except ImportError:
        return _COSINE
    return DistanceStrategy.COSINE


def store_id(value: Any) -> str:
    """One document id as stored: a str as it is; an int (FAISS users pass ``ids=[1, 2]``) or
    a UUID as its string, on every path (add, delete, get), so ``delete(ids=[1])`` finds "1"."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return str(int(value))
    if isinstance(value, uuid.UUID):
        return str(value)
    raise InvalidInputError(f"document ids must be strings (or ints, stored as their string), got {value!r}")


def _store_ids(values: Any) -> list[str]:
    if isinstance(values, (str, bytes)):
        raise InvalidInputError(f"ids must be a list of ids, got the single value {values!r}")
    return [store_id(v) for v in values]


class _CallableEmbeddings(Embeddings):
    """FAISS's (deprecated) ``embedding_function=callable``: one call per text."""

    def __init__(self, fn: Callable[[str], list[float]]) -> None:
        self.fn = fn

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [list(self.fn(t)) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return list(self.fn(text))


def warn_threshold(score_threshold: Any, what: str) -> None:
    """Warn when ``score_threshold`` exceeds 1, which no cosine (or relevance) reaches."""
    if score_threshold is not None and score_threshold > 1:
        warnings.warn(
            f"score_threshold={score_threshold} is above 1, which no {what} reaches, so nothing is "
            "returned: scores here are similarities (higher is better), not FAISS's L2 distances. "
            "For unit vectors an L2 distance threshold t (L2^2 <= t) is cosine >= 1 - t / 2",
            ScoreThresholdWarning,
            stacklevel=4,
        )


AnyFilter = MetadataFilter | None  # a filter or none
QueryVector = list[float]


def relevance_from_cosine(cosine: float) -> float:
    """Relevance in [0, 1] of a hit: its cosine similarity to the query, clipped at 0.

    It does not depend on ``alpha`` (the ranking does, the relevance does not), so a
    ``score_threshold`` means "cosine at least this" at every alpha, as in LangChain's cosine
    stores (whose relevance is ``1 - cosine distance``). Negative cosines map to 0.
    """
    return min(1.0, max(0.0, cosine))


class NormRankVectorStore(StoreBacked, AsyncFaissMethods, VectorStore):
    """In-process vector store over :class:`normrank.NormIndex`, ranking by cos(q, d)·‖d‖^α.

    Args:
        embedding: a LangChain ``Embeddings`` (FAISS's ``embedding_function``, also as its
            deprecated callable form). It must return *raw* (unnormalised) vectors for
            alpha to matter; a :class:`~langchain_normrank.UnitNormWarning` is issued once when
            every added vector has norm ≈ 1.
        index, docstore, index_to_docstore_id: FAISS's positional constructor arguments, as its
            docs pass them: an empty ``IndexFlat*`` or ``IndexHNSWFlat`` (its dimension, and its
            ``M`` as the factory ``"HNSW<M>"``), an empty docstore and ``{}``.
        alpha: default exponent on the document norm, within [-16, 16]; every search method
            also takes ``alpha=`` (and so does ``as_retriever(search_kwargs={"alpha": ...})``).
        factory: FAISS factory string for the underlying index (``"Flat"`` = exact search).
        relevance_score_fn: as in FAISS, maps a returned score ``s`` to a relevance; by default
            the relevance is the hit's cosine (:func:`relevance_from_cosine`).
        normalize_L2, distance_strategy: FAISS's options, accepted only where they describe
            what this store does (``normalize_L2=False``, ``DistanceStrategy.COSINE``); others
            raise, saying why.

    Document ids are strings (uuid4 when not given); adding an existing id overwrites it.
    ``filter=`` takes FAISS's dict filters (see :mod:`langchain_normrank.filters`) or a callable;
    filtered search is exact: it widens from ``fetch_k`` candidates until ``k`` matches are found
    or every document was scored, so a filter never returns fewer hits than exist.
    """

    def __init__(
        self,
        embedding: Embeddings | Callable[[str], list[float]] | None = None,
        index: Any = None,
        docstore: Any = None,
        index_to_docstore_id: dict[int, str] | None = None,
        relevance_score_fn: Callable[[float], float] | None = None,
        normalize_L2: bool = False,
        distance_strategy: Any = None,
        *,
        alpha: float = 0.0,
        factory: str | None = None,
        embedding_function: Embeddings | Callable[[str], list[float]] | None = None,
    ) -> None:
        check_faiss_options(normalize_L2, distance_strategy)
        if (embedding is None) == (embedding_function is None):
            raise InvalidParameterError(
                "give the embedding model once: embedding= (or FAISS's embedding_function=)"
            )
        given = embedding if embedding is not None else embedding_function
        if not isinstance(given, Embeddings) and not callable(given):
            raise InvalidParameterError(
                f"embedding must be a LangChain Embeddings (or a callable text -> vector), got {given!r}"
            )
        self._embedding_function = given
        self.embedding = given if isinstance(given, Embeddings) else _CallableEmbeddings(given)
        self.override_relevance_score_fn = relevance_score_fn
        dim, from_index = faiss_constructor_index(index, docstore, index_to_docstore_id)
        if factory is not None and from_index is not None:
            raise InvalidParameterError(f"give index= or factory=, not both (index= means {from_index!r})")
        factory = factory or from_index or "Flat"
        refuse_untrained_factory(factory, dim, "NormRankVectorStore.from_index(index, embedding)")
        self._store = KeyedStore(alpha=alpha, factory=factory, dim=dim, raw_hint=_RAW_HINT)

    # ------------------------------------------------------------------ basics
    @property
    def embeddings(self) -> Embeddings | None:
        """The embedding model (``None`` when a bare callable was given, as in FAISS)."""
        return self._embedding_function if isinstance(self._embedding_function, Embeddings) else None

    @property
    def embedding_function(self) -> Embeddings | Callable[[str], list[float]]:
        """FAISS's name for the embedding model, as it was given."""
        return self._embedding_function

    @property
    def distance_strategy(self) -> Any:
        """``DistanceStrategy.COSINE``: at alpha = 0 the ranking and scores are cosine's."""
        return _cosine_strategy()

    @property
    def docstore(self) -> DocstoreView:
        """FAISS's ``docstore`` (``search(id)``, ``_dict``) over this store's documents; editing a
        document's metadata in place takes effect, as in FAISS (:class:`~langchain_normrank.faiss_compat.LiveDocument`)."""
        return DocstoreView(self._store.records, self._store.lock)

    @property
    def index_to_docstore_id(self) -> Mapping[int, str]:
        """FAISS's position -> id map (read-only): the ids in insertion order."""
        with self._store.lock:
            return MappingProxyType(dict(enumerate(self._store.records)))

    @property
    def alpha(self) -> float:
        """Default exponent of the searches."""
        return self._store.alpha

    @property
    def factory(self) -> str:
        return self._store.factory

    @property
    def index(self) -> Any:
        """The underlying ``normrank.NormIndex`` (``None`` before the first add), or the index
        given to :meth:`from_index` / :meth:`from_postgres`."""
        return self._store.index

    def _document(self, sid: str) -> Document:
        rec = self._store.records[sid]
        return Document(id=sid, page_content=rec["text"], metadata=copy.deepcopy(rec["metadata"]))

    # ------------------------------------------------------------------ writing
    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict] | None = None,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Embed ``texts`` with ``embedding.embed_documents`` and add them (existing ids are overwritten)."""
        reject_unknown(kwargs, ("metadatas", "ids"), "add_texts()", _FAISS_HINTS)
        texts = list(texts)
        self._check_lengths(texts, metadatas, ids)
        if not texts:
            return []
        return self._add(texts, self.embedding.embed_documents(texts), metadatas, ids)

    def add_embeddings(
        self,
        text_embeddings: Iterable[tuple[str, list[float]]] | None = None,
        metadatas: list[dict] | None = None,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Add precomputed raw vectors: ``text_embeddings`` is ``(text, vector)`` pairs, as in FAISS,
        or PGVector's keywords ``texts=`` and ``embeddings=`` (two lists)."""
        if "texts" in kwargs or "embeddings" in kwargs:  # PGVector's form
            texts, vectors = list(kwargs.pop("texts", [])), list(kwargs.pop("embeddings", []))
            if text_embeddings is not None or len(texts) != len(vectors):
                raise InvalidInputError(
                    f"give texts= and embeddings= of one length (got {len(texts)} and {len(vectors)}), "
                    "or FAISS's (text, vector) pairs"
                )
            text_embeddings = list(zip(texts, vectors, strict=True))
        reject_unknown(kwargs, ("metadatas", "ids"), "add_embeddings()", _FAISS_HINTS)
        if text_embeddings is None:
            raise InvalidInputError("add_embeddings takes (text, vector) pairs, or texts= and embeddings=")
        pairs = list(text_embeddings)
        if any(not isinstance(p, (tuple, list)) or len(p) != 2 for p in pairs):
            raise InvalidInputError(
                "add_embeddings takes (text, vector) pairs (FAISS's form), or texts= and embeddings= (PGVector's)"
            )
        texts = [t for t, _ in pairs]
        self._check_lengths(texts, metadatas, ids)
        if not pairs:
            return []
        return self._add(texts, [v for _, v in pairs], metadatas, ids)

    @staticmethod
    def _check_lengths(texts: list[str], metadatas: Any, ids: Any) -> None:
        for name, seq in (("metadatas", metadatas), ("ids", ids)):
            if seq is not None and len(seq) != len(texts):
                raise InvalidInputError(f"{len(texts)} texts but {len(seq)} {name}")

    def _add(self, texts: list[str], vectors: Any, metadatas: Any, ids: Any) -> list[str]:
        n = len(texts)
        sids = [str(uuid.uuid4()) if i is None else store_id(i) for i in (ids or [None] * n)]
        for t in texts:
            if not isinstance(t, str):
                raise InvalidInputError(f"texts must be strings, got {type(t).__name__}")
        records = [
            {"text": t, "metadata": copy.deepcopy(dict(m)) if m else {}}
            for t, m in zip(texts, metadatas or [None] * n, strict=True)
        ]
        try:
            arr = np.asarray(vectors, dtype=np.float32)
        except (TypeError, ValueError) as e:
            raise InvalidInputError(f"embeddings must be a numeric (n, dim) array: {e}") from e
        self._store.add(sids, arr, records)
        return sids

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete by id (missing ids are ignored); ``ids=None`` deletes everything."""
        reject_unknown(kwargs, ("ids",), "delete()")
        with self._store.lock:
            self._store.delete(list(self._store.records) if ids is None else _store_ids(ids))
        return True

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """Documents for the ids that exist, in the order given (copies: edit through ``docstore``)."""
        with self._store.lock:
            return [self._document(s) for s in _store_ids(ids) if s in self._store]

    # ------------------------------------------------------------------ searching
    def _query_vector(self, query: str) -> list[float]:
        return self.embedding.embed_query(query)

    def _filter(self, filter: MetadataFilter | None) -> dict[str, Any]:
        """The filter as the store core takes it: ``where=`` (run in SQL) on a store kept in
        PostgreSQL when the filter can be said there, else ``passes=`` (a predicate on the ids)."""
        pred = metadata_predicate(filter)
        if pred is None:
            return {}
        with self._store.lock:  # an ordering across kinds raises, on every store alike
            check_kinds(filter, (r["metadata"] for r in self._store.records.values()))
        if self._store.keeps_records and (where := sql_filter(filter)) is not None:
            return {"where": where}
        records = self._store.records
        return {"passes": lambda sid: bool(pred(records[sid]["metadata"]))}

    def _hits(
        self, embedding: Any, k: int, filter: Any, fetch_k: int | None, alpha: float | None
    ) -> list[Hit]:
        return self._store.search(embedding, k, alpha=alpha, fetch_k=fetch_k, **self._filter(filter))

    def _with_docs(self, hits: list[Hit], score_threshold: float | None) -> list[tuple[Document, float]]:
        with self._store.lock:
            return [
                (self._document(h.id), h.score)
                for h in hits
                if h.id in self._store and (score_threshold is None or h.score >= score_threshold)
            ]

    def similarity_search_with_score_by_vector(
        self,
        embedding: QueryVector,
        k: int = 4,
        filter: AnyFilter = None,
        fetch_k: int = 20,
        *,
        alpha: float | None = None,
        score_threshold: float | None = None,
        **kwargs: Any,
    ) -> list[tuple[Document, float]]:
        """(Document, cos·‖d‖^α) pairs for a query vector, best first (similarities, not distances).

        ``fetch_k`` is where a filtered search starts widening (results are exact whatever it
        is); ``score_threshold`` keeps hits with score ``>= score_threshold``, as FAISS does for
        similarity strategies.
        """
        reject_unknown(kwargs, _SEARCH_ARGS, "similarity_search()", _FAISS_HINTS)
        if (self.alpha if alpha is None else alpha) == 0:
            warn_threshold(score_threshold, "cosine")
        return self._with_docs(self._hits(embedding, k, filter, fetch_k, alpha), score_threshold)

    def similarity_search_with_score(
        self, query: str, k: int = 4, filter: AnyFilter = None, fetch_k: int = 20, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """(Document, cos·‖d‖^α) pairs, best first; see :meth:`similarity_search_with_score_by_vector`."""
        return self.similarity_search_with_score_by_vector(
            self._query_vector(query), k, filter, fetch_k, **kwargs
        )

    def similarity_search_by_vector(
        self, embedding: QueryVector, k: int = 4, filter: AnyFilter = None, fetch_k: int = 20, **kwargs: Any
    ) -> list[Document]:
        return [
            d for d, _ in self.similarity_search_with_score_by_vector(embedding, k, filter, fetch_k, **kwargs)
        ]

    def similarity_search(
        self, query: str, k: int = 4, filter: AnyFilter = None, fetch_k: int = 20, **kwargs: Any
    ) -> list[Document]:
        return self.similarity_search_by_vector(self._query_vector(query), k, filter, fetch_k, **kwargs)

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        if self.override_relevance_score_fn is not None:
            return self.override_relevance_score_fn
        return relevance_from_cosine  # applied to the cosine, not the score: see below

    def similarity_search_with_relevance_scores(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """(Document, relevance in [0, 1]) pairs, best first: see :meth:`_similarity_search_with_relevance_scores`;
        ``score_threshold`` keeps relevance ``>=`` it (a value above 1 warns: nothing reaches it)."""
        warn_threshold(kwargs.get("score_threshold"), "relevance")
        return super().similarity_search_with_relevance_scores(query, k, **kwargs)

    async def asimilarity_search_with_relevance_scores(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Async :meth:`similarity_search_with_relevance_scores` (the same relevance: the cosine)."""
        warn_threshold(kwargs.get("score_threshold"), "relevance")
        return await super().asimilarity_search_with_relevance_scores(query, k, **kwargs)

    def _similarity_search_with_relevance_scores(
        self,
        query: str,
        k: int = 4,
        filter: AnyFilter = None,
        fetch_k: int | None = None,
        **kwargs: Any,
    ) -> list[tuple[Document, float]]:
        """(Document, relevance) with relevance = the hit's cosine clipped to [0, 1]
        (:func:`relevance_from_cosine`), ranked by cos·‖d‖^α; a ``relevance_score_fn`` given at
        construction is applied to the score instead, as FAISS does."""
        kwargs.pop("score_threshold", None)  # the caller applies it to the relevance
        alpha = kwargs.pop("alpha", None)
        reject_unknown(kwargs, _SEARCH_ARGS, "similarity_search_with_relevance_scores()", _FAISS_HINTS)
        hits = self._hits(self._query_vector(query), k, filter, fetch_k, alpha)
        fn = self.override_relevance_score_fn
        with self._store.lock:
            return [
                (self._document(h.id), fn(h.score) if fn else relevance_from_cosine(h.cosine))
                for h in hits
                if h.id in self._store
            ]

    def max_marginal_relevance_search_with_score_by_vector(
        self,
        embedding: QueryVector,
        *,
        filter: AnyFilter = None,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        **kwargs: Any,
    ) -> list[tuple[Document, float]]:
        """MMR over the ``fetch_k`` best documents passing ``filter=``, by cos·‖d‖^α (``alpha=``).

        Greedy: pick ``argmax lambda_mult * s_i - (1 - lambda_mult) * max_j cos(d_i, d_j)`` over
        the already picked ``j``, where ``s_i`` is the norm-weighted score; with ``alpha = 0`` this
        is LangChain's usual cosine MMR. Returns (document, score) pairs.
        """
        reject_unknown(
            {key: v for key, v in kwargs.items() if key != "alpha"},
            _MMR_ARGS,
            "max_marginal_relevance_search()",
            _FAISS_HINTS,
        )
        hits = self._store.mmr(
            embedding,
            k,
            fetch_k=fetch_k,
            lambda_mult=lambda_mult,
            alpha=kwargs.get("alpha"),
            **self._filter(filter),
        )
        return self._with_docs(hits, None)

    def max_marginal_relevance_search_with_score(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: AnyFilter = None,
        **kwargs: Any,
    ) -> list[tuple[Document, float]]:
        """PGVector's MMR with scores for a query text: :meth:`max_marginal_relevance_search_with_score_by_vector`."""
        return self.max_marginal_relevance_search_with_score_by_vector(
            self._query_vector(query), k=k, fetch_k=fetch_k, lambda_mult=lambda_mult, filter=filter, **kwargs
        )

    def max_marginal_relevance_search_by_vector(
        self,
        embedding: QueryVector,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: AnyFilter = None,
        **kwargs: Any,
    ) -> list[Document]:
        """Documents chosen by :meth:`max_marginal_relevance_search_with_score_by_vector`."""
        pairs = self.max_marginal_relevance_search_with_score_by_vector(
            embedding, k=k, fetch_k=fetch_k, lambda_mult=lambda_mult, filter=filter, **kwargs
        )
        return [d for d, _ in pairs]

    def max_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: AnyFilter = None,
        **kwargs: Any,
    ) -> list[Document]:
        """MMR for a query text: see :meth:`max_marginal_relevance_search_with_score_by_vector`."""
        vector = self._query_vector(query)
        return self.max_marginal_relevance_search_by_vector(vector, k, fetch_k, lambda_mult, filter, **kwargs)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict] | None = None,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> NormRankVectorStore:
        """A store holding ``texts``; ``kwargs`` are the constructor's (``alpha``, ``factory``, ...),
        or PGVector's (``connection=``, ``collection_name=``...): then a store kept in PostgreSQL
        (:meth:`from_postgres`, the collection's name as the table's)."""
        if "connection" in kwargs:
            texts = list(texts)
            vectors = embedding.embed_documents(texts) if texts else []
            return cls._in_postgres(embedding, kwargs, "from_texts()", vectors)._added(
                list(zip(texts, vectors, strict=True)), metadatas, ids
            )
        store = cls._from_kwargs(embedding, kwargs, "from_texts()")
        store.add_texts(texts, metadatas, ids=ids)
        return store

    @classmethod
    def _in_postgres(
        cls, embedding: Embeddings, kwargs: dict[str, Any], where: str, vectors: Any
    ) -> NormRankVectorStore:
        options = pgvector_options(kwargs, where, ("alpha",))
        if "dim" not in options and len(vectors):
            options["dim"] = len(vectors[0])
        return cls.from_postgres(
            options.pop("connection"), options.pop("table"), embedding, alpha=kwargs.get("alpha"), **options
        )

    @classmethod
    def from_existing_index(
        cls, embedding: Embeddings, collection_name: str = "langchain", **kwargs: Any
    ) -> NormRankVectorStore:
        """PGVector's reopen: :meth:`from_postgres` on the table named ``collection_name``, with
        PGVector's keywords (``connection=``, ``distance_strategy=``...)."""
        kwargs["collection_name"] = collection_name
        if "connection" not in kwargs:
            raise InvalidParameterError("from_existing_index needs connection= (the database's URL)")
        return cls._in_postgres(embedding, kwargs, "from_existing_index()", [])

    @classmethod
    def from_embeddings(
        cls,
        text_embeddings: Iterable[tuple[str, list[float]]],
        embedding: Embeddings,
        metadatas: list[dict[str, Any]] | None = None,
        ids: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> NormRankVectorStore:
        """A store from ``(text, raw vector)`` pairs, as ``FAISS.from_embeddings`` (in PostgreSQL
        with PGVector's ``connection=``, as :meth:`from_texts`)."""
        pairs = list(text_embeddings)  # may be a one-shot iterator such as zip()
        if "connection" in kwargs:
            vectors = [v for _, v in pairs]
            return cls._in_postgres(embedding, kwargs, "from_embeddings()", vectors)._added(
                pairs, metadatas, ids
            )
        return cls._from_kwargs(embedding, kwargs, "from_embeddings()")._added(pairs, metadatas, ids)

    def _added(self, pairs: list[tuple[str, Any]], metadatas: Any, ids: Any) -> NormRankVectorStore:
        self.add_embeddings(pairs, metadatas, ids=ids)
        return self

    @classmethod
    def _from_kwargs(cls, embedding: Embeddings, kwargs: dict[str, Any], where: str) -> NormRankVectorStore:
        # FAISS's __from pops docstore= / index_to_docstore_id= (empty ones are what its docs pass)
        faiss_args = {k: kwargs.pop(k) for k in ("docstore", "index_to_docstore_id") if k in kwargs}
        allowed = _CONSTRUCTOR_ARGS
        reject_unknown({k: v for k, v in kwargs.items() if k not in allowed}, allowed, where, _FAISS_HINTS)
        return cls(embedding, **faiss_args, **kwargs)

    def as_retriever(self, **kwargs: Any) -> Any:
        """A :class:`~langchain_normrank.NormRankRetriever`; ``search_kwargs`` may hold ``alpha``.

        ``search_kwargs`` and every other argument are checked now (unknown ones raise ``TypeError``).
        """

        tags = kwargs.pop("tags", None) or [*self._get_retriever_tags()]
        return NormRankRetriever(vectorstore=self, tags=tags, **kwargs)

    def merge_from(self, target: NormRankVectorStore) -> None:
        """Add every document of ``target`` (with its stored vector) to this store, as FAISS's
        ``merge_from``; ids present in both are refused (:class:`~normrank.errors.DuplicateIdError`)."""
        if not isinstance(target, NormRankVectorStore):
            raise InvalidParameterError(
                f"merge_from takes a NormRankVectorStore, got {type(target).__name__} "
                "(convert a FAISS store with NormRankVectorStore.from_faiss first)"
            )
        with target._store.lock:
            sids = list(target._store.records)
            both = [s for s in sids if s in self._store]
            if both:
                from normrank.errors import DuplicateIdError

                raise DuplicateIdError(f"cannot merge: ids in both stores, e.g. {both[0]!r}")
            records = [copy.deepcopy(target._store.records[s]) for s in sids]
            vectors = target._store.vectors(sids)
        self._store.add(sids, vectors, records)

    # ------------------------------------------------------------------ migration from FAISS
    @classmethod
    def from_faiss(
        cls,
        faiss_store: Any,
        *,
        embedding: Embeddings | None = None,
        alpha: float = 0.0,
        factory: str = "Flat",
    ) -> NormRankVectorStore:
        """A store with the documents, ids and raw vectors of a ``langchain_community`` FAISS store.

        The vectors are copied, not re-embedded, unless they are unit length (a store built with
        ``normalize_L2=True`` or a normalising model): their norms are gone then, so the texts are
        re-embedded with ``embedding`` (a model returning raw vectors), and a
        :class:`MigrationWarning` says so. ``embedding`` defaults to the FAISS store's own.
        """
        emb, texts, vectors, metadatas, ids = faiss_contents(faiss_store, embedding)
        store = cls(emb, alpha=alpha, factory=factory)
        if texts:
            store._add(texts, vectors, metadatas, ids)
        return store

    @classmethod
    def from_postgres(
        cls,
        connection: str,
        table: str,
        embedding: Embeddings,
        *,
        dim: int | None = None,
        alpha: float | None = None,
        **index_options: Any,
    ) -> NormRankVectorStore:
        """A store kept in PostgreSQL: vectors in ``table``, texts and metadata in ``<table>_docs``
        of the same database, every write one transaction. Reopening with the same ``connection``
        and ``table`` gives back every document and the store's alpha (``dim=`` is needed only to
        create the table; ``alpha=`` overrides the kept alpha for this object, ``save_local``
        keeps it); dict filters run in SQL. ``connection`` is a libpq URI or conninfo, or PGVector's
        SQLAlchemy URL ``postgresql+psycopg://...`` as it is; PGVector's ``distance_strategy=`` is
        accepted when it is cosine. Scores are similarities ``s`` (PGVector's cosine distance is
        ``1 - s`` at alpha = 0). ``index_options`` go to
        :class:`normrank.backends.pgvector_records.PgVectorRecordIndex` (``exact=``, ``ef_search=``...).
        """
        from normrank.backends.pgvector_records import PgVectorRecordIndex

        check_distance_strategy(index_options.pop("distance_strategy", None))
        index = PgVectorRecordIndex(libpq_url(connection), table, dim, **index_options)
        core = KeyedStore.from_index(index, check_record=_check_record, alpha=alpha, raw_hint=_RAW_HINT)
        store = cls(embedding, alpha=core.alpha)
        store._store = core
        return store

    @classmethod
    def from_index(
        cls, index: IndexBackend, embedding: Embeddings, *, alpha: float | None = None
    ) -> NormRankVectorStore:
        """A store keeping its vectors in ``index``: any object answering to
        :class:`normrank.IndexBackend` (docs/backends.md): a ``NormIndex``, the Qdrant or
        PostgreSQL backends, or your own. One that does not raises
        :class:`~normrank.errors.NonConformingIndexError` naming what is missing.

        The index must be empty, except one that keeps the records (``PgVectorRecordIndex``),
        which is reopened with every document it holds, as :meth:`from_postgres`. ``alpha=None``
        takes the index's own (kept) alpha where it has one, else 0. :meth:`save_local` writes
        the documents (texts, metadata, ids) to a folder; the vectors stay in the index, and
        ``load_local(folder, embeddings, index=the_index)`` puts the two back together."""
        core = KeyedStore.for_index(index, check_record=_check_record, alpha=alpha, raw_hint=_RAW_HINT)
        store = cls(embedding, alpha=core.alpha)
        store._store = core
        return store

    # ------------------------------------------------------------------ persistence
    @staticmethod
    def _json_path(folder: Path, index_name: str) -> Path:
        if (
            not isinstance(index_name, str)
            or not index_name
            or "/" in index_name
            or index_name.startswith(".")
        ):
            raise InvalidParameterError(f"index_name must be a plain file name stem, got {index_name!r}")
        return folder / f"{index_name}.normrank.json"

    def save_local(self, folder_path: str | Path, index_name: str = "index") -> None:
        """Write the store to ``folder_path`` as ``<index_name>.normrank.json`` and a NormIndex
        folder beside it (no pickle). The JSON file is the commit point, swapped in atomically
        after the index is written; a failed save removes what it created."""
        self._store.save(self._json_path(Path(folder_path), index_name), _HEADER)

    @classmethod
    def load_local(
        cls,
        folder_path: str | Path,
        embeddings: Embeddings,
        index_name: str = "index",
        *,
        allow_dangerous_deserialization: bool = False,
        alpha: float | None = None,
        index: IndexBackend | type[SavingBackend] | None = None,
        **kwargs: Any,
    ) -> NormRankVectorStore:
        """Load a store written by :meth:`save_local`; ``alpha`` overrides the saved default.

        ``index``: the index holding the vectors of a store made by :meth:`from_index` (its
        folder keeps the documents only; without it the load says where the vectors are), or
        the class that saved them into the folder (a :class:`normrank.SavingBackend` other than
        NormIndex).

        ``allow_dangerous_deserialization`` is accepted for FAISS code and changes nothing: nothing
        is ever unpickled. A folder holding a LangChain FAISS save (``<index_name>.faiss`` +
        ``<index_name>.pkl``) is refused with a :class:`FaissSaveError` naming the two lines that
        migrate it (``FAISS.load_local`` in your code, then :meth:`from_faiss`). A missing folder
        raises :class:`~normrank.store.keyed_store.StoreNotFoundError`, which is also a ``FileNotFoundError``.
        """
        io_flags = kwargs.pop("io_flags", 0)
        if isinstance(io_flags, bool) or not isinstance(io_flags, (int, np.integer)):
            raise InvalidParameterError(f"io_flags must be FAISS's integer IO flags, got {io_flags!r}")
        options = {
            k: kwargs.pop(k)
            for k in ("relevance_score_fn", "normalize_L2", "distance_strategy")
            if k in kwargs
        }
        allowed = (
            "index_name",
            "allow_dangerous_deserialization",
            "alpha",
            "io_flags",
            *_CONSTRUCTOR_ARGS[2:],
        )
        reject_unknown(kwargs, allowed, "load_local()", _FAISS_HINTS)
        folder = Path(folder_path)
        path = cls._json_path(folder, index_name)
        if (
            not path.exists()
            and (folder / f"{index_name}.faiss").is_file()
            and (folder / f"{index_name}.pkl").is_file()
        ):
            refuse_faiss_folder(folder, index_name)
        store = cls(embeddings, **options)
        store._store = KeyedStore.load(
            path, _HEADER, check_record=_check_record, alpha=alpha, raw_hint=_RAW_HINT, index=index
        )[0]
        return store

    def serialize_to_bytes(self) -> bytes:
        """Refused: FAISS's bytes are a pickle, and normrank never pickles. Use :meth:`save_local`
        (a folder, atomic) and archive that folder if you need one blob."""
        raise UnsupportedOperationError(
            "serialize_to_bytes is not offered (FAISS's bytes are a pickle, normrank never pickles): "
            "use store.save_local(folder) and NormRankVectorStore.load_local(folder, embeddings)"
        )

    @classmethod
    def deserialize_from_bytes(cls, serialized: bytes, embeddings: Embeddings, **kwargs: Any) -> NoReturn:
        """Refused, as :meth:`serialize_to_bytes`: bytes from FAISS are a pickle. Migrate a FAISS
        store with :meth:`from_faiss` once your code has loaded it."""
        raise UnsupportedOperationError(
            "deserialize_from_bytes is not offered (the bytes are a pickle, normrank never unpickles): "
            "load the FAISS store yourself (langchain_community) and call "
            "NormRankVectorStore.from_faiss(store)"
        )


def _check_record(rec: dict[str, Any]) -> None:
    if (
        set(rec) != {"text", "metadata"}
        or not isinstance(rec["text"], str)
        or not isinstance(rec["metadata"], dict)
    ):
        raise ValueError("a document needs exactly a str text and a dict metadata")
