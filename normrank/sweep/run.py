"""The sweep, start to end: embeddings -> rank all α -> metrics -> selection -> :class:`SweepRun`.

Returns results and writes nothing (the reports are :mod:`normrank.sweep.report`'s job).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from normrank.data import Dataset
from normrank.errors import InvalidInputError, InvalidParameterError
from normrank.settings import CV_METRIC, DEFAULT_ALPHAS, DEFAULT_FOLDS, DEFAULT_METRICS, DEFAULT_SEED
from normrank.sweep.depth import depth_table
from normrank.sweep.embed import embed_dataset
from normrank.sweep.grid import parse_alphas
from normrank.sweep.metrics import QrelsMatrix, parse_metrics, per_query_metric
from normrank.sweep.rank import rank_all_alphas
from normrank.sweep.result import SweepRun, summary_stats
from normrank.sweep.selection import cross_validate, paired_p_ranx, ranx_run
from normrank.sweep.weights import load_weights

__all__ = ["evaluate_alphas", "run_sweep", "sweep_embeddings"]


def evaluate_alphas(
    positions: np.ndarray, qrels: Sequence[dict[str, int]], doc_ids: Sequence[str], metrics: Sequence[str]
) -> dict[str, np.ndarray]:
    """Per-query metric values (n_alphas, nq) for top-k ``positions`` (n_alphas, nq, k)."""
    qm = QrelsMatrix(qrels, {d: i for i, d in enumerate(doc_ids)})
    return {m: per_query_metric(m, positions, qm) for m in metrics}


def sweep_embeddings(
    dataset: Dataset,
    model: str,
    queries: np.ndarray,
    docs: np.ndarray,
    *,
    alphas: Sequence[float],
    metrics: Sequence[str],
    folds: int = DEFAULT_FOLDS,
    by_depth: bool = False,
    weights: np.ndarray | None = None,
    weight_name: str = "norm",
    seed: int = DEFAULT_SEED,
    time_baseline: bool = True,
) -> SweepRun:
    """Sweep one (dataset, model) from its embeddings: ``queries`` (nq, d) of the judged queries
    in ``dataset.judged()`` order, ``docs`` (n, d) in ``dataset.doc_ids`` order."""
    from ranx import Qrels

    qids, _ = dataset.judged()
    if queries.shape[0] != len(qids) or docs.shape[0] != len(dataset.doc_ids):
        raise InvalidInputError("embeddings do not match the dataset's judged queries / documents")
    metrics = list(dict.fromkeys([CV_METRIC, *metrics]))
    k = max(int(m.split("@")[1]) for m in metrics)
    t0 = time.perf_counter()
    scores, pos, timing = rank_all_alphas(queries, docs, weights, alphas, k)
    t = time.perf_counter()
    qrels_list = [dataset.qrels[q] for q in qids]
    per_query = evaluate_alphas(pos, qrels_list, dataset.doc_ids, metrics)
    timing["metrics"] = time.perf_counter() - t
    # The α-sweep proper: cosines once, every α re-weighted and ranked exactly, every metric.
    timing["alpha_sweep"] = timing["cosine_matmul"] + timing["reweight_topk"] + timing["metrics"]

    t = time.perf_counter()
    fold_alphas, fold, chosen = cross_validate(per_query[CV_METRIC], alphas, folds, seed)
    rows = np.arange(len(qids))
    cv_pq = per_query[CV_METRIC][chosen, rows]
    i0 = list(alphas).index(0.0)
    qrels = Qrels({q: dataset.qrels[q] for q in qids})
    cos_run = ranx_run("cosine", qids, scores[i0], pos[i0], dataset.doc_ids)
    p = paired_p_ranx(
        qrels, cos_run, lambda: ranx_run("cv", qids, scores[chosen, rows], pos[chosen, rows], dataset.doc_ids),
        per_query[CV_METRIC][i0], cv_pq,
    )  # fmt: skip
    # Cross-check the vectorised metrics against ranx on the cosine run.
    from ranx import evaluate

    ranx_cos = evaluate(qrels, cos_run, metrics, make_comparable=True)
    ranx_cos = ranx_cos if isinstance(ranx_cos, dict) else {metrics[0]: ranx_cos}
    check = {m: float(abs(ranx_cos[m] - per_query[m][i0].mean())) for m in metrics}
    timing["cv_and_ranx"] = time.perf_counter() - t
    timing["sweep_total"] = time.perf_counter() - t0
    if time_baseline:
        timing["cosine_eval"] = _time_cosine_eval(queries, docs, k, qids, qrels, dataset.doc_ids, metrics)

    dnorm = np.linalg.norm(np.asarray(docs, dtype=np.float64), axis=1)
    run = SweepRun(
        dataset=dataset.name,
        model=model if weights is None else f"{model}+{weight_name}",
        n_docs=len(dataset.doc_ids),
        alphas=[float(a) for a in alphas],
        query_ids=list(qids),
        per_query=per_query,
        cv_alphas=fold_alphas,
        cv_fold=fold,
        cv_per_query=cv_pq,
        p_value=p,
        norm_stats=summary_stats(dnorm),
        weight=weight_name,
        weight_stats=None if weights is None else summary_stats(np.asarray(weights, dtype=np.float64)),
        timing=timing,
        ranx_check={"max_abs_diff_cosine": max(check.values())},
    )
    if by_depth:
        run.by_depth = depth_table(dataset, run)
    return run


def _time_cosine_eval(
    queries: np.ndarray,
    docs: np.ndarray,
    k: int,
    qids: list[str],
    qrels: Any,
    doc_ids: Sequence[str],
    metrics: list[str],
) -> float:
    """Seconds for one plain cosine evaluation: exact top-k by cosine, then ranx on that run."""
    from ranx import evaluate

    t = time.perf_counter()
    scores, pos, _ = rank_all_alphas(queries, docs, None, [0.0], k)
    evaluate(qrels, ranx_run("cos", qids, scores[0], pos[0], doc_ids), metrics, make_comparable=True)
    return time.perf_counter() - t


def run_sweep(
    datasets: Sequence[str | Dataset],
    models: Sequence[str],
    *,
    alphas: str | Sequence[float] = DEFAULT_ALPHAS,
    metrics: str | Sequence[str] = DEFAULT_METRICS,
    folds: int = DEFAULT_FOLDS,
    by_depth: bool = False,
    weights: Sequence[str] = (),
    data_dir: str | Path | None = None,
    split: str = "test",
    batch_size: int = 64,
    cache_dir: str | Path | None = None,
    show_progress: bool = True,
    seed: int = DEFAULT_SEED,
    encoder_options: dict[str, Any] | None = None,
    on_run: Callable[[SweepRun], None] | None = None,
) -> list[SweepRun]:
    """Sweep every (dataset, model) pair and return the runs (write them with
    :func:`normrank.sweep.report.write_all`).

    ``datasets``: BEIR folders, BEIR names or ir_datasets ids (see :func:`normrank.data.load_dataset`),
    or loaded :class:`Dataset` objects. ``models``: names for :func:`normrank.encoders.load_encoder`.
    ``weights``: ``"FILE.npz:KEY"`` specs, each swept beside the norm (score = cos * w**alpha).
    """
    from normrank.data import load_dataset
    from normrank.embedding_cache import EmbeddingCache

    grid = parse_alphas(alphas)
    mlist = parse_metrics(metrics)
    if folds < 2:
        raise InvalidParameterError(f"folds must be >= 2, got {folds}")
    cache = EmbeddingCache(cache_dir)
    runs: list[SweepRun] = []
    encoders: dict[str, Any] = {}
    for ds_spec in datasets:
        ds = ds_spec if isinstance(ds_spec, Dataset) else load_dataset(ds_spec, split, data_dir=data_dir)
        qids, qtexts = ds.judged()
        for model in models:
            q, d = embed_dataset(
                ds, model, cache, encoders, batch_size, show_progress, encoder_options, qids, qtexts
            )
            extra = [("norm", None)] + [load_weights(spec, ds.doc_ids) for spec in weights]
            for wname, w in extra:
                run = sweep_embeddings(
                    ds, model, q, d, alphas=grid, metrics=mlist, folds=folds, by_depth=by_depth,
                    weights=w, weight_name=wname, seed=seed,
                )  # fmt: skip
                runs.append(run)
                if on_run is not None:
                    on_run(run)
    return runs
