"""The α-sweep: does ``score = cos(q, d) * ||d||**alpha`` beat cosine, and at which α?

One step per module, flowing one way::

    grid         the α / β / γ grids                            parse_alphas, parse_grid
    embed        texts -> raw embeddings (cached)               embed_dataset, model_key
    lengths      document lengths: tokenizer tokens, else words document_lengths
    rank         cosines once, every weight grid ranked exactly rank_grids, rank_all_alphas
    metrics      per-query metrics, one registry (= ranx)       METRICS, per_query_metric
    selection    oracle / cross-validated α, paired t-test      cross_validate, paired_t_p
    controls     length prior, length-residualised norm          length_residual, weight_control
    null         permutation null; NDCG@10 from relevant ranks  permutation_null, RelevantRanks
    result       SweepRun and its pinned JSON entry             SweepRun
    depth        per query-depth bucket (TREC CAR)              depth_table
    weights      other per-document weights from a file         load_weights
    run          orchestration; returns runs, writes nothing    run_sweep, sweep_embeddings
    ranx_check   cross-checks and the baseline with ranx        ranx_cross_check
    calibration  pooled AUROC / threshold of cos, q- and sym.   calibration
    diagnosis    one collection, one verdict                    diagnose, Diagnosis
    specificity  Table 5: specific vs general answer norms       specificity_table
    report, plot sweep.json / .md / per_query.csv, the figures  write_all (the CLI calls it)
"""

from normrank.settings import CV_METRIC, DEFAULT_ALPHAS
from normrank.sweep.calibration import calibration
from normrank.sweep.controls import length_residual, weight_control
from normrank.sweep.depth import depth_table
from normrank.sweep.diagnosis import Diagnosis, diagnose
from normrank.sweep.embed import embed_dataset, model_key
from normrank.sweep.grid import parse_alphas, parse_grid
from normrank.sweep.lengths import document_lengths
from normrank.sweep.metrics import METRICS, QrelsMatrix, metrics_help, parse_metrics, per_query_metric
from normrank.sweep.null import RelevantRanks, permutation_null
from normrank.sweep.rank import WeightGrid, rank_all_alphas, rank_grids
from normrank.sweep.result import SweepRun
from normrank.sweep.run import evaluate_alphas, run_sweep, sweep_embeddings
from normrank.sweep.selection import cross_validate, paired_t_p
from normrank.sweep.weights import load_weights

__all__ = [
    "CV_METRIC",
    "DEFAULT_ALPHAS",
    "METRICS",
    "Diagnosis",
    "QrelsMatrix",
    "RelevantRanks",
    "SweepRun",
    "WeightGrid",
    "calibration",
    "cross_validate",
    "depth_table",
    "diagnose",
    "document_lengths",
    "embed_dataset",
    "evaluate_alphas",
    "length_residual",
    "load_weights",
    "metrics_help",
    "model_key",
    "paired_t_p",
    "parse_alphas",
    "parse_grid",
    "parse_metrics",
    "per_query_metric",
    "permutation_null",
    "rank_all_alphas",
    "rank_grids",
    "run_sweep",
    "sweep_embeddings",
    "weight_control",
]
