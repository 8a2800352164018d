"""Monte Carlo estimate of each probe text's drift D~ and heat V~^2 by virtual SGD steps.

Paper, Appendix H (eqs. H.1-H.3): for M random minibatches of contrastive pairs, take one
virtual step theta' = theta - lr * grad L over the scoped parameters, record the displacement of
each probe embedding ``dz = z(theta') - z(theta)``, rescale ``dz~ = dz * ||z||`` (H.1) and undo
the step. Then, per probe text,

* ``drift``  D~  = z^T mean(dz~)                           (H.2, z^ the unit direction)
* ``heat``   V~^2 = 1/(M-1) sum_m ||dz~_m - mean(dz~)||^2   (H.3, trace of the sample covariance)
* ``energy`` M^2 = ||mean(dz~)||^2                          (mean-update energy, eq. 4.8)

All values are in the units of one step of size ``lr`` (the paper's "update scale").
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from normrank.errors import InvalidInputError, InvalidParameterError, NonFiniteError
from normrank.probe.fastpath import detect_tail
from normrank.probe.loss import symmetric_infonce
from normrank.probe.scopes import Scope, resolve_scope
from normrank.probe.stats import WelfordTrace

if TYPE_CHECKING:
    import torch

__all__ = ["ProbeResult", "probe", "replay_model", "sample_batches", "step_gradients"]


@dataclass
class ProbeResult:
    """Per-probe-text estimates, aligned with the ``probe_texts`` given to :func:`probe`.

    ``norm`` R = ||z|| (n,), ``drift`` D~ (n,), ``heat`` V~^2 (n,), ``energy`` ||mean dz~||^2
    (n,), all float64; ``settings`` records how they were measured.
    """

    norm: np.ndarray
    drift: np.ndarray
    heat: np.ndarray
    energy: np.ndarray
    settings: dict[str, Any] = field(default_factory=dict)

    def theory(self, weight_decay: float | None = None) -> dict[str, Any]:
        """The paper's checks on these arrays (see :mod:`normrank.probe.theory`)."""
        from normrank.probe.theory import theory_checks

        return theory_checks(self, weight_decay=weight_decay)


def sample_batches(n_pairs: int, steps: int, batch_size: int, seed: int) -> np.ndarray:
    """The ``(steps, batch_size)`` pair indices of the virtual minibatches (no repeats within one)."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.choice(n_pairs, size=batch_size, replace=False) for _ in range(steps)])


def _check_args(
    probe_texts: Any, pairs: Any, steps: int, batch_size: int, lr: float, temperature: float
) -> None:
    if (
        isinstance(probe_texts, str)
        or not all(isinstance(t, str) for t in probe_texts)
        or len(probe_texts) == 0
    ):
        raise InvalidInputError("probe_texts must be a non-empty list of strings")
    if len(pairs) < 2 or not all(len(p) == 2 and all(isinstance(s, str) for s in p) for p in pairs):
        raise InvalidInputError("pairs must be a list of at least two (anchor, positive) string pairs")
    if int(steps) < 2:
        raise InvalidParameterError(f"steps must be >= 2 (the heat uses 1/(M-1)), got {steps}")
    if not 2 <= int(batch_size) <= len(pairs):
        raise InvalidParameterError(
            f"batch_size must be in [2, len(pairs) = {len(pairs)}] (in-batch negatives), got {batch_size}"
        )
    if not (np.isfinite(lr) and lr > 0):
        raise InvalidParameterError(f"lr must be a positive finite number, got {lr}")
    if not (np.isfinite(temperature) and temperature > 0):
        raise InvalidParameterError(f"temperature must be a positive finite number, got {temperature}")


def _progress(enabled: bool) -> Any:
    from normrank.progress import progress_bar

    return progress_bar(enabled=enabled)


def step_gradients(
    model: Any, scope: Scope, pairs: list[tuple[str, str]], idx: np.ndarray, temperature: float
) -> list[Any]:
    """Gradients of one virtual minibatch's loss (pairs ``idx``) w.r.t. the scope's parameters
    (zeros for parameters the loss does not reach). One step of the probe; public for timing."""
    import torch

    za = model.embed_tensor([pairs[i][0] for i in idx])
    zb = model.embed_tensor([pairs[i][1] for i in idx])
    if za.dtype in (torch.float16, torch.bfloat16):  # the loss in float32; float64 models stay float64
        za, zb = za.float(), zb.float()
    loss = symmetric_infonce(za, zb, temperature)
    params = [p for _, p in scope.params]
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads, strict=True)]


def _chunks(texts: list[str], size: int) -> list[np.ndarray]:
    """Row indices per encoding batch, longest texts first so each batch pads little."""
    order = np.argsort([-len(t) for t in texts], kind="stable")
    return [order[i : i + size] for i in range(0, len(texts), size)]


def probe(
    model: Any,
    probe_texts: list[str],
    pairs: list[tuple[str, str]],
    *,
    steps: int = 64,
    batch_size: int = 64,
    lr: float = 1e-3,
    temperature: float = 0.05,
    scope: str = "full",
    seed: int = 0,
    encode_batch_size: int = 32,
    fast_path: bool = True,
    progress: bool = False,
) -> ProbeResult:
    """Estimate norm, drift D~, heat V~^2 and mean-update energy for every probe text.

    ``model``: a normrank ``Encoder`` with a torch backend, or any object with ``torch_module``
    (an ``nn.Module`` holding the parameters) and ``embed_tensor(texts) -> (n, d)`` raw
    embeddings with autograd. ``pairs``: (anchor, positive) texts for the virtual objective
    (symmetric in-batch InfoNCE on normalised embeddings, temperature ``temperature``).
    ``scope``: ``"full"``, ``"head"`` or ``"last:N"`` (see :mod:`normrank.probe.scopes`). With
    ``scope="head"`` and ``fast_path`` the probe replays only the tail after the head from cached
    features when it can verify that this reproduces the model (see :mod:`.fastpath`).

    The model is left exactly as it was: scoped parameters are restored bit-for-bit, and the
    train/eval mode and ``requires_grad`` flags are put back. Dropout is off (eval mode) while
    probing. Duplicated probe texts are probed once and share their values.
    """
    _check_args(probe_texts, pairs, steps, batch_size, lr, temperature)
    if int(encode_batch_size) < 1:
        raise InvalidParameterError(f"encode_batch_size must be >= 1, got {encode_batch_size}")
    pairs = [(str(a), str(b)) for a, b in pairs]
    t0 = time.perf_counter()
    module: torch.nn.Module = model.torch_module
    uniq = list(dict.fromkeys(probe_texts))
    where = {t: i for i, t in enumerate(uniq)}
    inverse = np.fromiter((where[t] for t in probe_texts), dtype=np.int64, count=len(probe_texts))

    was_training = module.training
    flags = {id(p): p.requires_grad for p in module.parameters()}
    module.eval()
    try:
        sc = resolve_scope(model, scope, uniq[0])
        scoped = {id(p) for _, p in sc.params}
        for p in module.parameters():
            p.requires_grad_(id(p) in scoped)
        batches = sample_batches(len(pairs), int(steps), int(batch_size), int(seed))
        tail = None
        if fast_path and sc.head is not None:
            tail = detect_tail(model, sc.head, sc.head_path or "", uniq[: min(4, len(uniq))])
        with _progress(progress) as bar:
            if tail is not None:
                norm, stats = _run_fast(
                    model, sc, tail, uniq, pairs, batches, lr, temperature, encode_batch_size, bar
                )
            else:
                norm, stats = _run_generic(
                    model, sc, uniq, pairs, batches, lr, temperature, encode_batch_size, bar
                )
    finally:
        for p in module.parameters():
            p.requires_grad_(flags[id(p)])
        module.train(was_training)

    mean = stats.mean
    heat = stats.trace_cov()
    with np.errstate(invalid="ignore", divide="ignore"):
        drift = np.einsum("ij,ij->i", mean, stats.zhat)
    energy = np.einsum("ij,ij->i", mean, mean)
    for name, arr in (("norm", norm), ("drift", drift), ("heat", heat)):
        if not np.all(np.isfinite(arr)):
            raise NonFiniteError(
                f"probe produced non-finite {name} values (lr too large, or a zero embedding?)"
            )
    settings = {
        "steps": int(steps),
        "batch_size": int(batch_size),
        "lr": float(lr),
        "temperature": float(temperature),
        "scope": sc.name,
        "seed": int(seed),
        "n_probe_texts": len(probe_texts),
        "n_unique_probe_texts": len(uniq),
        "n_pairs": len(pairs),
        "n_scoped_params": sc.n_params,
        "scoped_tensors": len(sc.params),
        "path": tail.kind if tail is not None else "generic",
        "head": sc.head_path,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    return ProbeResult(
        norm=norm[inverse],
        drift=drift[inverse],
        heat=heat[inverse],
        energy=energy[inverse],
        settings=settings,
    )


class _Stats(WelfordTrace):
    zhat: np.ndarray


def _run_generic(model, sc, uniq, pairs, batches, lr, temperature, ebs, bar):
    """theta -> theta' -> re-encode every probe text -> restore, once per virtual step."""
    import torch

    chunks = _chunks(uniq, ebs)
    z = np.zeros((len(uniq), 0))
    task = bar.add_task("encode", total=len(uniq))
    with torch.no_grad():
        for c in chunks:
            zc = model.embed_tensor([uniq[i] for i in c]).detach().double().cpu().numpy()
            if z.shape[1] == 0:
                z = np.zeros((len(uniq), zc.shape[1]))
            z[c] = zc
            bar.advance(task, len(c))
    norm = np.linalg.norm(z, axis=1)
    stats = _Stats(len(uniq), z.shape[1])
    stats.zhat = z / norm[:, None]
    params = [p for _, p in sc.params]
    backup = [p.detach().clone() for p in params]
    task = bar.add_task(f"probe ({sc.name}, generic)", total=len(batches))
    try:
        for idx in batches:
            grads = step_gradients(model, sc, pairs, idx, temperature)
            with torch.no_grad():
                for p, g in zip(params, grads, strict=True):
                    p.sub_(lr * g)
                for c in chunks:
                    zp = model.embed_tensor([uniq[i] for i in c]).detach().double().cpu().numpy()
                    stats.update(c, (zp - z[c]) * norm[c, None])
                for p, b in zip(params, backup, strict=True):
                    p.copy_(b)  # exact restore: copy the saved bits back, never add the step back
            bar.advance(task)
    finally:
        with torch.no_grad():
            for p, b in zip(params, backup, strict=True):
                p.copy_(b)
    return norm, stats


# Cached pair features for the head's gradients are dropped beyond this many bytes (then every
# step re-runs the model on its minibatch instead).
PAIR_CACHE_BYTES = 2 * 1024**3


def _pair_embedder(model, tail, pairs, batches, ebs, bar):
    """``texts -> z`` for the minibatch texts, from features cached once (None if too large)."""
    used = list(dict.fromkeys(t for idx in batches for i in idx for t in pairs[i]))
    items: dict[str, Any] = {}
    size = 0
    task = bar.add_task("pair features", total=len(used))
    for c in _chunks(used, ebs):
        texts = [used[i] for i in c]
        _, cache = tail.capture(texts)
        size += sum(v.numel() * v.element_size() for v in cache.values())
        if size > PAIR_CACHE_BYTES:
            bar.remove_task(task)
            return None
        items.update(zip(texts, tail.split(cache), strict=True))
        bar.advance(task, len(c))
    return lambda texts: tail.embed([items[t] for t in texts])


def _run_fast(model, sc, tail, uniq, pairs, batches, lr, temperature, ebs, bar):
    """All M head updates first (they do not depend on the probe texts), then stream the texts.

    The pair texts enter the head's gradient only through their features at the head's input,
    which the step does not change: they are captured once and each step replays the tail.
    """
    import torch

    head = sc.head
    with torch.no_grad():
        embed = _pair_embedder(model, tail, pairs, batches, ebs, bar)
    src = model if embed is None else _CachedModel(embed)
    task = bar.add_task(f"gradients ({sc.name}, {tail.kind})", total=len(batches))
    dws, dbs = [], []
    for idx in batches:
        grads = step_gradients(src, sc, pairs, idx, temperature)
        dws.append((-lr * grads[0]).detach())
        dbs.append((-lr * grads[1]).detach() if head.bias is not None else None)
        bar.advance(task)
    del embed, src
    d = head.out_features
    stats = _Stats(len(uniq), d)
    stats.zhat = np.zeros((len(uniq), d))
    norm = np.zeros(len(uniq))
    task = bar.add_task("probe texts", total=len(uniq))
    with torch.no_grad():
        for c in _chunks(uniq, ebs):
            z, cache = tail.capture([uniq[i] for i in c])
            z = z.detach().double().cpu().numpy()
            norm[c] = np.linalg.norm(z, axis=1)
            stats.zhat[c] = z / norm[c, None]
            for dw, db in zip(dws, dbs, strict=True):
                dz = tail.delta(cache, dw, db).double().cpu().numpy()
                stats.update(c, dz * norm[c, None])
            bar.advance(task, len(c))
    return norm, stats


def replay_model(
    model: Any, tail: Any, pairs: list[tuple[str, str]], batches: Any, encode_batch_size: int = 32
) -> Any:
    """What the fast path hands :func:`step_gradients`: a stand-in for ``model`` whose pair
    embeddings come from features captured once at the head's input by ``tail``
    (``normrank.probe.fastpath.detect_tail``); ``model`` itself when those would not fit in memory."""
    import torch

    with torch.no_grad(), _progress(False) as bar:
        embed = _pair_embedder(model, tail, pairs, batches, encode_batch_size, bar)
    return model if embed is None else _CachedModel(embed)


class _CachedModel:
    """Stands in for the model in :func:`step_gradients`: embeddings from cached features."""

    def __init__(self, embed) -> None:
        self.embed_tensor = embed
