"""Input checks shared by the index and its backends: every bad input becomes a typed error
before anything is changed, so a rejected call leaves the index as it was."""

from __future__ import annotations

import mmap
import numbers
import warnings

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

__all__ = [
    "ANN_METHODS",
    "MAX_ABS_ALPHA",
    "MAX_ID",
    "MAX_RESULT_ENTRIES",
    "OPTION_BOUNDS",
    "Checked",
    "as_alpha",
    "as_ann",
    "as_count",
    "as_flag",
    "as_id_list",
    "as_ids",
    "as_k",
    "as_k_factor",
    "as_numbers",
    "as_one_id",
    "as_option",
    "as_positive_int",
    "as_vectors",
    "as_weights",
    "bases_argument",
    "deprecated",
    "split_norms",
    "storable_norm",
    "unit_and_norms",
]

# Below this a vector's direction is numerical noise: x / ||x|| would not be unit length.
_MIN_NORM = 1e-30
# |alpha| beyond this is a mistake, not a query: norms of ~250 would already overflow float32.
MAX_ABS_ALPHA = 16.0
# The largest id: FAISS ids are int64, and the next default id (max id + 1) must fit too.
MAX_ID = (1 << 63) - 2
# Results are (nq, k) arrays (12 bytes an entry); past this many entries (~200 MB) a call is a
# mistake, not a query: batch the queries instead.
MAX_RESULT_ENTRIES = 1 << 24
# Stored norms and weights live in float32's normal range, so that w**alpha is computed from
# the value that is saved, and a subnormal weight cannot lose its digits.
_W_MIN = float(np.finfo(np.float32).tiny)
_W_MAX = float(np.finfo(np.float32).max)


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


def storable_norm(norm: float) -> bool:
    """Whether a vector of this (float64) norm has a direction and a storable norm: what
    :func:`split_norms` accepts (NaN and inf fail)."""
    return _MIN_NORM < norm <= _W_MAX


# Values per float64 block of split_norms (2 MiB).
_SPLIT_BLOCK = 1 << 18
# A float32 result at least this large is mapped from the kernel on its own (see mapped_empty).
_MAPPED_BYTES = 1 << 22


def mapped_empty(shape: tuple[int, int], min_bytes: int = _MAPPED_BYTES, dtype=np.float32) -> np.ndarray:
    """An empty float32 array; one of ``min_bytes`` or more in its own anonymous mapping: its
    pages are resident only once written, and return to the kernel whole when it is freed.
    From malloc's heap instead, a batch's unit vectors (passed to FAISS, then freed) left heap
    pages touched that FAISS's growing arrays then reused: their unused capacity stayed
    resident (~100 bytes a document on HNSW32, 50k x 384); and a reserved buffer landing on
    pages touched before is resident whole, written or not."""
    nbytes = shape[0] * shape[1] * np.dtype(dtype).itemsize
    if nbytes < min_bytes or not nbytes:
        return np.empty(shape, dtype=dtype)
    return np.frombuffer(mmap.mmap(-1, nbytes), dtype=dtype).reshape(shape)


def split_norms(x: np.ndarray, *, what: str = "vectors") -> tuple[np.ndarray, np.ndarray]:
    """Split raw vectors into unit directions and norms, rejecting zero vectors.

    Norms are computed in float64, so large float32 values do not overflow when squared. The
    float64 work runs in blocks of ``_SPLIT_BLOCK`` values: a float64 copy of a whole batch (and
    its quotient) freed after the add raised glibc's mmap threshold, so FAISS's growing arrays
    landed in the heap around the holes and ~220 bytes a document of resident memory stayed
    (HNSW32,SQ8, 30k x 384, after ``malloc_trim``). The same operations per row: bit for bit the
    same result.
    """
    n, d = x.shape
    norms = np.empty(n, dtype=np.float64)
    unit = mapped_empty((n, d))
    step = max(1, _SPLIT_BLOCK // max(d, 1))
    # One float64 block, mapped apart from the heap and reused: a block allocated and freed per
    # step from malloc raises its mmap threshold and leaves holes FAISS's growing arrays fill.
    work = mapped_empty((min(n, step), d), min_bytes=1 << 16, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # bad rows raise below
        for s in range(0, n, step):
            x64 = work[: min(step, n - s)]
            x64[...] = x[s : s + step]
            block = np.sqrt(np.einsum("ij,ij->i", x64, x64))
            norms[s : s + step] = block
            np.divide(x64, block[:, None], out=x64)
            unit[s : s + step] = x64  # the float32 cast of astype: round to nearest
    ok = (norms > _MIN_NORM) & (norms <= _W_MAX)  # one pass; NaN and inf fail both
    if not ok.all():
        big = norms > _W_MAX
        if big.any():
            raise InvalidInputError(
                f"{what} in rows {_rows(np.flatnonzero(big))} have norms beyond the float32 range "
                f"({_W_MAX:.3g}), which cannot be stored: scale them down"
            )
        raise ZeroNormError(
            f"{what} in rows {_rows(np.flatnonzero(~ok))} have zero length, so no direction: "
            "remove them or fix the encoder"
        )
    # In (1e-30, FLT_MAX]: storable as they are (what as_weights would check, without its cost
    # on every query).
    return unit, norms.astype(np.float32)


def unit_and_norms(x: ArrayLike, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Raw vectors as ``(unit directions, norms)``: :func:`as_vectors` then :func:`split_norms`."""
    return split_norms(as_vectors(x, dim))


def as_weights(values: ArrayLike, n: int, *, what: str = "weights") -> np.ndarray:
    """``values`` as float32 ``(n,)`` weights that are stored, saved and loaded unchanged: finite,
    > 0 and within float32's normal range after the cast (so 1e39 and 1e-50 are refused rather
    than stored as inf and 0). The same check runs at ``add`` / ``set_bases`` and at load.

    Any power ``w**alpha`` with |alpha| <= 16 is then finite or saturates
    (:func:`normrank.scoring.norm_weight`), and every document keeps a real score."""
    try:
        w = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidInputError(f"{what} must be {n} numbers: {e}") from e
    if w.shape != (n,):
        raise InvalidInputError(f"{what} must have shape ({n},), got {w.shape}")
    if not np.isfinite(w).all() or not (w > 0).all():
        raise InvalidInputError(f"{what} must be finite and > 0 (they are raised to the power alpha)")
    with np.errstate(over="ignore"):
        out = w.astype(np.float32)
    bad = ~((out >= _W_MIN) & (out <= _W_MAX))
    if bad.any():
        raise InvalidInputError(
            f"{what} at positions {_rows(np.flatnonzero(bad))} lie outside float32's range "
            f"[{_W_MIN:.3g}, {_W_MAX:.3g}] and cannot be stored: rescale them"
        )
    return out


def as_id_list(ids: ArrayLike, *, what: str = "ids") -> np.ndarray:
    """``ids`` (one id or a 1-D list) as int64: the one id parser of every method (``add``,
    ``remove``, ``norm_of``, ``reconstruct``). Integers, or floats that are whole (3.0); 3.7,
    '3', True, None, NaN, nested lists and values beyond int64 are refused, never truncated."""
    try:
        arr = np.asarray(ids)
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidInputError(f"{what} must be integers: {e}") from e
    if arr.ndim == 0:
        arr = arr[None]
    if arr.ndim != 1:
        raise InvalidInputError(f"{what} must be one id or a 1-D list, got shape {arr.shape}")
    if not arr.size:
        return np.empty(0, np.int64)
    if arr.dtype == object:
        items = arr.tolist()
        if not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in items):
            raise InvalidInputError(f"{what} must be integers")
        if not all(-(1 << 63) <= int(i) < 1 << 63 for i in items):
            raise InvalidInputError(f"{what} must fit in int64")
        out = np.array([int(i) for i in items], dtype=np.int64)
    elif np.issubdtype(arr.dtype, np.integer):
        if arr.dtype == np.uint64 and (arr > np.iinfo(np.int64).max).any():
            raise InvalidInputError(f"{what} must fit in int64")
        out = arr.astype(np.int64)
    elif np.issubdtype(arr.dtype, np.floating):
        with np.errstate(invalid="ignore"):
            whole = np.isfinite(arr).all() and (arr == np.round(arr)).all()
        if not whole or (np.abs(arr) >= 2.0**63).any():
            raise InvalidInputError(f"{what} must be integers, got {arr[:5].tolist()}")
        out = arr.astype(np.int64)  # 3.0 is an id; 3.5 is not
    else:
        raise InvalidInputError(f"{what} must be integers, got dtype {arr.dtype}")
    if (out < 0).any():
        raise InvalidInputError(f"{what} must be >= 0 (-1 marks a missing result, as in FAISS)")
    if (out > MAX_ID).any():
        raise InvalidInputError(f"{what} must be at most 2**63 - 2 (the next default id must fit in int64)")
    return out


def as_one_id(id_: object) -> int:
    """One id, parsed as :func:`as_id_list` parses each."""
    out = as_id_list(id_, what="id")
    if out.shape != (1,):
        raise InvalidInputError(f"expected one id, got {out.size}")
    return int(out[0])


def as_ids(ids: ArrayLike, n: int | None = None) -> np.ndarray:
    """``ids`` as a 1-D int64 array of distinct non-negative integers (``n`` of them if given)."""
    out = as_id_list(ids)
    if n is not None and out.shape[0] != n:
        raise InvalidInputError(f"got {out.shape[0]} ids for {n} vectors")
    uniq, counts = np.unique(out, return_counts=True)
    if (counts > 1).any():
        raise DuplicateIdError(f"duplicate ids in the batch: {uniq[counts > 1][:10].tolist()}")
    return out


# The one table of integer option bounds, for NormIndex and every backend (Qdrant client and Edge,
# pgvector): a value past these is a mistake that would overflow the engine's integers or allocate
# per query (hnsw_ef = 2**64 made every Edge search raise OverflowError). Names as the options are
# spelt; FAISS's efSearch, Qdrant's hnsw_ef and pgvector's ef_search are one beam, one bound.
OPTION_BOUNDS: dict[str, tuple[int, int]] = {
    "ef_search": (1, 1 << 16),
    "hnsw_ef": (1, 1 << 16),
    "ef_construct": (1, 1 << 16),
    "ef_construction": (1, 1 << 16),
    "m": (1, 1 << 12),  # HNSW links per node
    "k_factor": (1, 1 << 20),
    "n_tail": (0, (1 << 62) - 1),
    "max_depth": (0, (1 << 62) - 1),
    "max_search_threads": (1, 1 << 12),
    "indexing_threshold_kb": (0, 1 << 40),
    "dim": (1, 1 << 20),
}


def as_option(value: object, name: str, *, allow_none: bool = False) -> int | None:
    """An integer option within :data:`OPTION_BOUNDS` ``[name]`` (bools refused; ``None`` only with
    ``allow_none``, an option's "default"). The error names the option and its range."""
    lo, hi = OPTION_BOUNDS[name]
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not lo <= value <= hi:
        default = " or None" if allow_none else ""
        raise InvalidParameterError(f"{name} must be an integer in [{lo}, {hi}]{default}, got {value!r}")
    return int(value)


def as_k_factor(value: object) -> int:
    """An ANN over-fetch factor: an integer in [1, 2**20]."""
    return int(as_option(value, "k_factor"))  # type: ignore[arg-type]


ANN_METHODS = ("adaptive", "scan", "overfetch")


def as_ann(value: object) -> str:
    """An ANN search method of :data:`ANN_METHODS`."""
    if not isinstance(value, str) or value not in ANN_METHODS:
        raise InvalidParameterError(f"ann must be one of {list(ANN_METHODS)}, got {value!r}")
    return value


def as_positive_int(value: object, name: str) -> int:
    """An integer >= 1 (bools refused), and within :data:`OPTION_BOUNDS` where ``name`` is there."""
    if name in OPTION_BOUNDS:
        return int(as_option(value, name))  # type: ignore[arg-type]
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise InvalidParameterError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def as_count(value: object, name: str) -> int | None:
    """A non-negative integer below 2**62, or None (an option's "default")."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value < 1 << 62:
        raise InvalidParameterError(f"{name} must be a non-negative integer or None, got {value!r}")
    return int(value)


def as_flag(value: object, name: str) -> bool:
    """A bool (numpy's included): ``"no"`` or ``2`` would otherwise read as True."""
    if not isinstance(value, bool | np.bool_):
        raise InvalidParameterError(f"{name} must be True or False, got {value!r}")
    return bool(value)


class Checked:
    """A public search option checked on every assignment, not only by the constructor:
    ``index.ann = "overfetsh"`` raises instead of quietly searching another way (and instead of
    surfacing later as a save that refuses). ``check(value, name)`` returns the stored value."""

    def __init__(self, check) -> None:
        self.check = check

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.slot = name, "_" + name

    def __get__(self, obj: object, owner: type | None = None):
        return self if obj is None else getattr(obj, self.slot)

    def __set__(self, obj: object, value: object) -> None:
        setattr(obj, self.slot, self.check(value, self.name))


def as_k(k: object, nq: int) -> int:
    """``k`` as a positive int, refusing result arrays too large to allocate."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise InvalidParameterError(f"k must be an integer >= 1, got {k!r}")
    k = int(k)
    if k < 1:
        raise InvalidParameterError(f"k must be >= 1, got {k}")
    if max(nq, 1) * k > MAX_RESULT_ENTRIES:
        raise InvalidParameterError(
            f"k={k} for {nq} queries asks for more than {MAX_RESULT_ENTRIES} results (~200 MB): "
            "search in smaller batches of queries, or with a smaller k"
        )
    return k


def as_numbers(value: object, name: str, expected: str = "a number") -> np.ndarray:
    """``value`` as float64, refusing what only looks numeric to numpy: strings (``'1'``),
    bools (``True`` is not 1 here), None and objects. An int or float scalar, a numpy number,
    or a list / array of them passes."""
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidParameterError(f"{name} must be {expected}: {e}") from e
    if raw.dtype.kind not in "iuf":
        got = f"{value!r}" if raw.size <= 4 else f"an array of dtype {raw.dtype}"
        raise InvalidParameterError(f"{name} must be {expected} (int or float, not bool or str), got {got}")
    return raw.astype(np.float64, copy=False)


def as_alpha(alpha: ArrayLike, nq: int) -> np.ndarray:
    """One finite alpha per query in ``[-MAX_ABS_ALPHA, MAX_ABS_ALPHA]``, float64 ``(nq,)``, from a
    scalar or an array."""
    a = as_numbers(alpha, "alpha", "a number or one number per query")
    if a.ndim == 0:
        a = np.full(nq, float(a))
    elif a.ndim != 1 or a.shape[0] != nq:
        raise InvalidParameterError(
            f"alpha must be a scalar or have one value per query ({nq}), got {a.shape}"
        )
    if not np.isfinite(a).all():
        raise InvalidParameterError("alpha must be finite")
    if (np.abs(a) > MAX_ABS_ALPHA).any():
        raise InvalidParameterError(
            f"alpha must lie in [-{MAX_ABS_ALPHA:g}, {MAX_ABS_ALPHA:g}] (useful values are about -2 to 1; "
            "beyond this ||d||**alpha leaves the float32 range for ordinary norms)"
        )
    return a


def deprecated(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is a deprecated name of ``new`` (DeprecationWarning).

    The default stacklevel 3 points at the user's call of the deprecated member, not at the
    member or this module."""
    warnings.warn(f"{old} is deprecated: use {new}", DeprecationWarning, stacklevel=stacklevel)


def bases_argument(bases: ArrayLike | None, weights: ArrayLike | None, owner: str) -> ArrayLike | None:
    """``add(bases=)`` of ``owner`` given either name: ``weights=`` (its deprecated name) warns,
    both raise :class:`InvalidInputError`. Called from ``add``: the warning points at its caller."""
    if weights is None:
        return bases
    if bases is not None:
        raise InvalidInputError("pass bases= only (weights= is its deprecated name)")
    deprecated(f"{owner}.add(weights=)", f"{owner}.add(bases=)", stacklevel=4)
    return weights
