"""Embeddings encoded once, keyed by what determines them, stored as ``.npy`` + JSON.

The key is a sha256 of: the model's identity (its kind, the digest of its weight and config files
or, for a hub id, its name; output-changing options; normrank's encoder format), the text fields
(``"title+text"`` for documents, ``"text"`` for queries: the role a text plays), and every
(id, text) pair in order. Not the dataset's path or name: a copied or moved collection hits, a
changed text or model misses. The dataset and part are kept in the manifest as labels only.

Layout under ``$NORMRANK_CACHE`` (default ``~/.cache/normrank``)::

    embeddings/<key>.npy    # (n, d) float32
    embeddings/<key>.json   # manifest: model, identity, dataset, part, fields, n, dim, content digest

No pickle: arrays load with ``allow_pickle=False``. Writes are atomic (temp file + rename).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from normrank.errors import InvalidInputError
from normrank.settings import cache_root

if TYPE_CHECKING:
    from normrank.encoders import Encoder

Strings = Sequence[str]
Identity = Mapping[str, Any] | None  # normrank.encoders.model_identity(...), or None

__all__ = ["EmbeddingCache", "content_digest"]

FORMAT = 2


def content_digest(ids: Sequence[str], texts: Sequence[str]) -> str:
    """sha256 of the (id, text) pairs in order (length-prefixed, so no two lists collide)."""
    if len(ids) != len(texts):
        raise InvalidInputError(f"{len(ids)} ids but {len(texts)} texts")
    h = hashlib.sha256()
    for i, t in zip(ids, texts, strict=True):
        bi, bt = str(i).encode("utf-8"), str(t).encode("utf-8")
        h.update(b"%d:%s%d:%s" % (len(bi), bi, len(bt), bt))
    return h.hexdigest()


class EmbeddingCache:
    """Embedding store.

    ``model_key`` is the model spec as :func:`normrank.encoders.load_encoder` takes it, optionally
    followed by ``"|opt=value,..."`` (output-changing options, as ``normrank.sweep.model_key``
    writes them). Its identity (weights digest included) is worked out from the spec without
    loading the model; pass ``model_identity=`` to give it yourself.
    """

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else cache_root() / "embeddings"
        self._identities: dict[str, dict[str, Any]] = {}

    # -- keys -------------------------------------------------------------------------------
    def model_identity(self, model_key: str) -> dict[str, Any]:
        """The identity ``model_key`` is keyed by (memoised per cache object)."""
        if model_key not in self._identities:
            from normrank.encoders import model_identity
            from normrank.errors import NormrankError

            spec, _, opts = model_key.partition("|")
            try:
                ident = model_identity(spec)
            except (NormrankError, OSError):  # not resolvable here: the spec names it
                ident = {"name": spec}
            self._identities[model_key] = {**ident, "key_options": opts}
        return self._identities[model_key]

    def key(
        self,
        model_key: str,
        fields: str,
        ids: Sequence[str],
        texts: Sequence[str],
        *,
        model_identity: Mapping[str, Any] | None = None,
    ) -> str:
        """The entry key (64 hex digits) for these texts under this model."""
        ident = dict(model_identity) if model_identity is not None else self.model_identity(model_key)
        blob = json.dumps(
            {"format": FORMAT, "model": ident, "fields": fields, "content": content_digest(ids, texts)},
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(blob.encode()).hexdigest()

    def path(self, key: str) -> Path:
        """The ``.npy`` file of entry ``key`` (its manifest is the same name with ``.json``)."""
        return self.root / f"{key}.npy"

    # -- read / write -----------------------------------------------------------------------
    def load(
        self, model_key: str, ids: Strings, fields: str, *, texts: Strings, model_identity: Identity = None
    ) -> np.ndarray | None:
        """The cached (n, d) float32 array for these (id, text) pairs, or None. Where the data
        came from (dataset, part) plays no part in finding it."""
        key = self.key(model_key, fields, ids, texts, model_identity=model_identity)
        array, manifest = self.path(key), self.path(key).with_suffix(".json")
        if not (manifest.is_file() and array.is_file()):
            return None
        try:
            meta = json.loads(manifest.read_text())
            if meta.get("format") != FORMAT or meta.get("content_sha256") != content_digest(ids, texts):
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
        *,
        texts: Sequence[str],
        model_identity: Mapping[str, Any] | None = None,
        **extra: object,
    ) -> Path:
        """Store ``emb`` (n, d) float32 for these (id, text) pairs; atomic. Returns the ``.npy`` path."""
        emb = np.ascontiguousarray(emb, dtype=np.float32)
        if emb.ndim != 2 or emb.shape[0] != len(ids):
            raise InvalidInputError(f"embeddings of shape {emb.shape} for {len(ids)} ids")
        key = self.key(model_key, fields, ids, texts, model_identity=model_identity)
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.path(key)
        tmp = self.root / f".{key}.{os.getpid()}.npy"
        np.save(tmp, emb, allow_pickle=False)
        os.replace(tmp, final)
        meta = {
            "format": FORMAT,
            "key": key,
            "model": model_key,
            "identity": dict(model_identity)
            if model_identity is not None
            else self.model_identity(model_key),
            "dataset": dataset_key,
            "part": part,
            "fields": fields,
            "n": int(emb.shape[0]),
            "dim": int(emb.shape[1]),
            "content_sha256": content_digest(ids, texts),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            **extra,
        }
        tmpj = self.root / f".{key}.{os.getpid()}.json"
        tmpj.write_text(json.dumps(meta, indent=1, default=str))
        os.replace(tmpj, final.with_suffix(".json"))
        return final

    def entries(self) -> list[dict[str, Any]]:
        """Every manifest in the cache (model, dataset, part, n, dim, key, ...), oldest first."""
        out = []
        for p in sorted(self.root.glob("*.json")) if self.root.is_dir() else []:
            try:
                meta = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(meta, dict) and meta.get("format") == FORMAT and self.path(p.stem).is_file():
                out.append(meta)
        return sorted(out, key=lambda m: m.get("created", ""))

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
        model_identity: Mapping[str, Any] | None = None,
    ) -> tuple[np.ndarray, bool]:
        """(embeddings, was_cached). ``encoder`` may be a zero-argument factory, called only on a miss
        (loading a model costs seconds; a cached re-run never loads it)."""
        hit = self.load(model_key, ids, fields, texts=texts, model_identity=model_identity)
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
            texts=texts,
            model_identity=model_identity,
            encoder_kind=enc.kind,
            seconds=round(time.perf_counter() - t0, 3),
        )
        return emb, False
