"""The Qdrant Edge backend's storage (:class:`~normrank.backends.qdrant_edge.QdrantEdgeNormIndex`):
the shard folder (its config, the lock that keeps a second opener out, the next default id), the
in-memory mirror of the shard's ids, norms and custom bases, and what searches derive from that
mirror (weight order, saturated powers, bands), kept until it changes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from normrank.errors import IndexStateError, InvalidInputError, MissingDependencyError
from normrank.search.id_lookup import IdLookup
from normrank.search.norm_band import powered, saturates
from normrank.validation import as_weights

__all__ = [
    "NORM",
    "SCROLL_PAGE",
    "WEIGHT",
    "ShardMirror",
    "edge_module",
    "lock_folder",
    "payload",
    "read_next_id",
    "write_next_id",
]

NORM = "norm"
WEIGHT = (
    "weight"  # the custom base (set_bases; "weight": its stored name) beside the norm, with its own index
)
_CONFIG_FILE = "edge_config.json"  # written by Qdrant Edge into the shard folder
# normrank's own files in the shard folder (the engine leaves files it does not know alone).
_LOCK_FILE = "normrank.lock"
_NEXT_ID_FILE = "normrank_next_id.json"
_OWN_FILES = {_LOCK_FILE, _NEXT_ID_FILE, _NEXT_ID_FILE + ".tmp"}
SCROLL_PAGE = 4096


def lock_folder(path: Path) -> int:
    """Take the shard folder's lock (``flock``, exclusive, not waiting) before the engine is touched,
    and return its file descriptor (closing it releases the lock; so does the process's death, so a
    crash leaves no stale lock). A second opener, in this process or another, gets
    :class:`IndexStateError`: opening the engine's WAL a second time fails untyped and breaks
    every later flush of the first opener."""
    path.mkdir(parents=True, exist_ok=True)
    fd = os.open(path / _LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        import fcntl
    except ImportError:  # no flock (Windows): the engine's own lock is all there is
        return fd
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        raise IndexStateError(
            f"the shard at {path} is in use by another QdrantEdgeNormIndex (this process or another): "
            "close it there first, or search through that one"
        ) from e
    return fd


def read_next_id(path: Path) -> int:
    """The next default id saved in the shard folder (0 if none: then the largest id + 1 is used)."""
    f = path / _NEXT_ID_FILE
    if not f.exists():
        return 0
    try:
        value = json.loads(f.read_text())["next_id"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise IndexStateError(f"cannot read {f}: {e}") from e
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise IndexStateError(f"{f} holds next_id {value!r}, not a non-negative integer")
    return value


def write_next_id(path: Path, value: int) -> None:
    """Save the next default id atomically (temporary file, fsync, rename, fsync of the folder):
    written before the engine removes the largest ids, so that a removed id is never handed out
    again, after a reopen or a crash either (a crash in between leaves a larger value, harmless)."""
    f = path / _NEXT_ID_FILE
    tmp = path / (_NEXT_ID_FILE + ".tmp")
    try:
        with open(tmp, "w") as out:
            out.write(json.dumps({"next_id": int(value)}))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, f)
        dir_fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as e:
        raise IndexStateError(f"cannot write {f}: {e}; nothing was removed") from e


def edge_module() -> Any:
    """The ``qdrant_edge`` module, or a typed error saying how to install it."""
    try:
        import qdrant_edge
    except ImportError as e:
        raise MissingDependencyError(
            "the Qdrant Edge backend needs qdrant-edge-py: pip install 'normrank[qdrant]'"
        ) from e
    return qdrant_edge


def payload(norm: float, weight: float | None) -> dict[str, float]:
    """A point's payload: its norm, and its custom weight when weights are set."""
    out = {NORM: float(norm)}
    if weight is not None:
        out[WEIGHT] = float(weight)
    return out


class ShardMirror:
    """Mixin of the Edge index: the shard's ids, norms and weights mirrored in memory (read once
    when the shard is opened, updated with every write), and the search's derived arrays. Needs
    ``path`` and ``_shard``."""

    path: Any
    _shard: Any
    _ids: np.ndarray
    _norms: np.ndarray
    _weights: np.ndarray | None

    @property
    def ntotal(self) -> int:
        return int(self._ids.size)

    def _stored_dim(self) -> int | None:
        cfg = self.path / _CONFIG_FILE
        if not cfg.exists():
            if self.path.exists() and any(p.name not in _OWN_FILES for p in self.path.iterdir()):
                raise IndexStateError(f"{self.path} is not empty and holds no Qdrant Edge shard")
            return None
        try:
            return int(json.loads(cfg.read_text())["vectors"][""]["size"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise IndexStateError(f"cannot read the shard config {cfg}: {e}") from e

    def _load_mirror(self) -> None:
        qe = edge_module()
        ids, norms, weights = [], [], []
        offset = None
        while True:
            recs, offset = self._shard.scroll(
                qe.ScrollRequest(offset=offset, limit=SCROLL_PAGE, with_payload=True, with_vector=False)
            )
            for r in recs:
                payload = r.payload or {}
                if not isinstance(r.id, int) or not isinstance(payload.get(NORM), float | int):
                    raise IndexStateError(
                        f"point {r.id!r} in {self.path} has no integer id or no {NORM!r} payload: "
                        "not a shard written by QdrantEdgeNormIndex"
                    )
                ids.append(int(r.id))
                norms.append(payload[NORM])
                weights.append(payload.get(WEIGHT))
            if offset is None:
                break
        have = [w is not None for w in weights]
        if any(have) and not all(have):
            # set_bases is one update, so this is a shard written by something else.
            raise IndexStateError(
                f"{sum(have)} of {len(have)} points carry custom bases: call set_bases or "
                "clear_bases on a shard opened elsewhere"
            )
        w = None
        if ids and all(have):
            try:  # the check set_bases runs: what is loaded is what could have been stored
                w = as_weights(weights, len(weights), what=f"custom bases in {self.path}")
            except InvalidInputError as e:
                raise IndexStateError(f"{e} (not written by this version's set_bases)") from e
        self._set_mirror(np.array(ids, dtype=np.int64), np.array(norms, dtype=np.float32), w)

    def _set_mirror(self, ids: np.ndarray, norms: np.ndarray, weights: np.ndarray | None) -> None:
        self._ids, self._norms, self._weights = ids, norms, weights
        self._pos = dict(zip(ids.tolist(), range(ids.size), strict=True))
        self._derived: dict[Any, Any] = {}

    def _base(self) -> np.ndarray:
        return self._norms if self._weights is None else self._weights

    def _order(self, sign: int) -> tuple[np.ndarray, np.ndarray]:
        """``(positions, base values)`` in decreasing weight order for this sign of alpha."""
        got = self._derived.get(("order", sign))
        if got is None:
            base = self._base()
            order = np.argsort(-base if sign > 0 else base, kind="stable")
            got = self._derived[("order", sign)] = (order, base[order].astype(np.float64))
        return got

    def _sorted_weights(self, alpha: float) -> tuple[np.ndarray, np.ndarray]:
        """``(weights in decreasing order, their negatives)`` for :func:`scan_needed`; saturated
        as the core saturates them (:func:`normrank.search.norm_band.powered`)."""
        got = self._derived.get(("w", alpha))
        if got is None:
            w = powered(self._order(1 if alpha > 0 else -1)[1], alpha)
            got = self._derived[("w", alpha)] = (w, -w)
        return got

    def _powered(self, alpha: float) -> np.ndarray:
        """Each stored point's weight ``base ** alpha`` (float64, storage order, saturated), per alpha."""
        got = self._derived.get(("pow", alpha))
        if got is None:
            got = self._derived[("pow", alpha)] = powered(self._base(), alpha)
        return got

    def _saturates(self, alpha: float) -> bool:
        """Whether some stored weight's power passes the cap at this alpha (the formula then
        saturates too)."""
        got = self._derived.get(("sat", alpha))
        if got is None:
            base = self._base()
            got = self._derived[("sat", alpha)] = bool(base.size) and saturates(
                float(base.min()), float(base.max()), alpha
            )
        return got

    def _lookup(self) -> IdLookup:
        got = self._derived.get("lookup")
        if got is None:
            got = self._derived["lookup"] = IdLookup(self._ids)
        return got

    def _rank(self, sign: int) -> np.ndarray:
        """Weight-order rank of each storage position."""
        got = self._derived.get(("rank", sign))
        if got is None:
            order = self._order(sign)[0]
            got = self._derived[("rank", sign)] = np.empty_like(order)
            got[order] = np.arange(order.size)
        return got

    def _band(self, alpha: float, t: int) -> tuple[int, float | None]:
        """The band of the first ``t`` documents in weight order as ``(size, edge)``: the points
        strictly beyond the ``t``-th base value (ties at the edge stay outside, so the size can
        be below ``t``); ``(n, None)`` when ``t`` covers everything."""
        n = self.ntotal
        if t >= n:
            return n, None
        sign = 1 if alpha > 0 else -1
        key = ("band", sign, t)  # a query asks for the same few bands again and again
        got = self._derived.get(key)
        if got is None:
            base = self._order(sign)[1]
            edge = float(base[t])
            size = int(
                np.searchsorted(-base, -edge, "left") if sign > 0 else np.searchsorted(base, edge, "left")
            )
            got = self._derived[key] = (size, edge)
        return got

    def _unit_vectors(self, ids: np.ndarray) -> list[list[float]]:
        recs = []
        for i0 in range(0, ids.size, SCROLL_PAGE):
            chunk = [int(i) for i in ids[i0 : i0 + SCROLL_PAGE]]
            got = {int(r.id): r.vector for r in self._shard.retrieve(chunk, False, True)}
            recs += [got[i] for i in chunk]
        return recs
