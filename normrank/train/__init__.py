"""Train a projection head here (the paper's Section 5 on CPU): symmetric InfoNCE, SGD with
decoupled weight decay, run to norm convergence; the folder it writes loads as an encoder."""

from normrank.probe.loss import symmetric_infonce
from normrank.train.loop import TrainConfig, TrainResult, convergence_steps, fit
from normrank.train.run import train_head, train_head_on_features

__all__ = [
    "TrainConfig",
    "TrainResult",
    "convergence_steps",
    "fit",
    "symmetric_infonce",
    "train_head",
    "train_head_on_features",
]
