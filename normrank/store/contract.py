"""The backend contract: what :class:`~normrank.store.keyed_store.KeyedStore` (the store both
framework adapters wrap) calls on the index that keeps its vectors, as ``typing.Protocol`` classes,
and :func:`check_backend`, which the store runs on any index it is handed.

:class:`IndexBackend` is the whole contract of an index holding vectors only (NormIndex, Qdrant,
Qdrant Edge, ``PgVectorNormIndex``, or your own: docs/backends.md has a 40-line numpy one).
:class:`RecordBackend` adds what an index that also keeps the documents' records needs
(``PgVectorRecordIndex``: vectors and records written in one transaction, filters run by it).
:class:`SavingBackend` adds what an index that the store saves into its own folder needs
(``NormIndex``): ``save(path)`` and, on its class, ``load(path)``.

How the store calls it (so a backend knows what it may assume): keys are int64, non-negative,
never reused by the store; ``add`` gets float32 ``(n, dim)`` finite vectors of nonzero norm and
fresh keys; ``remove``, ``norm_of`` and ``reconstruct`` only keys the index holds; ``search`` one
query as a ``(1, dim)`` array and a float ``alpha`` within [-16, 16]. Ties may come in any order
(the store orders equal scores itself).

Optional members, used only where an index has them (each checked by :func:`check_backend` as
the store uses it, and nothing else is read):
    alpha: a number, the index's default alpha: a store made over it with ``alpha=None`` takes it.
    keeps_records: a bool; ``True`` makes the index a :class:`RecordBackend`.
    search_where: as :class:`RecordBackend`'s; the store ranks (and filters) through it if there.
    location: a str saying where the index keeps its vectors (``"table 'docs'"``): a store saved
        over it writes it in its file, so that loading without the index can name it.
    save / load: :class:`SavingBackend` (both or neither).
"""

from __future__ import annotations

import functools
import inspect
import numbers
import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from normrank.errors import NonConformingIndexError

__all__ = [
    "STORE_CALLS",
    "IndexBackend",
    "RecordBackend",
    "SavingBackend",
    "check_backend",
    "keeps_records",
    "loads_saved",
    "location_of",
    "saves_itself",
]


@runtime_checkable
class IndexBackend(Protocol):
    """An index the store can keep its vectors in, scored by ``cos(q, d) * ||d||**alpha``.

    Members (each one the store calls; nothing else is asked of an index; the optional ones are
    in the module's docstring):
        dim: the vector dimension (a positive int; an attribute or a property, not a method).
        ``len(index)``: how many vectors it holds (a store is built over an empty index).
        ids: every key held, as an int64 array (an attribute or a property, not a method; checked
            against the records when a store reopens).
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
        keeps_records: ``True`` (a bool attribute or property).
        norms: the raw norms of every vector (an attribute or a property; whether they are all
            unit, on reopening).
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


@runtime_checkable
class SavingBackend(IndexBackend, Protocol):
    """An :class:`IndexBackend` the store saves into its own folder (``NormIndex``): the store's
    ``save`` calls ``index.save(path)`` (a new folder inside the store's) and its ``load`` calls
    ``type(index).load(path)``, which returns the index. A store's load takes NormIndex's folders
    by itself; another class is handed to it as ``index=`` (the class, not an instance).

    An index without both keeps its vectors where it keeps them (a database, a shard folder, the
    process's memory): a saved store writes its records only and names the index's type (and its
    ``location``), and its load needs the index back (``index=``) or says so.

    Members beyond :class:`IndexBackend`:
        save(path): write the index into the new folder ``path``, all or nothing.
        load(path): a classmethod (or staticmethod): the index saved at ``path``.
    """

    def save(self, path: str | os.PathLike[str]) -> Any: ...

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SavingBackend: ...


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
        "save": [lambda s: s.bind("path")],
        "load": [lambda s: s.bind("path")],
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
    "save": "save(path)",
    "load": "type(index).load(path)",
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


def _kind(owner: object, name: str) -> str:
    """How ``owner`` holds ``name``, found without running a property (it may query a database):
    ``"missing"``, ``"method"`` (a function, bound, class- or static), ``"property"`` (computed
    when read) or ``"value"``."""
    try:
        raw = inspect.getattr_static(owner, name)
    except AttributeError:
        return "missing"
    if isinstance(raw, property | functools.cached_property) or hasattr(type(raw), "__set__"):
        return "property"
    if (
        isinstance(raw, staticmethod | classmethod)
        or inspect.isfunction(raw)
        or inspect.ismethoddescriptor(raw)
    ):
        return "method"
    return "method" if callable(raw) else "value"


def keeps_records(index: Any) -> bool:
    """Whether ``index`` says it keeps the records (``keeps_records``, a bool; absent: no)."""
    return _kind(index, "keeps_records") in ("value", "property") and index.keeps_records is True


def saves_itself(index: object) -> bool:
    """Whether the store saves ``index`` into its own folder (:class:`SavingBackend`: ``save``
    on it and ``load`` on its class; :func:`check_backend` refuses one without the other)."""
    return _kind(index, "save") != "missing" and _kind(type(index), "load") != "missing"


def loads_saved(cls: type) -> bool:
    """Whether class ``cls`` can load a folder its instances saved (``load``, a class- or
    staticmethod, taking the path; ``save`` beside it): the class handed to a store's load."""
    load = inspect.getattr_static(cls, "load", None)
    return (
        _kind(cls, "save") == "method"
        and isinstance(load, classmethod | staticmethod)
        and _bind_problem(cls.load, "load") is None
    )


def location_of(index: object) -> str | None:
    """Where ``index`` keeps its vectors, for people: its ``location`` (a str), or None."""
    location = index.location if _kind(index, "location") in ("value", "property") else None
    return location if isinstance(location, str) else None


def _bind_problem(fn: Callable[..., Any], name: str) -> str | None:
    """Why the store's calls of ``name`` cannot bind to ``fn``'s signature, or None."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: trust it
        return None
    for bind in _calls()[name]:
        try:
            bind(sig)
        except TypeError:
            return f"{name}{sig} cannot take the store's call {STORE_CALLS[name]}"
    return None


def _value_problems(index: object, records: bool) -> tuple[list[str], list[str]]:
    """Missing members and problems of the members the store reads as values."""
    missing, problems = [], []
    optional = {"alpha": numbers.Real, "keeps_records": bool, "location": str}
    for name in ("dim", "ids", *(("norms",) if records else ()), *optional):
        kind = _kind(index, name)
        if kind == "missing":
            if name not in optional:
                missing.append(name)
        elif kind == "method":
            problems.append(
                f"{name} is a method, but the store reads index.{name} as a value: make it an "
                "attribute or a property"
            )
        elif name in optional and kind == "value":  # a property is not run here
            value = getattr(index, name)
            if not isinstance(value, optional[name]) or (name == "alpha" and isinstance(value, bool)):
                problems.append(f"{name} is {value!r}, not a {optional[name].__name__}")
    return missing, problems


def _saving_problems(index: Any) -> list[str]:
    """Problems of the :class:`SavingBackend` pair, where an index has either member."""
    has_save, load_kind = _kind(index, "save"), _kind(type(index), "load")
    if has_save == "missing" and load_kind == "missing":
        return []
    if has_save == "missing" or load_kind == "missing":
        have, lack = ("save", "load on its class") if load_kind == "missing" else ("load", "save")
        return [
            f"it has {have} but no {lack}: the store saves an index with index.save(path) and "
            "reads it back with type(index).load(path) (normrank.SavingBackend): give both, or "
            "neither to keep the vectors where the index keeps them"
        ]
    problems = []
    save = index.save
    if not callable(save):
        problems.append("save (not callable)")
    elif said := _bind_problem(save, "save"):
        problems.append(said)
    if not isinstance(inspect.getattr_static(type(index), "load"), classmethod | staticmethod):
        problems.append(
            "load is not a classmethod (or staticmethod), but the store calls it on the class: "
            "type(index).load(path)"
        )
    elif said := _bind_problem(type(index).load, "load"):
        problems.append(said)
    return problems


def check_backend(index: object, what: str = "index") -> Any:
    """``index`` itself when it answers to :class:`IndexBackend` (and to :class:`RecordBackend`
    when its ``keeps_records`` is true, to :class:`SavingBackend` when it has ``save`` or
    ``load``); otherwise :class:`NonConformingIndexError` naming every member missing, every
    method whose signature does not take the store's call, every member held as a method that
    the store reads as a value (``ids``...) and every optional member of the wrong kind.

    Properties are not run (no database query), except ``keeps_records`` and ``dim``, which must
    be a bool and a positive int."""
    records = keeps_records(index)
    members = (*_METHODS, *(_RECORD_METHODS if records else ()))
    if not records and _kind(index, "search_where") != "missing":  # optional: ranked through if there
        members = (*members, "search_where")
    missing, problems = _value_problems(index, records)
    if _kind(type(index), "__len__") == "missing":
        missing.append("__len__")
    for name in members:
        fn = getattr(index, name, None) if _kind(index, name) != "missing" else None
        if fn is None or not callable(fn):
            missing.append(name if fn is None else f"{name} (not callable)")
        elif said := _bind_problem(fn, name):
            problems.append(said)
    problems += _saving_problems(index)
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
