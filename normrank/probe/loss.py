"""The probe objective: symmetric in-batch InfoNCE on normalised embeddings (paper eq. 3.1)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["symmetric_infonce"]


def symmetric_infonce(za: torch.Tensor, zb: torch.Tensor, temperature: float) -> torch.Tensor:
    """Mean of the anchor->positive and positive->anchor cross-entropies over in-batch negatives.

    ``za``, ``zb``: raw embeddings ``(B, d)``; row ``k`` of each is a positive pair. Only the
    directions enter (assumption (A) of the paper), so the loss is invariant to rescaling either.
    """
    import torch
    import torch.nn.functional as F

    a = F.normalize(za, dim=-1)
    b = F.normalize(zb, dim=-1)
    logits = a @ b.T / temperature
    target = torch.arange(logits.shape[0], device=logits.device)
    return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))
