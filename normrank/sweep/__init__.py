"""The α-sweep: does ``score = cos(q, d) * ||d||**alpha`` beat cosine, and at which α?

One step per module, flowing one way::

    grid       the α grid                                  parse_alphas
    embed      texts -> raw embeddings (cached)            embed_dataset, model_key
    rank       cosines once, every α ranked exactly        rank_all_alphas
    metrics    per-query metrics, one registry (= ranx)    METRICS, per_query_metric
    selection  oracle / cross-validated α, paired test     cross_validate
    result     SweepRun and its pinned JSON entry          SweepRun
    depth      per query-depth bucket (TREC CAR)           depth_table
    weights    other per-document weights from a file      load_weights
    run        orchestration; returns runs, writes nothing run_sweep, sweep_embeddings
    report     sweep.json / .md / .png / per_query.csv     write_all (the CLI calls it)
"""

from normrank.settings import CV_METRIC, DEFAULT_ALPHAS
from normrank.sweep.depth import depth_table
from normrank.sweep.embed import embed_dataset, model_key
from normrank.sweep.grid import parse_alphas, parse_grid
from normrank.sweep.metrics import METRICS, QrelsMatrix, metrics_help, parse_metrics, per_query_metric
from normrank.sweep.rank import rank_all_alphas
from normrank.sweep.result import SweepRun
from normrank.sweep.run import evaluate_alphas, run_sweep, sweep_embeddings
from normrank.sweep.selection import cross_validate
from normrank.sweep.weights import load_weights

__all__ = [
    "CV_METRIC",
    "DEFAULT_ALPHAS",
    "METRICS",
    "QrelsMatrix",
    "SweepRun",
    "cross_validate",
    "depth_table",
    "embed_dataset",
    "evaluate_alphas",
    "load_weights",
    "metrics_help",
    "model_key",
    "parse_alphas",
    "parse_grid",
    "parse_metrics",
    "per_query_metric",
    "rank_all_alphas",
    "run_sweep",
    "sweep_embeddings",
]
