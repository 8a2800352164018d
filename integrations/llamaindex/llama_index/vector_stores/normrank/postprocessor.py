"""``NormReweightPostprocessor``: re-score any retriever's nodes by cos(q, d)·‖d‖^norm_alpha."""

from __future__ import annotations

from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle
from llama_index.vector_stores.normrank.ingestion import NORM_KEY

from normrank import norm_weighted
from normrank.errors import InvalidInputError
from normrank.store.checks import reranker_arguments

__all__ = ["NormReweightPostprocessor"]


class NormReweightPostprocessor(BaseNodePostprocessor):
    """Score each node by ``cos(q, d) * ‖d‖**norm_alpha`` (:func:`normrank.norm_weighted`) and
    re-sort (top ``top_n`` if set).

    ``‖d‖`` is read from ``node.metadata[norm_key]`` (written at ingestion by
    :func:`add_norm_metadata` / :class:`NormMetadataTransform`). The retriever's scores are
    never taken for cosines (fusion retrievers, rerankers and BM25 give other numbers):
    ``cos(q, d)`` is computed from the query embedding and the node embeddings when the query
    bundle and the nodes carry them, otherwise with ``embed_model``; without either it raises.
    """

    norm_alpha: float
    top_n: int | None = None
    norm_key: str = NORM_KEY
    embed_model: BaseEmbedding | None = None

    def __init__(self, **data: Any) -> None:
        fields = type(self).model_fields
        super().__init__(**reranker_arguments(data, fields, "norm_alpha", "NormReweightPostprocessor()"))

    @classmethod
    def class_name(cls) -> str:
        return "NormReweightPostprocessor"

    def _cosines(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None) -> np.ndarray:
        if query_bundle is None:
            raise InvalidInputError("the query is needed: call postprocess_nodes(nodes, query_bundle)")
        q = query_bundle.embedding
        todo = [i for i, n in enumerate(nodes) if n.node.embedding is None]
        if (q is None or todo) and self.embed_model is None:
            raise InvalidInputError(
                "retriever scores are not known to be cosines (fusion retrievers and rerankers give "
                "other numbers): give embed_model=<the index's embedding model> so cosines can be "
                "computed, or pass nodes and a query bundle that carry their embeddings"
            )
        if q is None:
            q = self.embed_model.get_query_embedding(query_bundle.query_str)
        texts = [nodes[i].node.get_content(metadata_mode=MetadataMode.EMBED) for i in todo]
        fresh = dict(zip(todo, self.embed_model.get_text_embedding_batch(texts), strict=True)) if todo else {}
        d = np.asarray([fresh.get(i, n.node.embedding) for i, n in enumerate(nodes)], dtype=np.float64)
        qv = np.asarray(q, dtype=np.float64)
        return (d @ qv) / (np.linalg.norm(d, axis=1) * np.linalg.norm(qv))

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        nodes = list(nodes)
        if not nodes:
            return []
        missing = [n.node.node_id for n in nodes if self.norm_key not in n.node.metadata]
        if missing:
            raise InvalidInputError(
                f"{len(missing)} node(s) lack metadata[{self.norm_key!r}] (e.g. {missing[0]}): record "
                "raw norms at ingestion with add_norm_metadata(nodes) or NormMetadataTransform()"
            )
        norms = np.asarray([float(n.node.metadata[self.norm_key]) for n in nodes])
        if not np.all(np.isfinite(norms)) or np.any(norms <= 0):
            raise InvalidInputError(f"metadata[{self.norm_key!r}] must hold positive finite norms")
        scores = norm_weighted(self._cosines(nodes, query_bundle), norms, self.norm_alpha)
        order = np.argsort(-scores, kind="stable")
        if self.top_n is not None:
            order = order[: self.top_n]
        return [NodeWithScore(node=nodes[i].node, score=float(scores[i])) for i in order]
