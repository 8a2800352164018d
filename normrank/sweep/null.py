"""The permutation null: how large a cross-validated gain do the norms reach once shuffled?

Permutation ``j`` gives document ``i`` the norm of document ``perms[j, i]``
(``perms[j] = np.random.default_rng([seed, j]).permutation(n)``), keeps everything else, and goes
through the same α grid and the same folds as the real norm. The p-value is the usual
``(1 + #{null gain >= real gain}) / (K + 1)``.

Fast because only the weights change, never the cosines. Each (permutation, α) is ranked among
the real run's cosine top-C candidates (C = 100) plus the m documents that this permutation
gives the largest weights ``w**α`` (m sized per α: enough for 99% of the rows to beat the bound,
at most 1024; 0 where the candidates settle it). Any other document has a cosine <= the C-th and
a weight <= the (m+1)-th largest, so when more than 10 of those scores beat that bound, their top-10
IS the exact top-10; the (permutation, α, query) triples where it is not are ranked again over
all documents. Equal scores are ranked by document position; which of two documents tied
bit-for-bit at exactly the 10th place is kept is left to ``argpartition`` (a tie that real-valued
permuted norms do not produce).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from normrank.settings import CV_METRIC
from normrank.sweep.metrics import QrelsMatrix
from normrank.sweep.selection import cv_choose_many

__all__ = ["NULL_CANDIDATES", "NULL_DEPTH", "permutation_null", "permutations"]

NULL_DEPTH = int(CV_METRIC.split("@")[1])  # the null is scored on the CV metric (NDCG@10)
# The sweep ranks the cosine run at least this deep when the null runs: its candidates.
NULL_CANDIDATES = 100
HIGH_WEIGHT_DOCS = 1024  # at most, per permutation and sign of α, scored exactly beside the candidates
_CHUNK_SCORES = 1 << 22  # (permutations x queries x candidates) floats per chunk


def permutations(n: int, k: int, seed: int) -> np.ndarray:
    """``(k, n)`` int64: the null's permutations of the documents' norms (seeded, reproducible)."""
    return np.stack([np.random.default_rng([seed, j]).permutation(n) for j in range(k)]).reshape(k, n)


def _ndcg_top(rel: np.ndarray, idcg: np.ndarray) -> np.ndarray:
    disc = 1.0 / np.log2(np.arange(2, rel.shape[-1] + 2))
    dcg = rel @ disc
    return np.where(idcg > 0, dcg / np.where(idcg > 0, idcg, 1.0), 0.0)


def _top(scores: np.ndarray, pos: np.ndarray, rel: np.ndarray, kk: int, idcg: np.ndarray) -> np.ndarray:
    """NDCG@kk of the best ``kk`` columns (score descending, then position ascending)."""
    idx = np.argpartition(-scores, kk - 1, axis=-1)[..., :kk]
    sv, pv = np.take_along_axis(scores, idx, -1), np.take_along_axis(pos, idx, -1)
    order = np.lexsort((pv, -sv), axis=-1)
    return _ndcg_top(np.take_along_axis(np.take_along_axis(rel, idx, -1), order, -1), idcg)


def permutation_null(
    qn: np.ndarray,
    dn: np.ndarray,
    norms: np.ndarray,
    cosines: np.ndarray | None,
    cand_pos: np.ndarray,
    cand_cos: np.ndarray,
    alphas: Sequence[float],
    qm: QrelsMatrix,
    fold: np.ndarray,
    k: int,
    seed: int,
) -> tuple[np.ndarray, dict[str, object]]:
    """Cross-validated NDCG@10 gains (percent, vs cosine) of ``k`` permutations of ``norms``.

    Args:
        qn, dn: unit queries (nq, d) and documents (n, d). cosines: ``qn @ dn.T`` if kept, else None.
        norms: (n,) the real norms. cand_pos, cand_cos: (nq, C) the cosine top-C (-1 padded).
        alphas: the grid (with 0). qm: the judgements. fold: (nq,) fold of each query.
    Returns:
        ``(null_gains (k,), info)``; ``info["fallback_fraction"]``: share of (permutation, α ≠ 0,
        query) triples that were ranked again over all documents; ``info["relative_curve"]``:
        quantiles over permutations of each α's mean NDCG@10 / cosine's (the shuffled band).
    """
    n, nq = norms.shape[0], cand_pos.shape[0]

    def cos_cols(cols: np.ndarray) -> np.ndarray:
        return cosines[:, cols] if cosines is not None else qn @ dn[cols].T

    def cos_rows(rows: np.ndarray) -> np.ndarray:
        return cosines[rows] if cosines is not None else qn[rows] @ dn.T

    kk = min(NULL_DEPTH, n)
    a = np.asarray(alphas, dtype=np.float64)
    i0 = int(np.flatnonzero(a == 0.0)[0])
    exhaustive = bool(np.any(cand_pos < 0)) or cand_pos.shape[1] >= n
    if exhaustive:  # every document is a candidate: no bound needed
        cand_pos = np.broadcast_to(np.arange(n), (nq, n))
        cand_cos = cos_rows(np.arange(nq)).astype(np.float64)
    cand_cos = np.asarray(cand_cos, dtype=np.float64)
    dense_rel = qm.relevance_rows(np.arange(nq))  # (nq, n)
    rel_c = np.take_along_axis(dense_rel, cand_pos, 1)
    idcg = qm.idcg(NULL_DEPTH)
    c_low = cand_cos.min(axis=1)  # >= every non-candidate's cosine
    m = 0 if exhaustive else max(0, min(HIGH_WEIGHT_DOCS, n - cand_pos.shape[1] - 1))
    by_norm = np.argsort(norms, kind="stable")
    is_cand = np.zeros((nq, n), dtype=bool)
    is_cand[np.arange(nq)[:, None], cand_pos] = True
    perms = permutations(n, k, seed)
    ndcg = np.empty((k, len(a), nq))
    ndcg[:, i0] = _top(cand_cos, cand_pos, rel_c, kk, idcg)  # α = 0 is cosine for every permutation
    redo = 0
    C, W = cand_pos.shape[1], cand_pos.shape[1] + m
    chunk = max(1, min(k, _CHUNK_SCORES // max(nq * W, 1)))
    buf = np.empty((chunk, nq, W), dtype=np.float32)
    cc32, norms64 = cand_cos.astype(np.float32), norms.astype(np.float64)
    qix = np.arange(nq)[None, :, None]
    for j0 in range(0, k, chunk):
        p = perms[j0 : j0 + chunk]
        b = p.shape[0]
        s = buf[:b]
        inv = np.argsort(p, axis=1)  # inv[j, d]: the document that receives document d's norm
        src = p[:, cand_pos]  # (b, nq, C): whose norm each candidate carries
        for ai, alpha in enumerate(a):
            if alpha == 0.0:
                continue
            wa = np.power(norms64, alpha)
            wa32 = wa.astype(np.float32)
            sorted_w = np.sort(wa32)
            np.multiply(cc32[None], wa32[src], out=s[..., :C])
            bad = np.zeros((b, nq), dtype=bool)
            h = np.zeros((b, 1), dtype=np.int64)
            ma = m
            if m:
                # Only documents whose weight beats (candidates' 10th best) / (C-th cosine) can
                # enter; size the high-weight set for 99% of the rows (the rest fall back).
                s10 = np.partition(s[..., :C], C - kk, axis=-1)[..., C - kk]
                need = np.where(c_low > 0, s10 / np.maximum(c_low, 1e-30), np.inf)
                count = n - np.searchsorted(sorted_w, need.ravel(), side="right")
                ma = int(min(m, np.quantile(count, 0.99)))
            if ma:
                top_norms = by_norm[-ma:] if alpha > 0 else by_norm[:ma]  # largest weights w**α
                h = inv[:, top_norms]  # (b, ma) the documents carrying them
                ch = cos_cols(h.ravel()).reshape(nq, b, ma).transpose(1, 0, 2)
                np.multiply(ch, wa32[top_norms][None, None], out=s[..., C : C + ma])
                s[..., C : C + ma][is_cand[qix, h[:, None, :]]] = -np.inf  # already among the candidates
            sa, wa_cols = s[..., : C + ma], C + ma
            if not exhaustive:
                tau = wa[by_norm[-ma - 1] if alpha > 0 else by_norm[ma]]  # largest weight left out
                bound = np.where(c_low >= 0, c_low * tau, c_low * wa.min()).astype(np.float32)
                bad = (sa > bound[None, :, None]).sum(axis=-1) < kk
            idx = np.argpartition(sa, wa_cols - kk, axis=-1)[..., wa_cols - kk :]
            sv = np.take_along_axis(sa, idx, -1)
            in_c = idx < C
            ci, hi = np.where(in_c, idx, 0), np.where(in_c, 0, idx - C)
            pos_c = np.take_along_axis(np.broadcast_to(cand_pos, (b, nq, C)), ci, -1)
            pos_h = np.take_along_axis(np.broadcast_to(h[:, None, :], (b, nq, h.shape[1])), hi, -1)
            pos = np.where(in_c, pos_c, pos_h)
            rel = dense_rel[qix, pos]
            order = np.lexsort((pos, -sv), axis=-1)
            ndcg[j0 : j0 + b, ai] = _ndcg_top(np.take_along_axis(rel, order, -1), idcg)
            jbs, qs = np.nonzero(bad)
            redo += qs.size
            step = max(1, _CHUNK_SCORES // n)
            for r0 in range(0, qs.size, step):  # the unsettled rows, ranked over all documents at once
                jr, qr = jbs[r0 : r0 + step], qs[r0 : r0 + step]
                full = cos_rows(qr).astype(np.float32) * wa32[p[jr]]
                ranks = np.broadcast_to(np.arange(n), full.shape)
                ndcg[j0 + jr, ai, qr] = _top(full, ranks, dense_rel[qr], kk, idcg[qr])
    held = cv_choose_many(ndcg, a, fold)  # (k, nq) held-out NDCG@10 per permutation
    base = ndcg[0, i0].mean() if k else 0.0
    gains = 100.0 * (held.mean(axis=1) - base) / base if base else np.zeros(k)
    total = k * (len(a) - 1) * nq
    info: dict[str, object] = {"fallback_fraction": redo / total if total else 0.0}
    if k and base:  # the shuffled band: each α's mean NDCG@10 relative to cosine, over permutations
        rel_curve = ndcg.mean(axis=2) / base
        info["relative_curve"] = {
            q: [float(x) for x in np.quantile(rel_curve, v, axis=0)]
            for q, v in (("q05", 0.05), ("median", 0.5), ("q95", 0.95), ("max", 1.0))
        }
    return gains, info
