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
from normrank.store.checks import check_json_value
from normrank.unit_norms import all_unit

__all__ = [
    "DocstoreView",
    "FaissSaveError",
    "LiveDocument",
    "MigrationWarning",
    "check_faiss_options",
    "faiss_constructor_index",
    "faiss_contents",
    "keeps_raw_vectors",
    "refuse_faiss_folder",
]


class FaissSaveError(InvalidParameterError):
    """A LangChain FAISS save was given where a normrank store was expected: normrank does not
    read its pickle; the message names the two lines that migrate it."""


class MigrationWarning(UserWarning):
    """Said once per migration from a LangChain FAISS store: what was read and what was redone."""


class LiveDocument(Document):
    """A document as ``store.docstore`` hands it out: edits reach the store, as in FAISS, whose
    docstore holds the very objects. ``doc.metadata`` *is* the stored metadata dict (in-place
    edits take effect at once, filters included); assigning ``page_content`` or ``metadata``
    writes through (the new metadata checked as at ``add``); the id cannot change."""

    def __setattr__(self, name: str, value: Any) -> None:
        record = self.__pydantic_private__.get("_record") if self.__pydantic_private__ else None
        if record is not None and name in ("page_content", "metadata", "id"):
            if name == "id":
                raise InvalidParameterError(
                    "a stored document's id cannot change: delete it and add it under the new id"
                )
            if name == "page_content" and not isinstance(value, str):
                raise InvalidInputError(f"page_content must be a str, got {type(value).__name__}")
            if name == "metadata":
                if not isinstance(value, dict):
                    raise InvalidInputError(f"metadata must be a dict, got {type(value).__name__}")
                check_json_value(value, f"metadata of document {self.id!r}")
            record["text" if name == "page_content" else "metadata"] = value
        super().__setattr__(name, value)


def live_document(sid: str, record: dict[str, Any]) -> LiveDocument:
    """The :class:`LiveDocument` over ``record`` (no copy: ``model_construct`` keeps the dict)."""
    doc = LiveDocument.model_construct(id=sid, page_content=record["text"], metadata=record["metadata"])
    object.__setattr__(doc, "__pydantic_private__", {"_record": record})
    return doc


class DocstoreView:
    """Stand-in for FAISS's ``store.docstore`` (an ``InMemoryDocstore``): ``search(id)`` and
    ``_dict``, as LangChain's FAISS docs use them, over the store's own documents. The documents
    are :class:`LiveDocument` objects: editing ``doc.metadata`` in place takes effect, as in
    FAISS. Adding or deleting through it is refused: add and delete on the vector store."""

    def __init__(self, records: Any, lock: Any) -> None:
        self._records = records  # the store's {id: record}, read fresh on every access
        self._lock = lock

    @property
    def _dict(self) -> Mapping[str, Document]:
        with self._lock:
            return MappingProxyType({sid: live_document(sid, r) for sid, r in self._records.items()})

    def search(self, search: str) -> Document | str:
        """The document with id ``search``, or InMemoryDocstore's "ID ... not found." string."""
        with self._lock:
            record = self._records.get(search if isinstance(search, str) else str(search))
            return f"ID {search} not found." if record is None else live_document(str(search), record)

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


def faiss_constructor_index(
    index: Any, docstore: Any, index_to_docstore_id: Any
) -> tuple[int | None, str | None]:
    """(dim, factory) for FAISS's constructor arguments, as its docs pass them (an empty index,
    an empty docstore and map). An empty ``IndexFlat*`` sets the dimension; an empty
    ``IndexHNSWFlat(d, M)`` the dimension and the factory ``"HNSW<M>"`` (the metric does not carry
    over: scores are cos * ||d||**alpha). Anything holding data is refused, pointing to
    :meth:`NormRankVectorStore.from_faiss`; other index types, with the factory string to use."""
    held = (index is not None and getattr(index, "ntotal", 0)) or len(getattr(docstore, "_dict", None) or {})
    if held or index_to_docstore_id:
        raise InvalidParameterError(
            "index=/docstore=/index_to_docstore_id= hold data: migrate a filled FAISS store with "
            "NormRankVectorStore.from_faiss(FAISS(...))"
        )
    if index is None:
        return None, None
    import faiss

    if isinstance(index, faiss.IndexFlat):
        return int(index.d), None
    if isinstance(index, faiss.IndexHNSWFlat):
        return int(index.d), f"HNSW{int(index.hnsw.nb_neighbors(1))}"
    raise UnsupportedIndexError(
        f"index={type(index).__name__}: pass factory='<FAISS factory string>' (e.g. 'IVF256,Flat') "
        "instead; NormRankVectorStore builds its own inner-product index over unit vectors "
        "(an empty IndexFlat* or IndexHNSWFlat is taken as it is); a normrank backend "
        "(normrank.IndexBackend: NormIndex, Qdrant, PostgreSQL, your own) goes to "
        "NormRankVectorStore.from_index(index, embedding)"
    )


def keeps_raw_vectors(index: Any) -> bool:
    """Whether FAISS gives back the vectors it was given (flat storage, IVF-Flat lists, an
    HNSW's flat storage), not decoded approximations (PQ, SQ, LSH, a pre-transform)."""
    import faiss

    from normrank.search.faiss_info import levels, raw_vectors

    if any(isinstance(level, faiss.IndexPreTransform) for level in levels(index)):
        return False
    try:
        raw_vectors(index)
    except UnsupportedIndexError:
        return False
    return True


def faiss_contents(
    faiss_store: Any, embedding: Embeddings | None
) -> tuple[Embeddings, list[str], Any, list[dict], list[str]]:
    """(embedding model, texts, raw vectors, metadatas, ids) of a FAISS store, in position order.

    Vectors that are all unit length (``normalize_L2=True`` or a normalising model) have lost
    their norms, and compressed codes (PQ, SQ, LSH, a pre-transform) decode to approximations:
    in both cases the texts are re-embedded with ``embedding`` (which must return raw vectors),
    and a :class:`MigrationWarning` says which. ``embedding`` defaults to the store's own.
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
    texts = [d.page_content for d in docs]
    if n and not keeps_raw_vectors(index):
        # decoded PQ / SQ codes are approximations: their norms are off (median ~5%, up to ~40%)
        warnings.warn(
            f"the FAISS store's {type(index).__name__} keeps compressed codes, which decode to "
            f"approximations whose norms are off: the {n} texts are re-embedded with "
            f"{type(emb).__name__} instead of copying the decoded vectors",
            MigrationWarning,
            stacklevel=3,
        )
        return emb, texts, emb.embed_documents(texts), [d.metadata for d in docs], ids
    try:
        vectors = stored_vectors(index, n)
    except RuntimeError as e:
        raise UnsupportedIndexError(
            f"this FAISS index cannot give back its vectors ({e}); rebuild from the texts with "
            "NormRankVectorStore.from_documents(documents, embedding)"
        ) from e
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
