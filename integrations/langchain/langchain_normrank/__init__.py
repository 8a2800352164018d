"""LangChain integration of normrank: ranking by cos(q, d)·‖d‖^α with the norm kept."""

from langchain_normrank.compressors import NormReweightCompressor, add_norm_metadata, embed_with_norms
from langchain_normrank.embeddings import NormRankEmbeddings
from langchain_normrank.faiss_compat import FaissSaveError
from langchain_normrank.filters import FilterTypeError
from langchain_normrank.retrievers import NormRankRetriever
from langchain_normrank.vectorstores import (
    MigrationWarning,
    NormRankVectorStore,
    StoreNotFoundError,
    relevance_from_cosine,
)
from normrank.store.checks import UnknownArgumentError, UnstorableMetadataError
from normrank.unit_norms import UnitNormWarning

__all__ = [
    "FaissSaveError",
    "FilterTypeError",
    "MigrationWarning",
    "NormRankEmbeddings",
    "NormRankRetriever",
    "NormRankVectorStore",
    "NormReweightCompressor",
    "StoreNotFoundError",
    "UnitNormWarning",
    "UnknownArgumentError",
    "UnstorableMetadataError",
    "add_norm_metadata",
    "embed_with_norms",
    "relevance_from_cosine",
]
