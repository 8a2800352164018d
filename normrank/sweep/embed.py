"""Texts -> raw embeddings for a sweep: from the embedding cache, or encoded once and cached."""

from __future__ import annotations

from typing import Any

import numpy as np

from normrank.corpus.beir import Dataset

__all__ = ["embed_dataset", "model_key"]


def model_key(model: str, options: dict[str, Any] | None) -> str:
    """Cache key of a model spec: the short name plus any output-changing options."""
    name = model.split("/", 1)[1] if model.startswith("sentence-transformers/") else model
    if options:
        name += "|" + ",".join(f"{k}={options[k]}" for k in sorted(options) if k != "device")
    return name


def embed_dataset(
    ds: Dataset,
    model: str,
    cache: Any,
    encoders: dict[str, Any],
    batch_size: int,
    show_progress: bool,
    options: dict[str, Any] | None,
    qids: list[str],
    qtexts: list[str],
) -> tuple[np.ndarray, np.ndarray]:
    """(judged query embeddings, document embeddings), from the cache or encoded once."""
    from normrank.encoders import load_encoder

    def factory() -> Any:
        if model not in encoders:
            encoders[model] = load_encoder(model, **(options or {}))
        return encoders[model]

    key, dkey = model_key(model, options), ds.source or ds.name
    docs, _ = cache.get_or_encode(
        key,
        dkey,
        "corpus",
        ds.doc_ids,
        ds.doc_texts,
        factory,
        batch_size=batch_size,
        show_progress=show_progress,
    )
    queries, _ = cache.get_or_encode(
        key, dkey, f"queries-{ds.split}", qids, qtexts, factory, fields="text", batch_size=batch_size,
        show_progress=show_progress,
    )  # fmt: skip
    return queries, docs
