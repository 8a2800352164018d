"""The α-sweep: does ``score = cos(q, d) * ||d||**alpha`` beat cosine, and at which α?

For each (dataset, model): encode once (cached), compute the cosine scores once per query block,
then for every α re-weight them by ``||d||**alpha`` (``normrank.scoring.norm_weight``) and take the exact
top-k over all documents (``normrank.topk.reweighted_topk``: each α bounded by its neighbour's
top-k; equal scores ranked by document order). Metrics are computed for all α at once
(:mod:`normrank.sweep_metrics`, equal to ranx); the cosine run is cross-checked against ranx.

Besides the oracle best α (chosen on the test queries, as the paper's Fig. 4), the sweep reports
the cross-validated α: k-fold over queries, α chosen on the other folds by NDCG@10 and scored on
the held-out fold, with a paired t-test (ranx ``compare``) of the pooled held-out run vs cosine.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from normrank.data import Dataset, depth_bucket
from normrank.errors import InvalidInputError, InvalidParameterError
from normrank.scoring import norm_weight
from normrank.sweep_metrics import QrelsMatrix, parse_metrics, per_query_metric
from normrank.topk import reweighted_topk

__all__ = [
    "DEFAULT_ALPHAS",
    "SweepRun",
    "evaluate_alphas",
    "load_weights",
    "parse_alphas",
    "run_sweep",
]

log = logging.getLogger(__name__)

DEFAULT_ALPHAS = "-2:1:0.25"
CV_METRIC = "ndcg@10"
_BLOCK_FLOATS = 1 << 22  # cosine block (queries x docs) kept near 16 MB


def parse_alphas(spec: str | Sequence[float] = DEFAULT_ALPHAS) -> list[float]:
    """``"-2:1:0.25"`` (start:stop:step, stop included) or ``"-1,0,0.5"`` -> sorted α list with 0."""
    if isinstance(spec, str):
        s = spec.strip()
        try:
            if ":" in s:
                start, stop, step = (float(x) for x in s.split(":"))
                if step <= 0 or stop < start:
                    raise InvalidParameterError(f"alpha range {spec!r}: need start <= stop and step > 0")
                n = int(np.floor((stop - start) / step + 1e-9)) + 1
                values = [round(start + i * step, 10) for i in range(n)]
            else:
                values = [float(x) for x in s.split(",") if x.strip()]
        except ValueError as e:
            raise InvalidParameterError(
                f"bad alpha grid {spec!r}: use START:STOP:STEP or a comma list"
            ) from e
    else:
        values = [float(x) for x in spec]
    if not values or not all(np.isfinite(values)):
        raise InvalidParameterError(f"alpha grid {spec!r} is empty or not finite")
    return sorted(set(values) | {0.0})


@dataclass
class SweepRun:
    """One (dataset, model, weight) sweep. Arrays are indexed [alpha, query]."""

    dataset: str
    model: str
    n_docs: int
    alphas: list[float]
    query_ids: list[str]
    per_query: dict[str, np.ndarray]  # metric -> (n_alphas, n_queries)
    cv_alphas: list[float]
    cv_fold: np.ndarray  # (n_queries,) fold of each query
    cv_per_query: np.ndarray  # (n_queries,) held-out NDCG@10
    p_value: float
    norm_stats: dict[str, float]
    weight: str = "norm"
    weight_stats: dict[str, float] | None = None
    by_depth: dict[str, Any] | None = None
    timing: dict[str, float] = field(default_factory=dict)
    ranx_check: dict[str, float] = field(default_factory=dict)

    @property
    def n_queries(self) -> int:
        return len(self.query_ids)

    def mean(self, metric: str) -> np.ndarray:
        return self.per_query[metric].mean(axis=1)

    @property
    def i0(self) -> int:
        return self.alphas.index(0.0)

    @property
    def best_index(self) -> int:
        return _argbest(self.mean(CV_METRIC), self.alphas)

    @property
    def best_alpha(self) -> float:
        return self.alphas[self.best_index]

    def gain_pct(self, metric: str = CV_METRIC) -> float:
        m = self.mean(metric)
        return _pct(m[self.best_index], m[self.i0])

    @property
    def cv_mean(self) -> float:
        return float(self.cv_per_query.mean()) if self.cv_per_query.size else 0.0

    @property
    def cv_gain_pct(self) -> float:
        return _pct(self.cv_mean, self.mean(CV_METRIC)[self.i0])

    def to_dict(self) -> dict[str, Any]:
        """The pinned ``sweep.json`` run entry (plus a few extra keys)."""
        metrics = {m: [float(x) for x in self.mean(m)] for m in self.per_query}
        return {
            "dataset": self.dataset,
            "model": self.model,
            "weight": self.weight,
            "n_docs": int(self.n_docs),
            "n_queries": int(self.n_queries),
            "alphas": [float(a) for a in self.alphas],
            "metrics": metrics,
            "relative": {
                m: [v / vals[self.i0] if vals[self.i0] else None for v in vals] for m, vals in metrics.items()
            },
            "best_alpha": float(self.best_alpha),
            "best_gain_pct": float(self.gain_pct()),
            "cv": {
                "alphas": [float(a) for a in self.cv_alphas],
                CV_METRIC: float(self.cv_mean),
                "gain_pct": float(self.cv_gain_pct),
                "p_value": float(self.p_value),
                "folds": len(self.cv_alphas),
            },
            "norm_stats": self.norm_stats,
            **({"weight_stats": self.weight_stats} if self.weight_stats else {}),
            **({"by_depth": self.by_depth} if self.by_depth else {}),
            "timing_s": {k: round(v, 4) for k, v in self.timing.items()},
            "ranx_check": self.ranx_check,
        }


def _pct(new: float, base: float) -> float:
    return float(100.0 * (new - base) / base) if base else 0.0


def _argbest(values: np.ndarray, alphas: Sequence[float]) -> int:
    """Index of the best value; ties go to the α closest to 0 (cosine), then the smaller α."""
    best = np.max(values)
    cands = [i for i, v in enumerate(values) if v >= best - 1e-12]
    return min(cands, key=lambda i: (abs(alphas[i]), alphas[i]))


def _stats(x: np.ndarray) -> dict[str, float]:
    mean, std = float(np.mean(x)), float(np.std(x))
    return {"mean": mean, "std": std, "cv": std / mean if mean else float("nan")}


def _unit(x: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise InvalidInputError(f"{what} must be 2-D, got shape {x.shape}")
    norms = np.linalg.norm(x, axis=1)
    if not np.all(np.isfinite(norms)) or np.any(norms <= 0):
        raise InvalidInputError(f"{what}: every vector must be finite and non-zero")
    return (x / norms[:, None]).astype(np.float32), norms.astype(np.float32)


def rank_all_alphas(
    queries: np.ndarray, docs: np.ndarray, weights: np.ndarray | None, alphas: Sequence[float], k: int
) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """Exact top-k of ``cos(q, d) * w**alpha`` for every α, the cosines computed once per block.

    Args:
        queries: (nq, d) raw query vectors. docs: (n, d) raw document vectors.
        weights: (n,) positive per-document weights; None -> the document norms.
        alphas: the grid. k: depth kept per query.

    Returns:
        ``(scores, positions, timing)`` with scores float32 and positions int64, both
        ``(n_alphas, nq, k)`` (positions index ``docs``; -1 pads when n < k).
    """
    qn, _ = _unit(queries, "queries")
    dn, dnorm = _unit(docs, "documents")
    w = dnorm if weights is None else np.asarray(weights, dtype=np.float32)
    na, nq, n = len(alphas), qn.shape[0], dn.shape[0]
    scores = np.empty((na, nq, k), dtype=np.float32)
    pos = np.empty((na, nq, k), dtype=np.int64)
    t_cos = t_rank = 0.0
    # Sorted by α so that neighbours rank alike; the chain starts from the α nearest 0 (cosine).
    order = np.argsort(np.asarray(alphas, dtype=np.float64), kind="stable")
    first = int(np.argmin(np.abs(np.asarray(alphas, dtype=np.float64)[order])))
    weight_rows = np.stack([norm_weight(w, alphas[i]) for i in order])  # w**alpha once per α
    block = max(1, min(nq, _BLOCK_FLOATS // max(n, 1)))
    for q0 in range(0, nq, block):
        t = time.perf_counter()
        cos = qn[q0 : q0 + block] @ dn.T
        t_cos += time.perf_counter() - t
        t = time.perf_counter()
        v, p = reweighted_topk(cos, weight_rows, k, first)
        scores[order, q0 : q0 + cos.shape[0]] = v
        pos[order, q0 : q0 + cos.shape[0]] = p
        t_rank += time.perf_counter() - t
    return scores, pos, {"cosine_matmul": t_cos, "reweight_topk": t_rank}


def evaluate_alphas(
    positions: np.ndarray, qrels: Sequence[dict[str, int]], doc_ids: Sequence[str], metrics: Sequence[str]
) -> dict[str, np.ndarray]:
    """Per-query metric values (n_alphas, nq) for top-k ``positions`` (n_alphas, nq, k)."""
    qm = QrelsMatrix(qrels, {d: i for i, d in enumerate(doc_ids)})
    return {m: per_query_metric(m, positions, qm) for m in metrics}


def cross_validate(
    per_query: np.ndarray, alphas: Sequence[float], folds: int, seed: int = 0
) -> tuple[list[float], np.ndarray, np.ndarray]:
    """k-fold α selection over queries.

    Args:
        per_query: (n_alphas, nq) values of the selection metric.
    Returns:
        ``(fold_alphas, fold_of_query, chosen_alpha_index_per_query)``.
    """
    nq = per_query.shape[1]
    if folds < 2:
        raise InvalidParameterError(f"folds must be >= 2, got {folds}")
    folds = min(folds, nq)
    perm = np.random.default_rng(seed).permutation(nq)
    fold = np.empty(nq, dtype=np.int64)
    fold[perm] = np.arange(nq) % folds
    chosen = np.empty(nq, dtype=np.int64)
    fold_alphas = []
    for f in range(folds):
        train = fold != f
        ai = _argbest(per_query[:, train].mean(axis=1), alphas)
        fold_alphas.append(float(alphas[ai]))
        chosen[fold == f] = ai
    return fold_alphas, fold, chosen


def _ranx_run(
    name: str, qids: Sequence[str], scores: np.ndarray, pos: np.ndarray, doc_ids: Sequence[str]
) -> Any:
    from ranx import Run

    run = {
        q: {doc_ids[p]: float(s) for s, p in zip(scores[i], pos[i], strict=True) if p >= 0}
        for i, q in enumerate(qids)
    }
    return Run(run, name=name)


def _paired_p(qrels: Any, a: Any, make_b: Callable[[], Any], da: np.ndarray, db: np.ndarray) -> float:
    """ranx paired t-test p-value of run a vs run ``make_b()`` on NDCG@10 (1.0 when they never differ)."""
    if np.array_equal(da, db):
        return 1.0
    from ranx import compare

    b = make_b()
    rep = compare(qrels, [a, b], [CV_METRIC], stat_test="student", make_comparable=True).to_dict()
    comp = rep[a.name]["comparisons"][b.name][CV_METRIC]
    p = float(comp["p_value"] if isinstance(comp, dict) else comp)
    return p if np.isfinite(p) else 1.0


def load_weights(spec: str, doc_ids: Sequence[str]) -> tuple[str, np.ndarray]:
    """``"probe.npz:heat"`` -> (``"heat"``, weights aligned to ``doc_ids``). No pickle.

    The npz must hold ``doc_ids`` and the named array; every document must have a finite weight > 0.
    """
    path, _, key = spec.rpartition(":")
    if not path:
        raise InvalidParameterError(f"--weights {spec!r}: use FILE.npz:KEY (e.g. probe.npz:heat)")
    with np.load(Path(path), allow_pickle=False) as z:
        if "doc_ids" not in z or key not in z:
            raise InvalidInputError(f"{path}: needs arrays 'doc_ids' and {key!r}; has {sorted(z.files)}")
        ids = [str(x) for x in z["doc_ids"]]
        vals = np.asarray(z[key], dtype=np.float64)
    if vals.shape != (len(ids),):
        raise InvalidInputError(f"{path}: {key!r} has shape {vals.shape}, expected ({len(ids)},)")
    lookup = dict(zip(ids, vals, strict=True))
    missing = [d for d in doc_ids if d not in lookup]
    if missing:
        raise InvalidInputError(
            f"{path}: {len(missing)} of {len(doc_ids)} documents have no {key!r} weight (e.g. {missing[:3]})"
        )
    w = np.array([lookup[d] for d in doc_ids], dtype=np.float64)
    if not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise InvalidInputError(f"{path}: {key!r} weights must be finite and > 0 to raise to a power")
    return key, w.astype(np.float32)


def sweep_embeddings(
    dataset: Dataset,
    model: str,
    queries: np.ndarray,
    docs: np.ndarray,
    *,
    alphas: Sequence[float],
    metrics: Sequence[str],
    folds: int = 5,
    by_depth: bool = False,
    weights: np.ndarray | None = None,
    weight_name: str = "norm",
    seed: int = 0,
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
    cos_run = _ranx_run("cosine", qids, scores[i0], pos[i0], dataset.doc_ids)
    p = _paired_p(
        qrels, cos_run, lambda: _ranx_run("cv", qids, scores[chosen, rows], pos[chosen, rows], dataset.doc_ids),
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
        norm_stats=_stats(dnorm),
        weight=weight_name,
        weight_stats=None if weights is None else _stats(np.asarray(weights, dtype=np.float64)),
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
    evaluate(qrels, _ranx_run("cos", qids, scores[0], pos[0], doc_ids), metrics, make_comparable=True)
    return time.perf_counter() - t


def depth_table(dataset: Dataset, run: SweepRun) -> dict[str, Any] | None:
    """NDCG@10 per α within each query-depth bucket (the paper's Table 3 layout), or None."""
    if not dataset.has_heading_paths():
        log.info("%s: query ids carry no heading path; --by-depth skipped", dataset.name)
        return None
    buckets = np.array([depth_bucket(dataset.query_depth(q)) for q in run.query_ids])
    out: dict[str, Any] = {}
    nd = run.per_query[CV_METRIC]
    for b in sorted(set(buckets)):
        sel = buckets == b
        means = nd[:, sel].mean(axis=1)
        bi = _argbest(means, run.alphas)
        out[b] = {
            "n_queries": int(sel.sum()),
            CV_METRIC: [float(x) for x in means],
            "best_alpha": float(run.alphas[bi]),
            "gain_pct": _pct(means[bi], means[run.i0]),
        }
    return out


def run_sweep(
    datasets: Sequence[str | Dataset],
    models: Sequence[str],
    *,
    alphas: str | Sequence[float] = DEFAULT_ALPHAS,
    metrics: str | Sequence[str] = "ndcg@10,recall@100,mrr@10",
    folds: int = 5,
    by_depth: bool = False,
    weights: Sequence[str] = (),
    out: str | Path | None = None,
    data_dir: str | Path | None = None,
    split: str = "test",
    batch_size: int = 64,
    cache_dir: str | Path | None = None,
    show_progress: bool = True,
    seed: int = 0,
    encoder_options: dict[str, Any] | None = None,
    on_run: Callable[[SweepRun], None] | None = None,
) -> list[SweepRun]:
    """Sweep every (dataset, model) pair; write ``sweep.json/.md/.png`` and ``per_query.csv`` to ``out``.

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
    if out is not None:
        from normrank.sweep_report import write_all

        write_all(runs, Path(out))
    return runs


def model_key(model: str, options: dict[str, Any] | None) -> str:
    """Cache key of a model spec: the short name plus any output-changing options."""
    name = model.split("/", 1)[1] if model.startswith("sentence-transformers/") else model
    if options:
        name += "|" + ",".join(f"{k}={options[k]}" for k in sorted(options) if k != "device")
    return name


def embed_dataset(
    ds: Dataset,
    model: str,
    cache: Any,
    encoders: dict[str, Any],
    batch_size: int,
    show_progress: bool,
    options: dict[str, Any] | None,
    qids: list[str],
    qtexts: list[str],
) -> tuple[np.ndarray, np.ndarray]:
    """(judged query embeddings, document embeddings), from the cache or encoded once."""
    from normrank.encoders import load_encoder

    def factory() -> Any:
        if model not in encoders:
            encoders[model] = load_encoder(model, **(options or {}))
        return encoders[model]

    key, dkey = model_key(model, options), ds.source or ds.name
    docs, _ = cache.get_or_encode(
        key,
        dkey,
        "corpus",
        ds.doc_ids,
        ds.doc_texts,
        factory,
        batch_size=batch_size,
        show_progress=show_progress,
    )
    queries, _ = cache.get_or_encode(
        key, dkey, f"queries-{ds.split}", qids, qtexts, factory, fields="text", batch_size=batch_size,
        show_progress=show_progress,
    )  # fmt: skip
    return queries, docs
