"""LlamaIndex integration of normrank: ranking by cos(q, d)·‖d‖^norm_alpha with the norm kept."""

from llama_index.vector_stores.normrank._filters import FilterTypeError
from llama_index.vector_stores.normrank.base import NormRankVectorStore
from llama_index.vector_stores.normrank.embeddings import NormRankEmbedding
from llama_index.vector_stores.normrank.ingestion import (
    NORM_KEY,
    NormMetadataTransform,
    add_norm_metadata,
)
from llama_index.vector_stores.normrank.postprocessor import NormReweightPostprocessor
from llama_index.vector_stores.normrank.retriever import NormRankRetriever

from normrank.store.checks import UnknownArgumentError, UnstorableMetadataError
from normrank.store.keyed_store import StoreNotFoundError
from normrank.unit_norms import UnitNormWarning

__all__ = [
    "NORM_KEY",
    "FilterTypeError",
    "NormMetadataTransform",
    "NormRankEmbedding",
    "NormRankRetriever",
    "NormRankVectorStore",
    "NormReweightPostprocessor",
    "StoreNotFoundError",
    "UnitNormWarning",
    "UnknownArgumentError",
    "UnstorableMetadataError",
    "add_norm_metadata",
]
