"""Reading FAISS index bytes from an untrusted file without unbounded allocation.

FAISS's reader trusts the length fields inside the file. Before deserialising we check the
top-level header against the manifest, and while deserialising we cap every vector FAISS
allocates at the size of the file itself (a vector cannot hold more bytes than the file), so a
header that claims billions of vectors fails fast instead of allocating them.
"""

from __future__ import annotations

import struct
import threading

import faiss
import numpy as np

from normrank.errors import CorruptIndexError, MissingDependencyError

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
    buf = np.frombuffer(data, dtype=np.uint8)
    with _limits_lock:
        old_bytes = faiss.get_deserialization_vector_byte_limit()
        old_loops = faiss.get_deserialization_loop_limit()
        try:
            faiss.set_deserialization_vector_byte_limit(len(data))
            faiss.set_deserialization_loop_limit(max(1 << 16, len(data)))
            index = faiss.deserialize_index(buf)
        except (RuntimeError, MemoryError, ValueError) as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise CorruptIndexError(f"index.faiss is corrupt or truncated: {first[-300:]}") from e
        finally:
            faiss.set_deserialization_vector_byte_limit(old_bytes)
            faiss.set_deserialization_loop_limit(old_loops)
    if index.d != dim or index.ntotal != count:
        raise CorruptIndexError("index.faiss does not match the manifest's dimension and count")
    if index.metric_type != faiss.METRIC_INNER_PRODUCT:
        raise CorruptIndexError("index.faiss is not an inner-product index")
    return index
