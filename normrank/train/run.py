"""``train_head``: pairs -> base features -> trained head -> a folder ``load_encoder`` reads.

Also :func:`train_head_on_features`, the same training on feature matrices a caller already has
(the experiments in ``benchmarks/train_head_experiments.py`` use it on cached and synthetic
features).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from normrank.encoders.head import HEAD_CONFIG, HEAD_FORMAT, HEAD_KIND, HEAD_WEIGHTS
from normrank.encoders.head_folder import recover_folder, replace_folder
from normrank.errors import InvalidInputError, InvalidParameterError, SaveError
from normrank.train.loop import TrainConfig, TrainResult, fit
from normrank.train.pairs import PairSet, cache_model_key, load_pair_sets, side_features
from normrank.train.trainables import LastBlockOnStates, LinearOnFeatures, make_head

__all__ = ["LOG_FILE", "save_head_folder", "train_head", "train_head_on_features"]

LOG_FILE = "train_log.json"


def train_head_on_features(
    anchors: np.ndarray,
    positives: np.ndarray,
    ia: np.ndarray,
    ib: np.ndarray,
    cfg: TrainConfig,
    *,
    out_dim: int | None = None,
    groups: np.ndarray | None = None,
    monitor: np.ndarray | None = None,
    progress: bool = False,
) -> tuple[Any, TrainResult]:
    """(head ``torch.nn.Linear``, result): a linear head trained on pairs of feature rows
    ``(anchors[ia[k]], positives[ib[k]])``. ``groups`` defaults to the anchor row (pairs sharing
    an anchor are not each other's negatives). ``monitor``: the feature rows whose mean output
    norm is logged and judged for convergence (default: a seeded subset of both sides)."""
    head = make_head(anchors.shape[1], out_dim or anchors.shape[1], cfg.seed)
    model = LinearOnFeatures(anchors, positives, ia, ib, head, seed=cfg.seed, monitor=monitor)
    groups = np.asarray(ia) if groups is None else groups
    return head, fit(model, len(ia), cfg, groups=groups, progress=progress)


def _combine(sets: list[PairSet], feats: list[tuple[np.ndarray, np.ndarray]]):
    """Stack every source's features; pair indices shifted into the stacked rows."""
    a_rows, b_rows, ia, ib = [], [], [], []
    oa = ob = 0
    for s, (fa, fb) in zip(sets, feats, strict=True):
        a_rows.append(fa)
        b_rows.append(fb)
        ia.append(s.ia + oa)
        ib.append(s.ib + ob)
        oa, ob = oa + len(fa), ob + len(fb)
    return np.concatenate(a_rows), np.concatenate(b_rows), np.concatenate(ia), np.concatenate(ib)


def _subsample(ia: np.ndarray, ib: np.ndarray, max_pairs: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if max_pairs and len(ia) > max_pairs:
        keep = np.sort(np.random.default_rng(seed).choice(len(ia), size=max_pairs, replace=False))
        return ia[keep], ib[keep]
    return ia, ib


def train_head(
    data: Sequence[str],
    model: str,
    weight_decay: float,
    out: str | Path,
    *,
    variant: str = "linear",
    pairs: str = "qrels",
    split: str = "train",
    out_dim: int | None = None,
    lr: float = 0.1,
    temperature: float = 0.05,
    batch_size: int = 256,
    max_epochs: int = 300,
    tol: float = 1e-2,
    patience: int = 5,
    steps_per_epoch: int | None = None,
    max_pairs: int = 0,
    max_seq_length: int | None = None,
    seed: int = 0,
    cache_dir: str | Path | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> TrainResult:
    """Train a projection head on ``model`` (variant ``"linear"``: on frozen raw features; or
    ``"last-block"``: the last transformer block too) to norm convergence and write ``out``:
    ``normrank_head.json``, ``model.safetensors``, ``train_log.json`` (+ the base's
    ``tokenizer.json``). ``load_encoder(out)`` then gives the trained encoder.

    ``data``: BEIR folders / names or ``.tsv`` files (see :mod:`normrank.train.pairs`); the
    pairs should come from data you will not evaluate the head on.
    """
    from normrank.corpus.embedding_cache import EmbeddingCache
    from normrank.encoders import load_encoder

    if variant not in ("linear", "last-block"):
        raise InvalidParameterError(f"variant must be 'linear' or 'last-block', got {variant!r}")
    out = Path(out)
    _check_out(out, overwrite)
    cfg = TrainConfig(
        weight_decay=weight_decay, lr=lr, temperature=temperature, batch_size=batch_size,
        max_epochs=max_epochs, tol=tol, patience=patience, steps_per_epoch=steps_per_epoch, seed=seed,
    )  # fmt: skip
    cfg.check(None)  # the settings, before any pair is read or encoded
    options = {"max_seq_length": max_seq_length} if max_seq_length else None
    sets = load_pair_sets(data, pairs, split)
    encoders: dict[str, Any] = {}

    def base() -> Any:
        if "base" not in encoders:
            encoders["base"] = load_encoder(model, **(options or {}))
        return encoders["base"]

    block_path = None
    if variant == "linear":
        cache, key = EmbeddingCache(cache_dir), cache_model_key(model, options)
        feats = [
            (side_features(s.anchors, key, base, cache, show_progress=progress),
             side_features(s.positives, key, base, cache, show_progress=progress))
            for s in sets
        ]  # fmt: skip
        fa, fb, ia, ib = _combine(sets, feats)
        ia, ib = _subsample(ia, ib, max_pairs, seed)
        cfg.check(len(ia))
        head, result = train_head_on_features(fa, fb, ia, ib, cfg, out_dim=out_dim, progress=progress)
        block = None
    else:
        texts_a = [t for s in sets for t in s.anchors.texts]
        texts_b = [t for s in sets for t in s.positives.texts]
        dummy = [(np.zeros((len(s.anchors.texts), 0)), np.zeros((len(s.positives.texts), 0))) for s in sets]
        _, _, ia, ib = _combine(sets, dummy)
        ia, ib = _subsample(ia, ib, max_pairs, seed)
        cfg.check(len(ia))
        enc = base()
        head = make_head(enc.dim, out_dim or enc.dim, seed)
        trainable = LastBlockOnStates(enc, texts_a, texts_b, ia, ib, head, seed=seed, progress=progress)
        result = fit(trainable, len(ia), cfg, groups=trainable.ia, progress=progress)
        block_path, block = trainable.block_path, trainable.block
    base_spec = str(Path(model).expanduser().resolve()) if Path(model).expanduser().exists() else model
    meta = {
        "format": HEAD_FORMAT,
        "kind": HEAD_KIND,
        "base": base_spec,
        "base_options": options or {},
        "variant": variant,
        "in_dim": int(head.in_features),
        "out_dim": int(head.out_features),
        "bias": False,
        "block": block_path,
        "trained_on": [s.source for s in sets],
        "n_pairs": len(ia),
        "converged": result.converged,
    }
    save_head_folder(out, meta, head, block, result, model, overwrite=overwrite)
    return result


def _check_out(out: Path, overwrite: bool) -> None:
    """Refuse an ``out`` that cannot be written before any training (and put back a head an
    interrupted --overwrite left aside)."""
    above = next((p for p in out.absolute().parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise InvalidInputError(f"--out {out}: {above} is a file, so no folder can be made under it")
    if above is not None and not os.access(above, os.W_OK | os.X_OK):
        raise InvalidInputError(f"--out {out}: {above} is not writable")
    recover_folder(out)
    if out.exists() and not (out.is_dir() and (not any(out.iterdir()) or (out / HEAD_CONFIG).is_file())):
        raise InvalidInputError(f"{out} exists and is not a trained-head folder: choose another --out")
    if out.is_dir() and (out / HEAD_CONFIG).is_file() and not overwrite:
        raise InvalidInputError(f"{out} already holds a trained head: pass --overwrite to replace it")


def _tokenizer_json(model: str) -> Path | None:
    from normrank.encoders.resolve import resolve_offline

    folders = [Path(model).expanduser()]
    found = resolve_offline(model)
    if found is not None:
        folders += [p if p.is_dir() else p.parent for p in (found.tokenizer, found.path) if p is not None]
    for f in folders:
        if (f / "tokenizer.json").is_file():
            return f / "tokenizer.json"
    return None


def save_head_folder(
    out: Path,
    meta: dict[str, Any],
    head: Any,
    block: Any,
    result: TrainResult,
    model: str,
    *,
    overwrite: bool,
) -> None:
    """Write the folder atomically: everything into a sibling temp folder, then one rename (an
    interrupted save leaves the old folder, or none, never half of one). No pickle."""
    from safetensors.torch import save_file

    _check_out(out, overwrite)
    tensors = {"head.weight": head.weight.detach().contiguous().clone()}
    if block is not None:
        tensors.update({f"block.{k}": v.detach().contiguous().clone() for k, v in block.state_dict().items()})
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        save_file(tensors, str(tmp / HEAD_WEIGHTS))
        (tmp / HEAD_CONFIG).write_text(json.dumps(meta, indent=1))
        (tmp / LOG_FILE).write_text(json.dumps(result.to_json(), indent=1, allow_nan=False))
        tok = _tokenizer_json(model)
        if tok is not None:  # so the sweep's length control counts the base's tokens
            shutil.copyfile(tok, tmp / "tokenizer.json")
        replace_folder(tmp, out)  # never leaves `out` absent, or recover_folder restores it
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SaveError(f"could not write {out}: {e}") from e
