"""What :func:`normrank.train.loop.fit` trains, from features computed once:

* :class:`LinearOnFeatures` (variant ``"linear"``): a linear head ``d -> d'`` on frozen raw
  encoder features (the embeddings the cache already holds), ``z = W h``.
* :class:`LastBlockOnStates` (variant ``"last-block"``): the base model's last transformer block
  plus the head, on the token states that enter that block (captured once: the frozen layers
  below never run again). The replay is checked against the model's own embeddings before
  training starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from normrank.errors import InvalidInputError, NormrankError

if TYPE_CHECKING:
    import torch

__all__ = ["LastBlockOnStates", "LinearOnFeatures", "make_head"]

MONITOR_ROWS = 2048  # inputs whose mean norm is the convergence signal (a seeded subset)
BLOCK_MONITOR_ROWS = 128  # the same for variant last-block


def make_head(in_dim: int, out_dim: int, seed: int) -> torch.nn.Linear:
    """A bias-free linear head (as CLIP's projection), orthogonally initialised, seeded: at step 0
    it keeps every input's norm when ``out_dim >= in_dim``."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    head = torch.nn.Linear(in_dim, out_dim, bias=False)
    with torch.no_grad():
        q, r = torch.linalg.qr(torch.randn(max(in_dim, out_dim), min(in_dim, out_dim), generator=gen))
        q = q * torch.sign(torch.diagonal(r))  # a unique (Haar) orthogonal draw
        head.weight.copy_(q if out_dim >= in_dim else q.T)
    return head


def _monitor_rows(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed + 1)
    return np.sort(rng.choice(n, size=min(n, MONITOR_ROWS), replace=False))


class LinearOnFeatures:
    """``z = head(h)`` on fixed features: ``anchors[ia[k]]`` / ``positives[ib[k]]`` is pair k."""

    def __init__(
        self,
        anchors: np.ndarray,
        positives: np.ndarray,
        ia: np.ndarray,
        ib: np.ndarray,
        head: torch.nn.Linear,
        seed: int = 0,
        monitor: np.ndarray | None = None,
    ) -> None:
        import torch

        if anchors.ndim != 2 or positives.ndim != 2 or anchors.shape[1] != positives.shape[1]:
            raise InvalidInputError(f"feature matrices of shapes {anchors.shape} and {positives.shape}")
        if len(ia) != len(ib) or len(ia) < 2:
            raise InvalidInputError("need at least two pairs, as many anchor as positive indices")
        self.a = torch.as_tensor(np.ascontiguousarray(anchors, dtype=np.float32))
        self.b = torch.as_tensor(np.ascontiguousarray(positives, dtype=np.float32))
        self.ia, self.ib = np.asarray(ia, dtype=np.int64), np.asarray(ib, dtype=np.int64)
        self.head = head
        if monitor is not None:
            self.monitor = torch.as_tensor(np.ascontiguousarray(monitor, dtype=np.float32))
        else:
            both = torch.cat([self.a, self.b])
            self.monitor = both[torch.as_tensor(_monitor_rows(len(both), seed))]

    def parameters(self) -> list[torch.nn.Parameter]:
        return list(self.head.parameters())

    def embed_pairs(self, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        return self.head(self.a[self.ia[idx]]), self.head(self.b[self.ib[idx]])

    def monitor_norms(self) -> np.ndarray:
        import torch

        with torch.no_grad():
            return self.head(self.monitor).norm(dim=1).double().numpy()


def last_block(model: Any) -> tuple[str, torch.nn.Module]:
    """(path, module) of the last block of a sentence-transformers model's transformer stack."""
    import torch

    stacks = [
        (n, m)
        for n, m in model.named_modules()
        if isinstance(m, torch.nn.ModuleList) and len(m) > 1 and len({type(c) for c in m}) == 1
    ]
    if not stacks:
        raise NormrankError("no transformer block stack found in the base model (variant last-block)")
    name, stack = max(stacks, key=lambda s: len(s[1]))
    return f"{name}.{len(stack) - 1}", stack[-1]


class LastBlockOnStates:
    """The last block + mean pooling + head, replayed on cached token states.

    Only for sentence-transformers encoders whose pipeline is Transformer -> mean Pooling (the
    MiniLM / MPNet family, with Normalize removed); anything else raises before training.
    """

    def __init__(
        self,
        encoder: Any,
        texts_a: Sequence[str],
        texts_b: Sequence[str],
        ia: np.ndarray,
        ib: np.ndarray,
        head: torch.nn.Linear,
        *,
        batch_size: int = 32,
        seed: int = 0,
        progress: bool = False,
    ) -> None:
        import torch

        st = getattr(encoder, "model", None)
        mods = [type(m).__name__ for m in st] if st is not None else []
        pool = st[1] if len(mods) == 2 else None
        # sentence-transformers < 6 flags the mode per kind; 6 names it
        mode = getattr(pool, "pooling_mode", None)
        mean = mode == "mean" or bool(getattr(pool, "pooling_mode_mean_tokens", False))
        if mods != ["Transformer", "Pooling"] or not mean:
            raise NormrankError(
                f"variant last-block needs a sentence-transformers model Transformer -> mean Pooling, got {mods}"
            )
        self.encoder, self.head = encoder, head
        self.block_path, self.block = last_block(st)
        for p in st.parameters():
            p.requires_grad_(False)
        for p in self.block.parameters():
            p.requires_grad_(True)
        # only the texts the pairs use: a --max-pairs subset captures no more states than it needs
        texts = list(dict.fromkeys([*(texts_a[i] for i in ia), *(texts_b[i] for i in ib)]))
        where = {t: i for i, t in enumerate(texts)}
        self.ia = np.array([where[texts_a[i]] for i in ia], dtype=np.int64)
        self.ib = np.array([where[texts_b[i]] for i in ib], dtype=np.int64)
        self.states, self.base = self._capture(texts, batch_size, progress)
        got = self._embed_rows(np.arange(min(4, len(texts))), with_head=False)
        with torch.no_grad():
            err = float((got - self.base[: len(got)]).abs().max())
        scale = float(self.base[: len(got)].abs().max())
        if not err <= 1e-4 * max(1.0, scale):
            raise NormrankError(
                f"replaying the last block does not reproduce the model's embeddings (max error {err:.3g}); "
                "this model's layout is not supported by variant last-block"
            )
        # fewer monitored texts than the linear head's: each check runs the block over all of them
        self.monitor = _monitor_rows(len(texts), seed)[:BLOCK_MONITOR_ROWS]

    def _capture(self, texts: list[str], batch_size: int, progress: bool) -> tuple[list[Any], Any]:
        import torch

        from normrank.progress import progress_bar

        states: list[Any] = [None] * len(texts)
        base = torch.zeros(len(texts), self.encoder.dim)
        seen: dict[str, Any] = {}
        hook = self.block.register_forward_pre_hook(lambda _m, args: seen.__setitem__("h", args[0]))
        order = np.argsort([-len(t) for t in texts], kind="stable")
        prep = getattr(self.encoder.model, "preprocess", None) or self.encoder.model.tokenize
        try:
            with progress_bar(enabled=progress) as bar:
                task = bar.add_task("token states before the last block", total=len(texts))
                with torch.no_grad():
                    for s in range(0, len(texts), batch_size):
                        rows = order[s : s + batch_size]
                        feats = prep([texts[i] for i in rows])
                        out = self.encoder.model(feats)
                        lengths = feats["attention_mask"].sum(1).tolist()
                        for k, i in enumerate(rows):
                            # Trimmed to the text's own tokens: batches are re-padded per step.
                            states[i] = seen["h"][k, : int(lengths[k])].clone()
                        base[rows] = out["sentence_embedding"].float()
                        bar.advance(task, len(rows))
        finally:
            hook.remove()
        return states, base

    def _pad(self, rows: np.ndarray) -> tuple[Any, Any]:
        import torch

        seqs = [self.states[i] for i in rows]
        length = max(s.shape[0] for s in seqs)
        h = torch.zeros(len(seqs), length, seqs[0].shape[1])
        mask = torch.zeros(len(seqs), length)
        for k, s in enumerate(seqs):
            h[k, : s.shape[0]] = s
            mask[k, : s.shape[0]] = 1
        return h, mask

    def _embed_rows(self, rows: np.ndarray, with_head: bool = True) -> Any:
        import torch

        h, mask = self._pad(rows)
        additive = torch.zeros_like(mask).masked_fill(mask == 0, torch.finfo(torch.float32).min)
        out = self.block(h, additive[:, None, None, :])
        out = out[0] if isinstance(out, tuple) else out
        pooled = (out * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        return self.head(pooled) if with_head else pooled

    def parameters(self) -> list[torch.nn.Parameter]:
        return [*self.block.parameters(), *self.head.parameters()]

    def embed_pairs(self, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        self.block.train(False)  # dropout off: the block is trained as the encoder runs it
        return self._embed_rows(self.ia[idx]), self._embed_rows(self.ib[idx])

    def monitor_norms(self) -> np.ndarray:
        import torch

        out = []
        with torch.no_grad():
            for s in range(0, len(self.monitor), 256):
                out.append(self._embed_rows(self.monitor[s : s + 256]).norm(dim=1).double().numpy())
        return np.concatenate(out)
