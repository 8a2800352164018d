"""The training loop: minibatches of pairs, symmetric InfoNCE, SGDW, run to norm convergence.

SGDW is plain SGD followed by a decoupled decay, task step then decay (paper eq. 4.4, the
"explicit task-then-decay ordering")::

    theta+ = theta - lr * grad L(theta);    theta' = (1 - lr * lambda) * theta+

**Norm convergence.** Under that decay the fourth power of an input's norm relaxes to its
equilibrium (R_eq^4 ~ V~^2 / (2 lr lambda), paper eq. 4.15's variance-dominated limit) with time
constant 1 / (4 lr lambda) steps. A run counts as converged once it has taken at least
``1 / (lr * lambda)`` steps (four time constants: under 2% of the starting offset is left) *and*
the mean output norm has changed by less than ``tol`` (relative) per epoch for ``patience``
epochs in a row. An epoch's mean norm is the average of ``checks_per_epoch`` evenly spaced checks
(the norm fluctuates at equilibrium: one check per epoch would mostly measure that noise). The
defaults (``tol=1e-2``, ``patience=5``) follow the paper's Appendix H (relative change < 1.5e-2
for 5 consecutive checks). Without the first condition a small lambda would "converge" at once, its norm
moving too slowly per epoch to cross ``tol``. A run that reaches ``max_epochs`` first is logged
with ``"converged": false``, never reported as converged.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from normrank.errors import InvalidParameterError, NonFiniteError
from normrank.probe.loss import symmetric_infonce

if TYPE_CHECKING:
    import torch

__all__ = ["TrainConfig", "TrainResult", "Trainable", "convergence_steps", "fit", "sgdw_step"]


@dataclass
class TrainConfig:
    """Hyper-parameters of one run (all recorded in ``train_log.json``)."""

    weight_decay: float
    lr: float = 0.1
    temperature: float = 0.05
    batch_size: int = 256
    max_epochs: int = 300
    tol: float = 1e-2
    patience: int = 5
    steps_per_epoch: int | None = None  # None: one pass over the pairs
    checks_per_epoch: int = 10  # norm checks averaged into an epoch's mean_norm
    mask_duplicates: bool = True
    seed: int = 0

    def check(self, n_pairs: int | None) -> None:
        """Raise InvalidParameterError for a value no run can use (None: before the pairs are known)."""
        bad = []
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            bad.append(f"weight_decay must be finite and >= 0, got {self.weight_decay}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            bad.append(f"lr must be finite and > 0, got {self.lr}")
        if self.lr * self.weight_decay >= 1:
            bad.append(
                f"lr * weight_decay must be < 1 (the decay factor 1 - lr*lambda), got {self.lr * self.weight_decay}"
            )
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            bad.append(f"temperature must be finite and > 0, got {self.temperature}")
        if n_pairs is not None and not 2 <= self.batch_size <= n_pairs:
            bad.append(f"batch_size must be in [2, {n_pairs}] (the number of pairs), got {self.batch_size}")
        if (
            self.max_epochs < 1
            or self.patience < 1
            or self.checks_per_epoch < 1
            or not 0 < self.tol < math.inf
        ):
            bad.append("max_epochs, patience and checks_per_epoch must be >= 1 and tol > 0")
        if self.steps_per_epoch is not None and self.steps_per_epoch < 1:
            bad.append(f"steps_per_epoch must be >= 1, got {self.steps_per_epoch}")
        if bad:
            raise InvalidParameterError("; ".join(bad))


def convergence_steps(lr: float, weight_decay: float) -> int:
    """Steps before the norm criterion may stop a run: ``ceil(1 / (lr * lambda))`` (0 without decay)."""
    return math.ceil(1.0 / (lr * weight_decay)) if weight_decay > 0 else 0


class Trainable(Protocol):
    """What :func:`fit` trains: parameters, pair embeddings with autograd, monitored norms."""

    def parameters(self) -> Sequence[torch.nn.Parameter]: ...

    def embed_pairs(self, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]: ...

    def monitor_norms(self) -> np.ndarray: ...


@dataclass
class TrainResult:
    """Per-epoch log and the stopping verdict of one run."""

    config: TrainConfig
    epochs: list[dict[str, float]] = field(default_factory=list)
    converged: bool = False
    stop_reason: str = ""
    min_steps: int = 0
    seconds: float = 0.0
    initial_norm: float = float("nan")  # mean_norm before the first step
    initial_weight_norm: float = float("nan")

    def to_json(self) -> dict[str, Any]:
        """The ``train_log.json`` body: ``{"epochs": [{"loss", "mean_norm", ...}, ...], ...}``."""
        return {
            "epochs": self.epochs,
            "initial": {"mean_norm": self.initial_norm, "weight_norm": self.initial_weight_norm},
            "converged": self.converged,
            "stop_reason": self.stop_reason,
            "convergence": {
                "rule": "steps >= min_steps and |relative change of mean_norm per epoch| < tol "
                "for patience epochs in a row",
                "min_steps": self.min_steps,
                "tol": self.config.tol,
                "patience": self.config.patience,
            },
            "config": asdict(self.config),
            "seconds": round(self.seconds, 3),
        }

    @property
    def final_norm(self) -> float:
        return float(self.epochs[-1]["mean_norm"]) if self.epochs else float("nan")


def sgdw_step(params: Sequence[torch.nn.Parameter], lr: float, weight_decay: float) -> None:
    """theta <- (1 - lr*lambda) * (theta - lr * grad): the task step, then the decoupled decay."""
    import torch

    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p.sub_(lr * p.grad)
            if weight_decay:
                p.mul_(1.0 - lr * weight_decay)


def fit(
    model: Trainable,
    n_pairs: int,
    cfg: TrainConfig,
    *,
    groups: np.ndarray | None = None,
    progress: bool = False,
    on_epoch: Callable[[dict[str, float]], None] | None = None,
) -> TrainResult:
    """Train ``model`` on pairs ``0..n_pairs-1`` to norm convergence (see the module docstring).

    ``groups`` (n_pairs,) ints: the anchor each pair belongs to (with ``mask_duplicates``, pairs
    of one anchor are not each other's negatives). Each epoch logs ``loss`` (mean minibatch
    loss), ``mean_norm`` (mean output norm over the model's monitor set, averaged over the
    epoch's checks), ``final_norm`` (at the epoch's end),
    ``norm_rel_change``, ``weight_norm`` (Frobenius norm of all trained parameters), ``steps``.
    """
    import torch

    cfg.check(n_pairs)
    rng = np.random.default_rng(cfg.seed)
    torch.manual_seed(cfg.seed)
    params = list(model.parameters())
    g = torch.as_tensor(groups) if (groups is not None and cfg.mask_duplicates) else None
    per_epoch = cfg.steps_per_epoch or max(1, n_pairs // cfg.batch_size)
    checks = set(
        np.linspace(per_epoch / cfg.checks_per_epoch, per_epoch, cfg.checks_per_epoch).round().astype(int)
    )
    result = TrainResult(config=cfg, min_steps=convergence_steps(cfg.lr, cfg.weight_decay))
    t0 = time.perf_counter()
    prev = float(np.mean(model.monitor_norms()))
    result.initial_norm, result.initial_weight_norm = prev, _weight_norm(params)
    steps, calm = 0, 0
    order, pos = rng.permutation(n_pairs), 0
    from normrank.progress import progress_bar

    with progress_bar(enabled=progress) as bar:
        task = bar.add_task(f"train (lambda={cfg.weight_decay:g})", total=cfg.max_epochs)
        for epoch in range(1, cfg.max_epochs + 1):
            losses, seen = [], []
            for step in range(1, per_epoch + 1):
                if pos + cfg.batch_size > n_pairs:  # a fresh shuffle: every pair once per pass
                    order, pos = rng.permutation(n_pairs), 0
                idx = order[pos : pos + cfg.batch_size]
                pos += cfg.batch_size
                for p in params:
                    p.grad = None
                za, zb = model.embed_pairs(idx)
                loss = symmetric_infonce(za, zb, cfg.temperature, None if g is None else g[idx])
                if not torch.isfinite(loss):
                    raise NonFiniteError(f"loss became {loss.item()} at step {steps + 1}: lower --lr")
                loss.backward()
                sgdw_step(params, cfg.lr, cfg.weight_decay)
                losses.append(float(loss.detach()))
                steps += 1
                if step in checks:
                    seen.append(float(np.mean(model.monitor_norms())))
            norm = float(np.mean(seen))
            rel = abs(norm - prev) / prev if prev > 0 else float("inf")
            prev = norm
            row = {"epoch": epoch, "loss": float(np.mean(losses)), "mean_norm": norm, "final_norm": seen[-1], "norm_rel_change": rel,
                   "weight_norm": _weight_norm(params), "steps": steps,
                   "seconds": round(time.perf_counter() - t0, 3)}  # fmt: skip
            result.epochs.append(row)
            if on_epoch is not None:
                on_epoch(row)
            bar.update(
                task,
                advance=1,
                description=f"train (lambda={cfg.weight_decay:g}) loss {row['loss']:.3f} R {norm:.3f}",
            )
            calm = calm + 1 if rel < cfg.tol else 0
            if steps >= result.min_steps and calm >= cfg.patience:
                result.converged, result.stop_reason = True, f"norm converged at epoch {epoch}"
                break
        else:
            result.stop_reason = f"max_epochs={cfg.max_epochs} reached before norm convergence"
    result.seconds = time.perf_counter() - t0
    return result


def _weight_norm(params: Sequence[torch.nn.Parameter]) -> float:
    return float(math.sqrt(sum(float((p.detach().double() ** 2).sum()) for p in params)))
