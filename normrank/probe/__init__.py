"""The probe: per-document drift D~ and heat V~^2 by virtual SGD steps (the paper "Optimization
Dynamics Imprint Semantic Specificity in Contrastive Embedding Norms", Appendix H)."""

from normrank.probe.estimator import ProbeResult, probe, sample_batches
from normrank.probe.pairs import load_pairs, pairs_from_qrels, pairs_from_tsv, self_pairs
from normrank.probe.report import write_probe
from normrank.probe.run import ProbeRun, run_probe
from normrank.probe.theory import predicted_norm, theory_checks

__all__ = [
    "ProbeResult",
    "ProbeRun",
    "load_pairs",
    "pairs_from_qrels",
    "pairs_from_tsv",
    "predicted_norm",
    "probe",
    "run_probe",
    "sample_batches",
    "self_pairs",
    "theory_checks",
    "write_probe",
]
