"""The backend contract: what :class:`~normrank.store.keyed_store.KeyedStore` (the store both
framework adapters wrap) calls on the index that keeps its vectors, as ``typing.Protocol`` classes,
and :func:`check_backend`, which the store runs on any index it is handed.

:class:`IndexBackend` is the whole contract of an index holding vectors only (NormIndex, Qdrant,
Qdrant Edge, ``PgVectorNormIndex``, or your own: docs/backends.md has a 40-line numpy one).
:class:`RecordBackend` adds what an index that also keeps the documents' records needs
(``PgVectorRecordIndex``: vectors and records written in one transaction, filters run by it).

How the store calls it (so a backend knows what it may assume): keys are int64, non-negative,
never reused by the store; ``add`` gets float32 ``(n, dim)`` finite vectors of nonzero norm and
fresh keys; ``remove``, ``norm_of`` and ``reconstruct`` only keys the index holds; ``search`` one
query as a ``(1, dim)`` array and a float ``alpha`` within [-16, 16]. Ties may come in any order
(the store orders equal scores itself).
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from normrank.errors import NonConformingIndexError

__all__ = ["STORE_CALLS", "IndexBackend", "RecordBackend", "check_backend"]


@runtime_checkable
class IndexBackend(Protocol):
    """An index the store can keep its vectors in, scored by ``cos(q, d) * ||d||**alpha``.

    Members (each one the store calls; nothing else is asked of an index):
        dim: the vector dimension (a positive int; an attribute or a property).
        ``len(index)``: how many vectors it holds (a store is built over an empty index).
        ids: every key held, as an int64 array (checked against the records when a store reopens).
        add(x, ids=keys): add raw vectors ``x`` (n, dim) under int64 ``keys``; all or nothing.
        remove(keys): remove those keys; returns how many were removed.
        search(q, k, alpha=a): ``(scores, keys)``, float32 / int64 ``(nq, k)``, best first by
            ``cos(q, d) * ||d||**a``, padded with ``-inf`` / ``-1`` past what the index holds.
        norm_of(keys): the raw norms ``||d||`` of those keys, in that order.
        reconstruct(key): the raw vector of one key (float32, up to rounding).
    """

    @property
    def dim(self) -> int: ...

    @property
    def ids(self) -> np.ndarray: ...

    def __len__(self) -> int: ...

    def add(self, x: np.ndarray, ids: np.ndarray) -> Any: ...

    def remove(self, ids: np.ndarray) -> int: ...

    def search(self, q: np.ndarray, k: int, *, alpha: float) -> tuple[np.ndarray, np.ndarray]: ...

    def norm_of(self, ids: Sequence[int] | np.ndarray) -> np.ndarray: ...

    def reconstruct(self, id_: int) -> np.ndarray: ...


@runtime_checkable
class RecordBackend(IndexBackend, Protocol):
    """An :class:`IndexBackend` that keeps the records too (``keeps_records = True``): the store
    hands it every write of vectors and records as one call, and reopens from it alone.

    Members beyond :class:`IndexBackend`:
        keeps_records: ``True``.
        norms: the raw norms of every vector (whether they are all unit, on reopening).
        add_records(x, keys, ids, records, replaced): add vectors under ``keys`` with their
            string ids and JSON records, and remove the keys ``replaced``, all or nothing.
        update_records(keys, records): rewrite the records of existing keys.
        load_records(): every ``(key, id, record)`` it holds.
        stored_alpha() / store_alpha(a): the store's default alpha, kept beside the records
            (``None`` when none was kept yet).
        next_key(): a key above every key it ever held.
        search_where(q, k, alpha=a, where=w): exact top-k among the records passing the filter
            ``w`` (:data:`normrank.backends.pgvector_records.Where`), every record when ``None``.
    """

    keeps_records: bool

    @property
    def norms(self) -> np.ndarray: ...

    def add_records(
        self,
        x: np.ndarray,
        keys: np.ndarray,
        ids: Sequence[str],
        records: Sequence[dict[str, Any]],
        replaced: np.ndarray,
    ) -> None: ...

    def update_records(self, keys: Sequence[int], records: Sequence[dict[str, Any]]) -> None: ...

    def load_records(self) -> list[tuple[int, str, dict[str, Any]]]: ...

    def stored_alpha(self) -> float | None: ...

    def store_alpha(self, alpha: float) -> None: ...

    def next_key(self) -> int: ...

    def search_where(
        self, q: np.ndarray, k: int, *, alpha: float, where: Any = None
    ) -> tuple[np.ndarray, np.ndarray]: ...


def _calls() -> dict[str, list[Callable[[inspect.Signature], Any]]]:
    """Every way the store calls each method, as a bind of the method's signature."""
    x, keys, q = np.zeros((1, 1), np.float32), np.zeros(1, np.int64), np.zeros((1, 1), np.float32)
    return {
        "add": [lambda s: s.bind(x, ids=keys)],
        "remove": [lambda s: s.bind(keys)],
        "search": [lambda s: s.bind(q, 1, alpha=0.0)],
        "norm_of": [lambda s: s.bind([0])],
        "reconstruct": [lambda s: s.bind(0)],
        "add_records": [lambda s: s.bind(x, keys, ["a"], [{}], keys)],
        "update_records": [lambda s: s.bind([0], [{}])],
        "load_records": [lambda s: s.bind()],
        "stored_alpha": [lambda s: s.bind()],
        "store_alpha": [lambda s: s.bind(0.0)],
        "next_key": [lambda s: s.bind()],
        "search_where": [lambda s: s.bind(q, 1, alpha=0.0), lambda s: s.bind(q, 1, alpha=0.0, where=None)],
    }


#: How the store calls each method, written as a call (for messages and docs).
STORE_CALLS = {
    "add": "add(x, ids=keys)",
    "remove": "remove(keys)",
    "search": "search(q, k, alpha=a)",
    "norm_of": "norm_of(keys)",
    "reconstruct": "reconstruct(key)",
    "add_records": "add_records(x, keys, ids, records, replaced)",
    "update_records": "update_records(keys, records)",
    "load_records": "load_records()",
    "stored_alpha": "stored_alpha()",
    "store_alpha": "store_alpha(alpha)",
    "next_key": "next_key()",
    "search_where": "search_where(q, k, alpha=a, where=w)",
}
_METHODS = ("add", "remove", "search", "norm_of", "reconstruct")
_RECORD_METHODS = (
    "add_records",
    "update_records",
    "load_records",
    "stored_alpha",
    "store_alpha",
    "next_key",
    "search_where",
)


def _has(index: object, name: str) -> bool:
    """Whether ``index`` has ``name``, without running a property (it may query a database)."""
    try:
        inspect.getattr_static(index, name)
    except AttributeError:
        return False
    return True


def check_backend(index: object, what: str = "index") -> Any:
    """``index`` itself when it answers to :class:`IndexBackend` (and to :class:`RecordBackend`
    when its ``keeps_records`` is true); otherwise :class:`NonConformingIndexError` naming every
    member missing and every method whose signature does not take the store's call.

    Properties are not run (no database query); ``dim`` is read and must be a positive int."""
    records = bool(getattr(index, "keeps_records", False))
    members = (*_METHODS, *(_RECORD_METHODS if records else ()))
    if not records and _has(index, "search_where"):  # optional: the store ranks through it if there
        members = (*members, "search_where")
    missing = [m for m in ("dim", "ids") if not _has(index, m)]
    if not _has(type(index), "__len__"):
        missing.append("__len__")
    problems = []
    calls = _calls()
    for name in members:
        fn = getattr(index, name, None) if _has(index, name) else None
        if fn is None or not callable(fn):
            missing.append(name if fn is None else f"{name} (not callable)")
            continue
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):  # a builtin without a signature: trust it
            continue
        for bind in calls[name]:
            try:
                bind(sig)
            except TypeError:
                problems.append(f"{name}{sig} cannot take the store's call {STORE_CALLS[name]}")
                break
    if missing or problems:
        kind = "RecordBackend (it says keeps_records)" if records else "IndexBackend"
        said = ([f"missing {', '.join(missing)}"] if missing else []) + problems
        raise NonConformingIndexError(
            f"{what}={type(index).__name__} does not answer to normrank.{kind}: {'; '.join(said)} "
            "(the contract and a complete example: docs/backends.md)"
        )
    dim = getattr(index, "dim", None)
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or int(dim) < 1:
        raise NonConformingIndexError(f"{what}={type(index).__name__} has dim {dim!r}, not a positive int")
    return index
