"""int8 codes of the first rows of a weight order: what lets a single query's scan read 1 byte a
dimension instead of 4 and still return exactly what reading the rows would.

A single query's weight-order scan mostly proves that nothing in the rows it reads beats the k-th
score (on real MiniLM embeddings, almost no row does). Proving that from int8 codes reads a
quarter of the bytes. The codes are FAISS's own: a ``ScalarQuantizer`` of type
``QT_8bit_direct_signed``, whose distance computer multiplies integer codes by an integer query
(FAISS truncates the query to integers; we round it first), an exact integer inner product with
SIMD. Each chunk of :data:`CHUNK` rows has its own scale ``s`` (``127 / max |x|`` over the
chunk), the query its own ``S``; with ``x^ = round(s x) / s`` and ``q^ = round(S q) / S``:

    |q . x - q^ . x^| <= ||q|| ||x - x^|| + ||q - q^|| ||x^||

(the chunk's largest ``||x - x^||`` and ``||x^||`` are kept; ~0.024 of cosine on 384-d unit vectors)

so the rows whose codes' product, plus that bound, cannot reach the k-th score divided by the
chunk's largest weight are out; the rest (the contenders) are scored exactly from their rows,
by the same FAISS kernel as without codes. FAISS's scanner keeps them in a heap seeded at the
threshold (``InvertedListScanner.scan_codes``): more than :data:`CONTENDERS` in a chunk and the
chunk is read exactly instead. Results are bit for bit those of the scan without codes.

Bytes: ``d`` a row for at most :data:`~normrank.settings.SCAN_CODES_BYTES` (split between
the signs of alpha by their norm tails) whatever the index size, plus three floats a chunk.
"""

from __future__ import annotations

import math
import threading

import faiss
import numpy as np

from normrank.validation import mapped_empty

__all__ = ["CHUNK", "CONTENDERS", "MIN_ROWS", "BytePool", "QueryCodes", "ScanCodes"]

# Rows sharing one scale and one threshold (the chunk's first, largest weight): small enough
# that weights barely change within one, large enough that a FAISS call per chunk (~2 us) is
# small beside its scan (13-50 ns a 384-d row; 1,024 or 2,048 measured no faster at 100k).
CHUNK = 512
# Contenders a chunk's heap holds; past it the chunk is scored exactly.
CONTENDERS = 32
# A block of the scan shorter than this is read as rows: making a query's codes (10-30 us) costs
# about what the codes save on fewer rows (8.4k / 27k real MiniLM, HNSW32, interleaved: 0 to
# 40 us a query better than codes from the first row or from 2,048).
MIN_ROWS = 1024

_QT = faiss.ScalarQuantizer.QT_8bit_direct_signed
# FAISS's scanners have no destructor Python can call, so they are never dropped: each query
# takes one (with its heap) from a pool per dimension and gives it back, so that there are as
# many as queries ever ran at once, a few hundred bytes each.
_POOLS: dict[int, tuple[faiss.ScalarQuantizer, list]] = {}
_POOLS_LOCK = threading.Lock()


def _take(d: int):
    """A FAISS scanner for ``d`` dimensions and its heap (values, offsets, their pointers)."""
    with _POOLS_LOCK:
        got = _POOLS.get(d)
        if got is None:
            got = _POOLS[d] = (faiss.ScalarQuantizer(d, _QT), [])
        sq, free = got
        if free:
            return free.pop()
    scanner = sq.select_InvertedListScanner(faiss.METRIC_INNER_PRODUCT, None, True, None, False)
    scanner.set_list(0, 0.0)  # labels are offsets in the scanned block
    top = np.empty(CONTENDERS, dtype=np.float32)
    at = np.empty(CONTENDERS, dtype=np.int64)
    return scanner, top, at, faiss.swig_ptr(top), faiss.swig_ptr(at)


def _give_back(d: int, buffers) -> None:
    with _POOLS_LOCK:
        _POOLS[d][1].append(buffers)


class QueryCodes:
    """One unit query made ready for the codes: ``round(S q)`` set on a FAISS scanner of its
    own (from a pool: :meth:`close` gives it back), the rounding's size, and the heap a chunk's
    contenders land in."""

    __slots__ = (
        "_at_ptr",
        "_buffers",
        "_top_ptr",
        "at",
        "d",
        "ints",
        "miss",
        "norm",
        "scale",
        "scanner",
        "top",
    )

    def __init__(self, q: np.ndarray) -> None:
        q64 = q.astype(np.float64)
        peak = max(float(q64.max()), -float(q64.min()))
        self.d = q.size
        self.scale = 127.0 / peak if peak > 0 else 1.0
        ints = np.rint(q64 * self.scale)
        self.ints = ints.astype(np.float32)  # kept alive: FAISS reads it while setting the query
        self.norm = math.sqrt(float(q64 @ q64))
        q64 -= ints / self.scale
        self.miss = math.sqrt(float(q64 @ q64))  # ||q - round(S q) / S||
        self._buffers = _take(self.d)
        self.scanner, self.top, self.at, self._top_ptr, self._at_ptr = self._buffers
        self.scanner.set_query(faiss.swig_ptr(self.ints))

    def close(self) -> None:
        """Give the scanner back to the pool (the query is done with the codes)."""
        if self._buffers is not None:
            _give_back(self.d, self._buffers)
            self._buffers = None

    def scan(self, codes_ptr, m: int, seed: float) -> int:
        """FAISS's scan of ``m`` codes from ``codes_ptr``, contenders above ``seed`` into
        ``at`` (offsets, -1 for none); returns how many entered (more than the heap: lost)."""
        self.top.fill(seed)
        self.at.fill(-1)
        return self.scanner.scan_codes(m, codes_ptr, None, self._top_ptr, self._at_ptr, CONTENDERS)


class BytePool:
    """Bytes a growing cache draws from (a weight order's scan codes or prefix copy); several
    caches may share one. Taken as they grow, never given back (a changed index gets a new
    cache). Shared by both signs of alpha, first come first served, it starved alpha > 0 after
    alpha < 0 had filled it (27k HNSW ef 512, one query: 1.72-1.92x plain -> 2.23-2.41x): the
    search cache gives each sign its own share."""

    def __init__(self, total: int) -> None:
        self.total = max(int(total), 0)
        self.left = self.total

    def take(self, want: int) -> int:
        """Up to ``want`` bytes (what is left, if less); the bytes granted."""
        got = max(0, min(int(want), self.left))
        self.left -= got
        return got


class ScanCodes:
    """int8 codes of the first rows of one weight order, grown chunk by chunk (doubling) as far
    as single-query scans read, within what ``budget`` (bytes, or a :class:`BytePool` shared
    with the other sign's codes) grants."""

    def __init__(self, d: int, n: int, budget: int | BytePool) -> None:
        self.d = d
        self._pool = budget if isinstance(budget, BytePool) else BytePool(budget)
        # rows reserved (address space only: written, so resident, as far as they are encoded)
        self.cap = min(n, (self._pool.total // max(d, 1)) // CHUNK * CHUNK)
        self.rows = 0  # rows encoded so far
        self._codes: np.ndarray | None = None
        self._addr = 0
        # Per chunk: the scale s, the largest ||x - round(s x) / s|| and ||round(s x) / s|| (None:
        # a chunk holding a non-finite value, read as rows).
        self._chunks: list[tuple[float, float, float] | None] = []
        # An integer product beyond float32's 2**24 may come back rounded: widen by that.
        self._int_slop = math.ceil(d * 127 * 127 / 2**24)
        self._sq = faiss.ScalarQuantizer(d, _QT)

    def grow(self, hi: int, read) -> int:
        """Encode rows (``read(lo, hi) -> float32 (m, d)``, in weight order) towards ``hi``, whole
        chunks, at least doubling; returns how many rows have codes."""
        if hi <= self.rows or self.rows >= self.cap:
            return self.rows
        target = min(self.cap, max(hi, 2 * self.rows, 2 * CHUNK))
        target = min(self.cap, -(-target // CHUNK) * CHUNK)
        affordable = self._pool.left // self.d  # whole chunks of what the pool has left
        if target - self.rows > affordable:
            target = self.rows + affordable // CHUNK * CHUNK
        if target <= self.rows:
            return self.rows
        self._pool.take((target - self.rows) * self.d)
        if self._codes is None:
            self._codes = mapped_empty((self.cap, self.d), min_bytes=1 << 16, dtype=np.uint8)
            self._addr = self._codes.ctypes.data
        for c in range(self.rows // CHUNK, -(-target // CHUNK)):
            lo, hi_c = c * CHUNK, min(target, (c + 1) * CHUNK)
            x = np.asarray(read(lo, hi_c), dtype=np.float64)
            peak = float(np.abs(x).max()) if x.size else 0.0
            if not math.isfinite(peak):  # a non-finite stored row: this chunk is read as rows
                self._chunks.append(None)
                continue
            s = 127.0 / peak if peak > 0 else 1.0
            ints = np.rint(x * s)
            miss = math.sqrt(float(((x - ints / s) ** 2).sum(axis=1).max()))
            self._chunks.append((s, miss, math.sqrt(float((ints**2).sum(axis=1).max())) / s))
            # (integers in [-127, 127]: FAISS's encoding, 128 + x truncated, keeps them exactly)
            self._codes[lo:hi_c] = self._sq.compute_codes(ints.astype(np.float32))
        self.rows = target
        return self.rows

    def contenders(self, query: QueryCodes, lo: int, hi: int, need: float) -> np.ndarray | None:
        """Ranks in ``[lo, hi)`` (within one chunk, encoded) whose ``q . x`` may exceed ``need``
        (a superset of those whose computed score does); None when there are more than
        :data:`CONTENDERS` (read the chunk exactly)."""
        if not math.isfinite(need):
            return None
        chunk = self._chunks[lo // CHUNK]
        if chunk is None:
            return None
        s, miss, norm = chunk
        # |q.x - q^.x^| <= ||q|| ||x - x^|| + ||q - q^|| ||x^||, plus room for float32 rounding of
        # the exact score (d u ||q|| ||x||), of its product with the weight and of the threshold.
        bound = query.norm * miss + query.miss * norm
        bound += 1e-6 * abs(need) + self.d * 2.0**-22 * query.norm * (norm + miss) + 1e-7
        seed = math.floor((need - bound) * query.scale * s) - 1 - self._int_slop
        if seed >= 2**24 and not self._int_slop:  # past any product of int8 codes
            return _NONE
        if not -(2**24) < seed < 2**24:  # beyond float32's exact integers: read exactly
            return None
        hits = query.scan(faiss.cast_integer_to_uint8_ptr(self._addr + lo * self.d), hi - lo, float(seed))
        if hits > CONTENDERS:
            return None
        if not hits:
            return _NONE
        at = query.at
        return lo + np.sort(at[at >= 0])

    @property
    def nbytes(self) -> int:
        return self.rows * self.d + 24 * len(self._chunks)


_NONE = np.empty(0, dtype=np.int64)
