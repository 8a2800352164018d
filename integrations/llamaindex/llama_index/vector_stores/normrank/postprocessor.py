"""``NormReweightPostprocessor``: re-score any retriever's nodes by cos(q, d)·‖d‖^norm_alpha."""

from __future__ import annotations

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle
from llama_index.vector_stores.normrank.ingestion import NORM_KEY

from normrank.errors import InvalidInputError, InvalidParameterError

__all__ = ["NormReweightPostprocessor"]


class NormReweightPostprocessor(BaseNodePostprocessor):
    """Multiply each node's cosine by ``‖d‖**norm_alpha`` and re-sort (top ``top_n`` if set).

    ``‖d‖`` is read from ``node.metadata[norm_key]`` (written at ingestion by
    :func:`add_norm_metadata` / :class:`NormMetadataTransform`). ``cos(q, d)`` is taken from
    the retriever's score — the cosine similarity for ``SimpleVectorStore`` and stores in cosine
    mode — unless ``embed_model`` is given, in which case it is recomputed from the query and the
    node embeddings (or node text when a node carries no embedding).
    """

    norm_alpha: float
    top_n: int | None = None
    norm_key: str = NORM_KEY
    embed_model: BaseEmbedding | None = None

    @classmethod
    def class_name(cls) -> str:
        return "NormReweightPostprocessor"

    def _cosines(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None) -> np.ndarray:
        if self.embed_model is None:
            if any(n.score is None for n in nodes):
                raise InvalidInputError("a node has no score: give embed_model to recompute cosines")
            return np.asarray([float(n.score) for n in nodes])
        if query_bundle is None:
            raise InvalidInputError(
                "embed_model needs the query: call postprocess_nodes(nodes, query_bundle)"
            )
        q = query_bundle.embedding or self.embed_model.get_query_embedding(query_bundle.query_str)
        todo = [i for i, n in enumerate(nodes) if n.node.embedding is None]
        texts = [nodes[i].node.get_content(metadata_mode=MetadataMode.EMBED) for i in todo]
        fresh = dict(zip(todo, self.embed_model.get_text_embedding_batch(texts), strict=True)) if todo else {}
        d = np.asarray([fresh.get(i, n.node.embedding) for i, n in enumerate(nodes)], dtype=np.float64)
        qv = np.asarray(q, dtype=np.float64)
        return (d @ qv) / (np.linalg.norm(d, axis=1) * np.linalg.norm(qv))

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if self.top_n is not None and self.top_n < 1:
            raise InvalidParameterError(f"top_n must be positive, got {self.top_n}")
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
        scores = self._cosines(nodes, query_bundle) * norms ** float(self.norm_alpha)
        order = np.argsort(-scores, kind="stable")
        if self.top_n is not None:
            order = order[: self.top_n]
        return [NodeWithScore(node=nodes[i].node, score=float(scores[i])) for i in order]
