"""LangChain integration of normrank: ranking by cos(q, d)·‖d‖^α with the norm kept."""

from langchain_normrank.compressors import NormReweightCompressor, add_norm_metadata
from langchain_normrank.embeddings import NormRankEmbeddings
from langchain_normrank.retrievers import NormRankRetriever
from langchain_normrank.vectorstores import NormRankVectorStore, relevance_from_score
from normrank.unit_norms import UnitNormWarning

__all__ = [
    "NormRankEmbeddings",
    "NormRankRetriever",
    "NormRankVectorStore",
    "NormReweightCompressor",
    "UnitNormWarning",
    "add_norm_metadata",
    "relevance_from_score",
]
