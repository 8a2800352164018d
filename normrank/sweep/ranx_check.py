"""Cross-checks against ranx, on request: the cosine run's metrics and the paired test, and the
time of one plain cosine evaluation with ranx (the sweep's timing baseline).

The sweep itself does not need ranx (its metrics and test are equal to ranx's, as the tests
check); loading ranx costs seconds in a fresh process (numba compiles or loads its kernels).
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from normrank.corpus.beir import Dataset
from normrank.settings import CV_METRIC
from normrank.sweep.rank import rank_all_alphas
from normrank.sweep.selection import import_ranx, paired_p_ranx, ranx_run

__all__ = ["quiet_numba", "ranx_cross_check", "time_cosine_eval"]


@contextlib.contextmanager
def quiet_numba() -> Iterator[None]:
    """Silence numba's ``NumbaTypeSafetyWarning`` from inside ranx (a uint64 -> int64 cast of its
    own id hashes, harmless here), which numba prints with raw terminal escape codes."""
    with warnings.catch_warnings():
        try:
            from numba.core.errors import NumbaTypeSafetyWarning

            warnings.simplefilter("ignore", NumbaTypeSafetyWarning)
        except ImportError:  # no numba: nothing to silence
            pass
        yield


def time_cosine_eval(
    queries: np.ndarray, docs: np.ndarray, k: int, qids: Sequence[str], qrels: Any, doc_ids: Sequence[str],
    metrics: list[str],
) -> float:  # fmt: skip
    """Seconds for one plain cosine evaluation: exact top-k by cosine, then ranx on that run."""
    evaluate = import_ranx().evaluate
    t = time.perf_counter()
    scores, pos, _ = rank_all_alphas(queries, docs, None, [0.0], k)
    with quiet_numba():
        evaluate(qrels, ranx_run("cos", qids, scores[0], pos[0], doc_ids), metrics, make_comparable=True)
    return time.perf_counter() - t


def ranx_cross_check(
    dataset: Dataset,
    qids: Sequence[str],
    scores: np.ndarray,
    pos: np.ndarray,
    chosen: np.ndarray,
    i0: int,
    per_query: dict[str, np.ndarray],
    metrics: list[str],
    p_value: float,
    queries: np.ndarray,
    docs: np.ndarray,
) -> tuple[dict[str, float], float]:
    """``(check, cosine_eval_seconds)``: |ranx - ours| on the cosine run's metrics and the test."""
    ranx = import_ranx()
    rows = np.arange(len(qids))
    qrels = ranx.Qrels({q: dataset.qrels[q] for q in qids})
    with quiet_numba():
        # Warm ranx first (numba), so that the timed baseline below is ranx's steady cost.
        cos_run = ranx_run("cosine", qids, scores[i0], pos[i0], dataset.doc_ids)
        got = ranx.evaluate(qrels, cos_run, metrics, make_comparable=True)
        got = got if isinstance(got, dict) else {metrics[0]: got}
        p_ranx = paired_p_ranx(
            qrels, cos_run, lambda: ranx_run("cv", qids, scores[chosen, rows], pos[chosen, rows], dataset.doc_ids),
            per_query[CV_METRIC][i0], per_query[CV_METRIC][chosen, rows],
        )  # fmt: skip
    k = pos.shape[-1]
    base = time_cosine_eval(queries, docs, k, qids, qrels, dataset.doc_ids, metrics)
    check = {
        "max_abs_diff_cosine": max(abs(float(got[m]) - float(per_query[m][i0].mean())) for m in metrics),
        "p_value_ranx": p_ranx,
        "abs_diff_p_value": abs(p_ranx - p_value),
    }
    return check, base
