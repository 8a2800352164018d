"""CLIP text towers, unnormalised: open_clip and Hugging Face ``CLIPModel``.

Two readouts per family (paper Table 3):

- projected (``kind="open_clip"`` / ``"hf-clip"``): the text embedding after the projection head,
  exactly what the model's ``encode_text`` / ``get_text_features`` give before any normalisation;
- no head (``"open_clip-nohead"`` / ``"hf-clip-nohead"``): the pooled token states that enter the
  projection (the paper's "CLIP mean-pool" ablation: no projection head).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from normrank.encoders.base import TorchEncoder, quiet_loading
from normrank.errors import MissingDependencyError

__all__ = ["HFCLIPEncoder", "OpenCLIPEncoder", "load_hf_clip", "load_open_clip"]


@contextlib.contextmanager
def _without(module: Any, attr: str) -> Iterator[None]:
    """Temporarily set ``module.attr`` (a parameter or submodule) to None; restore it after."""
    saved = getattr(module, attr)
    setattr(module, attr, None)
    try:
        yield
    finally:
        setattr(module, attr, saved)


def _import_open_clip() -> Any:
    # open_clip imports torchvision at import time; a torchvision built for another torch fails
    # with RuntimeError, not ImportError, so catch both.
    try:
        import open_clip
    except (ImportError, RuntimeError) as e:
        raise MissingDependencyError(
            "open_clip could not be imported (it needs a torchvision built for this torch): "
            "pip install 'normrank[clip]' torchvision"
        ) from e
    return open_clip


class _CLIPTextEncoder(TorchEncoder):
    """What both CLIP families share: the model in eval mode, its tokenizer, and the readout
    (projected, or the no-head ablation) named in ``kind``."""

    family = ""

    def __init__(
        self, model: Any, tokenizer: Any, name: str, *, head: bool = True, device: str = "cpu"
    ) -> None:
        self.model = model.eval()
        self.torch_module = self.model
        self.tokenizer = tokenizer
        self.name = name
        self.device = device
        self.head = head
        self.kind = self.family if head else f"{self.family}-nohead"
        self._setup()
        self.dim = int(self.embed_tensor(["a"]).shape[1])

    def _setup(self) -> None:
        """Family-specific state, set before the first ``embed_tensor`` call."""


class OpenCLIPEncoder(_CLIPTextEncoder):
    """The text tower of an open_clip model (``CLIP`` or ``CustomTextCLIP``)."""

    family = "open_clip"

    def _setup(self) -> None:
        # The projection lives on the model (CLIP) or on its text tower (CustomTextCLIP).
        self._proj_owner = self.model.text if hasattr(self.model, "text") else self.model

    def embed_tensor(self, texts: list[str]) -> Any:
        self.model.eval()
        tokens = self.tokenizer(list(texts)).to(self.device)
        if self.head:
            return self.model.encode_text(tokens, normalize=False)
        with _without(self._proj_owner, "text_projection"):
            return self.model.encode_text(tokens, normalize=False)


def load_open_clip(
    spec: str,
    name: str,
    *,
    pretrained: str | None = None,
    head: bool = True,
    device: str = "cpu",
    model_config: dict | str | Path | None = None,
) -> OpenCLIPEncoder:
    """Build an open_clip text encoder.

    ``spec`` is an open_clip model name (``"ViT-B-32"``), ``"hf-hub:org/repo"`` or ``"local-dir:/path"``;
    ``pretrained`` a tag (``"laion2b_s34b_b79k"``) or a local checkpoint file. ``spec`` may also carry
    the tag as ``"ViT-B-32/laion2b_s34b_b79k"``. ``model_config`` (a dict, or a JSON file / folder of
    them) registers extra architectures first, e.g. a small model for tests.
    """
    open_clip = _import_open_clip()
    if model_config is not None:
        import json
        import tempfile

        if isinstance(model_config, dict):
            tmp = Path(tempfile.mkdtemp(prefix="normrank-openclip-"))
            cfg_path = tmp / f"{spec}.json"
            cfg_path.write_text(json.dumps(model_config))
            open_clip.add_model_config(cfg_path)
        else:
            open_clip.add_model_config(Path(model_config))
    if pretrained is None and "/" in spec and not spec.startswith(("hf-hub:", "local-dir:")):
        spec, pretrained = spec.split("/", 1)
    with quiet_loading():
        model = open_clip.create_model(spec, pretrained=pretrained, device=device)
        tokenizer = open_clip.get_tokenizer(spec)
    return OpenCLIPEncoder(model, tokenizer, name, head=head, device=device)


class HFCLIPEncoder(_CLIPTextEncoder):
    """The text side of a Hugging Face ``CLIPModel``, unnormalised."""

    family = "hf-clip"

    def _setup(self) -> None:
        self.max_length = int(self.model.config.text_config.max_position_embeddings)

    def embed_tensor(self, texts: list[str]) -> Any:
        self.model.eval()
        batch = self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        ).to(self.device)
        inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        # Pooled (EOS) text state, then the projection head unless this is the no-head ablation.
        pooled = self.model.text_model(**inputs).pooler_output
        return self.model.text_projection(pooled) if self.head else pooled


def load_hf_clip(path_or_name: str, name: str, *, head: bool = True, device: str = "cpu") -> HFCLIPEncoder:
    """Load a ``CLIPModel`` and its tokenizer from a folder (or the hub, when online)."""
    try:
        from transformers import AutoTokenizer, CLIPModel
    except ImportError as e:
        raise MissingDependencyError("transformers is not installed: pip install 'normrank[models]'") from e
    with quiet_loading():
        model = CLIPModel.from_pretrained(str(path_or_name)).to(device)
        tokenizer = AutoTokenizer.from_pretrained(str(path_or_name))
    return HFCLIPEncoder(model, tokenizer, name, head=head, device=device)
