"""Fast paths for ``scope="head"``: replay only what follows the head layer, from cached features.

A virtual step on the head ``z = tail(W h + b)`` changes only ``W`` and ``b``, so the displaced
embedding is ``tail((W + dW) h + b + db)`` with the features ``h`` entering the head unchanged.
Caching ``h`` once per probe text replaces M full re-encodings by M cheap replays:

* :class:`LinearOutputTail`: the head's output *is* the embedding (CLIP-style projection, or any
  model ending in a linear map). Closed form ``dz = dW h + db`` with ``dW = -lr * grad_W L``.
* :class:`ResidualNormMeanPoolTail`: the head is the ``dense`` of a transformer block's output
  sub-layer (BERT/MiniLM/MPNet ``*Output``: ``LayerNorm(dense(h) + residual)``) and the embedding
  is the masked mean of the last hidden states (sentence-transformers mean pooling). Replays
  dense + residual + LayerNorm + mean pooling per token.

:func:`detect_tail` picks one only after checking that a replay with unchanged weights reproduces
the model's embedding; otherwise the probe falls back to the generic re-encoding path.
"""

from __future__ import annotations

from itertools import pairwise
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["LinearOutputTail", "ResidualNormMeanPoolTail", "detect_tail"]


class LinearOutputTail:
    """The embedding is the head's output: ``z = W h + b``."""

    kind = "fast-linear"

    def __init__(self, model: Any, head: torch.nn.Linear) -> None:
        self.model, self.head = model, head

    def capture(self, texts: list[str]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        import torch

        seen: list[torch.Tensor] = []
        hook = self.head.register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach()))
        try:
            with torch.no_grad():
                z = self.model.embed_tensor(texts)
        finally:
            hook.remove()
        if len(seen) != 1 or seen[0].shape[:-1] != z.shape[:-1]:
            raise ValueError("head is not applied once per text")
        return z, {"h": seen[0]}

    def base(self, cache: dict[str, torch.Tensor]) -> torch.Tensor:
        import torch.nn.functional as F

        return F.linear(cache["h"], self.head.weight, self.head.bias)

    def split(self, cache: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        """Per-text cached features, for :meth:`embed`."""
        return list(cache["h"])

    def embed(self, items: list[torch.Tensor]) -> torch.Tensor:
        """Embeddings of cached texts at the head's current weights (differentiable in them)."""
        import torch
        import torch.nn.functional as F

        return F.linear(torch.stack(items), self.head.weight, self.head.bias)

    def delta(
        self, cache: dict[str, torch.Tensor], dw: torch.Tensor, db: torch.Tensor | None
    ) -> torch.Tensor:
        """``dz = dW h + db``: exact for a linear output, no cancellation."""
        dz = cache["h"] @ dw.T
        return dz if db is None else dz + db


class ResidualNormMeanPoolTail:
    """``z = masked_mean_t LayerNorm(W h_t + b + r_t)`` (post-LN transformer, mean pooling)."""

    kind = "fast-tail"

    def __init__(
        self, model: Any, head: torch.nn.Linear, block_out: torch.nn.Module, pooling: torch.nn.Module
    ):
        self.model, self.head, self.block_out, self.pooling = model, head, block_out, pooling
        self.ln = block_out.LayerNorm

    def capture(self, texts: list[str]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        import torch
        import torch.nn.functional as F

        got: dict[str, Any] = {}

        def on_block(_m: Any, args: tuple, kwargs: dict) -> None:
            vals = list(args) + [kwargs[k] for k in ("hidden_states", "input_tensor") if k in kwargs]
            got["h"], got["r"] = vals[0].detach(), vals[1].detach()

        def on_pool(_m: Any, args: tuple, kwargs: dict) -> None:
            feats = args[0] if args else kwargs["features"]
            got["mask"] = feats["attention_mask"].detach()

        hooks = [
            self.block_out.register_forward_pre_hook(on_block, with_kwargs=True),
            self.pooling.register_forward_pre_hook(on_pool, with_kwargs=True),
        ]
        try:
            with torch.no_grad():
                z = self.model.embed_tensor(texts)
        finally:
            for h in hooks:
                h.remove()
        keep = got["mask"].bool()
        if keep.shape != got["h"].shape[:2]:
            raise ValueError("attention mask does not match the block's token states")
        h, r = got["h"][keep], got["r"][keep]  # real tokens only: (T, d_in), (T, d)
        seg = torch.arange(keep.shape[0]).unsqueeze(1).expand_as(keep)[keep]
        counts = keep.sum(1).clamp(min=1).to(h.dtype).unsqueeze(1)
        u = F.linear(h, self.head.weight, self.head.bias) + r
        cache = {"h": h, "r": r, "u": u, "seg": seg, "counts": counts}
        cache["z0"] = self._pool(self._norm(u), cache)
        return z, cache

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        import torch.nn.functional as F

        return F.layer_norm(x, self.ln.normalized_shape, self.ln.weight, self.ln.bias, self.ln.eps)

    @staticmethod
    def _pool(x: torch.Tensor, cache: dict[str, torch.Tensor]) -> torch.Tensor:
        import torch

        n = cache["counts"].shape[0]
        out = torch.zeros(n, x.shape[1], dtype=x.dtype).index_add_(0, cache["seg"], x)
        return out / cache["counts"]

    def base(self, cache: dict[str, torch.Tensor]) -> torch.Tensor:
        return cache["z0"]

    def split(self, cache: dict[str, torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per-text ``(h, r)`` token features, for :meth:`embed`."""
        bounds = [0, *cache["counts"].squeeze(1).long().cumsum(0).tolist()]
        h, r = cache["h"], cache["r"]
        return [(h[a:b], r[a:b]) for a, b in pairwise(bounds)]

    def embed(self, items: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """Embeddings of cached texts at the head's current weights (differentiable in them)."""
        import torch
        import torch.nn.functional as F

        h = torch.cat([it[0] for it in items])
        r = torch.cat([it[1] for it in items])
        counts = torch.tensor([len(it[0]) for it in items])
        cache = {"seg": torch.repeat_interleave(torch.arange(len(items)), counts)}
        cache["counts"] = counts.clamp(min=1).to(h.dtype).unsqueeze(1)
        return self._pool(self._norm(F.linear(h, self.head.weight, self.head.bias) + r), cache)

    def delta(
        self, cache: dict[str, torch.Tensor], dw: torch.Tensor, db: torch.Tensor | None
    ) -> torch.Tensor:
        """Replay of the tail at ``W + dW``, minus the replay at ``W`` (same arithmetic both times)."""
        pre = cache["u"] + cache["h"] @ dw.T
        if db is not None:
            pre = pre + db
        return self._pool(self._norm(pre), cache) - cache["z0"]


def _parent(module: torch.nn.Module, path: str) -> torch.nn.Module | None:
    if "." not in path:
        return None
    return module.get_submodule(path.rsplit(".", 1)[0])


def detect_tail(model: Any, head: torch.nn.Linear, head_path: str, sample: list[str]) -> Any | None:
    """A fast path whose replay at unchanged weights reproduces ``model.embed_tensor(sample)``."""
    import torch

    candidates: list[Any] = [LinearOutputTail(model, head)]
    parent = _parent(model.torch_module, head_path)
    if (
        parent is not None
        and getattr(parent, "dense", None) is head
        and isinstance(getattr(parent, "LayerNorm", None), torch.nn.LayerNorm)
    ):
        pools = [m for m in model.torch_module.modules() if type(m).__name__ == "Pooling"]
        if len(pools) == 1:
            candidates.append(ResidualNormMeanPoolTail(model, head, parent, pools[0]))
    for tail in candidates:
        try:
            z, cache = tail.capture(sample)
            replay = tail.base(cache)
        except (ValueError, KeyError, IndexError, TypeError, RuntimeError):
            continue
        if replay.shape == z.shape and torch.allclose(replay, z, rtol=1e-4, atol=1e-5 * float(z.abs().max())):
            return tail
    return None
