"""A model spec (a name, a path, a ``KIND:`` prefix) read into what loads it: kind, name, path.

One reading, shared by :func:`normrank.encoders.load_encoder` and
:func:`normrank.encoders.model_identity`, so the cache key names what the encoder will load.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from normrank.encoders.head import HEAD_CONFIG, HEAD_KIND
from normrank.encoders.resolve import resolve_offline
from normrank.errors import InvalidParameterError

KINDS = (
    "sentence-transformers",
    "open_clip",
    "open_clip-nohead",
    "hf-clip",
    "hf-clip-nohead",
    "onnx",
    "onnx-text",
    HEAD_KIND,  # a folder written by ``normrank train-head``: a base encoder + a trained head
)


def _detect_kind(path: Path) -> str:
    if path.is_file() and path.suffix == ".onnx":
        return "onnx"
    if (path / HEAD_CONFIG).is_file():  # before modules.json: a trained head is never a plain model
        return HEAD_KIND
    if (path / "modules.json").is_file() or (path / "config_sentence_transformers.json").is_file():
        return "sentence-transformers"
    if (path / "open_clip_config.json").is_file():
        return "open_clip"
    cfg = path / "config.json"
    if cfg.is_file():
        try:
            model_type = json.loads(cfg.read_text()).get("model_type")
        except (OSError, ValueError):
            model_type = None
        if model_type == "clip":
            return "hf-clip"
    return "sentence-transformers"


def resolve_spec(
    name_or_path: str | Path, kind: str, options: dict[str, Any]
) -> tuple[str, str, Path, bool, str]:
    """(kind, name, path, local, device) for a model spec, as :func:`load_encoder` reads it.

    Pops ``device`` from ``options`` and adds the defaults a resolved offline package supplies
    (its tokenizer, its max length), so :func:`model_identity` sees what the encoder will use.
    """
    if kind != "auto" and kind not in KINDS:
        raise InvalidParameterError(f"unknown encoder kind {kind!r}; valid: auto, {', '.join(KINDS)}")
    name = str(name_or_path)
    device = options.pop("device", "cpu")
    path = Path(name).expanduser()
    local = path.exists()
    prefix, sep, rest = name.partition(":")
    if sep and prefix in KINDS and not local:  # "KIND:NAME", e.g. "open_clip-nohead:ViT-B-32/openai"
        kind = prefix if kind == "auto" else kind
        name = rest
        path = Path(name).expanduser()
        local = path.exists()
    if not local and kind in ("auto", "sentence-transformers", "onnx", "onnx-text"):
        found = resolve_offline(name)
        if found is not None:
            path, local = found.path, True
            if kind == "auto":
                kind = found.kind
            if found.tokenizer is not None:
                options.setdefault("tokenizer", found.tokenizer)
            if found.max_seq_length is not None:
                options.setdefault("max_seq_length", found.max_seq_length)
    if kind == "auto":
        kind = _detect_kind(path) if local else "sentence-transformers"
    return kind, name, path, local, device
