"""normrank: norm-aware reranking for vector retrieval.

``score(q, d) = cos(q, d) * ||d||**alpha`` over any FAISS index, with the raw norms kept beside
unit vectors (paper: "Optimization Dynamics Imprint Semantic Specificity in Contrastive
Embedding Norms", 2026).
"""

from normrank.errors import (
    CorruptIndexError,
    DimensionMismatchError,
    DuplicateIdError,
    IndexStateError,
    InvalidInputError,
    InvalidParameterError,
    NewerFormatError,
    NonConformingIndexError,
    NonFiniteError,
    NormrankError,
    SaveError,
    UnknownIdError,
    UnsupportedIndexError,
    ZeroNormError,
)
from normrank.index.norm_index import NormIndex
from normrank.index.state import IndexState
from normrank.scoring import norm_weighted, symmetric_score
from normrank.search.flat import topk
from normrank.store.contract import IndexBackend, RecordBackend, SavingBackend, check_backend

__version__ = "0.1.0"

__all__ = [
    "CorruptIndexError",
    "DimensionMismatchError",
    "DuplicateIdError",
    "IndexBackend",
    "IndexState",
    "IndexStateError",
    "InvalidInputError",
    "InvalidParameterError",
    "NewerFormatError",
    "NonConformingIndexError",
    "NonFiniteError",
    "NormIndex",
    "NormrankError",
    "RecordBackend",
    "SaveError",
    "SavingBackend",
    "UnknownIdError",
    "UnsupportedIndexError",
    "ZeroNormError",
    "__version__",
    "check_backend",
    "norm_weighted",
    "symmetric_score",
    "topk",
]
