"""The sweep, start to end: embeddings -> rank all α -> metrics -> selection -> :class:`SweepRun`.

Returns results and writes nothing (the reports are :mod:`normrank.sweep.report`'s job).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from normrank.corpus.beir import Dataset
from normrank.errors import InvalidInputError, InvalidParameterError
from normrank.scoring import norm_weight
from normrank.settings import (
    CV_METRIC,
    DEFAULT_ALPHAS,
    DEFAULT_BETAS,
    DEFAULT_FOLDS,
    DEFAULT_METRICS,
    DEFAULT_PERMUTATIONS,
    DEFAULT_SEED,
)
from normrank.sweep.controls import length_residual, permutation_summary, spearman, weight_control
from normrank.sweep.depth import depth_gradient, depth_table
from normrank.sweep.embed import embed_dataset
from normrank.sweep.grid import parse_alphas, parse_grid
from normrank.sweep.lengths import document_lengths
from normrank.sweep.metrics import QrelsMatrix, parse_metrics, per_query_metric
from normrank.sweep.null import NULL_CANDIDATES, RelevantRanks, permutation_null
from normrank.sweep.rank import WeightGrid, rank_grids, unit_rows
from normrank.sweep.ranx_check import ranx_cross_check
from normrank.sweep.result import SweepRun, pct, summary_stats
from normrank.sweep.selection import cross_validate, paired_t_p
from normrank.sweep.weights import load_weights

__all__ = ["check_cv_queries", "evaluate_alphas", "run_sweep", "sweep_embeddings"]


def evaluate_alphas(
    positions: np.ndarray, qrels: Sequence[dict[str, int]], doc_ids: Sequence[str], metrics: Sequence[str]
) -> dict[str, np.ndarray]:
    """Per-query metric values (n_alphas, nq) for top-k ``positions`` (n_alphas, nq, k)."""
    qm = QrelsMatrix(qrels, {d: i for i, d in enumerate(doc_ids)})
    return {m: per_query_metric(m, positions, qm) for m in metrics}


def check_cv_queries(dataset: Dataset) -> None:
    """Refuse a collection with fewer than 2 judged queries (before anything is encoded): the
    cross-validated α is chosen on some queries and scored on others.

    Raises:
        InvalidInputError: naming the qrels file and the query.
    """
    qids, _ = dataset.judged()
    if len(qids) < 2:
        which = f"only 1 judged query ({qids[0]!r})" if qids else "no judged query"
        raise InvalidInputError(
            f"{dataset.qrels_path or dataset.name}: {which}: too few for cross-validation over queries "
            "(α is chosen on some queries and scored on the others): judge at least 2"
        )


def _norms64(x: np.ndarray, rows: int = 128) -> np.ndarray:
    """Row norms in float64, a block of rows at a time: the same values as one
    ``np.linalg.norm(x.astype(np.float64), axis=1)`` (each row is reduced alone), without a
    float64 copy of the whole matrix, whose fresh pages cost more than the sweep's ranking."""
    out = np.empty(x.shape[0], dtype=np.float64)
    for s in range(0, x.shape[0], rows):
        out[s : s + rows] = np.linalg.norm(np.asarray(x[s : s + rows], dtype=np.float64), axis=1)
    return out


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
    controls: bool = True,
    betas: str | Sequence[float] = DEFAULT_BETAS,
    permutations: int = DEFAULT_PERMUTATIONS,
    length_unit: str = "auto",
    ranx_check: bool = False,
) -> SweepRun:
    """Sweep one (dataset, model) from its embeddings: ``queries`` (nq, d) of the judged queries
    in ``dataset.judged()`` order, ``docs`` (n, d) in ``dataset.doc_ids`` order.

    ``controls`` (norm sweeps only): the length prior over ``betas``, the length-residualised
    norm and ``permutations`` shuffles of the norms (:mod:`normrank.sweep.controls`).
    ``ranx_check``: also evaluate the cosine run and the paired test with ranx (cross-checks,
    recorded in ``ranx_check``) and time one plain cosine evaluation with ranx (``cosine_eval``).
    """
    qids, _ = dataset.judged()
    check_cv_queries(dataset)
    if queries.shape[0] != len(qids) or docs.shape[0] != len(dataset.doc_ids):
        raise InvalidInputError("embeddings do not match the dataset's judged queries / documents")
    if permutations < 0:
        raise InvalidParameterError(f"permutations must be >= 0, got {permutations}")
    metrics = list(dict.fromkeys([CV_METRIC, *metrics]))
    k = max(int(m.split("@")[1]) for m in metrics)
    with_controls = controls and weights is None
    t0 = time.perf_counter()
    timing: dict[str, float] = {}
    qn = unit_rows(queries, "queries")[0]
    dn, dnorm32 = unit_rows(docs, "documents")  # once, for the ranking and the controls
    dnorm = _norms64(docs)
    # Part of the α-sweep: on a large collection these passes over the raw vectors cost as much
    # as the ranking (fresh memory), and a stage table that left them out would not add up.
    timing["unit_vectors"] = time.perf_counter() - t0
    depth = max(k, NULL_CANDIDATES) if with_controls else k
    grids = [WeightGrid("norm", weights, list(alphas), depth)]
    if with_controls:
        t = time.perf_counter()
        beta_grid = parse_grid(betas, "beta")
        lengths, unit = document_lengths(model, dataset.doc_texts, length_unit)
        resid, fit = length_residual(dnorm, lengths)
        timing["controls_lengths"] = time.perf_counter() - t
    ranked, rt, cosines = rank_grids(
        queries, docs, grids, keep_cosines=with_controls, units=(qn, dn, dnorm32)
    )
    scores, pos = ranked["norm"]
    timing["cosine_matmul"], timing["reweight_topk"] = rt["cosine_matmul"], rt["rank_norm"]
    t = time.perf_counter()
    qm = QrelsMatrix([dataset.qrels[q] for q in qids], {d: i for i, d in enumerate(dataset.doc_ids)})
    per_query = {m: per_query_metric(m, pos, qm) for m in metrics}
    timing["metrics"] = time.perf_counter() - t
    # The α-sweep proper: cosines once, every α re-weighted and ranked exactly, every metric.
    timing["alpha_sweep"] = (
        timing["unit_vectors"] + timing["cosine_matmul"] + timing["reweight_topk"] + timing["metrics"]
    )

    t = time.perf_counter()
    fold_alphas, fold, chosen = cross_validate(per_query[CV_METRIC], alphas, folds, seed)
    rows = np.arange(len(qids))
    cv_pq = per_query[CV_METRIC][chosen, rows]
    i0 = list(alphas).index(0.0)
    p = paired_t_p(per_query[CV_METRIC][i0], cv_pq)
    timing["cv_and_test"] = time.perf_counter() - t
    # Everything the norm alone needs (the controls' extra ranking is timed apart below).
    timing["sweep_norm"] = timing["alpha_sweep"] + timing["cv_and_test"]

    control_entry = None
    if with_controls:
        t = time.perf_counter()
        cos_pq = per_query[CV_METRIC][i0]
        # The controls' NDCG@10 from the ranks of the relevant documents among the norm run's
        # cosine top-100 (exact: null.RelevantRanks), shared with the null.
        ranks = RelevantRanks(qm, pos[i0], scores[i0], cosines, qn, dn)

        def grid_ndcg(w: np.ndarray, grid: Sequence[float]) -> np.ndarray:
            w32 = np.asarray(w, dtype=np.float32)  # as the sweep ranks a weight: norm_weight of float32
            up = np.argsort(w32, kind="stable")  # w**e is monotone in w: one sort for the grid
            return np.stack(
                [ranks.ndcg(norm_weight(w32, float(e)), order=up if e >= 0 else up[::-1])[0] for e in grid]
            )

        control_entry = {
            "length_unit": unit,
            "spearman_norm_length": spearman(dnorm, lengths),
            "length": weight_control(grid_ndcg(lengths, beta_grid), beta_grid, cos_pq, folds, seed, "beta"),
            "residual": {
                "fit": fit,
                **weight_control(grid_ndcg(resid, alphas), alphas, cos_pq, folds, seed, "alpha"),
            },
        }
        timing["controls_rank"] = time.perf_counter() - t
        t = time.perf_counter()
        real_gain = pct(float(cv_pq.mean()), float(cos_pq.mean()))
        info: dict[str, object] = {"fallback_fraction": 0.0}
        null = np.zeros(0)
        if permutations:
            null, info = permutation_null(
                qn, dn, dnorm, cosines, pos[i0], scores[i0], alphas, qm, fold, permutations, seed, ranks
            )
        control_entry["permutation"] = {**permutation_summary(null, real_gain, permutations, seed), **info}
        timing["controls_null"] = time.perf_counter() - t
        timing["controls"] = sum(timing[x] for x in ("controls_lengths", "controls_rank", "controls_null"))
    timing["sweep_total"] = time.perf_counter() - t0

    check: dict[str, float] = {}
    if ranx_check:
        check, timing["cosine_eval"] = ranx_cross_check(
            dataset, qids, scores[:, :, :k], pos[:, :, :k], chosen, i0, per_query, metrics, p, queries, docs
        )
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
        ranx_check=check,
        controls=control_entry,
    )
    if by_depth:
        run.by_depth = depth_table(dataset, run, folds=folds, seed=seed)
        run.depth_gradient = depth_gradient(dataset, run, seed=seed) if run.by_depth else None
    if control_entry is not None:  # the shuffles' (K, α, nq) NDCG@10: only the depth tables need it
        for key in ("_null_ndcg", "_null_cols"):
            control_entry["permutation"].pop(key, None)
    return run


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
    controls: bool = True,
    betas: str | Sequence[float] = DEFAULT_BETAS,
    permutations: int = DEFAULT_PERMUTATIONS,
    length_unit: str = "auto",
    ranx_check: bool = False,
) -> list[SweepRun]:
    """Sweep every (dataset, model) pair and return the runs (write them with
    :func:`normrank.sweep.report.write_all`).

    ``datasets``: BEIR folders, BEIR names or ir_datasets ids (see :func:`normrank.corpus.beir.load_dataset`),
    or loaded :class:`Dataset` objects. ``models``: names for :func:`normrank.encoders.load_encoder`.
    ``weights``: ``"FILE.npz:KEY"`` specs, each swept beside the norm (score = cos * w**alpha).
    ``controls``, ``betas``, ``permutations``, ``length_unit``, ``ranx_check``: see
    :func:`sweep_embeddings`.
    """
    from normrank.corpus.beir import load_dataset, validate_dataset
    from normrank.corpus.embedding_cache import EmbeddingCache

    grid = parse_alphas(alphas)
    mlist = parse_metrics(metrics)
    if folds < 2:
        raise InvalidParameterError(f"folds must be >= 2, got {folds}")
    cache = EmbeddingCache(cache_dir)
    runs: list[SweepRun] = []
    encoders: dict[str, Any] = {}
    for ds_spec in datasets:
        if isinstance(ds_spec, Dataset):
            validate_dataset(ds_spec)  # as load_dataset validates what it reads
            ds = ds_spec
        else:
            ds = load_dataset(ds_spec, split, data_dir=data_dir)
        check_cv_queries(ds)
        qids, qtexts = ds.judged()
        for model in models:
            q, d = embed_dataset(
                ds, model, cache, encoders, batch_size, show_progress, encoder_options, qids, qtexts
            )
            extra = [("norm", None)] + [load_weights(spec, ds.doc_ids) for spec in weights]
            for wname, w in extra:
                run = sweep_embeddings(
                    ds, model, q, d, alphas=grid, metrics=mlist, folds=folds, by_depth=by_depth,
                    weights=w, weight_name=wname, seed=seed, controls=controls, betas=betas,
                    permutations=permutations, length_unit=length_unit, ranx_check=ranx_check,
                )  # fmt: skip
                runs.append(run)
                if on_run is not None:
                    on_run(run)
    return runs
