"""A projection head trained by ``normrank train-head``, on top of a base encoder, as one encoder.

A trained-head folder holds::

    normrank_head.json   # {"format": 1, "base": SPEC, "variant": "linear" | "last-block", ...}
    model.safetensors    # "head.weight" (d', d) [+ "head.bias"]; "block.<name>" for "last-block"
    train_log.json       # {"epochs": [{"loss": ..., "mean_norm": ...}, ...], ...}
    tokenizer.json       # the base's tokenizer, copied so length controls count its tokens

``load_encoder(DIR)`` returns a :class:`HeadEncoder`: ``z = W · base(x) (+ b)``, raw (never
normalised), where for ``"last-block"`` the base's last transformer block carries the trained
weights. No pickle: tensors load from safetensors.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from normrank.encoders.base import Encoder, TorchEncoder
from normrank.errors import InvalidInputError, MissingDependencyError, NormrankError

if TYPE_CHECKING:
    import torch

__all__ = ["HEAD_CONFIG", "HEAD_FORMAT", "HEAD_KIND", "HEAD_WEIGHTS", "HeadEncoder", "load_head_encoder"]

HEAD_KIND = "normrank-head"
HEAD_CONFIG = "normrank_head.json"
HEAD_WEIGHTS = "model.safetensors"
HEAD_FORMAT = 1
VARIANTS = ("linear", "last-block")


class HeadEncoder(TorchEncoder):
    """A base torch encoder followed by a linear projection head ``z = head(base(x))``.

    ``probe_head`` is the head, so ``normrank probe --scope head`` moves exactly what was
    trained; ``torch_module`` holds base and head (``scope="full"``, ``"last:N"`` see both).
    """

    kind = HEAD_KIND

    def __init__(self, base: TorchEncoder, head: torch.nn.Linear, name: str, variant: str = "linear") -> None:
        import torch

        if head.in_features != base.dim:
            raise InvalidInputError(f"head takes {head.in_features} features, base gives {base.dim}")
        self.base, self.head, self.name, self.variant = base, head, name, variant
        self.device = base.device
        self.dim = int(head.out_features)
        self.probe_head = head
        self.torch_module = torch.nn.ModuleDict({"base": base.torch_module, "head": head})
        self.torch_module.eval()

    def embed_tensor(self, texts: list[str]) -> torch.Tensor:
        return self.head(self.base.embed_tensor(texts))


def read_head_config(folder: str | Path) -> dict[str, Any]:
    """The folder's ``normrank_head.json``, checked (format, variant, dimensions)."""
    folder = Path(folder)
    try:
        cfg = json.loads((folder / HEAD_CONFIG).read_text())
    except (OSError, ValueError) as e:
        raise NormrankError(f"{folder}: unreadable {HEAD_CONFIG} ({e}); re-run normrank train-head") from e
    if not isinstance(cfg, dict) or cfg.get("format") != HEAD_FORMAT:
        raise NormrankError(
            f"{folder}/{HEAD_CONFIG}: format {cfg.get('format') if isinstance(cfg, dict) else cfg!r}, "
            f"this normrank reads format {HEAD_FORMAT}; re-run normrank train-head"
        )
    if cfg.get("variant") not in VARIANTS or not isinstance(cfg.get("base"), str):
        raise NormrankError(
            f"{folder}/{HEAD_CONFIG}: needs 'base' (a model spec) and 'variant' in {VARIANTS}"
        )
    return cfg


def load_head_encoder(
    folder: str | Path, load_base: Callable[..., Encoder], *, device: str = "cpu", **options: Any
) -> HeadEncoder:
    """Load a trained-head folder. ``load_base`` is :func:`normrank.encoders.load_encoder` (passed
    in, so this module never imports the package that imports it)."""
    import torch

    try:
        from safetensors.torch import load_file
    except ImportError as e:
        raise MissingDependencyError("safetensors is not installed: pip install 'normrank[models]'") from e
    folder = Path(folder)
    cfg = read_head_config(folder)
    base_options = {**cfg.get("base_options", {}), **options}
    base = load_base(cfg["base"], device=device, **base_options)
    if not isinstance(base, TorchEncoder):
        raise NormrankError(f"base model {cfg['base']!r} is not a torch encoder; a head needs one")
    tensors = load_file(str(folder / HEAD_WEIGHTS), device=device)
    weight = tensors.get("head.weight")
    if weight is None or weight.ndim != 2:
        raise NormrankError(f"{folder}/{HEAD_WEIGHTS}: no 2-d 'head.weight'")
    bias = tensors.get("head.bias")
    head = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device=device)
    with torch.no_grad():
        head.weight.copy_(weight)
        if bias is not None:
            head.bias.copy_(bias)
    if cfg["variant"] == "last-block":
        block = base.torch_module.get_submodule(cfg["block"])
        state = {k[len("block.") :]: v for k, v in tensors.items() if k.startswith("block.")}
        block.load_state_dict(state, strict=True)  # every tensor of the block, no more, no fewer
    return HeadEncoder(base, head, str(folder), cfg["variant"])
