"""The encoder interface every model family answers to.

An encoder turns texts into **raw** (unnormalised) float32 embeddings of shape ``(n, dim)``:
the norm is the signal normrank ranks with, so no encoder here ever normalises.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from normrank.errors import InvalidInputError

if TYPE_CHECKING:
    import torch

__all__ = ["Encoder", "TorchEncoder", "check_texts", "quiet_loading"]


def check_texts(texts: Sequence[str]) -> list[str]:
    """Return ``texts`` as a list of str, or raise InvalidInputError."""
    if isinstance(texts, str):
        raise InvalidInputError("texts must be a sequence of strings, not one string")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise InvalidInputError(f"texts[{i}] is {type(t).__name__}, expected str")
    return out


class Encoder(ABC):
    """Texts -> raw embeddings.

    Attributes:
        name: the model name or path it was loaded from.
        kind: the model family ("sentence-transformers", "open_clip", "open_clip-nohead",
            "hf-clip", "hf-clip-nohead", "onnx").
        dim: the embedding dimension d.
    """

    name: str
    kind: str
    dim: int

    @abstractmethod
    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
        """Encode ``texts`` into a float32 array of shape (n, dim), raw (not unit length)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, kind={self.kind!r}, dim={self.dim})"


class TorchEncoder(Encoder):
    """An encoder backed by a torch module.

    ``torch_module`` is the module whose parameters a probe perturbs; ``embed_tensor`` returns
    the raw (n, d) embeddings with autograd enabled (the caller decides ``no_grad``), with the
    module in eval mode (dropout off). ``encode`` gives the same values, batched, as numpy.
    """

    torch_module: torch.nn.Module
    device: str = "cpu"

    @abstractmethod
    def embed_tensor(self, texts: list[str]) -> torch.Tensor:
        """Raw embeddings (n, dim) as a float tensor, differentiable w.r.t. ``torch_module``."""

    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
        import torch

        texts = check_texts(texts)
        if batch_size < 1:
            raise InvalidInputError(f"batch_size must be >= 1, got {batch_size}")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        # Longest first, as sentence-transformers does: batches of similar length pad less.
        order = np.argsort([-len(t) for t in texts], kind="stable")
        self.torch_module.eval()
        with torch.inference_mode(), _progress(len(texts), f"encoding ({self.name})", show_progress) as bar:
            for start in range(0, len(texts), batch_size):
                idx = order[start : start + batch_size]
                emb = self.embed_tensor([texts[i] for i in idx])
                out[idx] = emb.detach().float().cpu().numpy()
                bar(len(idx))
        return out


class _NoBar:
    def __enter__(self) -> Any:
        return lambda n: None

    def __exit__(self, *exc: object) -> None:
        return None


class _Bar:
    """Description, done/total, elapsed and remaining time, on stderr (stdout stays for results):
    rich's bar on a terminal, plain lines at a steady pace elsewhere (normrank.progress)."""

    def __init__(
        self,
        total: int,
        label: str,
        get_time: Callable[[], float] | None = None,
        file: TextIO | None = None,
    ) -> None:
        from normrank.progress import progress_bar

        self._p = progress_bar(get_time=get_time, file=file)
        self._task = self._p.add_task(label, total=total)

    def __enter__(self) -> Any:
        self._p.start()
        return lambda n: self._p.advance(self._task, n)

    def __exit__(self, *exc: object) -> None:
        self._p.stop()


def _progress(total: int, label: str, show: bool) -> Any:
    return _Bar(total, label) if show else _NoBar()


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """Turn off transformers' and huggingface_hub's tqdm bars ("Loading weights", downloads) while
    a model loads; restore them after. Log messages and exceptions pass through unchanged."""
    restore: list[Callable[[], None]] = []
    try:
        from huggingface_hub import utils as hub_utils

        if not hub_utils.are_progress_bars_disabled():
            restore.append(hub_utils.enable_progress_bars)
    except ImportError:
        hub_utils = None
    try:
        from transformers.utils import logging as tf_logging

        if tf_logging.is_progress_bar_enabled():
            restore.append(tf_logging.enable_progress_bar)
        tf_logging.disable_progress_bar()  # also turns off huggingface_hub's
    except ImportError:
        if hub_utils is not None:
            hub_utils.disable_progress_bars()
    try:
        yield
    finally:
        for undo in restore:
            undo()
        if hub_utils is not None and not any(u is hub_utils.enable_progress_bars for u in restore):
            # transformers' enable_progress_bar turns the hub's back on too; keep it as it was.
            hub_utils.disable_progress_bars()
