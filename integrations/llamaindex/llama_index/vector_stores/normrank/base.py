"""``NormRankVectorStore``: a LlamaIndex vector store ranking by cos(q, d)·‖d‖^norm_alpha.

Query similarities are the norm-weighted score ``cos(q, d) * ||d||**norm_alpha`` (higher is
better; plain cosine when ``norm_alpha = 0``). LlamaIndex's own ``alpha`` is the hybrid-search
weight, hence the name ``norm_alpha``. Override it per query with
``index.as_retriever(vector_store_kwargs={"norm_alpha": -0.5})``.
"""

from __future__ import annotations

import math
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.types import (
    DEFAULT_PERSIST_DIR,
    DEFAULT_PERSIST_FNAME,
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from llama_index.core.vector_stores.utils import metadata_dict_to_node, node_to_metadata_dict
from llama_index.vector_stores.normrank._filters import matches

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

_RAW_HINT = (
    "wrap a normrank encoder with llama_index.vector_stores.normrank.NormRankEmbedding("
    "model_name='<model name or path>'), or turn normalisation off in your embedding model "
    "(e.g. HuggingFaceEmbedding(normalize=False) with a model without a Normalize module)."
)

__all__ = ["NormRankVectorStore"]

_FORMAT = "llama-index-vector-stores-normrank"
_FORMAT_VERSION = 1
_NAMESPACE_SEP = "__"


def _check_alpha(alpha: Any) -> float:
    try:
        value = float(alpha)
    except (TypeError, ValueError) as e:
        raise InvalidParameterError(f"norm_alpha must be a real number, got {alpha!r}") from e
    if not math.isfinite(value):
        raise InvalidParameterError(f"norm_alpha must be finite, got {alpha!r}")
    return value


class NormRankVectorStore(BasePydanticVectorStore):
    """In-process LlamaIndex vector store over :class:`normrank.NormIndex`.

    Args:
        dim: embedding dimension; ``None`` takes it from the first added node.
        norm_alpha: default exponent on the document norm (``query(..., norm_alpha=...)``
            overrides it per call).
        factory: FAISS factory string of the underlying index (``"Flat"`` = exact).

    Stores node text and metadata (``stores_text = True``), so it works with
    ``VectorStoreIndex.from_vector_store``. Embeddings must be raw (unnormalised) for
    ``norm_alpha`` to matter; a :class:`UnitNormWarning` is issued once when all added vectors
    have norm ≈ 1. Metadata filters (``MetadataFilters``, nested, AND / OR / NOT, operators
    EQ NE GT GTE LT LTE IN NIN CONTAINS ANY ALL TEXT_MATCH IS_EMPTY) are applied before the
    top-k cut.
    """

    stores_text: bool = True
    flat_metadata: bool = False
    dim: int | None = None
    norm_alpha: float = 0.0
    factory: str = "Flat"

    _index: Any = PrivateAttr(default=None)
    _nodes: dict[str, dict[str, Any]] = PrivateAttr(default_factory=dict)
    _by_key: dict[int, str] = PrivateAttr(default_factory=dict)
    _next_key: int = PrivateAttr(default=0)
    _all_unit_so_far: bool = PrivateAttr(default=True)
    _warned_unit: bool = PrivateAttr(default=False)
    _lock: Any = PrivateAttr(default_factory=threading.RLock)

    def __init__(
        self, dim: int | None = None, norm_alpha: float = 0.0, factory: str = "Flat", **kwargs: Any
    ) -> None:
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
            raise InvalidParameterError(f"dim must be a positive integer, got {dim!r}")
        super().__init__(dim=dim, norm_alpha=_check_alpha(norm_alpha), factory=factory, **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "NormRankVectorStore"

    @property
    def client(self) -> Any:
        """The underlying ``normrank.NormIndex`` (``None`` before the first add without ``dim``)."""
        return self._index

    def __len__(self) -> int:
        return len(self._nodes)

    def __bool__(self) -> bool:
        # An empty store is still a store: frameworks test ``if vector_store:`` for presence.
        return True

    def _ensure_index(self, dim: int) -> Any:
        if self._index is None:
            from normrank import NormIndex

            if self.dim is None:
                self.dim = dim
            self._index = NormIndex(self.dim, alpha=self.norm_alpha, factory=self.factory)
        if dim != self.dim:
            raise DimensionMismatchError(f"embedding has dim {dim}, the store has dim {self.dim}")
        return self._index

    # ------------------------------------------------------------------ writing
    def add(self, nodes: list[BaseNode], **add_kwargs: Any) -> list[str]:
        """Add nodes with raw embeddings (``node.embedding``); an existing node id is overwritten."""
        nodes = list(nodes)
        if not nodes:
            return []
        ids = [n.node_id for n in nodes]
        if len(set(ids)) != len(ids):
            raise DuplicateIdError("node ids repeat within one add call")
        missing = [n.node_id for n in nodes if n.embedding is None]
        if missing:
            raise InvalidInputError(f"nodes without an embedding: {missing[:5]}")
        vectors = np.asarray([n.get_embedding() for n in nodes], dtype=np.float32)
        if vectors.ndim != 2:
            raise InvalidInputError("node embeddings have different lengths")
        entries = [
            {
                "ref_doc_id": n.ref_doc_id,
                "data": node_to_metadata_dict(n, remove_text=False, flat_metadata=self.flat_metadata),
            }
            for n in nodes
        ]
        with self._lock:
            index = self._ensure_index(vectors.shape[1])
            keys = np.arange(self._next_key, self._next_key + len(nodes), dtype=np.int64)
            index.add(vectors, ids=keys)  # first: a rejected batch changes nothing
            self._next_key += len(nodes)
            replaced = [self._nodes[i]["key"] for i in ids if i in self._nodes]
            if replaced:
                index.remove(np.asarray(replaced, dtype=np.int64))
                for key in replaced:
                    del self._by_key[key]
            for node_id, key, entry in zip(ids, keys.tolist(), entries, strict=True):
                self._nodes[node_id] = {"key": key, **entry}
                self._by_key[key] = node_id
            self._all_unit_so_far = self._all_unit_so_far and all_unit(np.linalg.norm(vectors, axis=1))
            if self._all_unit_so_far and not self._warned_unit:
                self._warned_unit = True
                warn_unit_norms("norm_alpha", _RAW_HINT, stacklevel=3)
        return ids

    def _remove(self, node_ids: list[str]) -> None:
        with self._lock:
            if not node_ids:
                return
            self._index.remove(np.asarray([self._nodes[i]["key"] for i in node_ids], dtype=np.int64))
            for node_id in node_ids:
                del self._by_key[self._nodes.pop(node_id)["key"]]

    def _select(self, node_ids: list[str] | None, filters: MetadataFilters | None) -> list[str]:
        with self._lock:
            pool = list(self._nodes) if node_ids is None else [i for i in node_ids if i in self._nodes]
            return [i for i in pool if matches(filters, self._nodes[i]["data"])]

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete every node whose ``ref_doc_id`` equals ``ref_doc_id``."""
        with self._lock:
            self._remove([i for i, e in self._nodes.items() if e["ref_doc_id"] == ref_doc_id])

    def delete_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
        **delete_kwargs: Any,
    ) -> None:
        """Delete the nodes among ``node_ids`` (all when ``None``) that pass ``filters``."""
        with self._lock:
            self._remove(self._select(node_ids, filters))

    def clear(self) -> None:
        with self._lock:
            self._remove(list(self._nodes))

    def get_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> list[BaseNode]:
        """Nodes (text and metadata, without embeddings) among ``node_ids`` passing ``filters``."""
        with self._lock:
            return [self._node(i) for i in self._select(node_ids, filters)]

    def _node(self, node_id: str) -> BaseNode:
        return metadata_dict_to_node(dict(self._nodes[node_id]["data"]))

    # ------------------------------------------------------------------ querying
    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Top ``similarity_top_k`` nodes by cos·‖d‖^norm_alpha among those passing the filters.

        Keyword arguments: ``norm_alpha`` (overrides the store's default for this query) and,
        for ``mode=MMR``, ``mmr_threshold`` (the MMR lambda, default 0.5, also read from the
        query): MMR re-orders the ``max(4k, 20)`` best nodes by cos·‖d‖^norm_alpha, with that
        score as relevance and cosine between nodes as redundancy.
        """
        unknown = set(kwargs) - {"norm_alpha", "mmr_threshold"}
        if unknown:
            raise InvalidParameterError(f"unknown query arguments: {sorted(unknown)}")
        if query.query_embedding is None:
            raise InvalidInputError("VectorStoreQuery.query_embedding is required")
        if query.mode not in (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.MMR):
            raise InvalidParameterError(f"query mode {query.mode!r} is not supported (default, mmr)")
        k = query.similarity_top_k
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidParameterError(f"similarity_top_k must be a positive integer, got {k!r}")
        alpha = self.norm_alpha if kwargs.get("norm_alpha") is None else _check_alpha(kwargs["norm_alpha"])
        q = np.asarray([query.query_embedding], dtype=np.float32)

        # An empty list means "no restriction": VectorStoreIndex.as_retriever passes node_ids=[]
        # for stores that keep text (its own node table is empty then), as other stores assume.
        allowed_ids = set(query.node_ids) if query.node_ids else None
        allowed_docs = set(query.doc_ids) if query.doc_ids else None

        def passes(node_id: str) -> bool:
            e = self._nodes[node_id]
            return (
                (allowed_ids is None or node_id in allowed_ids)
                and (allowed_docs is None or e["ref_doc_id"] in allowed_docs)
                and matches(query.filters, e["data"])
            )

        unfiltered = (
            allowed_ids is None and allowed_docs is None and not (query.filters and query.filters.filters)
        )
        with self._lock:
            n = len(self._nodes)
            if n == 0:
                return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
            if q.shape[1] != self.dim:
                raise DimensionMismatchError(f"query has dim {q.shape[1]}, the store has dim {self.dim}")
            fetch = k if query.mode == VectorStoreQueryMode.DEFAULT else max(4 * k, 20)
            # Widen the exact search until enough nodes pass or everything was scanned: the
            # filtered top-k is then exactly the top-k of the filtered set.
            want = min(n, fetch if unfiltered else max(4 * fetch, 64))
            while True:
                scores, keys = self._index.search(q, want, alpha=alpha)
                hits = [
                    (self._by_key[key], float(s))
                    for key, s in zip(keys[0].tolist(), scores[0].tolist(), strict=True)
                    if key >= 0 and passes(self._by_key[key])
                ]
                if len(hits) >= fetch or want >= n:
                    break
                want = min(n, want * 4)
            hits = hits[:fetch]
            if query.mode == VectorStoreQueryMode.MMR and hits:
                vecs = np.stack([self._index.reconstruct(self._nodes[i]["key"]) for i, _ in hits])
                lam = kwargs.get("mmr_threshold", query.mmr_threshold)
                lam = 0.5 if lam is None else float(lam)
                hits = [
                    hits[j]
                    for j in maximal_marginal_relevance(np.asarray([s for _, s in hits]), vecs, lam, k)
                ]
            nodes = [self._node(i) for i, _ in hits]
        return VectorStoreQueryResult(
            nodes=nodes, similarities=[s for _, s in hits], ids=[i for i, _ in hits]
        )

    # ------------------------------------------------------------------ persistence
    def persist(
        self,
        persist_path: str = os.path.join(
            DEFAULT_PERSIST_DIR, f"default{_NAMESPACE_SEP}{DEFAULT_PERSIST_FNAME}"
        ),
        fs: fsspec.AbstractFileSystem | None = None,
    ) -> None:
        """Write ``persist_path`` (JSON) and its index directory beside it, atomically; no pickle."""
        _local_only(fs)
        path = Path(persist_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            name = None
            if self._index is not None:
                name = store_files.new_index_dirname(path)
                self._index.save(path.parent / name)
            payload = {
                "format": _FORMAT,
                "version": _FORMAT_VERSION,
                "dim": self.dim,
                "norm_alpha": self.norm_alpha,
                "factory": self.factory,
                "index_dir": name,
                "next_key": self._next_key,
                "all_unit_so_far": self._all_unit_so_far,
                "nodes": [{"id": i, **e} for i, e in self._nodes.items()],
            }
            try:
                store_files.write_json_atomic(path, payload)
            except BaseException:
                if name is not None:  # the previous persist stays the committed one
                    shutil.rmtree(path.parent / name, ignore_errors=True)
                raise
        store_files.remove_stale_index_dirs(path, keep=name)

    @classmethod
    def from_persist_path(
        cls, persist_path: str, fs: fsspec.AbstractFileSystem | None = None
    ) -> NormRankVectorStore:
        """Load a store written by :meth:`persist`."""
        from normrank import NormIndex

        _local_only(fs)
        path = Path(persist_path)
        payload = store_files.read_json(path)
        if payload.get("format") != _FORMAT or payload.get("version") != _FORMAT_VERSION:
            raise CorruptIndexError(
                f"{path}: unknown store format {payload.get('format')!r} v{payload.get('version')!r}"
            )
        try:
            store = cls(dim=payload["dim"], norm_alpha=payload["norm_alpha"], factory=payload["factory"])
            for e in payload["nodes"]:
                store._nodes[str(e["id"])] = {
                    "key": int(e["key"]),
                    "ref_doc_id": e["ref_doc_id"],
                    "data": dict(e["data"]),
                }
            store._by_key = {e["key"]: i for i, e in store._nodes.items()}
            store._next_key = int(payload["next_key"])
            store._all_unit_so_far = bool(payload["all_unit_so_far"])
            index_dir = payload["index_dir"]
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptIndexError(f"{path}: malformed store file: {e}") from e
        store._warned_unit = store._all_unit_so_far
        if index_dir is not None:
            store._index = NormIndex.load(store_files.checked_index_dir(path, index_dir))
            if store._index.dim != store.dim:
                raise CorruptIndexError(f"{path}: index dim {store._index.dim} != saved dim {store.dim}")
        have = set() if store._index is None else {int(i) for i in np.asarray(store._index.ids)}
        if have != set(store._by_key) or len(store._by_key) != len(store._nodes):
            raise CorruptIndexError(f"{path}: the node table and the index hold different ids")
        return store

    @classmethod
    def from_persist_dir(
        cls,
        persist_dir: str = DEFAULT_PERSIST_DIR,
        namespace: str = "default",
        fs: fsspec.AbstractFileSystem | None = None,
    ) -> NormRankVectorStore:
        """Load the store that ``StorageContext.persist(persist_dir)`` wrote for ``namespace``."""
        return cls.from_persist_path(
            os.path.join(persist_dir, f"{namespace}{_NAMESPACE_SEP}{DEFAULT_PERSIST_FNAME}"), fs=fs
        )


def _local_only(fs: fsspec.AbstractFileSystem | None) -> None:
    if fs is not None and "file" not in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)):
        raise InvalidParameterError("NormRankVectorStore persists to the local filesystem only")
