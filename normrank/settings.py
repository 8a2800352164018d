"""Settings and defaults in one place: every module and command reads them from here.

A leaf module (standard library only), so that anything may import it without a loop.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "CACHE_ENV",
    "CACHE_FRACTION",
    "CACHE_SPLIT",
    "CV_METRIC",
    "DEFAULT_ALPHAS",
    "DEFAULT_BETAS",
    "DEFAULT_FOLDS",
    "DEFAULT_GAMMAS",
    "DEFAULT_METRICS",
    "DEFAULT_PERMUTATIONS",
    "DEFAULT_SEED",
    "FLAT_BATCH_MAX_WORK",
    "FLAT_BATCH_MIN_PROBED",
    "FLAT_BATCH_MIN_QUERIES",
    "FLAT_BATCH_ROWS_PER_EF",
    "FLOAT_ROWS_MIN_CACHE_BYTES",
    "LOSSY_OVERFETCH_DEPTH_SCALE",
    "LOSSY_OVERFETCH_MAX_BOOST",
    "LOSSY_OVERFETCH_MIN_PROBED",
    "PG_CLIENT_CACHE_BYTES",
    "PROGRESS_LINE_FRACTION",
    "PROGRESS_LINE_MIN_SECONDS",
    "PROGRESS_LINE_SECONDS",
    "SCAN_CODES_BYTES",
    "SCAN_PREFIX_BYTES",
    "SEARCH_CACHE_BYTES",
    "SWEEP_BLOCK_FLOATS",
    "WEIGHT_CACHE_ENTRIES",
    "cache_root",
]

# --- where things are kept -------------------------------------------------------------------
CACHE_ENV = "NORMRANK_CACHE"


def cache_root() -> Path:
    """``$NORMRANK_CACHE`` or ``~/.cache/normrank`` (embeddings, unpacked models, downloaded data)."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "normrank"


# --- progress of long steps ---------------------------------------------------------------------
# Where stderr is not a terminal (a file, a CI log, nohup, tee), a long step prints a plain line
# (done/total, elapsed, remaining; normrank.progress.PlainProgress) every PROGRESS_LINE_SECONDS or
# each PROGRESS_LINE_FRACTION of its total, whichever comes first, but never two within
# PROGRESS_LINE_MIN_SECONDS (a step of a few seconds prints a few lines, not ten). Read when a
# display is made, so they can be set at run time. On a terminal rich's bar is drawn instead.
PROGRESS_LINE_SECONDS = 15.0
PROGRESS_LINE_FRACTION = 0.10
PROGRESS_LINE_MIN_SECONDS = 1.0

# --- the index ---------------------------------------------------------------------------------
# The search caches of an index (the weights of alphas besides the one in use, the scan's prefix
# copy and int8 codes) get at most this fraction of the bytes FAISS itself holds for the index
# (normrank.search.faiss_info.index_bytes), each part still capped by its absolute cap below.
# Why 0.05: the memory goal is normrank's whole excess over FAISS <= max(32 B/doc, 10% of
# FAISS's bytes); the per-document tables (ids, bases, weight order: ~12-26 B/doc measured)
# take part of it, and at HNSW32,SQ8 (~660 B/doc) 10% leaves ~45 B/doc for the caches. At
# IVF-PQ48 (~56 B/doc) the budget (2.8 B/doc) holds no weights (4 B/doc an alpha): the scan reads
# them lazily, its candidates' and scanned ranks' only (SearchCache.ann_weights).
# Split by CACHE_SPLIT (normrank.search.cache.cache_budget); all of it to the weights where the
# index is flat (no scan). math.inf: the absolute caps only; 0: every cache off. Read at each
# index state's first search, so it can be set at run time.
CACHE_FRACTION = 0.05
# (weights, prefix copy, scan codes): the shares of an index's cache budget. The codes (a quarter
# of a row's bytes: 4x the rows per byte) are what single queries read first, and a single
# query's scan past them reads rows where FAISS keeps them at ~0.4 us a row (IVF-Flat); the
# weights of one alpha are 4 bytes a document (read lazily where they do not fit their share).
# From a quarter / quarter / half to an eighth / quarter / five eighths, with the floor below at
# 12 MiB: single queries in three quiet runs each (speed.py, 2-core AMD EPYC; 4a1f1d5 -> 168785f,
# which also has this round's other changes): real 27k HNSW32 ef 512, alpha 0.5 / 1: 1.72 / 1.92x
# plain -> 1.58 / 1.63x; IVF656 nprobe 492, alpha 1: 1.72 -> 1.47x; generated 100k IVF1264 nprobe
# 316, alpha 0.5 / 1: 4.09 / 4.60 -> 3.23 / 3.21x (its deepest tenth of queries read 31-35k rows:
# past the codes whatever the split within the memory goal).
CACHE_SPLIT = (0.125, 0.25, 0.625)
# ... but at least this many bytes where FAISS keeps float32 rows (HNSW over flat storage,
# IVF-Flat): there the scan codes and prefix copy are what single queries read first, and 5% of
# a small index starves them (20k x 384 HNSW32 ef 64, alpha in +-0.5, +-1, one query: 2.4-3.4x
# plain with the caps, 3.1-7.2x at 5% (1.7 MiB), 2.7-3.7x with this floor; quiet 2-core AMD EPYC,
# benchmarks/single_query_floor.py; 12 MiB, CACHE_SPLIT above). From ~140-160k such documents
# (384-d) 5% is more; below, the floor is at most 126 B a document at 100k, within the memory
# goal (excess <= 10% of FAISS's ~1,550-1,810 B a document, with ~20-30 B of per-document
# tables: benchmarks/results/memory.md). Not for SQ / PQ codes: a user who chose them for memory
# gets the fraction alone. 0: no floor.
FLOAT_ROWS_MIN_CACHE_BYTES = 12 << 20
# Per-α weights w**α kept per index (normrank.search.cache.SearchCache): a few α are typical per
# application, and each entry costs one float per document; at most this many entries, and at
# most SEARCH_CACHE_BYTES for all of them (the one in use is always kept).
WEIGHT_CACHE_ENTRIES = 8
SEARCH_CACHE_BYTES = 64 << 20
# The ANN weight-order scan keeps its first rows (the ones every query of a sign of α reads) as one
# contiguous float32 copy, up to this many bytes in all, whatever the index size, split between the
# signs of α by their norm tails (SearchCache.sign_share: a quarter to three quarters each):
# 384-d, ~10.9k rows in all, ~5.5k a sign at equal tails (the whole scan of a single query up to
# ~20k documents; at 1M documents 17 bytes a document, at 10M 1.7). Rows past it are read where
# FAISS keeps them, at ~1.8x the cost a row (8.4k real MiniLM, HNSW32: 4 -> 16 MiB took 10-20% off a single query at
# alpha != 0). Read at each index state's first scan, so it can be set at run time
# (``normrank.settings.SCAN_PREFIX_BYTES = 0`` turns it off: rows read in place only).
SCAN_PREFIX_BYTES = 16 << 20
# A single query's scan reads its first rows as int8 codes (normrank.search.scan_codes: a quarter
# of the bytes, the same results): up to this many bytes of codes in all (split as the copy), d
# bytes a row: 384-d, ~87k rows in all, ~65k to α > 0 for MiniLM-like norms (100k MiniLM-like
# vectors, IVF1264 nprobe 316, alpha = 1: a tenth of the queries scan 35k-48k rows; past the
# codes they read rows at ~0.4 us each). Written only as far as scans read; read at each index
# state's first scan (0: none).
SCAN_CODES_BYTES = 32 << 20
# The client-side band of the PostgreSQL backend (normrank.backends.pgvector_band.ClientCopy):
# all it holds of a table (ids, weight bases, weight order, weights per alpha, vectors copied)
# stays within this many bytes whatever the table size. Vectors that do not fit are read from
# the server per search; a table whose per-row arrays alone (20 B a row and an id lookup of up to
# 16: ~1.8M rows at 64 MiB; normrank.backends.pgvector_band.client_reserve) do not fit is searched
# with the band scored in SQL. Read at each copy's (re-)read (0: always the SQL band).
PG_CLIENT_CACHE_BYTES = 64 << 20

# A batch on a small HNSW over float32 storage (no removed documents) runs the exact flat product
# over FAISS's storage instead of candidates + scan (normrank.search.plan.plan_search, method
# "flat", exact over the whole collection) when it has at least FLAT_BATCH_MIN_QUERIES queries
# (FAISS's own flat search turns to BLAS at 20), at most FLAT_BATCH_ROWS_PER_EF stored rows per
# unit of efSearch (the product costs n d a query, the beam about efSearch d) and at most
# FLAT_BATCH_MAX_WORK multiply-adds a query (n d: 50k x 384, the largest measured). Measured by
# benchmarks/small_flat.py (ratios in plan_search's docstring). Read at each search;
# FLAT_BATCH_ROWS_PER_EF = 0 turns it off.
FLAT_BATCH_MIN_QUERIES = 20
FLAT_BATCH_ROWS_PER_EF = 320
FLAT_BATCH_MAX_WORK = 50_000 * 384
# The same product for a batch on an IVF-Flat (float32 codes in its lists, read list by list in
# place; no removed document still stored), with the same FLAT_BATCH_MIN_QUERIES and no size
# cap (generated 100k, IVF1264 nprobe 316, nq 100: 0.56-0.63x plain against the scan's 1.12-1.40x),
# where the search probes at least FLAT_BATCH_MIN_PROBED of the lists
# (nprobe / nlist): the IVF then reads that share of the collection per query anyway, a vector at
# a time, where the product reads it all through BLAS. Measured by benchmarks/small_flat.py
# (nq 100, ratios to plain IVF in the same interleaved rounds, product / scan, load 5-7.5 on the 2
# shared cores): real 8.4k MiniLM, IVF366: nprobe 45 (0.12) 1.99-2.37 / 1.68-2.55 (mixed),
# 61 (0.17) 1.56-1.87 / 1.72-2.68, 91 (0.25) 1.15-1.30 / 1.41-2.06, 183 (0.5) 0.55-0.78 /
# 1.42-1.55; generated 20k, IVF565: 70 (0.12) 1.39-1.68 / 1.40-1.94, 94 (0.17) 1.03-1.30 /
# 1.25-1.80, 141 (0.25) 0.47-0.86 / 1.05-1.49. 0, or a value above 1, turns it off.
FLAT_BATCH_MIN_PROBED = 0.15
# On lossy codes (PQ, additive quantizers; not SQ, not a refine stage over raw vectors) the
# default ann="adaptive" re-scores k * k_factor * LOSSY_OVERFETCH_DEPTH_SCALE candidates instead
# of scanning where alpha's weights lift a document at most LOSSY_OVERFETCH_MAX_BOOST times over
# the median (the 95th percentile weight at alpha > 0, the 5th at alpha < 0: the norm spread the
# index holds, raised to |alpha|). The codes cap recall for every method that reads them, and
# there the over-fetch reached the scan's recall for a fraction of its time (IVF1264,PQ48, 100k
# MiniLM-like vectors, norms p5 / p50 / p95 1.85 / 2.35 / 6.28: K' 500 recall 0.644-0.668 at
# 1.06-1.21x plain, the scan 0.644-0.666 at 2.7-23x; at alpha = +1, boost 2.7, K' 4096 reached
# 0.484 against the scan's 0.600: docs/frontier.md). 0 turns it off (ann="scan" per index).
LOSSY_OVERFETCH_MAX_BOOST = 2.0
LOSSY_OVERFETCH_DEPTH_SCALE = 5
# ... and, on an IVF, only where it probes at least this share of its lists: a narrow probe misses
# neighbours in the lists it skips, which the over-fetch cannot return and the scan (reading in
# weight order over every list) does. IVF4096,PQ48 over 1M clustered vectors at nprobe 32 (0.8%
# of the lists; plain cosine recall 0.12): the over-fetch 0.05-0.09 weighted recall, the scan
# 0.76-0.88 at about the same time (1.6x plain: benchmarks/results/scale_1m.md); at an eighth of
# the lists (100k, above) the two reached the same recall. 0: the over-fetch at any breadth.
LOSSY_OVERFETCH_MIN_PROBED = 0.1

# --- the sweep -----------------------------------------------------------------------------------
DEFAULT_ALPHAS = "-2:1:0.25"  # the paper's Fig. 4 range, 13 values with 0 (cosine)
DEFAULT_METRICS = "ndcg@10,recall@100,mrr@10"
CV_METRIC = "ndcg@10"  # the metric α is selected on (cross-validation, oracle best α)
DEFAULT_FOLDS = 5
DEFAULT_SEED = 0
# Length-prior exponent grid (score = cos * len**β): step 0.05 resolves β ≈ 0.1.
DEFAULT_BETAS = "-0.5:0.5:0.05"
# Calibration exponent grid (score = cos * ||q||**-γ [* ||d||**-γ], the paper's eq. 4.20).
DEFAULT_GAMMAS = "-3:3:0.1"
# Random permutations of the norms for the null: 99 gives p-values in steps of 0.01.
DEFAULT_PERMUTATIONS = 99
SWEEP_BLOCK_FLOATS = 1 << 22  # cosine block (queries x docs) kept near 16 MB
