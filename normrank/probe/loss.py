"""The contrastive objective: symmetric in-batch InfoNCE on normalised embeddings (paper eq. 3.1),
with repeated anchors optionally kept out of each other's negatives. The probe's virtual steps and
``normrank train-head`` (:mod:`normrank.train`) both descend this one function."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["symmetric_infonce"]


def symmetric_infonce(
    za: torch.Tensor, zb: torch.Tensor, temperature: float, groups: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean of the anchor->positive and positive->anchor cross-entropies over in-batch negatives.

    ``za``, ``zb``: raw embeddings ``(B, d)``; row ``k`` of each is a positive pair. Only the
    directions enter (assumption (A) of the paper), so the loss is invariant to rescaling either.
    ``groups`` (B,) ints: pairs of one group (the same anchor, e.g. a query with several
    relevant documents) are not each other's negatives.
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
