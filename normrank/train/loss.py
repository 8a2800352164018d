"""The training objective: symmetric in-batch InfoNCE on normalised embeddings (paper eq. 3.1),
with repeated anchors optionally kept out of each other's negatives."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["symmetric_infonce"]


def symmetric_infonce(
    za: torch.Tensor, zb: torch.Tensor, temperature: float, groups: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean of the anchor->positive and positive->anchor cross-entropies over in-batch negatives.

    ``za``, ``zb``: raw ``(B, d)``; row ``k`` of each is a positive pair. Only directions enter,
    so the loss is invariant to rescaling either (the paper's assumption (A)). ``groups`` (B,)
    ints: pairs of one group (the same anchor, e.g. a query with several relevant documents)
    are not each other's negatives; without it this is :func:`normrank.probe.loss.symmetric_infonce`.
    """
    import torch
    import torch.nn.functional as F

    a = F.normalize(za, dim=-1)
    b = F.normalize(zb, dim=-1)
    logits = a @ b.T / temperature
    if groups is not None:
        same = groups[:, None] == groups[None, :]
        same.fill_diagonal_(False)
        if bool(same.any()):
            logits = logits.masked_fill(same, float("-inf"))
    target = torch.arange(logits.shape[0], device=logits.device)
    return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))
