"""Document lengths for the length control: tokens of the model's tokenizer where one is found,
words otherwise.

Token counts are of the whole text (no truncation, no special tokens): the control asks whether a
length prior explains the norm's gain, and a document's length is what it is, not what the model
kept of it. Counts are cached under ``cache_root()/lengths`` (keyed by tokenizer file and texts),
so a sweep on cached embeddings pays the tokenizer once.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from normrank.settings import cache_root

__all__ = ["document_lengths", "tokenizer_file"]


def tokenizer_file(model: str) -> Path | None:
    """The ``tokenizer.json`` a model name or folder resolves to offline, or None."""
    candidates: list[Path] = []
    if Path(model).expanduser().is_dir():
        candidates.append(Path(model).expanduser())
    try:
        from normrank.encoders.resolve import resolve_offline

        found = resolve_offline(model)
    except Exception:  # resolution is best effort here: no tokenizer -> words
        found = None
    if found is not None:
        for p in (found.tokenizer, found.path):
            if p is not None:
                candidates.append(Path(p) if Path(p).is_dir() else Path(p).parent)
    for folder in candidates:
        if (folder / "tokenizer.json").is_file():
            return folder / "tokenizer.json"
    return None


def _digest(tok: Path, texts: Sequence[str]) -> str:
    h = hashlib.sha1(tok.read_bytes())
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def _token_counts(tok: Path, texts: Sequence[str]) -> np.ndarray:
    from tokenizers import Tokenizer

    t = Tokenizer.from_file(str(tok))
    t.no_truncation()
    t.no_padding()
    enc = t.encode_batch(list(texts), add_special_tokens=False)
    return np.array([len(e.ids) for e in enc], dtype=np.float64)


def document_lengths(
    model: str, texts: Sequence[str], unit: str = "auto", cache: bool = True
) -> tuple[np.ndarray, str]:
    """``(lengths, unit)``: lengths >= 1 per text, unit ``"tokens"`` or ``"words"``.

    ``unit="auto"``: tokens when the model's tokenizer is found (and ``tokenizers`` installed),
    else words; ``"words"`` forces whitespace words.
    """
    tok = tokenizer_file(model) if unit != "words" else None
    # Installed? Asked without importing it (~5 ms): a cache hit needs no tokenizer.
    if tok is not None and importlib.util.find_spec("tokenizers") is None:
        tok = None
    if tok is None:
        return np.maximum([len(t.split()) for t in texts], 1).astype(np.float64), "words"
    path = cache_root() / "lengths" / f"{_digest(tok, texts)}.npy"
    if cache and path.is_file():
        counts = np.load(path, allow_pickle=False)
        if counts.shape == (len(texts),):
            return np.maximum(counts, 1.0), "tokens"
    counts = _token_counts(tok, texts)
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
        np.save(tmp, counts, allow_pickle=False)
        os.replace(tmp, path)  # atomic: a reader sees the old file or the whole new one
    return np.maximum(counts, 1.0), "tokens"
