"""What ``NormRankVectorStore`` needs to stand in for ``langchain_community``'s FAISS: FAISS's
constructor options checked (refused where they would change results), and a FAISS store or a
saved FAISS folder read for migration (its documents, ids and raw vectors)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, NoReturn

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from normrank.errors import (
    InvalidInputError,
    InvalidParameterError,
    UnsupportedIndexError,
)
from normrank.unit_norms import all_unit

__all__ = [
    "DocstoreView",
    "FaissSaveError",
    "MigrationWarning",
    "check_faiss_options",
    "faiss_constructor_dim",
    "faiss_contents",
    "refuse_faiss_folder",
]


class FaissSaveError(InvalidParameterError):
    """A LangChain FAISS save was given where a normrank store was expected: normrank does not
    read its pickle; the message names the two lines that migrate it."""


class MigrationWarning(UserWarning):
    """Said once per migration from a LangChain FAISS store: what was read and what was redone."""


class DocstoreView:
    """Read-only stand-in for FAISS's ``store.docstore`` (an ``InMemoryDocstore``): ``search(id)``
    and ``_dict``, as LangChain's FAISS docs use them, over the store's own documents. Writing
    through it is refused: add and delete on the vector store."""

    def __init__(self, documents: Any) -> None:
        self._documents = documents  # () -> {id: Document}, read fresh on every access

    @property
    def _dict(self) -> Mapping[str, Document]:
        return MappingProxyType(self._documents())

    def search(self, search: str) -> Document | str:
        """The document with id ``search``, or InMemoryDocstore's "ID ... not found." string."""
        return self._documents().get(search, f"ID {search} not found.")

    def add(self, texts: Any) -> None:
        raise InvalidParameterError(
            "the docstore of a NormRankVectorStore is read-only: use store.add_documents(...)"
        )

    def delete(self, ids: Any) -> None:
        raise InvalidParameterError(
            "the docstore of a NormRankVectorStore is read-only: use store.delete(ids=...)"
        )


def _strategy_name(strategy: Any) -> str:
    return str(getattr(strategy, "value", strategy)).upper()


def check_faiss_options(normalize_L2: Any, distance_strategy: Any) -> None:
    """Refuse the FAISS options whose results this store would not give."""
    if normalize_L2:
        raise InvalidParameterError(
            "normalize_L2=True would throw away the norms that alpha weighs; leave it out: "
            "NormRankVectorStore keeps each vector's norm beside its direction and ranks by "
            "cosine at alpha=0"
        )
    if distance_strategy is None:
        return
    name = _strategy_name(distance_strategy)
    if name == "COSINE":
        return
    advice = {
        "MAX_INNER_PRODUCT": "alpha=1.0 ranks exactly by inner product (scores are q·d / ||q||)",
        "DOT_PRODUCT": "alpha=1.0 ranks exactly by inner product (scores are q·d / ||q||)",
        "EUCLIDEAN_DISTANCE": "alpha=0 is cosine, the ranking L2 gives on normalised vectors",
    }.get(name, "it has no equivalent here")
    raise InvalidParameterError(
        f"distance_strategy={name} is not what NormRankVectorStore computes: it ranks by "
        f"cos(q, d) * ||d||**alpha (DistanceStrategy.COSINE at alpha=0); {advice}"
    )


def stored_vectors(index: Any, n: int) -> Any:
    """The ``n`` vectors a FAISS index stores, in position order (IVF: through a direct map
    built on a copy, leaving the caller's index as it was)."""
    import faiss
    import numpy as np

    if n == 0:
        return np.zeros((0, index.d), np.float32)
    try:
        return index.reconstruct_n(0, n)
    except RuntimeError:
        ivf = faiss.try_extract_index_ivf(index)
        if ivf is None:
            raise
        copy_ = faiss.clone_index(index)
        faiss.extract_index_ivf(copy_).make_direct_map()
        return copy_.reconstruct_n(0, n)


def faiss_constructor_dim(index: Any, docstore: Any, index_to_docstore_id: Any) -> int | None:
    """FAISS's constructor arguments, as its docs pass them (an empty flat index, an empty
    docstore and map): they set the dimension. Anything holding data is refused, pointing to
    :meth:`NormRankVectorStore.from_faiss`."""
    held = (index is not None and getattr(index, "ntotal", 0)) or len(getattr(docstore, "_dict", None) or {})
    if held or index_to_docstore_id:
        raise InvalidParameterError(
            "index=/docstore=/index_to_docstore_id= hold data: migrate a filled FAISS store with "
            "NormRankVectorStore.from_faiss(FAISS(...))"
        )
    if index is None:
        return None
    import faiss

    if not isinstance(index, faiss.IndexFlat):
        raise UnsupportedIndexError(
            f"index={type(index).__name__}: pass factory='<FAISS factory string>' (e.g. 'HNSW32') "
            "instead; NormRankVectorStore builds its own inner-product index over unit vectors"
        )
    return int(index.d)  # the metric does not carry over: scores are cos * ||d||**alpha


def faiss_contents(
    faiss_store: Any, embedding: Embeddings | None
) -> tuple[Embeddings, list[str], Any, list[dict], list[str]]:
    """(embedding model, texts, raw vectors, metadatas, ids) of a FAISS store, in position order.

    Vectors that are all unit length (``normalize_L2=True`` or a normalising model) have lost
    their norms: the texts are then re-embedded with ``embedding`` (which must return raw
    vectors), and a :class:`MigrationWarning` says so. ``embedding`` defaults to the store's own.
    """
    import numpy as np

    emb = embedding if embedding is not None else getattr(faiss_store, "embedding_function", None)
    if not isinstance(emb, Embeddings):
        raise InvalidParameterError("give embedding=<a LangChain Embeddings returning raw vectors>")
    index = faiss_store.index
    n = int(index.ntotal)
    order = sorted(faiss_store.index_to_docstore_id)
    if order != list(range(n)):
        raise InvalidInputError(f"index_to_docstore_id does not cover the {n} FAISS positions")
    ids = [faiss_store.index_to_docstore_id[i] for i in order]
    docs = [faiss_store.docstore.search(i) for i in ids]
    bad = [i for i, d in enumerate(docs) if not isinstance(d, Document)]
    if bad:
        raise InvalidInputError(f"the FAISS docstore lacks the document at position {bad[0]}")
    try:
        vectors = stored_vectors(index, n)
    except RuntimeError as e:
        raise UnsupportedIndexError(
            f"this FAISS index cannot give back its vectors ({e}); rebuild from the texts with "
            "NormRankVectorStore.from_documents(documents, embedding)"
        ) from e
    texts = [d.page_content for d in docs]
    if n and (getattr(faiss_store, "_normalize_L2", False) or all_unit(np.linalg.norm(vectors, axis=1))):
        warnings.warn(
            f"the FAISS store holds unit-length vectors (normalize_L2 or a normalising model): "
            f"their norms are gone, so the {n} texts are re-embedded with {type(emb).__name__}",
            MigrationWarning,
            stacklevel=3,
        )
        vectors = emb.embed_documents(texts)
    return emb, texts, vectors, [d.metadata for d in docs], ids


def refuse_faiss_folder(folder: Path, index_name: str) -> NoReturn:
    """A LangChain FAISS save is never read here: its ``.pkl`` can only be read by unpickling,
    which normrank never does. The error names the two lines that migrate it in the user's code."""
    raise FaissSaveError(
        f"{folder} holds a LangChain FAISS save ({index_name}.faiss + {index_name}.pkl), which normrank "
        f"does not read: its .pkl is a pickle and normrank never unpickles. If you trust the file, load "
        f"it with langchain_community (store = FAISS.load_local(folder, embeddings, index_name="
        f"{index_name!r}, allow_dangerous_deserialization=...)), then migrate it with "
        "NormRankVectorStore.from_faiss(store) and save_local(folder)"
    )
