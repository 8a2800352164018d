"""Reading FAISS index bytes from an untrusted file without unbounded allocation.

FAISS's reader trusts the length fields inside the file. Before deserialising we check the
top-level header against the manifest, and while deserialising we cap every vector FAISS
allocates at the size of the file itself (a vector cannot hold more bytes than the file), so a
header that claims billions of vectors fails fast instead of allocating them.

One structure is not in the file and may outgrow it: the table FAISS precomputes on reading an
IVF-PQ (``nlist · M · ksub`` floats, often larger than the codes). We read with that step skipped
and let FAISS precompute only once the quantizer is known to rank by inner product, for which
FAISS builds no table at all; an IVF-PQ over any other quantizer is refused (NormIndex needs inner
product at every level), so no file can make the reader allocate more than its own size.
"""

from __future__ import annotations

import struct
import threading

import faiss
import numpy as np

from normrank.errors import CorruptIndexError, MissingDependencyError
from normrank.search.faiss_info import levels

__all__ = ["read_faiss_index"]

_HEADER = struct.Struct("<4s i q")  # fourcc, d, ntotal: the start of every FAISS index header
_limits_lock = threading.Lock()  # the limits are process-global in FAISS


def read_faiss_index(data: bytes, *, dim: int, count: int) -> faiss.Index:
    """Deserialise ``data``, refusing anything that is not an inner-product index of
    dimension ``dim`` holding ``count`` vectors. Raises :class:`CorruptIndexError`."""
    if len(data) < _HEADER.size:
        raise CorruptIndexError("index.faiss is too short to be a FAISS index")
    fourcc, d, ntotal = _HEADER.unpack_from(data)
    if not fourcc.isascii() or not fourcc.isalnum():
        raise CorruptIndexError(f"index.faiss does not start with a FAISS index tag ({fourcc!r})")
    if d != dim or ntotal != count:
        raise CorruptIndexError(
            f"index.faiss holds {ntotal} vectors of dimension {d}; "
            f"the manifest says {count} of dimension {dim}"
        )
    if not hasattr(faiss, "set_deserialization_vector_byte_limit"):
        # Older FAISS trusts every length field in the file and validates no HNSW graph.
        raise MissingDependencyError(
            f"faiss {faiss.__version__} cannot read untrusted index files safely: "
            "pip install 'faiss-cpu>=1.15'"
        )
    reader = faiss.VectorIOReader()
    faiss.copy_array_to_vector(np.frombuffer(data, dtype=np.uint8), reader.data)
    with _limits_lock:
        old_bytes = faiss.get_deserialization_vector_byte_limit()
        old_loops = faiss.get_deserialization_loop_limit()
        try:
            faiss.set_deserialization_vector_byte_limit(len(data))
            faiss.set_deserialization_loop_limit(max(1 << 16, len(data)))
            index = faiss.read_index(reader, faiss.IO_FLAG_SKIP_PRECOMPUTE_TABLE)
        except (RuntimeError, MemoryError, ValueError) as e:
            raise _corrupt(e) from e
        finally:
            faiss.set_deserialization_vector_byte_limit(old_bytes)
            faiss.set_deserialization_loop_limit(old_loops)
    del reader  # a copy of the file: not needed beside the index
    if index.d != dim or index.ntotal != count:
        raise CorruptIndexError("index.faiss does not match the manifest's dimension and count")
    if index.metric_type != faiss.METRIC_INNER_PRODUCT:
        raise CorruptIndexError("index.faiss is not an inner-product index")
    _precompute_ivfpq_tables(index)
    return index


def _precompute_ivfpq_tables(index: faiss.Index) -> None:
    """What FAISS's reader skipped: each IVF-PQ's precomputed table, which FAISS builds only for a
    quantizer that is not inner product (and then of ``nlist · M · ksub`` floats, unbounded by the
    file's size). Such a quantizer is refused first, so nothing is allocated here."""
    for level in levels(index):
        if not isinstance(level, faiss.IndexIVFPQ):
            continue
        if level.quantizer.metric_type != faiss.METRIC_INNER_PRODUCT:
            raise CorruptIndexError(
                f"index.faiss: an {type(level).__name__} whose quantizer does not use inner product "
                f"(metric {level.quantizer.metric_type}); NormIndex needs inner product at every level"
            )
        try:
            level.precompute_table()  # as FAISS's reader would have: for inner product, no table
        except RuntimeError as e:
            raise _corrupt(e) from e


def _corrupt(e: BaseException) -> CorruptIndexError:
    first = str(e).splitlines()[0] if str(e) else type(e).__name__
    return CorruptIndexError(f"index.faiss is corrupt or truncated: {first[-300:]}")
