"""Record raw embedding norms in node metadata, for :class:`NormReweightPostprocessor`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from llama_index.core.schema import BaseNode, TransformComponent

from normrank.errors import InvalidInputError
from normrank.store.checks import reject_unknown

__all__ = ["NORM_KEY", "NormMetadataTransform", "add_norm_metadata"]

#: Metadata key holding the raw embedding norm ‖d‖.
NORM_KEY = "normrank_norm"


def add_norm_metadata(nodes: Sequence[BaseNode], key: str = NORM_KEY) -> list[BaseNode]:
    """Put ‖node.embedding‖ into ``node.metadata[key]`` (in place) and return the nodes.

    The nodes must carry their *raw* embeddings (e.g. from ``NormRankEmbedding``). The key is
    excluded from the embed and LLM views of the metadata, so it changes neither the text that
    gets embedded nor the prompt.
    """
    out = list(nodes)
    for node in out:
        if node.embedding is None:
            raise InvalidInputError(
                f"node {node.node_id} has no embedding: run the embedding model before add_norm_metadata"
            )
        norm = float(np.linalg.norm(np.asarray(node.embedding, dtype=np.float64)))
        if not np.isfinite(norm) or norm <= 0:
            raise InvalidInputError(f"node {node.node_id} has a zero or non-finite embedding")
        node.metadata[key] = norm
        for excluded in (node.excluded_embed_metadata_keys, node.excluded_llm_metadata_keys):
            if key not in excluded:
                excluded.append(key)
    return out


class NormMetadataTransform(TransformComponent):
    """``IngestionPipeline`` step (after the embedding model) calling :func:`add_norm_metadata`."""

    key: str = NORM_KEY

    def __init__(self, **data: Any) -> None:
        fields = type(self).model_fields  # pydantic would drop an unknown (misspelt) field silently
        reject_unknown({k: v for k, v in data.items() if k not in fields}, fields, "NormMetadataTransform()")
        super().__init__(**data)

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[BaseNode]:
        return add_norm_metadata(nodes, key=self.key)
