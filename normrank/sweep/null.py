"""The permutation null: how large a cross-validated gain do the norms reach once shuffled?

Permutation ``j`` gives document ``i`` the norm of document ``perms[j, i]``
(``perms[j] = np.random.default_rng([seed, j]).permutation(n)``), keeps everything else, and goes
through the same α grid and the same folds as the real norm. The p-value is the usual
``(1 + #{null gain >= real gain}) / (K + 1)``.

Fast because only the weights change, never the cosines, and because NDCG@10 needs only the
rank of each judged-relevant document, and only when it is at most 10 (:class:`RelevantRanks`):
that rank is 1 + the number of documents scoring above it (equal scores: lower position first,
the sweep's total order). The documents counted are the real run's cosine top-C candidates
(C = 100): for a query with few judgements, each relevant document is compared with every
candidate for all K permutations and every α in one array pass (the comparison's sign is
linear in α in log space, :meth:`RelevantRanks.ndcg_powers`); for a query with many, the
candidates' top 10 is taken per α. Then, for a relevant document the candidates leave in the
top 10, the others whose weight could lift a cosine <= the C-th above its score are scored (at
most :data:`HIGH_WEIGHT_DOCS`; more, or a score <= 0, and that one (permutation, α, document) is
counted over all documents). Exact, ties included: the gains equal a full ranking's (tests).
When the cosine matrix is too large to keep, the few cosines outside the candidates are
recomputed, which may differ from the matrix's in the last bit (only exact ties could tell).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from normrank.settings import CV_METRIC
from normrank.sweep.metrics import QrelsMatrix
from normrank.sweep.selection import cv_choose_many, quantile

__all__ = [
    "HIGH_WEIGHT_DOCS",
    "NULL_CANDIDATES",
    "NULL_DEPTH",
    "RelevantRanks",
    "permutation_null",
    "permutations",
]

NULL_DEPTH = int(CV_METRIC.split("@")[1])  # the null is scored on the CV metric (NDCG@10)
# The sweep ranks the cosine run at least this deep when the null runs: its candidates.
NULL_CANDIDATES = 100
HIGH_WEIGHT_DOCS = 1024  # at most, per relevant document, scored beside the candidates
_CHUNK = 1 << 22  # (weightings x relevant pairs x candidates) scores per array pass
# (query, document) cosines scored at once: by the non-candidate scan (its ~10 temporaries stay
# near 0.5 MB each, reused rather than fresh pages), or computed when the matrix is not kept
_PAIR_CHUNK = 1 << 16
_PASS_CHUNK = 1 << 18  # comparisons per block of the all-α pass: its temporaries stay in cache
_DENSE_MASK = 1 << 26  # (queries x documents) booleans for the candidate membership test
_MARGIN = 1e-5  # |log score ratio| beyond which float32 scores cannot order two documents otherwise
_FEW_PAIRS = 6  # relevant documents per query up to which each is compared with every candidate


def _count_last(mask: np.ndarray) -> np.ndarray:
    """``np.count_nonzero(mask, axis=-1)`` as int64; summed as bytes where the last axis is
    shorter than 256 (no count can wrap), about twice as fast as count_nonzero's int sum."""
    if mask.shape[-1] < 256:
        return np.add.reduce(mask.view(np.uint8), axis=-1, dtype=np.uint8).astype(np.int64)
    return np.count_nonzero(mask, axis=-1)


def permutations(n: int, k: int, seed: int) -> np.ndarray:
    """``(k, n)`` int64: the null's permutations of the documents' norms (seeded, reproducible):
    row j is ``np.random.default_rng([seed, j]).permutation(n)``, shuffled in place here (the same
    generator and the same shuffle, without k temporary arrays and their stacking copy)."""
    out = np.empty((k, n), dtype=np.int64)
    out[:] = np.arange(n, dtype=np.int64)
    for j in range(k):
        np.random.Generator(np.random.PCG64([seed, j])).shuffle(out[j])
    return out


class RelevantRanks:
    """NDCG@10 of ``cos(q, d) * w[d]`` for many weightings ``w``, from the ranks of the relevant
    documents alone (module docstring). Scores are float32 products ``cos * w`` exactly as the
    sweep ranks them, so the values equal a full ranking's.

    Args:
        qm: the judgements. cand_pos, cand_cos: (nq, C) the cosine top-C (-1 padded when n < C).
        cosines: the whole (nq, n) float32 cosine matrix if kept, else None (then ``qn``, ``dn``,
            the unit queries and documents, give the few cosines needed).
    """

    def __init__(
        self,
        qm: QrelsMatrix,
        cand_pos: np.ndarray,
        cand_cos: np.ndarray,
        cosines: np.ndarray | None,
        qn: np.ndarray,
        dn: np.ndarray,
        depth: int = NULL_DEPTH,
    ) -> None:
        n, nq = qm.n, qm.nq
        self.n, self.nq = n, nq
        self.kk = min(depth, n)
        self.disc = 1.0 / np.log2(np.arange(2, self.kk + 2))
        self.idcg = qm.idcg(depth)
        self._cosines, self._qn, self._dn = cosines, qn, dn
        self.exhaustive = bool(np.any(cand_pos < 0)) or cand_pos.shape[1] >= n
        if self.exhaustive:  # every document is a candidate: nothing outside to check
            cand_pos = np.broadcast_to(np.arange(n), (nq, n))
            cand_cos = self.cos_rows(np.arange(nq))
        cand_cos = np.asarray(cand_cos, dtype=np.float32)
        self.pq, self.pd, self.rel = qm.pairs()
        in_c = np.zeros(self.pq.size, dtype=bool)
        self.r_cos = np.zeros(self.pq.size, dtype=np.float32)
        if self.pq.size:
            hit_all = cand_pos[self.pq] == self.pd[:, None]
            in_c = hit_all.any(axis=1)
            self.r_cos[in_c] = cand_cos[self.pq[in_c], hit_all[in_c].argmax(axis=1)]
            del hit_all
        if not in_c.all():
            self.r_cos[~in_c] = self.cos_pairs(self.pq[~in_c], self.pd[~in_c])
        self.in_c = in_c
        # Queries with few relevant documents: each compared with every candidate (one pass for
        # all α, ndcg_powers). Queries with many: their candidates' top 10 per α, so that the
        # work grows with the queries, not with their judgements.
        per_q = np.bincount(self.pq, minlength=nq)[self.pq]
        self.few, self.many = np.flatnonzero(per_q <= _FEW_PAIRS), np.flatnonzero(per_q > _FEW_PAIRS)
        self.mq, self.mq_of = np.unique(self.pq[self.many], return_inverse=True)
        self.m_pos, self.m_cos = cand_pos[self.mq], cand_cos[self.mq]
        f = self.few
        self.f_pd, self.f_rcos = self.pd[f], self.r_cos[f]
        self.c_pos = np.ascontiguousarray(cand_pos[self.pq[f]])  # (F, C) each few pair's candidates
        self.c_cos = np.ascontiguousarray(cand_cos[self.pq[f]])
        self.lower = self.c_pos < self.f_pd[:, None]  # wins a tie against the relevant document
        hit = self.c_pos == self.f_pd[:, None]
        self.self_in_c = int(in_c[f].sum())
        # log(cos_c / cos_r) for ndcg_powers; -inf where c cannot win at any weight (itself, or
        # cos_c <= 0 < cos_r); pairs with cos_r <= 0 are compared in float32 (nan: never decided).
        with np.errstate(divide="ignore", invalid="ignore"):
            lc = np.log(self.c_cos.astype(np.float64)) - np.log(self.f_rcos.astype(np.float64))[:, None]
        lc[(self.c_cos <= 0) | hit] = -np.inf
        lc[self.f_rcos <= 0] = np.nan
        self._lc = lc
        self.c_low = cand_cos.min(axis=1)[self.pq]  # >= every non-candidate's cosine
        self.cand_keys = np.sort((np.arange(nq)[:, None] * n + cand_pos).ravel())
        self.is_cand: np.ndarray | None = None  # dense (nq, n) membership where it is small
        if nq * n <= _DENSE_MASK:
            self.is_cand = np.zeros((nq, n), dtype=bool)
            self.is_cand[np.arange(nq)[:, None], cand_pos] = True
        self.full_rows = 0  # (weighting, pair) ranks counted over all documents, for the record

    def cos_rows(self, rows: np.ndarray) -> np.ndarray:
        if self._cosines is not None:
            return self._cosines[rows]
        return (self._qn[rows] @ self._dn.T).astype(np.float32)

    def cos_pairs(self, q: np.ndarray, d: np.ndarray) -> np.ndarray:
        if self._cosines is not None:
            return self._cosines[q, d]
        out = np.empty(q.size, dtype=np.float32)
        for i in range(0, q.size, _PAIR_CHUNK):
            s = slice(i, i + _PAIR_CHUNK)
            out[s] = np.einsum("ij,ij->i", self._qn[q[s]], self._dn[d[s]])
        return out

    def sources(self, perm: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """For weightings ``w[perm[b]]`` (perm (B, n)): whose weight each pair's candidates and
        relevant document carry, and the inverse permutations; computed once, reused for every α."""
        inv = np.empty_like(perm)
        inv[np.arange(perm.shape[0])[:, None], perm] = np.arange(perm.shape[1])
        # C order: indexing a slice by an array may return another layout (flat indices read C order)
        return perm, np.ascontiguousarray(perm[:, self.c_pos]), np.ascontiguousarray(perm[:, self.pd]), inv

    def _counts_many(
        self, w: np.ndarray, src_m: np.ndarray | None, src_mr: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The many-judgement queries' relevant documents that the candidates leave in the top
        ``kk``: ``(weighting, index into self.many, candidates above it)``, from the candidates'
        top ``kk`` scores, exact. ``src_m`` (B, Qm, C) and ``src_mr`` (B, M): whose weight the
        candidates and the relevant documents carry (None: their own)."""
        many = self.many
        s = self.m_cos * (w[self.m_pos][None] if src_m is None else w[src_m])  # (B, Qm, C)
        r = self.r_cos[many] * (w[self.pd[many]][None] if src_mr is None else w[src_mr])  # (B, M)
        c, kk = s.shape[-1], self.kk
        top = np.partition(s, c - kk, axis=-1)[..., c - kk :] if c > kk else s
        low = top.min(axis=-1)  # the kk-th best candidate score
        if c < kk:  # fewer candidates than kk: none is ruled out by them
            low[:] = -np.inf
        eb, em = np.nonzero(r >= low[:, self.mq_of])  # below it: at least kk candidates above
        re, lo = r[eb, em], low[eb, self.mq_of[em]]
        v = top[eb, self.mq_of[em]]
        got = np.count_nonzero(v > re[:, None], axis=1)
        ties = np.count_nonzero(v == re[:, None], axis=1) - (self.in_c[many[em]] & (re > lo))
        # At the kk-th score itself, or tied with another candidate: every candidate, position rule.
        x = np.flatnonzero((re == lo) | (ties > 0))
        if x.size:
            sx, px = s[eb[x], self.mq_of[em[x]]], self.m_pos[self.mq_of[em[x]]]
            rx, pdx = re[x][:, None], self.pd[many[em[x]]][:, None]
            got[x] = np.count_nonzero((sx > rx) | ((sx == rx) & (px < pdx)), axis=1)
        keep = got < kk
        return eb[keep], em[keep], got[keep]

    def ndcg(
        self,
        w: np.ndarray,
        src: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None,
        order: np.ndarray | None = None,
    ) -> np.ndarray:
        """(B, nq) NDCG@10 of ``cos * w[src]`` (B = 1 and weights ``w`` as they are when ``src`` is
        None; else from :meth:`sources`). ``w``: (n,) float32, >= 0; ``order``: the documents by
        ``w`` ascending, if known (saves a sort)."""
        w = np.asarray(w, dtype=np.float32)
        perm, src_c, src_r, inv = src if src is not None else (None, None, None, None)
        b_all = 1 if perm is None else perm.shape[0]
        f, c = self.c_pos.shape
        if self.pq.size == 0:
            return np.zeros((b_all, self.nq))
        entries = []  # (weighting, pair, candidates above) of the relevant documents still in the top kk
        step = max(1, _CHUNK // max(f * c, 1))
        for b0 in range(0, b_all if f else 0, step):
            if src_c is None:
                s, r = (self.c_cos * w[self.c_pos])[None], (self.f_rcos * w[self.f_pd])[None]
            else:
                s = w[src_c[b0 : b0 + step]]
                np.multiply(self.c_cos, s, out=s)
                r = self.f_rcos * w[src_r[b0 : b0 + step, self.few]]
            r3 = r[..., None]
            got = _count_last(s > r3)
            eq = s == r3
            if np.count_nonzero(eq) > self.self_in_c * s.shape[0]:  # a tie other than itself
                got += _count_last(eq & self.lower)
            eb, ef = np.nonzero(got < self.kk)
            entries.append((eb + b0, self.few[ef], got[eb, ef]))
        if self.many.size:
            src_m = None if perm is None else perm[:, self.m_pos]
            src_mr = None if perm is None else src_r[:, self.many]
            step = max(1, _CHUNK // max(self.m_pos.size, 1))
            for b0 in range(0, b_all, step):
                sl = slice(b0, b0 + step)
                eb, em, got = self._counts_many(
                    w, None if perm is None else src_m[sl], None if perm is None else src_mr[sl]
                )
                entries.append((eb + b0, self.many[em], got))
        return self._finish(w, entries, b_all, perm, inv, order, src_r)

    def _finish(
        self,
        w: np.ndarray,
        entries: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
        b_all: int,
        perm: np.ndarray | None,
        inv: np.ndarray | None,
        order: np.ndarray | None = None,
        src_r: np.ndarray | None = None,
    ) -> np.ndarray:
        """(B, nq) NDCG@10 from the relevant documents the candidates leave in the top kk
        (``entries``: weighting, pair, candidates above), once the other documents are added.
        ``order``: documents by ``w`` ascending, if known; ``src_r``: ``perm[:, pd]``, if known."""
        eb = np.concatenate([e[0] for e in entries]) if entries else np.zeros(0, np.int64)
        ep = np.concatenate([e[1] for e in entries]) if entries else np.zeros(0, np.int64)
        ce = np.concatenate([e[2] for e in entries]).astype(np.int64) if entries else np.zeros(0, np.int64)
        if not self.exhaustive and eb.size:
            if perm is None:
                src = self.pd[ep]
            elif src_r is not None:  # the same sources, read from the small (B, pairs) table
                src = src_r.ravel()[eb * src_r.shape[1] + ep]
            else:
                src = perm[eb, self.pd[ep]]
            rv = self.r_cos[ep] * w[src]
            self._outside(w, eb, ep, ce, rv, perm, inv, order)
        keep = ce < self.kk
        eb, ep, ce = eb[keep], ep[keep], ce[keep]
        gain = self.rel[ep] * self.disc[ce]
        dcg = np.bincount(eb * self.nq + self.pq[ep], weights=gain, minlength=b_all * self.nq)
        dcg = dcg.reshape(b_all, self.nq)
        return np.where(self.idcg > 0, dcg / np.where(self.idcg > 0, self.idcg, 1.0), 0.0)

    def ndcg_powers(
        self, norms: np.ndarray, alphas: Sequence[float], perm: np.ndarray, out: np.ndarray | None = None
    ) -> np.ndarray:
        """(B, len(alphas), nq): :meth:`ndcg` of ``w = float32(norms ** α)[perm[b]]`` for every α
        and every row of ``perm`` (B, n), the candidate comparisons of all α in one pass.

        Candidate c beats relevant document r at α iff ``x(α) = log(cos_c / cos_r) + α log(n_c / n_r)
        > 0``, linear in α: its sign at the grid's two ends decides every α between, or else its
        zero falls between two grid points. The float32 scores agree with that sign wherever
        ``|x| > _MARGIN`` (each is within 2^-23 of the real product; x itself is computed to
        ~1e-6); the rest (ties included, and any cosine <= 0 of a relevant document) are
        compared in float32 at every α. ``out``: a (B, len(alphas), nq) float64 array (a view will
        do) to write the result into, returned.
        """
        norms = np.asarray(norms, dtype=np.float64)
        a = np.asarray(alphas, dtype=np.float64)
        if a.size == 0:  # a grid of cosine alone (``--alphas 0``): nothing to rank
            res = np.empty((perm.shape[0], 0, self.nq))
            if out is None:
                return res
            return out
        weights = [np.power(norms, x).astype(np.float32) for x in a]
        b_all, (p, c), na = perm.shape[0], self.c_pos.shape, a.size  # p: the few-judgement pairs
        if self.pq.size == 0 or na < 2 or any(not np.all(np.isfinite(w) & (w > 0)) for w in weights):
            src = self.sources(perm)
            res = np.stack([self.ndcg(w, src) for w in weights], axis=1)
            if out is None:
                return res
            out[...] = res
            return out
        # int32 where it fits: half the fresh memory, the same values
        inv = np.empty(perm.shape, dtype=np.int32 if perm.shape[1] < 2**31 else np.int64)
        ar = np.arange(perm.shape[1], dtype=inv.dtype)
        for row, pr in zip(inv, perm, strict=True):  # row by row: 1-D scatters, ~2x a 2-D one
            row[pr] = ar
        src_r = np.ascontiguousarray(perm[:, self.pd])
        src_fr = np.ascontiguousarray(src_r[:, self.few])
        order = np.argsort(a, kind="stable")
        asort = a[order]
        by_norm = np.argsort(norms, kind="stable")
        ln = np.log(norms)
        finite_lc = self._lc[np.isfinite(self._lc)]
        # float32 keeps x to ~1e-6 while its terms stay small; beyond that, float64
        big = max(np.abs(finite_lc).max(initial=0.0), np.ptp(ln) * np.abs(asort).max())
        dt = np.float32 if big < 20 else np.float64
        lc, ln_t, a_t = self._lc.astype(dt), ln.astype(dt), asort.astype(dt)
        steps = np.diff(asort)
        # A grid on a lattice (uniform, or uniform with holes: the default grid without 0):
        # #grid points below t from t's lattice index by a table, not a search (~10x cheaper).
        # Off by one only where t is near a lattice point: a grid point (caught below) or a hole
        # (the count is the same on both sides of a hole).
        uniform = bool(np.allclose(steps, steps[0], rtol=1e-9, atol=0))
        unit = steps[0] if uniform else steps.min()
        lattice = np.rint((asort - asort[0]) / unit) if unit > 0 else np.zeros(0)
        below = None  # below[i]: grid points at lattice indices < i
        on_lattice = unit > 0 and np.allclose(asort - asort[0], lattice * unit, rtol=0, atol=1e-9 * unit)
        if on_lattice and lattice[-1] <= 4 * na:  # a small table
            below = np.cumsum(np.bincount(lattice.astype(np.int64) + 1, minlength=int(lattice[-1]) + 2))
        # x(a) = lc + a * dl > M  <=>  dl > (M - lc) / a for a > 0, dl < (M - lc) / a for a < 0
        # (and < -M likewise); nan lc (cos_r <= 0) fails every comparison: compared in float32.
        with np.errstate(invalid="ignore"):
            th_pos = [((_MARGIN - self._lc) / e).astype(dt) for e in (asort[0], asort[-1])]
            th_neg = [((-_MARGIN - self._lc) / e).astype(dt) for e in (asort[0], asort[-1])]

        def cmp(x: np.ndarray, th: np.ndarray, greater: bool) -> np.ndarray:
            return x > th if greater else x < th

        # in asort order, α first: each α's counts are read as one contiguous block below
        cnt = np.zeros((na, b_all, p), dtype=np.int32)
        step = max(1, _PASS_CHUNK // max(p * c, 1))
        lc_b = np.ascontiguousarray(np.broadcast_to(lc, (min(step, b_all), p, c)))  # lc per block row
        for b0 in range(0, b_all if p else 0, step):
            pb, srr = perm[b0 : b0 + step], src_fr[b0 : b0 + step]
            b = pb.shape[0]
            lnp = ln_t[pb]  # (b, n): each document's log-norm in these permutations
            dl = np.take(lnp, self.c_pos, axis=1)
            dl -= np.take_along_axis(lnp, self.f_pd[None], axis=1)[..., None]
            # x(end) > M and x(end) < -M as comparisons of dl with thresholds fixed per column
            lo_pos, lo_neg = cmp(dl, th_pos[0], a_t[0] > 0), cmp(dl, th_neg[0], a_t[0] < 0)
            hi_pos, hi_neg = cmp(dl, th_pos[1], a_t[-1] > 0), cmp(dl, th_neg[1], a_t[-1] < 0)
            sure = lo_pos & hi_pos
            above = _count_last(sure)  # (b, p): candidates above the relevant document at every α
            cnt[:, b0 : b0 + b] += above
            flip = (lo_neg & hi_pos) | (lo_pos & hi_neg)
            unsure = ~(sure | (lo_neg & hi_neg) | flip)
            # A relevant document with kk candidates above it at every α is out of the top kk at
            # every α whatever else it meets (only counts below kk are read): skip its other work.
            dead = above >= self.kk
            if dead.any():
                flip &= ~dead[..., None]
                unsure &= ~dead[..., None]
            fi = np.flatnonzero(flip)
            if fi.size:
                d, lcf = dl.ravel()[fi], lc_b[:b].ravel()[fi]
                t = -lcf / d  # the zero of x: beats above it when d > 0, below it when d < 0
                if below is not None:
                    j = np.ceil((t - a_t[0]) / a_t.dtype.type(unit)).astype(np.int64)
                    j = below[np.clip(j, 0, below.size - 1)]
                else:
                    j = np.searchsorted(a_t, t)
                j = np.clip(j, 1, na - 1)
                near = np.abs(d) * np.minimum(np.abs(t - a_t[j - 1]), np.abs(a_t[j] - t)) <= 2 * _MARGIN
                if near.any():
                    unsure[np.unravel_index(fi[near], unsure.shape)] = True
                    fi, d, j = fi[~near], d[~near], j[~near]
                bp = fi // c  # flat (permutation, pair)
                up = d > 0
                hist = np.bincount(
                    bp * (na + 1) + j, weights=np.where(up, 1.0, -1.0), minlength=b * p * (na + 1)
                )
                hist[:: na + 1] += np.bincount(bp[~up], minlength=b * p)
                counted = np.cumsum(hist.reshape(b, p, na + 1), axis=-1)[..., :na].astype(np.int32)
                cnt[:, b0 : b0 + b] += np.moveaxis(counted, -1, 0)
            ui = np.flatnonzero(unsure)  # rare: flat indices are cheaper than nonzero's three
            ub, up_, uc = ui // (p * c), (ui // c) % p, ui % c
            if ub.size:  # compared in float32, as the scores are, at every α
                src_u = pb[ub, self.c_pos[up_, uc]]
                for k, ai in enumerate(order):
                    w = weights[ai]
                    s_u = self.c_cos[up_, uc] * w[src_u]
                    r_u = self.f_rcos[up_] * w[srr[ub, up_]]
                    beat = (s_u > r_u) | ((s_u == r_u) & self.lower[up_, uc])
                    add = np.bincount(ub * p + up_, weights=beat, minlength=b * p)
                    cnt[k, b0 : b0 + b] += add.reshape(b, p).astype(np.int32)
        if out is None:
            out = np.empty((b_all, na, self.nq))
        if self.many.size:
            src_m = np.ascontiguousarray(perm[:, self.m_pos])  # once for every α
            src_mr = np.ascontiguousarray(src_r[:, self.many])
        m_step = max(1, _CHUNK // max(self.m_pos.size, 1))
        for k, ai in enumerate(order):
            w = weights[ai]
            ck = cnt[k].ravel()
            flat = np.flatnonzero(ck < self.kk)  # row-major, as np.nonzero: the same order
            eb, ef = np.divmod(flat, max(p, 1))
            entries = [(eb, self.few[ef], ck[flat])]
            for b0 in range(0, b_all if self.many.size else 0, m_step):
                sl = slice(b0, b0 + m_step)
                mb, mm, got = self._counts_many(w, src_m[sl], src_mr[sl])
                entries.append((mb + b0, self.many[mm], got))
            # w = norms**α is monotone in the norms: their order (reversed for α < 0) sorts it
            by_w = by_norm if a[ai] > 0 else by_norm[::-1]
            out[:, ai] = self._finish(w, entries, b_all, perm, inv, by_w, src_r)
        return out

    def _outside(
        self,
        w: np.ndarray,
        eb: np.ndarray,
        ep: np.ndarray,
        cnt: np.ndarray,
        rv: np.ndarray,
        perm: np.ndarray | None,
        inv: np.ndarray | None,
        order: np.ndarray | None = None,
    ) -> None:
        """Add to ``cnt`` (in place) the non-candidates that beat relevant document ``ep`` (score
        ``rv``) in weighting ``eb``."""
        cl = self.c_low[ep]
        # A non-candidate's cosine is <= c_low: with c_low <= 0 < rv it cannot win; with both
        # > 0 it needs a weight above rv / c_low (slack for float32 rounding: a superset).
        full = rv <= 0
        scan = (cl > 0) & ~full
        if order is None:
            order = np.argsort(w, kind="stable")
        m = np.zeros(eb.size, dtype=np.int64)
        thr = rv.astype(np.float64) / np.where(scan, cl, 1.0).astype(np.float64) * (1 - 1e-6)
        scan &= thr < w[order[-1]]  # no document's weight is above: nothing to scan
        m[scan] = self.n - np.searchsorted(w[order], thr[scan], side="right")
        full |= m > HIGH_WEIGHT_DOCS
        m[full] = 0
        sel = np.flatnonzero(m)
        desc = order[::-1]  # sources by weight, largest first: a prefix of m of them can win
        w_desc = w[desc]
        bounds = np.r_[0, np.cumsum(m[sel])]
        start, n = 0, self.n
        while start < sel.size:  # the scans, a bounded number of cosines at a time
            stop = int(np.searchsorted(bounds, bounds[start] + _PAIR_CHUNK, side="right")) - 1
            stop = max(stop, start + 1)
            e, mm = sel[start:stop], m[sel[start:stop]]
            ends = np.cumsum(mm)
            # each entry's sources in weight order, entry after entry; per-entry values are
            # repeated rather than gathered through a repeated entry index
            rank = np.arange(int(ends[-1])) - np.repeat(ends - mm, mm)
            srcs = desc[rank]
            docs = inv.ravel()[np.repeat(eb[e] * n, mm) + srcs] if inv is not None else srcs
            qe = self.pq[ep[e]]
            flat = np.repeat(qe * n, mm) + docs  # (query, document) into the dense (nq, n) arrays
            if self._cosines is not None:
                cs = self._cosines.ravel()[flat]
            else:
                cs = self.cos_pairs(np.repeat(qe, mm), docs)
            sc = cs * w_desc[rank]
            # Few score at least as high: the other tests only on those.
            hi = np.flatnonzero(sc >= np.repeat(rv[e], mm))
            rep = np.searchsorted(ends, hi, side="right")  # their entries (hi ascending)
            docs, flat, sc = docs[hi], flat[hi], sc[hi]
            if self.is_cand is not None:
                outside = ~self.is_cand.ravel()[flat]  # candidates were counted already
            else:
                at = np.minimum(np.searchsorted(self.cand_keys, flat), self.cand_keys.size - 1)
                outside = self.cand_keys[at] != flat
            r = rv[e][rep]
            pd_e = self.pd[ep[e]][rep]
            # equal scores: the lower position first, never the document itself
            beat = ((sc > r) | (docs < pd_e)) & outside & (docs != pd_e)
            cnt[e] += np.bincount(rep[beat], minlength=e.size)
            start = stop
        rows = np.flatnonzero(full)
        self.full_rows += rows.size
        ar = np.arange(self.n)
        for i in range(0, rows.size, max(1, _CHUNK // max(self.n, 1))):
            f = rows[i : i + max(1, _CHUNK // max(self.n, 1))]
            wrow = w[perm[eb[f]]] if perm is not None else w[None]
            sc = self.cos_rows(self.pq[ep[f]]) * wrow
            r = rv[f][:, None]
            pd_f = self.pd[ep[f]][:, None]
            beat = ((sc > r) | ((sc == r) & (ar < pd_f))) & (ar != pd_f)  # never itself
            cnt[f] = np.count_nonzero(beat, axis=1)


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
    ranks: RelevantRanks | None = None,
) -> tuple[np.ndarray, dict[str, object]]:
    """Cross-validated NDCG@10 gains (percent, vs cosine) of ``k`` permutations of ``norms``.

    Args:
        qn, dn: unit queries (nq, d) and documents (n, d). cosines: ``qn @ dn.T`` if kept, else None.
        norms: (n,) the real norms. cand_pos, cand_cos: (nq, C) the cosine top-C (-1 padded).
        alphas: the grid (with 0). qm: the judgements. fold: (nq,) fold of each query.
        ranks: a :class:`RelevantRanks` built from these arguments, to share with other controls.
    Returns:
        ``(null_gains (k,), info)``; ``info["fallback_fraction"]``: share of (permutation, α ≠ 0,
        relevant document) ranks that were counted over all documents; ``info["relative_curve"]``:
        quantiles over permutations of each α's mean NDCG@10 / cosine's (the shuffled band).
    """
    n, nq = norms.shape[0], qm.nq
    if ranks is None:
        ranks = RelevantRanks(qm, cand_pos, cand_cos, cosines, qn, dn)
    a = np.asarray(alphas, dtype=np.float64)
    i0 = int(np.flatnonzero(a == 0.0)[0])
    full_before = ranks.full_rows
    perms = permutations(n, k, seed)
    nz = np.flatnonzero(a != 0.0)
    # Columns α ≠ 0 first and α = 0 last, so that ndcg_powers writes into a view of ``ndcg``
    # (no copy); the selection is told the same order, and the band is put back in grid order.
    cols = np.r_[nz, i0]
    ndcg = np.empty((k, len(a), nq))
    ndcg[:, -1] = ranks.ndcg(np.ones(n, dtype=np.float32))[0]  # α = 0 is cosine for every permutation
    norms64 = norms.astype(np.float64)
    # Permutations in chunks bound the memory of their candidates' sources (B x P x C).
    chunk = max(1, min(k, _CHUNK // max(ranks.c_pos.size, 1)))
    for j0 in range(0, k, chunk):
        ranks.ndcg_powers(norms64, a[nz], perms[j0 : j0 + chunk], out=ndcg[j0 : j0 + chunk, : nz.size])
    held = cv_choose_many(ndcg, a[cols], fold)  # (k, nq) held-out NDCG@10 per permutation
    base = ndcg[0, -1].mean() if k else 0.0
    gains = 100.0 * (held.mean(axis=1) - base) / base if base else np.zeros(k)
    total = k * (len(a) - 1) * ranks.pq.size
    info: dict[str, object] = {"fallback_fraction": (ranks.full_rows - full_before) / total if total else 0.0}
    # Per-query NDCG@10 of every shuffle and α (columns in ``cols`` order): the depth tables read them.
    info["_null_ndcg"], info["_null_cols"] = ndcg, cols
    if k and base:  # the shuffled band: each α's mean NDCG@10 relative to cosine, over permutations
        rel_curve = (ndcg.mean(axis=2) / base)[:, np.argsort(cols)]  # grid order
        info["relative_curve"] = {
            q: [float(x) for x in quantile(rel_curve, v)]
            for q, v in (("q05", 0.05), ("median", 0.5), ("q95", 0.95), ("max", 1.0))
        }
    return gains, info
