"""Embeddings encoded once per (model, dataset, part, text fields), stored as ``.npy`` + JSON.

Layout under ``$NORMRANK_CACHE`` (default ``~/.cache/normrank``)::

    embeddings/<model>/<dataset>-<key>/{corpus,queries}.npy
    embeddings/<model>/<dataset>-<key>/{corpus,queries}.json   # manifest: ids, shape, model, fields

No pickle: arrays load with ``allow_pickle=False``. An entry is used only when its ids match the
ids asked for, in order; otherwise it is re-encoded and replaced (written atomically).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from normrank.settings import cache_root

if TYPE_CHECKING:
    from normrank.encoders import Encoder

__all__ = ["EmbeddingCache"]

FORMAT = 1


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s).strip("_")[:80] or "x"


def _ids_digest(ids: Sequence[str]) -> str:
    h = hashlib.sha1()
    for i in ids:
        h.update(i.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


class EmbeddingCache:
    """Embedding store. ``model_key`` names the model and any option that changes its output."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else cache_root() / "embeddings"

    def entry(self, model_key: str, dataset_key: str, fields: str) -> Path:
        key = hashlib.sha1(json.dumps([model_key, dataset_key, fields]).encode()).hexdigest()[:10]
        return self.root / _slug(model_key) / f"{_slug(dataset_key)}-{key}"

    def load(
        self, model_key: str, dataset_key: str, part: str, ids: Sequence[str], fields: str
    ) -> np.ndarray | None:
        """The cached (n, d) float32 array for ``ids`` (in that order), or None."""
        d = self.entry(model_key, dataset_key, fields)
        manifest, array = d / f"{part}.json", d / f"{part}.npy"
        if not (manifest.is_file() and array.is_file()):
            return None
        try:
            meta = json.loads(manifest.read_text())
            if meta.get("format") != FORMAT or meta.get("ids_sha1") != _ids_digest(ids):
                return None
            emb = np.load(array, allow_pickle=False)
        except (OSError, ValueError):
            return None
        if emb.shape != (len(ids), meta.get("dim")) or emb.dtype != np.float32:
            return None
        return emb

    def save(
        self,
        model_key: str,
        dataset_key: str,
        part: str,
        ids: Sequence[str],
        fields: str,
        emb: np.ndarray,
        **extra: object,
    ) -> Path:
        """Store ``emb`` (n, d) float32 for ``ids``; atomic (temp file + rename)."""
        d = self.entry(model_key, dataset_key, fields)
        d.mkdir(parents=True, exist_ok=True)
        emb = np.ascontiguousarray(emb, dtype=np.float32)
        tmp = d / f".{part}.{os.getpid()}.npy"
        np.save(tmp, emb, allow_pickle=False)
        os.replace(tmp, d / f"{part}.npy")
        meta = {
            "format": FORMAT,
            "model": model_key,
            "dataset": dataset_key,
            "part": part,
            "fields": fields,
            "n": int(emb.shape[0]),
            "dim": int(emb.shape[1]),
            "ids_sha1": _ids_digest(ids),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            **extra,
        }
        tmpj = d / f".{part}.{os.getpid()}.json"
        tmpj.write_text(json.dumps(meta, indent=1))
        os.replace(tmpj, d / f"{part}.json")
        return d

    def get_or_encode(
        self,
        model_key: str,
        dataset_key: str,
        part: str,
        ids: Sequence[str],
        texts: Sequence[str],
        encoder: Encoder | Callable[[], Encoder],
        *,
        fields: str = "title+text",
        batch_size: int = 64,
        show_progress: bool = True,
    ) -> tuple[np.ndarray, bool]:
        """(embeddings, was_cached). ``encoder`` may be a zero-argument factory, called only on a miss
        (loading a model costs seconds; a cached re-run never loads it)."""
        hit = self.load(model_key, dataset_key, part, ids, fields)
        if hit is not None:
            return hit, True
        enc = encoder() if callable(encoder) and not hasattr(encoder, "encode") else encoder
        t0 = time.perf_counter()
        emb = enc.encode(list(texts), batch_size=batch_size, show_progress=show_progress)
        self.save(
            model_key,
            dataset_key,
            part,
            ids,
            fields,
            emb,
            encoder_kind=enc.kind,
            seconds=time.perf_counter() - t0,
        )
        return emb, False
