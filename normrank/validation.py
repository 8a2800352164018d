"""Input checks shared by the index and its backends: every bad input becomes a typed error
before anything is changed, so a rejected call leaves the index as it was."""

from __future__ import annotations

import numbers

import numpy as np
from numpy.typing import ArrayLike

from normrank.errors import (
    DimensionMismatchError,
    DuplicateIdError,
    InvalidInputError,
    InvalidParameterError,
    NonFiniteError,
    ZeroNormError,
)

__all__ = ["as_alpha", "as_ids", "as_k", "as_vectors", "split_norms"]

# Below this a vector's direction is numerical noise: x / ||x|| would not be unit length.
_MIN_NORM = 1e-30
# |alpha| beyond this is a mistake, not a query: norms of ~250 would already overflow float32.
MAX_ABS_ALPHA = 16.0
# Results are (nq, k) arrays; past this many entries a call is a mistake, not a query.
_MAX_RESULT_ENTRIES = 1 << 28


def _rows(idx: np.ndarray, limit: int = 10) -> str:
    shown = ", ".join(str(int(i)) for i in idx[:limit])
    return shown + (f", ... ({idx.size} rows)" if idx.size > limit else "")


def as_vectors(x: ArrayLike, dim: int, *, what: str = "vectors", allow_1d: bool = False) -> np.ndarray:
    """``x`` as a C-contiguous float32 ``(n, dim)`` array of finite values.

    Lists, float16 and float64 are converted; values that overflow float32 are rejected rather
    than turned into inf. A 1-D input is one vector when ``allow_1d``.
    """
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as e:
        raise InvalidInputError(f"{what} must be a numeric array: {e}") from e
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise InvalidInputError(f"{what} must be a real numeric array, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.complexfloating):
        raise InvalidInputError(f"{what} must be real, got dtype {arr.dtype}")
    if arr.ndim == 1 and allow_1d:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise DimensionMismatchError(f"{what} must be 2-D (n, {dim}), got shape {arr.shape}")
    if arr.shape[1] != dim:
        raise DimensionMismatchError(f"{what} have dimension {arr.shape[1]}, the index has {dim}")
    if arr.dtype.kind == "f" and arr.dtype.itemsize > 4:
        bad = ~np.isfinite(arr).all(axis=1)
        if bad.any():
            raise NonFiniteError(f"{what} contain NaN or inf in rows {_rows(np.flatnonzero(bad))}")
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.ascontiguousarray(arr, dtype=np.float32)
    bad = ~np.isfinite(out).all(axis=1)
    if bad.any():
        raise NonFiniteError(
            f"{what} contain NaN or inf (or values beyond float32) in rows {_rows(np.flatnonzero(bad))}"
        )
    return out


def split_norms(x: np.ndarray, *, what: str = "vectors") -> tuple[np.ndarray, np.ndarray]:
    """Split raw vectors into unit directions and norms, rejecting zero vectors.

    Norms are computed in float64, so large float32 values do not overflow when squared.
    """
    x64 = x.astype(np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", x64, x64))
    zero = ~(norms > _MIN_NORM) | ~np.isfinite(norms)
    if zero.any():
        raise ZeroNormError(
            f"{what} in rows {_rows(np.flatnonzero(zero))} have zero length, so no direction: "
            "remove them or fix the encoder"
        )
    unit = (x64 / norms[:, None]).astype(np.float32)
    return unit, norms.astype(np.float32)


def as_ids(ids: ArrayLike, n: int) -> np.ndarray:
    """``ids`` as a 1-D int64 array of ``n`` distinct non-negative integers."""
    arr = np.asarray(ids)
    if arr.ndim == 0:
        arr = arr[None]
    if arr.ndim != 1:
        raise InvalidInputError(f"ids must be 1-D, got shape {arr.shape}")
    if arr.size and not (np.issubdtype(arr.dtype, np.integer) or arr.dtype == object):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            pass  # 3.0 is an id; 3.5 is not
        else:
            raise InvalidInputError(f"ids must be integers, got dtype {arr.dtype}")
    try:
        out = arr.astype(np.int64, casting="unsafe") if arr.size else np.empty(0, np.int64)
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidInputError(f"ids must be integers: {e}") from e
    if arr.dtype == object and not all(isinstance(i, numbers.Integral) for i in arr.tolist()):
        raise InvalidInputError("ids must be integers")
    if out.shape[0] != n:
        raise InvalidInputError(f"got {out.shape[0]} ids for {n} vectors")
    if (out < 0).any():
        raise InvalidInputError("ids must be >= 0 (-1 marks a missing result, as in FAISS)")
    uniq, counts = np.unique(out, return_counts=True)
    if (counts > 1).any():
        raise DuplicateIdError(f"duplicate ids in the batch: {uniq[counts > 1][:10].tolist()}")
    return out


def as_k(k: object, nq: int) -> int:
    """``k`` as a positive int, refusing result arrays too large to allocate."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise InvalidParameterError(f"k must be an integer >= 1, got {k!r}")
    k = int(k)
    if k < 1:
        raise InvalidParameterError(f"k must be >= 1, got {k}")
    if max(nq, 1) * k > _MAX_RESULT_ENTRIES:
        raise InvalidParameterError(f"k={k} for {nq} queries asks for more than {_MAX_RESULT_ENTRIES} results")
    return k


def as_alpha(alpha: ArrayLike, nq: int) -> np.ndarray:
    """One finite alpha per query in ``[-MAX_ABS_ALPHA, MAX_ABS_ALPHA]``, float64 ``(nq,)``, from a
    scalar or an array."""
    try:
        a = np.asarray(alpha, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise InvalidParameterError(f"alpha must be a number or one number per query: {e}") from e
    if a.ndim == 0:
        a = np.full(nq, float(a))
    elif a.ndim != 1 or a.shape[0] != nq:
        raise InvalidParameterError(f"alpha must be a scalar or have one value per query ({nq}), got {a.shape}")
    if not np.isfinite(a).all():
        raise InvalidParameterError("alpha must be finite")
    if (np.abs(a) > MAX_ABS_ALPHA).any():
        raise InvalidParameterError(
            f"alpha must lie in [-{MAX_ABS_ALPHA:g}, {MAX_ABS_ALPHA:g}] (useful values are about -2 to 1; "
            "beyond this ||d||**alpha leaves the float32 range for ordinary norms)"
        )
    return a
