"""``NormRankVectorStore``: a LlamaIndex vector store ranking by cos(q, d)·‖d‖^norm_alpha.

Query similarities are the norm-weighted score ``cos(q, d) * ||d||**norm_alpha`` (higher is
better; plain cosine when ``norm_alpha = 0``). LlamaIndex's own ``alpha`` is the hybrid-search
weight, hence the name ``norm_alpha``. Override it per query with
``index.as_retriever(vector_store_kwargs={"norm_alpha": -0.5})`` or
``NormRankRetriever(index, norm_alpha=-0.5)`` (a plain ``as_retriever(norm_alpha=...)`` drops the
keyword: LlamaIndex's retriever discards keywords it does not know, and normrank patches nothing).
The store itself is :class:`normrank.store.keyed_store.KeyedStore`.

Persisting: ``index.storage_context.persist(d)`` writes ``d/default__normrank_store.json`` (and
its index folder). LlamaIndex's default reload reads every ``*vector_store.json`` as a
``SimpleVectorStore``, which cannot hold this store; so ``d/default__vector_store.json`` is a
stub that makes that reload fail with the line that works::

    StorageContext.from_defaults(persist_dir=d, vector_store=NormRankVectorStore.from_persist_dir(d))
"""

from __future__ import annotations

import json
import os
import re
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
from llama_index.vector_stores.normrank._filters import check_kinds, matches
from llama_index.vector_stores.normrank._sql_filters import sql_where

from normrank.errors import CorruptIndexError, InvalidInputError, InvalidParameterError
from normrank.store import files as store_files
from normrank.store.checks import check_json_value, refuse_untrained_factory, reject_unknown
from normrank.store.contract import IndexBackend, SavingBackend
from normrank.store.keyed_store import KeyedStore, StoreBacked, StoreNotFoundError

_RAW_HINT = (
    "wrap a normrank encoder with llama_index.vector_stores.normrank.NormRankEmbedding("
    "model_name='<model name or path>'), or turn normalisation off in your embedding model "
    "(e.g. HuggingFaceEmbedding(normalize=False) with a model without a Normalize module)."
)

__all__ = ["NormRankVectorStore"]

_HEADER = {"format": "llama-index-vector-stores-normrank", "version": 2}
_NAMESPACE_SEP = "__"
_STORE_FNAME = "normrank_store.json"
_ALPHA_HINT = {
    "alpha": "LlamaIndex's alpha is the hybrid (sparse/dense) weight and normrank has no hybrid "
    "mode; the exponent on the document norm is norm_alpha=",
}
_QUERY_KWARGS = ("norm_alpha", "mmr_threshold")


def _stub(real_name: str) -> dict[str, Any]:
    # SimpleVectorStoreData.from_dict fails on the string below with this message in the error:
    # the default reload is loud and says what to write instead.
    line = (
        "this folder holds a normrank store (" + real_name + "), which SimpleVectorStore cannot read; "
        "load it with StorageContext.from_defaults(persist_dir=<folder>, "
        "vector_store=NormRankVectorStore.from_persist_dir(<folder>))"
    )
    return {"embedding_dict": {"normrank": [line]}, "normrank_store": real_name}


def _real_path(path: Path) -> Path:
    """Where the store's data lives for ``path``: LlamaIndex's ``<ns>__vector_store.json`` names
    map to ``<ns>__normrank_store.json``; any other name holds the data itself."""
    if path.name.endswith(DEFAULT_PERSIST_FNAME):
        return path.with_name(path.name[: -len(DEFAULT_PERSIST_FNAME)] + _STORE_FNAME)
    return path


def check_unit_interval(value: Any, name: str) -> float:
    """A float in [0, 1], or InvalidParameterError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise InvalidParameterError(f"{name} must be a number in [0, 1], got {value!r}")
    return float(value)


def _check_record(rec: dict[str, Any]) -> None:
    if set(rec) != {"ref_doc_id", "data"} or not isinstance(rec["data"], dict):
        raise ValueError("a node record needs exactly ref_doc_id and a dict data")
    if rec["ref_doc_id"] is not None and not isinstance(rec["ref_doc_id"], str):
        raise ValueError("ref_doc_id must be a string or null")
    metadata_dict_to_node(dict(rec["data"]))  # raises for data LlamaIndex cannot turn into a node


class NormRankVectorStore(StoreBacked, BasePydanticVectorStore):
    """In-process LlamaIndex vector store over :class:`normrank.NormIndex`.

    Args:
        dim: embedding dimension; ``None`` takes it from the first added node.
        norm_alpha: default exponent on the document norm, within [-16, 16]
            (``as_retriever(vector_store_kwargs={"norm_alpha": ...})``, ``NormRankRetriever`` or
            ``query(..., norm_alpha=...)`` override it).
        factory: FAISS factory string of the underlying index (``"Flat"`` = exact).

    Stores node text and metadata (``stores_text = True``), so it works with
    ``VectorStoreIndex.from_vector_store``. Embeddings must be raw (unnormalised) for
    ``norm_alpha`` to matter; a :class:`UnitNormWarning` is issued once when all added vectors
    have norm ≈ 1. Metadata filters (``MetadataFilters``, nested, AND / OR / NOT, operators
    EQ NE GT GTE LT LTE IN NIN CONTAINS ANY ALL TEXT_MATCH IS_EMPTY) are applied before the
    top-k cut. Metadata must be JSON values (no dates or tuples): others are refused at ``add``.
    Unknown keyword arguments raise ``TypeError`` (``alpha=`` says to use ``norm_alpha=``).
    """

    stores_text: bool = True
    flat_metadata: bool = False
    dim: int | None = None
    norm_alpha: float = 0.0
    factory: str = "Flat"

    _store: KeyedStore = PrivateAttr()

    def __init__(
        self, dim: int | None = None, norm_alpha: float = 0.0, factory: str = "Flat", **kwargs: Any
    ) -> None:
        extra = {
            k: v for k, v in kwargs.items() if k not in ("stores_text", "flat_metadata", "is_embedding_query")
        }
        reject_unknown(extra, ("dim", "norm_alpha", "factory"), "NormRankVectorStore()", _ALPHA_HINT)
        refuse_untrained_factory(factory, dim, "NormRankVectorStore.from_index(index)")
        store = KeyedStore(
            alpha=norm_alpha, factory=factory, dim=dim, alpha_name="norm_alpha", raw_hint=_RAW_HINT
        )
        super().__init__(dim=store.dim, norm_alpha=store.alpha, factory=factory, **kwargs)
        self._store = store

    @property
    def client(self) -> Any:
        """The underlying ``normrank.NormIndex`` (``None`` before the first add), or the index
        given to :meth:`from_index` / :meth:`from_postgres`."""
        return self._store.index

    @classmethod
    def class_name(cls) -> str:
        return "NormRankVectorStore"

    def get(self, text_id: str) -> list[float]:
        """The raw embedding of node ``text_id``, as ``SimpleVectorStore.get`` (KeyError if absent)."""
        with self._store.lock:
            if text_id not in self._store:
                raise KeyError(text_id)
            return self._store.vectors([text_id])[0].tolist()

    def to_dict(self, **kwargs: Any) -> dict[str, Any]:
        """Everything the store holds, JSON-ready (as ``SimpleVectorStore.to_dict``, whose dict
        holds its embeddings): options, and per node its id, record and raw embedding."""
        reject_unknown(kwargs, (), "to_dict()")
        with self._store.lock:
            ids = list(self._store.records)
            vectors = self._store.vectors(ids).tolist() if ids else []
            nodes = [
                {"id": i, "record": self._store.records[i], "embedding": v}
                for i, v in zip(ids, vectors, strict=True)
            ]
        head = {"dim": self._store.dim, "norm_alpha": self._store.alpha, "factory": self._store.factory}
        return {**_HEADER, "class_name": self.class_name(), **head, "nodes": nodes}

    @classmethod
    def from_dict(cls, data: dict[str, Any], **kwargs: Any) -> NormRankVectorStore:
        """The store :meth:`to_dict` described; a dict of another kind raises ``CorruptIndexError``."""
        reject_unknown(kwargs, (), "from_dict()")
        where = "NormRankVectorStore.from_dict"
        if not isinstance(data, dict) or any(data.get(k) != v for k, v in _HEADER.items()):
            raise CorruptIndexError(f"{where}: not a dict written by NormRankVectorStore.to_dict()")
        try:
            store = cls(dim=data["dim"], norm_alpha=data["norm_alpha"], factory=data["factory"])
            nodes = data["nodes"]
            for entry in nodes:
                _check_record(entry["record"])
            if nodes:
                ids = [e["id"] for e in nodes]
                store._store.add(
                    ids, np.asarray([e["embedding"] for e in nodes], np.float32), [e["record"] for e in nodes]
                )
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptIndexError(f"{where}: malformed ({e})") from e
        return store

    def to_json(self, **kwargs: Any) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(**kwargs), ensure_ascii=False, allow_nan=False)

    @classmethod
    def from_json(cls, data_str: str, **kwargs: Any) -> NormRankVectorStore:
        """The store :meth:`to_json` wrote."""
        try:
            data = json.loads(data_str)
        except (TypeError, ValueError) as e:
            raise CorruptIndexError(f"NormRankVectorStore.from_json: not JSON ({e})") from e
        return cls.from_dict(data, **kwargs)

    # ------------------------------------------------------------------ writing
    def add(self, nodes: list[BaseNode], **add_kwargs: Any) -> list[str]:
        """Add nodes with raw embeddings (``node.embedding``); an existing node id is overwritten."""
        reject_unknown(add_kwargs, (), "add()")
        nodes = list(nodes)
        if not nodes:
            return []
        missing = [n.node_id for n in nodes if n.embedding is None]
        if missing:
            raise InvalidInputError(f"nodes without an embedding: {missing[:5]}")
        lengths = {len(n.get_embedding()) for n in nodes}
        if len(lengths) != 1:
            raise InvalidInputError("node embeddings have different lengths")
        ids = [n.node_id for n in nodes]
        records = [
            {
                "ref_doc_id": n.ref_doc_id,
                "data": node_to_metadata_dict(n, remove_text=False, flat_metadata=self.flat_metadata),
            }
            for n in nodes
        ]
        for n in nodes:  # the node round-trips through its own JSON; its metadata must too
            check_json_value(n.metadata, f"metadata of node {n.node_id!r}")
        self._store.add(ids, [n.get_embedding() for n in nodes], records)
        self.dim = self._store.dim
        return ids

    def _check_kinds(self, filters: MetadataFilters | None) -> None:
        """A filter across kinds raises (FilterTypeError), looking at every node: never []."""
        if filters is not None and filters.filters:
            check_kinds(filters, (r["data"] for r in self._store.records.values()))

    def _select(self, node_ids: list[str] | None, filters: MetadataFilters | None) -> list[str]:
        records = self._store.records
        self._check_kinds(filters)
        pool = list(records) if node_ids is None else [i for i in node_ids if i in records]
        return [i for i in pool if matches(filters, records[i]["data"])]

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete every node whose ``ref_doc_id`` equals ``ref_doc_id``."""
        reject_unknown(delete_kwargs, (), "delete()")
        with self._store.lock:
            self._store.delete([i for i, r in self._store.records.items() if r["ref_doc_id"] == ref_doc_id])

    def delete_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
        **delete_kwargs: Any,
    ) -> None:
        """Delete the nodes among ``node_ids`` (all when ``None``) that pass ``filters``; with
        neither given it raises (``clear()`` deletes every node): ``SimpleVectorStore`` would
        delete every node there and ``PGVectorStore`` none, so no answer is safe for both."""
        reject_unknown(delete_kwargs, (), "delete_nodes()")
        if node_ids is None and filters is None:
            raise InvalidParameterError(
                "delete_nodes() got neither node_ids nor filters: to delete every node call clear()"
            )
        with self._store.lock:
            self._store.delete(self._select(node_ids, filters))

    def clear(self) -> None:
        with self._store.lock:
            self._store.delete(list(self._store.records))

    def get_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> list[BaseNode]:
        """Nodes (text and metadata, without embeddings) among ``node_ids`` passing ``filters``."""
        with self._store.lock:
            return [self._node(i) for i in self._select(node_ids, filters)]

    def _node(self, node_id: str) -> BaseNode:
        return metadata_dict_to_node(dict(self._store.records[node_id]["data"]))

    # ------------------------------------------------------------------ querying
    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Top ``similarity_top_k`` nodes by cos·‖d‖^norm_alpha among those passing the filters.

        Keyword arguments (``vector_store_kwargs``, or ``NormRankRetriever(index, norm_alpha=...)``):
        ``norm_alpha`` (overrides the store's default for this query) and, for ``mode=MMR``,
        ``mmr_threshold`` (the MMR lambda, default 0.5, also read from the query). MMR is
        ``SimpleVectorStore``'s (LlamaIndex's ``get_top_k_mmr_embeddings``) over every node
        passing the filters, with cos·‖d‖^norm_alpha as the relevance: the first pick scores
        ``lambda * s``, each next ``lambda * s - (1 - lambda) * cos(d, previous pick)``, and the
        similarities returned are those MMR scores (at norm_alpha = 0 SimpleVectorStore's result).
        ``doc_ids`` restricts the search to nodes of those documents (SimpleVectorStore ignores it).
        ``VectorStoreQuery.alpha`` (LlamaIndex's hybrid weight) is refused: no hybrid mode here.
        """
        reject_unknown(
            {k: v for k, v in kwargs.items() if k not in _QUERY_KWARGS}, _QUERY_KWARGS, "query()", _ALPHA_HINT
        )
        if query.alpha is not None:
            raise InvalidParameterError(
                f"alpha={query.alpha} is LlamaIndex's hybrid-search weight and this store has no hybrid "
                "mode; for the exponent on the document norm use "
                'as_retriever(vector_store_kwargs={"norm_alpha": ...})'
            )
        if query.query_embedding is None:
            raise InvalidInputError("VectorStoreQuery.query_embedding is required")
        if query.mode not in (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.MMR):
            raise InvalidParameterError(f"query mode {query.mode!r} is not supported (default, mmr)")
        k = query.similarity_top_k
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidParameterError(f"similarity_top_k must be a positive integer, got {k!r}")
        alpha = self.norm_alpha if kwargs.get("norm_alpha") is None else kwargs["norm_alpha"]

        # An empty list means "no restriction": VectorStoreIndex.as_retriever passes node_ids=[]
        # for stores that keep text (its own node table is empty then), as other stores assume.
        allowed_ids = set(query.node_ids) if query.node_ids else None
        allowed_docs = set(query.doc_ids) if query.doc_ids else None
        records = self._store.records

        def passes(node_id: str) -> bool:
            r = records[node_id]
            return (
                (allowed_ids is None or node_id in allowed_ids)
                and (allowed_docs is None or r["ref_doc_id"] in allowed_docs)
                and matches(query.filters, r["data"])
            )

        unfiltered = (
            allowed_ids is None and allowed_docs is None and not (query.filters and query.filters.filters)
        )
        pred = None if unfiltered else passes
        # On a store kept in PostgreSQL the restrictions run in SQL where they can be said there.
        where = None
        if pred is not None and self._store.keeps_records:
            where = sql_where(query.filters, query.node_ids, query.doc_ids)
        how = {"passes": pred} if where is None else {"where": where}
        with self._store.lock:
            self._check_kinds(query.filters)
            if query.mode == VectorStoreQueryMode.MMR:
                lam = kwargs.get("mmr_threshold", query.mmr_threshold)
                ids, scores = self._mmr(query.query_embedding, k, alpha, how, 0.5 if lam is None else lam)
            else:
                hits = self._store.search(query.query_embedding, k, alpha=alpha, **how)
                ids, scores = [h.id for h in hits], [h.score for h in hits]
            nodes = [self._node(i) for i in ids]
        return VectorStoreQueryResult(nodes=nodes, similarities=scores, ids=ids)

    def _mmr(
        self, query_embedding: Any, k: int, alpha: float, how: dict[str, Any], threshold: Any
    ) -> tuple[list[str], list[float]]:
        """LlamaIndex's MMR (``get_top_k_mmr_embeddings``, as ``SimpleVectorStore`` runs it) over
        every passing node in insertion order, relevance cos·‖d‖^alpha: (ids, MMR scores)."""
        lam = check_unit_interval(threshold, "mmr_threshold")
        hits = self._store.search(query_embedding, max(1, len(self._store)), alpha=alpha, **how)
        if not hits:
            return [], []
        position = {sid: i for i, sid in enumerate(self._store.records)}
        hits.sort(key=lambda h: position[h.id])  # SimpleVectorStore walks its nodes in insertion order
        raw = self._store.vectors([h.id for h in hits]).astype(np.float64)
        unit = raw / np.maximum(np.linalg.norm(raw, axis=1, keepdims=True), np.finfo(np.float64).tiny)
        rel = np.asarray([h.score for h in hits])
        free = np.ones(len(hits), bool)
        pick = int(np.argmax(rel * lam))  # the first of equal maxima, as its strict '>' keeps
        ids, scores = [], []
        score = float(rel[pick] * lam)
        while True:
            ids.append(hits[pick].id)
            scores.append(score)
            free[pick] = False
            if len(ids) >= min(k, len(hits)):
                return ids, scores
            # redundancy is the cosine to the latest pick only, as in LlamaIndex's loop
            mmr = np.where(free, lam * rel - (1 - lam) * (unit @ unit[pick]), -np.inf)
            pick = int(np.argmax(mmr))
            score = float(mmr[pick])

    # ------------------------------------------------------------------ persistence
    def persist(
        self,
        persist_path: str = os.path.join(DEFAULT_PERSIST_DIR, DEFAULT_PERSIST_FNAME),  # SimpleVectorStore's
        fs: fsspec.AbstractFileSystem | None = None,
    ) -> None:
        """Write the store atomically (no pickle): JSON plus an index folder beside it.

        For LlamaIndex's ``<namespace>__vector_store.json`` the data goes to
        ``<namespace>__normrank_store.json`` and the given file is a stub that makes
        ``SimpleVectorStore`` fail loudly with the line that loads this store (module docstring).
        """
        _local_only(fs)
        path = Path(persist_path)
        real = _real_path(path)
        if real == path:
            self._store.save(real, _HEADER)
            return
        made_stub = not path.exists()
        created = store_files.make_folder(path.parent)
        try:
            store_files.write_json_atomic(path, _stub(real.name))  # first: constant, taken back on failure
            self._store.save(real, _HEADER)
        except BaseException:
            if made_stub:
                path.unlink(missing_ok=True)
            store_files.remove_empty_folders(created)
            raise

    @classmethod
    def from_persist_path(
        cls,
        persist_path: str,
        fs: fsspec.AbstractFileSystem | None = None,
        *,
        index: IndexBackend | type[SavingBackend] | None = None,
    ) -> NormRankVectorStore:
        """Load a store written by :meth:`persist` (given the path it was persisted to).

        ``index``: the index holding the vectors of a store made by :meth:`from_index` (its
        files keep the nodes only; without it the load says where the vectors are), or the
        class that saved them into the folder (a :class:`normrank.SavingBackend` other than
        NormIndex)."""
        _local_only(fs)
        path = _real_path(Path(persist_path))
        core = KeyedStore.load(
            path,
            _HEADER,
            check_record=_check_record,
            alpha_name="norm_alpha",
            raw_hint=_RAW_HINT,
            index=index,
        )[0]
        store = cls(dim=core.dim, norm_alpha=core.alpha, factory=core.factory)
        store._store = core
        return store

    @classmethod
    def from_postgres(
        cls,
        connection_string: str,
        table_name: str,
        embed_dim: int | None = None,
        norm_alpha: float | None = None,
        **index_options: Any,
    ) -> NormRankVectorStore:
        """A store kept in PostgreSQL (as ``PGVectorStore.from_params(connection_string=...,
        table_name=..., embed_dim=...)``): vectors in ``table_name``, node records in
        ``<table_name>_docs`` of the same database, every write one transaction. Reopening with
        the same two names gives back every node and the store's ``norm_alpha`` (``embed_dim`` is
        needed only to create the table; ``norm_alpha=`` overrides the kept one for this object,
        ``persist`` keeps it); ``MetadataFilters``, ``node_ids`` and ``doc_ids`` run in SQL where
        they can.
        ``index_options`` go to :class:`normrank.backends.pgvector_records.PgVectorRecordIndex`.
        ``connection_string`` may be PGVectorStore's SQLAlchemy form too
        (``postgresql+psycopg2://...``, ``postgresql+asyncpg://...``, or a ``sqlalchemy.URL``)."""
        from normrank.backends.pgvector_records import PgVectorRecordIndex

        index = PgVectorRecordIndex(_libpq_uri(connection_string), table_name, embed_dim, **index_options)
        core = KeyedStore.from_index(
            index, check_record=_check_record, alpha=norm_alpha, alpha_name="norm_alpha", raw_hint=_RAW_HINT
        )
        store = cls(dim=core.dim, norm_alpha=core.alpha)
        store._store = core
        return store

    @classmethod
    def from_index(cls, index: IndexBackend, norm_alpha: float | None = None) -> NormRankVectorStore:
        """A store keeping its vectors in ``index``: any object answering to
        :class:`normrank.IndexBackend` (docs/backends.md): a ``NormIndex``, the Qdrant or
        PostgreSQL backends, or your own. One that does not raises
        :class:`~normrank.errors.NonConformingIndexError` naming what is missing.

        The index must be empty, except one that keeps the records (``PgVectorRecordIndex``),
        which is reopened with every node it holds, as :meth:`from_postgres`. ``norm_alpha=None``
        takes the index's own (kept) alpha where it has one, else 0. :meth:`persist` writes the
        nodes; ``from_persist_dir(d, index=the_index)`` puts them back with the vectors."""
        core = KeyedStore.for_index(
            index, check_record=_check_record, alpha=norm_alpha, alpha_name="norm_alpha", raw_hint=_RAW_HINT
        )
        store = cls(dim=core.dim, norm_alpha=core.alpha)
        store._store = core
        return store

    @classmethod
    def from_namespaced_persist_dir(
        cls, persist_dir: str = DEFAULT_PERSIST_DIR, fs: fsspec.AbstractFileSystem | None = None
    ) -> dict[str, NormRankVectorStore]:
        """{namespace: store} for every store ``StorageContext.persist(persist_dir)`` wrote there."""
        _local_only(fs)
        folder = Path(persist_dir)
        if not folder.is_dir():
            raise StoreNotFoundError(f"{folder} does not exist (or is not a folder): nothing was saved there")
        suffix = f"{_NAMESPACE_SEP}{_STORE_FNAME}"
        return {
            path.name[: -len(suffix)]: cls.from_persist_path(str(path))
            for path in sorted(folder.glob(f"*{suffix}"))
        }

    @classmethod
    def from_persist_dir(
        cls,
        persist_dir: str = DEFAULT_PERSIST_DIR,
        namespace: str = "default",
        fs: fsspec.AbstractFileSystem | None = None,
        *,
        index: IndexBackend | type[SavingBackend] | None = None,
    ) -> NormRankVectorStore:
        """Load the store that ``StorageContext.persist(persist_dir)`` wrote for ``namespace``
        (``index``: as :meth:`from_persist_path`)."""
        return cls.from_persist_path(
            os.path.join(persist_dir, f"{namespace}{_NAMESPACE_SEP}{DEFAULT_PERSIST_FNAME}"),
            fs=fs,
            index=index,
        )


def _libpq_uri(connection: Any) -> Any:
    """The libpq URI psycopg takes, from SQLAlchemy's forms of it (the driver after ``+`` dropped):
    a PGVectorStore user's connection string works unchanged."""
    if hasattr(connection, "render_as_string"):  # a sqlalchemy.URL: str() would hide the password
        connection = connection.render_as_string(hide_password=False)
    if isinstance(connection, str):
        return re.sub(r"^postgres(?:ql)?\+\w+://", "postgresql://", connection)
    return connection


def _local_only(fs: fsspec.AbstractFileSystem | None) -> None:
    if fs is not None and "file" not in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)):
        raise InvalidParameterError("NormRankVectorStore persists to the local filesystem only")
