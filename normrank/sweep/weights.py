"""Per-document weights from a file, swept beside the norm: ``"probe.npz:heat"`` -> aligned array."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from normrank.errors import InvalidInputError, InvalidParameterError

__all__ = ["load_weights"]


def load_weights(spec: str, doc_ids: Sequence[str]) -> tuple[str, np.ndarray]:
    """``"probe.npz:heat"`` -> (``"heat"``, weights aligned to ``doc_ids``). No pickle.

    The npz must hold ``doc_ids`` and the named array; every document must have a finite weight > 0.
    """
    path, _, key = spec.rpartition(":")
    if not path:
        raise InvalidParameterError(f"--weights {spec!r}: use FILE.npz:KEY (e.g. probe.npz:heat)")
    with np.load(Path(path), allow_pickle=False) as z:
        if "doc_ids" not in z or key not in z:
            raise InvalidInputError(f"{path}: needs arrays 'doc_ids' and {key!r}; has {sorted(z.files)}")
        ids = [str(x) for x in z["doc_ids"]]
        vals = np.asarray(z[key], dtype=np.float64)
    if vals.shape != (len(ids),):
        raise InvalidInputError(f"{path}: {key!r} has shape {vals.shape}, expected ({len(ids)},)")
    lookup = dict(zip(ids, vals, strict=True))
    missing = [d for d in doc_ids if d not in lookup]
    if missing:
        raise InvalidInputError(
            f"{path}: {len(missing)} of {len(doc_ids)} documents have no {key!r} weight (e.g. {missing[:3]})"
        )
    w = np.array([lookup[d] for d in doc_ids], dtype=np.float64)
    if not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise InvalidInputError(f"{path}: {key!r} weights must be finite and > 0 to raise to a power")
    return key, w.astype(np.float32)
