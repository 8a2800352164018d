"""One question, one call: does this model's norm carry a retrieval signal on this data, beyond
length and beyond chance? (:func:`diagnose`; ``normrank diagnose DATA --model M``.)

The sweep with its controls (:mod:`normrank.sweep.controls`) on NDCG@10, the pooled calibration
of the query-norm and symmetric scores (:mod:`normrank.sweep.calibration`), and a verdict in one
sentence. ``Diagnosis.to_json()`` is the pinned ``--json`` schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from normrank.corpus.beir import Dataset
from normrank.settings import (
    CV_METRIC,
    DEFAULT_ALPHAS,
    DEFAULT_BETAS,
    DEFAULT_FOLDS,
    DEFAULT_GAMMAS,
    DEFAULT_PERMUTATIONS,
    DEFAULT_SEED,
)
from normrank.sweep.calibration import calibration
from normrank.sweep.embed import embed_dataset
from normrank.sweep.grid import parse_alphas, parse_grid
from normrank.sweep.metrics import QrelsMatrix
from normrank.sweep.result import SweepRun
from normrank.sweep.run import check_cv_queries, sweep_embeddings

__all__ = ["SIGNIFICANCE", "Diagnosis", "diagnose", "verdict"]

SIGNIFICANCE = 0.05  # the level the verdict reads p-values at


@dataclass
class Diagnosis:
    """The sweep with controls, the calibration measurements and the verdict."""

    run: SweepRun
    calibration: dict[str, Any]
    verdict: str

    def to_json(self) -> dict[str, Any]:
        """The pinned ``normrank diagnose --json`` schema."""
        r, c = self.run, self.run.controls
        return {
            "dataset": r.dataset,
            "model": r.model,
            "n_docs": int(r.n_docs),
            "n_queries": int(r.n_queries),
            "spearman_norm_length": float(c["spearman_norm_length"]),
            "norm": {
                "cv_gain_pct": float(r.cv_gain_pct),
                "p_value": float(r.p_value),
                "best_alpha": float(r.best_alpha),
            },
            "length": {
                "cv_gain_pct": float(c["length"]["cv"]["gain_pct"]),
                "p_value": float(c["length"]["cv"]["p_value"]),
                "best_beta": float(c["length"]["best_beta"]),
            },
            "residual": {
                "cv_gain_pct": float(c["residual"]["cv"]["gain_pct"]),
                "p_value": float(c["residual"]["cv"]["p_value"]),
                "best_alpha": float(c["residual"]["best_alpha"]),
            },
            "permutation": {
                "k": int(c["permutation"]["k"]),
                "p_value": float(c["permutation"]["p_value"]),
                "null_cv_gain_pct": [float(x) for x in c["permutation"]["null_cv_gain_pct"]],
            },
            "verdict": self.verdict,
        }


def _p(p: float) -> str:
    return f"p = {p:.3f}" if p >= 0.001 else f"p = {p:.1e}"


def verdict(run: SweepRun) -> str:
    """One sentence from the norm's CV gain and test, the permutation p and the two controls."""
    c = run.controls
    g, p = run.cv_gain_pct, run.p_value
    perm, k = c["permutation"]["p_value"], c["permutation"]["k"]
    ln, rs = c["length"], c["residual"]
    perm_txt = f"permutation {_p(perm)}, K = {k}" if k else "no permutation null run"
    if not (g > 0 and p < SIGNIFICANCE):
        return (
            f"No: the norm's cross-validated {CV_METRIC} gain ({g:+.1f}%, {_p(p)}) is not distinguishable "
            f"from cosine ({perm_txt})."
        )
    if k and perm >= SIGNIFICANCE:
        return f"No: the norm's gain ({g:+.1f}%, {_p(p)}) is within what shuffled norms reach ({perm_txt})."
    if rs["cv"]["gain_pct"] > 0 and rs["cv"]["p_value"] < SIGNIFICANCE:
        return (
            f"Yes: the norm helps ({g:+.1f}%, {_p(p)}, {perm_txt}) and its part that length does not predict "
            f"still helps ({rs['cv']['gain_pct']:+.1f}%, {_p(rs['cv']['p_value'])})."
        )
    return (
        f"Not beyond length: the norm's gain ({g:+.1f}%, {_p(p)}, {perm_txt}) goes with document length "
        f"(Spearman {c['spearman_norm_length']:+.2f}; length^{ln['best_beta']:+.2f} gains "
        f"{ln['cv']['gain_pct']:+.1f}%, {_p(ln['cv']['p_value'])}), and with log-length regressed out the norm "
        f"gains {rs['cv']['gain_pct']:+.1f}% ({_p(rs['cv']['p_value'])})."
    )


def diagnose(
    data: str | Path | Dataset,
    model: str,
    *,
    alphas: str | Sequence[float] = DEFAULT_ALPHAS,
    betas: str | Sequence[float] = DEFAULT_BETAS,
    gammas: str | Sequence[float] = DEFAULT_GAMMAS,
    permutations: int = DEFAULT_PERMUTATIONS,
    folds: int = DEFAULT_FOLDS,
    seed: int = DEFAULT_SEED,
    length_unit: str = "auto",
    data_dir: str | Path | None = None,
    split: str = "test",
    batch_size: int = 64,
    cache_dir: str | Path | None = None,
    show_progress: bool = False,
    encoder_options: dict[str, Any] | None = None,
    by_depth: bool = False,
) -> Diagnosis:
    """Diagnose ``model``'s norm on ``data`` (a BEIR folder or name, an ir_datasets id or a Dataset).
    ``by_depth``: also the per-depth tables and the gradient test (:mod:`normrank.sweep.depth`)."""
    from normrank.corpus.beir import load_dataset, validate_dataset
    from normrank.corpus.embedding_cache import EmbeddingCache

    if isinstance(data, Dataset):
        validate_dataset(data)  # as load_dataset validates what it reads
        ds = data
    else:
        ds = load_dataset(data, split, data_dir=data_dir)
    check_cv_queries(ds)  # before anything is encoded
    qids, qtexts = ds.judged()
    q, d = embed_dataset(
        ds, model, EmbeddingCache(cache_dir), {}, batch_size, show_progress, encoder_options, qids, qtexts
    )
    run = sweep_embeddings(
        ds, model, q, d, alphas=parse_alphas(alphas), metrics=[CV_METRIC], folds=folds, seed=seed,
        betas=betas, permutations=permutations, length_unit=length_unit, by_depth=by_depth,
    )  # fmt: skip
    qm = QrelsMatrix([ds.qrels[x] for x in qids], {x: i for i, x in enumerate(ds.doc_ids)})
    cal = calibration(q, d, qm, run.cv_fold, parse_grid(gammas, "gamma"))
    cal["query_norm_stats"] = {"mean": float(np.linalg.norm(q, axis=1).mean()), "cv": float(
        np.linalg.norm(q, axis=1).std() / np.linalg.norm(q, axis=1).mean())}  # fmt: skip
    return Diagnosis(run=run, calibration=cal, verdict=verdict(run))
