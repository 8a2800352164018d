"""``NormRankVectorStore``: a LangChain vector store that keeps the norm and ranks by cos·‖d‖^α.

Scores returned by ``similarity_search_with_score`` are the norm-weighted similarity
``s = cos(q, d) * ||d||**alpha`` (higher is better; not a distance). With ``alpha = 0`` this is
plain cosine similarity. ``similarity_search_with_relevance_scores`` maps ``s`` to [0, 1] with
:func:`relevance_from_score`.
"""

from __future__ import annotations

import copy
import math
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from normrank import store_files
from normrank.errors import (
    CorruptIndexError,
    DimensionMismatchError,
    DuplicateIdError,
    InvalidInputError,
    InvalidParameterError,
)
from normrank.mmr import maximal_marginal_relevance
from normrank.unit_norms import all_unit, warn_unit_norms

STORE_FILE = "normrank_store.json"
_RAW_HINT = (
    "wrap a normrank encoder with langchain_normrank.NormRankEmbeddings('<model name or path>'), or "
    "turn normalisation off (e.g. HuggingFaceEmbeddings(encode_kwargs={'normalize_embeddings': False}) "
    "with a model without a Normalize module)."
)

__all__ = ["MetadataFilter", "NormRankVectorStore", "relevance_from_score"]

#: ``dict`` (every key equal) or a callable taking the metadata dict and returning a bool.
MetadataFilter = Mapping[str, Any] | Callable[[dict[str, Any]], bool]

_FORMAT = "langchain-normrank"
_FORMAT_VERSION = 1
_MISSING = object()


def relevance_from_score(score: float) -> float:
    """Map a norm-weighted score ``s`` to a relevance in [0, 1].

    ``r = (1 + s / (1 + |s|)) / 2`` — strictly increasing, ``r(0) = 0.5``, ``r(1) = 0.75``,
    ``r -> 1`` as ``s -> +inf`` and ``r -> 0`` as ``s -> -inf``. Parameter-free, so a
    ``score_threshold`` means the same thing for every query; the ranking is unchanged.
    """
    return 0.5 * (1.0 + score / (1.0 + abs(score)))


@dataclass
class _Record:
    key: int  # int64 id inside the NormIndex
    text: str
    metadata: dict[str, Any]


def _check_alpha(alpha: Any) -> float:
    try:
        value = float(alpha)
    except (TypeError, ValueError) as e:
        raise InvalidParameterError(f"alpha must be a real number, got {alpha!r}") from e
    if not math.isfinite(value):
        raise InvalidParameterError(f"alpha must be finite, got {alpha!r}")
    return value


def _check_k(k: Any, name: str = "k") -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InvalidParameterError(f"{name} must be a positive integer, got {k!r}")
    return int(k)


def _predicate(filter: MetadataFilter | None) -> Callable[[dict[str, Any]], bool] | None:
    if filter is None:
        return None
    if callable(filter):
        return filter
    if isinstance(filter, Mapping):
        wanted = dict(filter)
        return lambda meta: all(meta.get(k, _MISSING) == v for k, v in wanted.items())
    raise InvalidParameterError(
        f"filter must be a dict (metadata equality) or a callable(metadata) -> bool, got {type(filter)}"
    )


def _as_matrix(vectors: Any, what: str) -> np.ndarray:
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise InvalidInputError(f"{what} must be a non-empty (n, dim) array, got shape {arr.shape}")
    return arr


class NormRankVectorStore(VectorStore):
    """In-process vector store over :class:`normrank.NormIndex`, ranking by cos(q, d)·‖d‖^α.

    Args:
        embedding: a LangChain ``Embeddings``. It must return *raw* (unnormalised) vectors for
            alpha to matter; a :class:`~langchain_normrank.UnitNormWarning` is issued once when
            every added vector has norm ≈ 1.
        alpha: default exponent on the document norm; every search method also takes ``alpha=``
            (and so does ``as_retriever(search_kwargs={"alpha": ...})``).
        factory: FAISS factory string for the underlying index (``"Flat"`` = exact search).

    Document ids are strings (uuid4 when not given); adding an existing id overwrites it.
    Metadata filters (``filter=``) are a dict of required equal values or a callable taking the
    metadata dict; they are applied before the top-k cut (the search widens until ``k`` matches
    are found or the store is exhausted), so a filter never returns fewer hits than exist.
    """

    def __init__(self, embedding: Embeddings, *, alpha: float = 0.0, factory: str = "Flat") -> None:
        self.embedding = embedding
        self.alpha = _check_alpha(alpha)
        self.factory = factory
        self._index: Any = None  # normrank.NormIndex, created at the first add (needs dim)
        self._records: dict[str, _Record] = {}
        self._by_key: dict[int, str] = {}
        self._next_key = 0
        self._all_unit_so_far = True
        self._warned_unit = False
        self._lock = threading.RLock()  # the async variants run the sync ones in threads

    # ------------------------------------------------------------------ basics
    @property
    def embeddings(self) -> Embeddings:
        return self.embedding

    def __len__(self) -> int:
        return len(self._records)

    def __bool__(self) -> bool:
        # An empty store is still a store: frameworks test ``if vector_store:`` for presence.
        return True

    @property
    def index(self) -> Any:
        """The underlying ``normrank.NormIndex`` (``None`` before the first add)."""
        return self._index

    def _make_index(self, dim: int) -> Any:
        from normrank import NormIndex

        return NormIndex(dim, alpha=self.alpha, factory=self.factory)

    def _document(self, sid: str) -> Document:
        rec = self._records[sid]
        return Document(id=sid, page_content=rec.text, metadata=copy.deepcopy(rec.metadata))

    # ------------------------------------------------------------------ writing
    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Embed ``texts`` with ``embedding.embed_documents`` and add them (existing ids are overwritten)."""
        texts = list(texts)
        if not texts:
            return []
        vectors = self.embedding.embed_documents(texts)
        return self.add_embeddings(texts, vectors, metadatas, ids=ids)

    def add_embeddings(
        self,
        texts: Sequence[str],
        embeddings: Any,
        metadatas: Sequence[dict] | None = None,
        *,
        ids: Sequence[str | None] | None = None,
    ) -> list[str]:
        """Add precomputed raw vectors ``embeddings`` (n, dim) for ``texts``; returns the ids."""
        texts = list(texts)
        n = len(texts)
        if n == 0:
            return []
        vectors = _as_matrix(embeddings, "embeddings")
        if vectors.shape[0] != n:
            raise InvalidInputError(f"{n} texts but {vectors.shape[0]} embeddings")
        if metadatas is not None and len(metadatas) != n:
            raise InvalidInputError(f"{n} texts but {len(metadatas)} metadatas")
        if ids is not None and len(ids) != n:
            raise InvalidInputError(f"{n} texts but {len(ids)} ids")
        sids = [str(i) if i is not None else str(uuid.uuid4()) for i in (ids or [None] * n)]
        if len(set(sids)) != n:
            raise DuplicateIdError("ids repeat within one add call")
        metas = [copy.deepcopy(dict(m)) if m else {} for m in (metadatas or [None] * n)]

        with self._lock:
            if self._index is None:
                self._index = self._make_index(vectors.shape[1])
            elif vectors.shape[1] != self._index.dim:
                raise DimensionMismatchError(
                    f"embeddings have dim {vectors.shape[1]}, the store has dim {self._index.dim}"
                )
            keys = np.arange(self._next_key, self._next_key + n, dtype=np.int64)
            # Add first: if the index rejects the batch (zero or non-finite vector) nothing changed.
            self._index.add(vectors, ids=keys)
            self._next_key += n
            replaced = [self._records[s].key for s in sids if s in self._records]
            if replaced:
                self._index.remove(np.asarray(replaced, dtype=np.int64))
                for key in replaced:
                    del self._by_key[key]
            for sid, key, text, meta in zip(sids, keys.tolist(), texts, metas, strict=True):
                self._records[sid] = _Record(key=key, text=text, metadata=meta)
                self._by_key[key] = sid
            self._note_norms(np.linalg.norm(vectors, axis=1))
        return sids

    def _note_norms(self, norms: np.ndarray) -> None:
        self._all_unit_so_far = self._all_unit_so_far and all_unit(norms)
        if self._all_unit_so_far and not self._warned_unit:
            self._warned_unit = True
            warn_unit_norms("alpha", _RAW_HINT, stacklevel=4)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete by id (missing ids are ignored); ``ids=None`` deletes everything."""
        with self._lock:
            sids = list(self._records) if ids is None else [s for s in ids if s in self._records]
            if not sids:
                return True
            keys = np.asarray([self._records[s].key for s in sids], dtype=np.int64)
            self._index.remove(keys)
            for sid in sids:
                del self._by_key[self._records.pop(sid).key]
        return True

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """Documents for the ids that exist, in the order given."""
        with self._lock:
            return [self._document(s) for s in ids if s in self._records]

    # ------------------------------------------------------------------ searching
    def _query_vector(self, query: str) -> np.ndarray:
        return _as_matrix([self.embedding.embed_query(query)], "query embedding")[0]

    def _hits(
        self,
        vector: Any,
        k: int,
        alpha: float | None,
        filter: MetadataFilter | None,
    ) -> list[tuple[str, float]]:
        """Top-``k`` (id, score) by cos·‖d‖^α among documents passing ``filter``."""
        k = _check_k(k)
        a = self.alpha if alpha is None else _check_alpha(alpha)
        pred = _predicate(filter)
        q = _as_matrix([vector], "query embedding")
        with self._lock:
            n = len(self._records)
            if n == 0:
                return []
            if q.shape[1] != self._index.dim:
                raise DimensionMismatchError(
                    f"query has dim {q.shape[1]}, the store has dim {self._index.dim}"
                )
            # Widen the exact search until k documents pass the filter or all were scanned:
            # the filtered top-k is then exactly the top-k of the filtered set.
            want = min(n, k if pred is None else max(4 * k, 64))
            while True:
                scores, keys = self._index.search(q, want, alpha=a)
                hits: list[tuple[str, float]] = []
                for key, score in zip(keys[0].tolist(), scores[0].tolist(), strict=True):
                    if key < 0:
                        continue
                    sid = self._by_key[key]
                    if pred is None or pred(self._records[sid].metadata):
                        hits.append((sid, float(score)))
                if len(hits) >= k or want >= n:
                    return hits[:k]
                want = min(n, want * 4)

    def similarity_search_with_score_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        *,
        alpha: float | None = None,
        filter: MetadataFilter | None = None,
    ) -> list[tuple[Document, float]]:
        """(Document, cos·‖d‖^α) pairs for a query vector, best first."""
        hits = self._hits(embedding, k, alpha, filter)
        with self._lock:
            return [(self._document(s), score) for s, score in hits if s in self._records]

    def similarity_search_with_score(
        self,
        query: str,
        k: int = 4,
        *,
        alpha: float | None = None,
        filter: MetadataFilter | None = None,
    ) -> list[tuple[Document, float]]:
        """(Document, cos·‖d‖^α) pairs, best first (a similarity, not a distance)."""
        return self.similarity_search_with_score_by_vector(
            self._query_vector(query), k, alpha=alpha, filter=filter
        )

    def similarity_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        *,
        alpha: float | None = None,
        filter: MetadataFilter | None = None,
    ) -> list[Document]:
        return [
            d
            for d, _ in self.similarity_search_with_score_by_vector(embedding, k, alpha=alpha, filter=filter)
        ]

    def similarity_search(
        self,
        query: str,
        k: int = 4,
        *,
        alpha: float | None = None,
        filter: MetadataFilter | None = None,
    ) -> list[Document]:
        return self.similarity_search_by_vector(self._query_vector(query), k, alpha=alpha, filter=filter)

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        return relevance_from_score

    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        *,
        alpha: float | None = None,
        filter: MetadataFilter | None = None,
    ) -> list[Document]:
        """Maximal marginal relevance over the ``fetch_k`` best documents by cos·‖d‖^α.

        Greedy: pick ``argmax lambda_mult * s_i - (1 - lambda_mult) * max_j cos(d_i, d_j)`` over
        the already picked ``j``, where ``s_i`` is the norm-weighted score; with ``alpha = 0`` this
        is LangChain's usual cosine MMR.
        """
        k = _check_k(k)
        fetch_k = max(_check_k(fetch_k, "fetch_k"), k)
        hits = self._hits(embedding, fetch_k, alpha, filter)
        if not hits:
            return []
        with self._lock:
            vecs = np.stack([self._index.reconstruct(self._records[s].key) for s, _ in hits])
            docs = [self._document(s) for s, _ in hits]
        chosen = maximal_marginal_relevance(np.asarray([s for _, s in hits]), vecs, float(lambda_mult), k)
        return [docs[i] for i in chosen]

    def max_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        *,
        alpha: float | None = None,
        filter: MetadataFilter | None = None,
    ) -> list[Document]:
        return self.max_marginal_relevance_search_by_vector(
            self._query_vector(query), k, fetch_k, lambda_mult, alpha=alpha, filter=filter
        )

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict] | None = None,
        *,
        ids: list[str] | None = None,
        alpha: float = 0.0,
        factory: str = "Flat",
        **kwargs: Any,
    ) -> NormRankVectorStore:
        store = cls(embedding, alpha=alpha, factory=factory)
        store.add_texts(texts, metadatas, ids=ids)
        return store

    def as_retriever(self, **kwargs: Any) -> Any:
        """A :class:`~langchain_normrank.NormRankRetriever`; ``search_kwargs`` may hold ``alpha``."""
        from langchain_normrank.retrievers import NormRankRetriever

        tags = kwargs.pop("tags", None) or [*self._get_retriever_tags()]
        return NormRankRetriever(vectorstore=self, tags=tags, **kwargs)

    # ------------------------------------------------------------------ persistence
    def save_local(self, folder: str | Path) -> None:
        """Write the store to ``folder`` (NormIndex files + a JSON docstore; no pickle).

        The JSON file is the commit point, swapped in atomically after the index is written.
        Metadata must be JSON-serialisable.
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        with self._lock:
            name = None
            if self._index is not None:
                name = store_files.new_index_dirname(folder / STORE_FILE)
                self._index.save(folder / name)
            payload = {
                "format": _FORMAT,
                "version": _FORMAT_VERSION,
                "alpha": self.alpha,
                "factory": self.factory,
                "index_dir": name,
                "next_key": self._next_key,
                "all_unit_so_far": self._all_unit_so_far,
                "records": [
                    {"id": sid, "key": r.key, "text": r.text, "metadata": r.metadata}
                    for sid, r in self._records.items()
                ],
            }
            try:
                store_files.write_json_atomic(folder / STORE_FILE, payload)
            except BaseException:
                if name is not None:  # the previous save stays the committed one
                    shutil.rmtree(folder / name, ignore_errors=True)
                raise
        store_files.remove_stale_index_dirs(folder / STORE_FILE, keep=name)

    @classmethod
    def load_local(
        cls, folder: str | Path, embeddings: Embeddings, *, alpha: float | None = None
    ) -> NormRankVectorStore:
        """Load a store written by :meth:`save_local`; ``alpha`` overrides the saved default."""
        from normrank import NormIndex

        folder = Path(folder)
        payload = store_files.read_json(folder / STORE_FILE)
        if payload.get("format") != _FORMAT or payload.get("version") != _FORMAT_VERSION:
            raise CorruptIndexError(
                f"{folder}: unknown store format {payload.get('format')!r} v{payload.get('version')!r}"
            )
        try:
            store = cls(
                embeddings,
                alpha=payload["alpha"] if alpha is None else alpha,
                factory=payload["factory"],
            )
            records = payload["records"]
            for rec in records:
                store._records[str(rec["id"])] = _Record(
                    key=int(rec["key"]), text=str(rec["text"]), metadata=dict(rec["metadata"])
                )
            store._by_key = {r.key: sid for sid, r in store._records.items()}
            store._next_key = int(payload["next_key"])
            store._all_unit_so_far = bool(payload["all_unit_so_far"])
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptIndexError(f"{folder}: malformed {STORE_FILE}: {e}") from e
        store._warned_unit = store._all_unit_so_far
        if payload["index_dir"] is not None:
            store._index = NormIndex.load(
                store_files.checked_index_dir(folder / STORE_FILE, payload["index_dir"])
            )
        saved = set(store._by_key)
        have = set() if store._index is None else {int(i) for i in np.asarray(store._index.ids)}
        if saved != have or len(store._by_key) != len(store._records):
            raise CorruptIndexError(f"{folder}: the docstore and the index hold different ids")
        return store
