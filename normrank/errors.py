"""Typed errors. Every error normrank raises on purpose derives from :class:`NormrankError`.

The input errors also derive from ``ValueError`` / ``KeyError`` / ``TypeError`` so code written
against plain FAISS or numpy (``except ValueError``) keeps working.
"""

from __future__ import annotations

__all__ = [
    "CorruptIndexError",
    "DimensionMismatchError",
    "DuplicateIdError",
    "FilterTypeError",
    "IndexStateError",
    "InvalidInputError",
    "InvalidParameterError",
    "MissingDependencyError",
    "NewerFormatError",
    "NonConformingIndexError",
    "NonFiniteError",
    "NormrankError",
    "SaveError",
    "UnknownIdError",
    "UnsupportedIndexError",
    "ZeroNormError",
]


class NormrankError(Exception):
    """Base class of every error normrank raises on purpose."""


class InvalidInputError(NormrankError, ValueError):
    """An input array or argument is malformed (shape, dtype, emptiness)."""


class DimensionMismatchError(InvalidInputError):
    """Vectors do not have the index's dimension."""


class NonFiniteError(InvalidInputError):
    """An input contains NaN or infinity."""


class ZeroNormError(InvalidInputError):
    """A vector has zero (or subnormal) length, so it has no direction."""


class DuplicateIdError(InvalidInputError):
    """An id is repeated within a batch or is already in the index."""


class UnknownIdError(NormrankError, KeyError):
    """An id is not in the index."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class InvalidParameterError(InvalidInputError):
    """A parameter (k, alpha, factory string, ...) is out of range."""


class FilterTypeError(InvalidParameterError, TypeError):
    """A metadata filter orders or compares values of one kind against a field holding another
    (a number against a string...): Python raises ``TypeError`` there, the peers' SQL a data
    error or nothing matches; this names the field and both kinds. The LangChain and LlamaIndex
    stores raise this one class."""


class IndexStateError(NormrankError, RuntimeError):
    """The operation does not fit the index's state (e.g. adding to an untrained IVF index)."""


class CorruptIndexError(NormrankError, OSError):
    """A saved index directory is corrupt, truncated, tampered with or of an unknown format."""


class NewerFormatError(NormrankError, OSError):
    """A saved index was written by a newer normrank: its data format or options version is above
    what this one reads, or it names a search option (or method) this one does not know. Nothing
    is wrong with the folder: upgrade normrank to load it (the message names both versions)."""


class SaveError(NormrankError, OSError):
    """A save could not be written (disk full, read-only folder, ...). What it created is
    removed and the previous save in that folder still loads; retry once the cause is fixed."""


class UnsupportedIndexError(NormrankError, TypeError):
    """A FAISS index type normrank cannot wrap, or whose norms cannot be recovered."""


class MissingDependencyError(NormrankError, ImportError):
    """An optional dependency is not installed; the message gives the pip command."""


class NonConformingIndexError(UnsupportedIndexError):
    """An object handed to a store as its index lacks a method the store calls, or takes other
    arguments than the store passes (the message names each one; the contract is
    :class:`normrank.IndexBackend`, docs/backends.md)."""
