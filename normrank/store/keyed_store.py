"""The document-store core both framework adapters wrap (LangChain, LlamaIndex).

A :class:`KeyedStore` maps the frameworks' string ids to int64 keys of one
:class:`~normrank.NormIndex` and keeps one JSON record per id (text, metadata, whatever the
adapter needs). It owns what the adapters would otherwise each re-implement: overwrite-by-id,
the filtered widening search (exact filtered top-k), MMR, unit-norm detection, alpha checked by
the index's own rule, and an atomic, pickle-free save whose load trusts nothing it reads.
"""

from __future__ import annotations

import numbers
import shutil
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from normrank.errors import (
    CorruptIndexError,
    DimensionMismatchError,
    DuplicateIdError,
    IndexStateError,
    InvalidInputError,
    InvalidParameterError,
    MissingDependencyError,
)
from normrank.scoring import norm_weight
from normrank.search.mmr import maximal_marginal_relevance
from normrank.store import files as store_files
from normrank.store.checks import check_alpha, check_json_value, refuse_untrained_factory
from normrank.store.contract import (
    IndexBackend,
    SavingBackend,
    check_backend,
    keeps_records,
    location_of,
    saves_itself,
)
from normrank.store.files import StoreNotFoundError
from normrank.unit_norms import all_unit, warn_unit_norms
from normrank.validation import as_k, as_vectors

__all__ = [
    "MAX_STORE_KEY",
    "Hit",
    "KeyedStore",
    "StoreBacked",
    "StoreNotFoundError",
    "encode_texts",
    "load_normrank_encoder",
]

#: Keys stay far below int64 overflow whatever a store file claims.
MAX_STORE_KEY = 2**62


def load_normrank_encoder(name_or_path: str) -> Any:
    """``normrank.encoders.load_encoder(name_or_path)``, imported lazily (it pulls in torch)."""
    try:
        from normrank.encoders import load_encoder
    except ImportError as e:
        raise MissingDependencyError(
            "normrank's encoders need the model extras: pip install 'normrank[models]'"
        ) from e
    return load_encoder(name_or_path)


def encode_texts(encoder: Any, texts: Sequence[str], batch_size: int) -> list[list[float]]:
    """Raw float32 embeddings of ``texts`` as lists, the form both frameworks pass around."""
    if not texts:
        return []
    out = np.asarray(encoder.encode(list(texts), batch_size=batch_size), dtype=np.float32)
    return out.reshape(len(texts), -1).tolist()


class StoreBacked:
    """Mixin for an adapter keeping its documents in a :class:`KeyedStore` at ``self._store``."""

    def __len__(self) -> int:
        return len(self._store)  # type: ignore[attr-defined]

    def __bool__(self) -> bool:
        # An empty store is still a store: frameworks test ``if vector_store:`` for presence.
        return True


@dataclass(frozen=True)
class Hit:
    """One search result: the string id, the norm-weighted score and its cosine component."""

    id: str
    score: float
    cosine: float


class KeyedStore:
    """String ids and JSON records over one :class:`~normrank.NormIndex`.

    Args:
        alpha: default exponent (checked like ``NormIndex.search``'s: finite, within +-16).
        factory: FAISS factory string of the index, built at the first add (it needs the dim).
        dim: the embedding dimension, or ``None`` to take it from the first add.
        alpha_name: what the adapter calls alpha, for messages (LlamaIndex: ``norm_alpha``).
        raw_hint: how to get raw embeddings in that framework, for the unit-norm warning.
        index: an empty index to keep the vectors in, instead of the NormIndex built at the first
            add: anything answering to :class:`normrank.store.contract.IndexBackend` (checked
            here: :class:`~normrank.errors.NonConformingIndexError` names what is missing), such
            as :class:`normrank.backends.pgvector.PgVectorNormIndex` or Qdrant's backends.
            :meth:`save` writes it into the store's folder where it saves itself
            (:class:`~normrank.store.contract.SavingBackend`, as NormIndex), else the records
            only, and :meth:`load` takes the same index back (``index=``). An index that
            keeps the records itself (``keeps_records``, such as
            :class:`normrank.backends.pgvector_records.PgVectorRecordIndex`) gets every write of
            vectors and records as one call (one transaction); :meth:`from_index` reopens it.

    Adding an existing id replaces it. All methods hold one lock (the frameworks' async
    variants run the sync ones in threads).
    """

    def __init__(
        self,
        *,
        alpha: float = 0.0,
        factory: str = "Flat",
        dim: int | None = None,
        alpha_name: str = "alpha",
        raw_hint: str = "",
        index: IndexBackend | None = None,
    ) -> None:
        if not isinstance(factory, str):
            raise InvalidParameterError(f"factory must be a FAISS factory string, got {factory!r}")
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or dim < 1):
            raise InvalidParameterError(f"dim must be a positive integer, got {dim!r}")
        self.alpha_name = alpha_name
        self.alpha = check_alpha(alpha, alpha_name)
        self.factory = factory
        self.dim = None if dim is None else int(dim)
        self.raw_hint = raw_hint
        self.index: Any = None  # normrank.NormIndex, created at the first add
        if index is not None:  # keys are numbered from 0: an index holding rows would clash
            check_backend(index)
            if len(index) or (dim is not None and int(index.dim) != int(dim)):
                reopen = (
                    (
                        " (reopen a store kept in it with KeyedStore.from_index)"
                        if keeps_records(index)
                        else " (a store whose vectors it holds reopens from its saved records: "
                        "KeyedStore.load(..., index=), the adapters' load_local / from_persist_dir "
                        "with index=)"
                    )
                    if len(index)
                    else ""
                )
                raise InvalidParameterError(f"index= must be empty and of dim {dim}, got {index!r}{reopen}")
            self.index, self.dim = index, int(index.dim)
        self.records: dict[str, dict[str, Any]] = {}
        self._key_of: dict[str, int] = {}
        self._id_of: dict[int, str] = {}
        self.next_key = 0
        self.all_unit_so_far = True
        self._warned_unit = False
        self.lock = threading.RLock()

    def __len__(self) -> int:
        return len(self.records)

    def __contains__(self, sid: object) -> bool:
        return sid in self.records

    # ------------------------------------------------------------------ writing
    def add(self, ids: Sequence[str], vectors: Any, records: Sequence[dict[str, Any]]) -> None:
        """Add raw ``vectors`` (n, dim) under string ``ids`` with their JSON ``records``.

        Everything is checked before anything changes: a rejected call leaves the store as it was.
        """
        n = len(ids)
        if len(records) != n:
            raise InvalidInputError(f"{n} ids but {len(records)} records")
        if n == 0:
            return
        if len(set(ids)) != n:
            raise DuplicateIdError("ids repeat within one add call")
        for i, rec in enumerate(records):
            check_json_value(rec, f"document {ids[i]!r}")
        arr = np.asarray(vectors) if not isinstance(vectors, np.ndarray) else vectors
        if arr.ndim != 2 or arr.shape[0] != n:
            raise InvalidInputError(
                f"expected ({n}, dim) embeddings, got shape {getattr(arr, 'shape', None)}"
            )
        with self.lock:
            if self.dim is not None and arr.shape[1] != self.dim:
                raise DimensionMismatchError(
                    f"embeddings have dim {arr.shape[1]}, the store has dim {self.dim}"
                )
            arr = as_vectors(arr, arr.shape[1], what="embeddings")
            if self.next_key + n > MAX_STORE_KEY:
                raise InvalidInputError(
                    "the store has used every key it can give; rebuild it from its documents"
                )
            if self.index is None:
                from normrank.index.norm_index import NormIndex

                # the adapters refuse it when made; here for a dim they could not know then
                refuse_untrained_factory(self.factory, arr.shape[1], "the adapter's from_index(index)")
                self.index = NormIndex(arr.shape[1], alpha=self.alpha, factory=self.factory)
                self.dim = arr.shape[1]
            keys = np.arange(self.next_key, self.next_key + n, dtype=np.int64)
            replaced = [self._key_of[s] for s in ids if s in self._key_of]
            if self.keeps_records:  # vectors, overwrites and records: one transaction
                self.index.add_records(arr, keys, list(ids), list(records), np.asarray(replaced, np.int64))
                self.next_key += n
            else:
                self.index.add(arr, ids=keys)  # first: if the index refuses the batch, nothing changed
                self.next_key += n
                if replaced:
                    self.index.remove(np.asarray(replaced, dtype=np.int64))
            for key in replaced:
                del self._id_of[key]
            for sid, key, rec in zip(ids, keys.tolist(), records, strict=True):
                self.records[sid] = rec
                self._key_of[sid] = key
                self._id_of[key] = sid
            self.all_unit_so_far = self.all_unit_so_far and all_unit(self.index.norm_of(keys))
            if self.all_unit_so_far and not self._warned_unit:
                self._warned_unit = True
                warn_unit_norms(self.alpha_name, self.raw_hint, stacklevel=5)

    @property
    def keeps_records(self) -> bool:
        """Whether the index keeps the records too (in the same database as the vectors)."""
        return keeps_records(self.index)

    @classmethod
    def from_index(
        cls,
        index: Any,
        *,
        check_record: Callable[[dict[str, Any]], None],
        alpha: float | None = None,
        alpha_name: str = "alpha",
        raw_hint: str = "",
    ) -> KeyedStore:
        """The store kept by an index that keeps the records (``keeps_records``), with every
        record it holds: the vectors and records are read back, not a file. A record the adapter
        cannot use (``check_record`` raises) or a vector without a record raises
        :class:`CorruptIndexError`; an empty store comes back only from an empty table.

        ``alpha=None`` takes the alpha the database keeps (``index.stored_alpha()``: the one the
        store was created with, or last saved with); a given alpha applies to this object only,
        until :meth:`save`. A store created here keeps its alpha in the database at once."""
        if not keeps_records(index):
            raise InvalidParameterError(
                f"from_index needs an index that keeps the records (keeps_records), got {index!r}"
            )
        check_backend(index)
        stored = index.stored_alpha()
        if alpha is not None:
            alpha = check_alpha(alpha, alpha_name)
        store = cls(
            alpha=(stored or 0.0) if alpha is None else alpha, alpha_name=alpha_name, raw_hint=raw_hint
        )
        if stored is None:
            index.store_alpha(store.alpha)
        rows = index.load_records()
        where = " ".join(filter(None, (type(index).__name__, location_of(index))))
        for key, sid, rec in rows:
            if not isinstance(rec, dict):
                raise CorruptIndexError(f"{where}: the record of {sid!r} is not an object")
            store._take(sid, key, rec, check_record, where)
        if len(index) != len(rows):  # the index was written meanwhile: read it again
            raise CorruptIndexError(f"{where}: {len(rows)} records but {len(index)} vectors")
        store.index, store.dim = index, int(index.dim)
        store.next_key = int(index.next_key())
        if rows:
            store.all_unit_so_far = store._warned_unit = all_unit(index.norms)
        return store

    @classmethod
    def for_index(
        cls,
        index: IndexBackend,
        *,
        check_record: Callable[[dict[str, Any]], None],
        alpha: float | None = None,
        alpha_name: str = "alpha",
        raw_hint: str = "",
    ) -> KeyedStore:
        """The store over any conforming ``index`` (:func:`~normrank.store.contract.check_backend`),
        what the adapters' ``from_index`` return: an index that keeps the records is reopened with
        every record it holds (:meth:`from_index`); any other must be empty (its vectors' records
        would be in a saved store: :meth:`load` with ``index=``). ``alpha=None`` takes the alpha
        the index keeps (``stored_alpha()``) or has (its ``alpha`` attribute), else 0."""
        check_backend(index)
        if keeps_records(index):
            return cls.from_index(
                index, check_record=check_record, alpha=alpha, alpha_name=alpha_name, raw_hint=raw_hint
            )
        if alpha is None:  # the contract's optional alpha
            alpha = getattr(index, "alpha", 0.0)
        return cls(
            alpha=check_alpha(alpha, alpha_name), alpha_name=alpha_name, raw_hint=raw_hint, index=index
        )

    def _take(
        self,
        sid: str,
        key: int,
        rec: dict[str, Any],
        check_record: Callable[[dict[str, Any]], None],
        where: str,
    ) -> None:
        """Keep one record read back (a file or the index), checked: JSON values and what the
        adapter needs, else :class:`CorruptIndexError` naming ``where``."""
        try:
            check_json_value(rec, f"record {sid!r}")
            check_record(rec)
        except Exception as e:  # whatever the adapter finds unusable
            raise CorruptIndexError(f"{where}: record {sid!r} cannot be used: {e}") from e
        self.records[sid] = rec
        self._key_of[sid] = key
        self._id_of[key] = sid

    def sync_records(self) -> None:
        """Write records edited in place (LangChain's docstore) and the store's alpha back to an
        index that keeps them; :meth:`save` calls it. Nothing to do for other indexes."""
        with self.lock:
            if not self.keeps_records:
                return
            for sid, rec in self.records.items():
                check_json_value(rec, f"document {sid!r}")
            self.index.update_records([self._key_of[s] for s in self.records], list(self.records.values()))
            self.index.store_alpha(self.alpha)  # saved with the records, as a store folder keeps it

    def delete(self, ids: Iterable[str]) -> int:
        """Delete the ids that exist; returns how many were deleted."""
        with self.lock:
            sids = [s for s in dict.fromkeys(ids) if s in self.records]
            if sids:
                self.index.remove(np.asarray([self._key_of[s] for s in sids], dtype=np.int64))
                for sid in sids:
                    del self._id_of[self._key_of.pop(sid)]
                    del self.records[sid]
            return len(sids)

    # ------------------------------------------------------------------ searching
    def _query(self, vector: Any) -> np.ndarray:
        """One query vector as the index takes it: a ``(1, dim)`` array (the contract's shape)."""
        q = np.asarray(vector)
        if q.ndim != 1 or q.size == 0:
            raise InvalidInputError(f"the query embedding must be one non-empty vector, got shape {q.shape}")
        if self.dim is not None and q.shape[0] != self.dim:
            raise DimensionMismatchError(f"query has dim {q.shape[0]}, the store has dim {self.dim}")
        return q.reshape(1, -1)

    def search(
        self,
        vector: Any,
        k: int,
        *,
        alpha: float | None = None,
        passes: Callable[[str], bool] | None = None,
        fetch_k: int | None = None,
        where: Any = None,
    ) -> list[Hit]:
        """Top-``k`` ids by cos·‖d‖^α among those for which ``passes(id)`` holds, best first.

        ``where`` is a filter the index runs itself (an index with ``search_where``, such as
        ``PgVectorRecordIndex``: a :data:`normrank.backends.pgvector_records.Where` tree, ranked
        exactly in SQL); it cannot be combined with ``passes``. On such an index the widening
        search below ranks exactly too (``search_where`` without a filter), whatever its ``exact``.

        With a filter the exact search widens (from ``fetch_k``, default ``max(4k, 64)``, four
        times each round) until ``k`` ids pass or every document was scored, so the filtered
        top-k is exactly the top-k of the filtered set. Equal scores come in insertion order
        (FAISS's flat indexes' rule; an overwritten id counts as inserted when it was overwritten):
        the search also widens until the k-th score is not tied with the last one fetched.
        """
        k = as_k(k, 1)
        a = self.alpha if alpha is None else check_alpha(alpha, self.alpha_name)
        first = max(4 * k, 64) if fetch_k is None else max(as_k(fetch_k, 1), k)
        q = self._query(vector)
        if where is not None and passes is not None:
            raise InvalidParameterError("give where= (run by the index) or passes=, not both")
        with self.lock:
            n = len(self.records)
            if n == 0:
                return []
            by_sql = getattr(self.index, "search_where", None)
            if where is not None:
                if by_sql is None:
                    raise InvalidParameterError(
                        f"where= needs an index that filters itself, not {self.index!r}"
                    )
                return self._hits_of(*by_sql(q, k, alpha=a, where=where), a)
            want = min(n, k + 1 if passes is None else first)  # one more: is the k-th score tied?
            while True:
                if passes is not None and by_sql is not None:  # exact widening on any such index
                    scores, keys = by_sql(q, want, alpha=a)
                else:
                    scores, keys = self.index.search(q, want, alpha=a)
                valid = [
                    (key, s) for key, s in zip(keys[0].tolist(), scores[0].tolist(), strict=True) if key >= 0
                ]
                self._check_known([key for key, _ in valid])
                found = [
                    (self._id_of[key], key, s)
                    for key, s in valid
                    if passes is None or passes(self._id_of[key])
                ]
                # a tie of the k-th score with the last one fetched may hide older equal documents
                if want >= n or (len(found) >= k and found[k - 1][2] != valid[-1][1]):
                    break
                want = min(n, max(want * 4, k + 1))
            found = sorted(found, key=lambda f: (-f[2], f[1]))[:k]  # ties: lower key (older) first
            if not found:
                return []
            weights = norm_weight(self.index.norm_of([key for _, key, _ in found]), a).astype(np.float64)
        return [
            Hit(sid, float(s), float(s) / w) for (sid, _, s), w in zip(found, weights.tolist(), strict=True)
        ]

    def _check_known(self, keys: list[int]) -> None:
        unknown = [key for key in keys if key not in self._id_of]
        if unknown:
            raise IndexStateError(
                f"the index holds keys this store does not know ({unknown[:5]}): another client wrote "
                "to it; reopen the store"
            )

    def _hits_of(self, scores: np.ndarray, keys: np.ndarray, a: float) -> list[Hit]:
        """Hits of one ``search_where`` result row (best first, padding dropped)."""
        found = [
            (int(key), float(s))
            for key, s in zip(keys[0].tolist(), scores[0].tolist(), strict=True)
            if key >= 0
        ]
        self._check_known([key for key, _ in found])
        if not found:
            return []
        weights = norm_weight(self.index.norm_of([key for key, _ in found]), a).astype(np.float64)
        return [Hit(self._id_of[key], s, s / w) for (key, s), w in zip(found, weights.tolist(), strict=True)]

    def vectors(self, ids: Sequence[str]) -> np.ndarray:
        """Raw vectors of ``ids`` (n, dim), float32."""
        with self.lock:
            if not ids:
                return np.zeros((0, self.dim or 0), np.float32)
            return np.stack([self.index.reconstruct(self._key_of[s]) for s in ids])

    def mmr(
        self,
        vector: Any,
        k: int,
        *,
        fetch_k: int,
        lambda_mult: float,
        alpha: float | None = None,
        passes: Callable[[str], bool] | None = None,
        where: Any = None,
    ) -> list[Hit]:
        """Maximal marginal relevance over the ``fetch_k`` best passing ids by cos·‖d‖^α
        (:mod:`normrank.search.mmr`: that score as relevance, cosine between documents as redundancy)."""
        k = as_k(k, 1)
        lam = float(lambda_mult)
        if not 0.0 <= lam <= 1.0:
            raise InvalidParameterError(f"lambda_mult must lie in [0, 1], got {lambda_mult!r}")
        with self.lock:
            hits = self.search(vector, max(as_k(fetch_k, 1), k), alpha=alpha, passes=passes, where=where)
            if not hits:
                return []
            vecs = self.vectors([h.id for h in hits])
        chosen = maximal_marginal_relevance(np.asarray([h.score for h in hits]), vecs, lam, k)
        return [hits[i] for i in chosen]

    # ------------------------------------------------------------------ persistence
    def save(self, json_path: Path, header: Mapping[str, Any]) -> None:
        """Write the records to ``json_path`` and the index beside it, atomically (no pickle).

        ``header`` holds the adapter's format name and version and anything else it keeps. A
        failed save removes what it created; the previous save stays the committed one.
        """
        with self.lock:  # records may have been edited in place since add (LangChain's docstore)
            for sid, rec in self.records.items():
                check_json_value(rec, f"document {sid!r}")
            self.sync_records()
        folder = json_path.parent
        created = store_files.make_folder(folder)
        name = None
        try:
            with self.lock:
                if self.index is not None and saves_itself(self.index):
                    name = store_files.new_index_dirname(json_path)
                    self.index.save(folder / name)
                payload = {
                    **header,
                    "alpha": self.alpha,
                    "factory": self.factory,
                    "dim": self.dim,
                    "index_dir": name,
                    "index_type": None if name is None else type(self.index).__name__,  # its load
                    # Where the vectors live when not in index_dir (a database table): load names
                    # it instead of reporting a folder that seems to have lost them.
                    "external_index": None
                    if name is not None or self.index is None
                    else {"type": type(self.index).__name__, "location": location_of(self.index)},
                    "next_key": self.next_key,
                    "all_unit_so_far": self.all_unit_so_far,
                    "records": [
                        {"id": s, "key": self._key_of[s], "record": r} for s, r in self.records.items()
                    ],
                }
                store_files.write_json_atomic(json_path, payload)
        except BaseException:
            if name is not None:
                shutil.rmtree(folder / name, ignore_errors=True)
            store_files.remove_empty_folders(created)
            raise
        store_files.remove_stale_index_dirs(json_path, keep=name)

    @classmethod
    def load(
        cls,
        json_path: Path,
        header: Mapping[str, Any],
        *,
        check_record: Callable[[dict[str, Any]], None],
        alpha: float | None = None,
        alpha_name: str = "alpha",
        raw_hint: str = "",
        index: IndexBackend | type[SavingBackend] | None = None,
    ) -> tuple[KeyedStore, dict[str, Any]]:
        """Read a :meth:`save`; every claim of the file is checked, or :class:`CorruptIndexError`.

        ``header`` must match the file's; ``check_record`` raises (anything) for a record the
        adapter cannot use. ``index``: the index holding the vectors of a store saved without
        them, or the :class:`~normrank.store.contract.SavingBackend` class that saved them into
        the folder where it is not NormIndex. Returns the store and the whole payload (the
        adapter's own keys).
        """
        if not json_path.parent.is_dir():
            raise StoreNotFoundError(
                f"{json_path.parent} does not exist (or is not a folder): nothing was saved there"
            )
        if not json_path.is_file():
            raise StoreNotFoundError(f"{json_path} not found: nothing was saved there")
        payload = store_files.read_json(json_path)
        where = f"{json_path}"
        for key, value in header.items():
            if payload.get(key) != value or type(payload.get(key)) is not type(value):
                raise CorruptIndexError(f"{where}: {key} is {payload.get(key)!r}, expected {value!r}")
        required = ("alpha", "factory", "dim", "index_dir", "next_key", "all_unit_so_far", "records")
        missing = [k for k in required if k not in payload]
        if missing:
            raise CorruptIndexError(f"{where}: missing {', '.join(missing)}")
        try:
            saved_alpha = check_alpha(payload["alpha"], alpha_name)
        except InvalidParameterError as e:
            raise CorruptIndexError(f"{where}: saved alpha is impossible ({e})") from e
        next_key, records = payload["next_key"], payload["records"]
        if type(next_key) is not int or not 0 <= next_key <= MAX_STORE_KEY:
            raise CorruptIndexError(f"{where}: next_key must be an integer in [0, 2**62], got {next_key!r}")
        if not isinstance(payload["all_unit_so_far"], bool) or not isinstance(records, list):
            raise CorruptIndexError(f"{where}: malformed all_unit_so_far or records")
        try:
            store = cls(
                alpha=saved_alpha if alpha is None else alpha,
                factory=payload["factory"],
                dim=payload["dim"],
                alpha_name=alpha_name,
                raw_hint=raw_hint,
            )
        except InvalidParameterError as e:
            if alpha is not None:
                raise
            raise CorruptIndexError(f"{where}: {e}") from e
        for i, entry in enumerate(records):
            if not isinstance(entry, dict) or set(entry) != {"id", "key", "record"}:
                raise CorruptIndexError(f"{where}: record {i} is malformed")
            sid, key, rec = entry["id"], entry["key"], entry["record"]
            if (
                not isinstance(sid, str)
                or type(key) is not int
                or not 0 <= key < next_key
                or not isinstance(rec, dict)
            ):
                raise CorruptIndexError(
                    f"{where}: record {i} has a bad id, key (must be below next_key) or body"
                )
            if sid in store.records or key in store._id_of:
                raise CorruptIndexError(f"{where}: id {sid!r} or key {key} appears twice")
            store._take(sid, key, rec, check_record, where)
        store.next_key = next_key
        store.all_unit_so_far = store._warned_unit = payload["all_unit_so_far"]
        if index is not None and not isinstance(index, type):  # the vectors live in that index
            check_backend(index)
            if store.dim is not None and store.dim != int(index.dim):
                raise CorruptIndexError(f"{where}: dim {store.dim!r} but index= has dim {index.dim}")
            store.index, store.dim = index, int(index.dim)
        elif payload["index_dir"] is not None:
            index_dir = store_files.checked_index_dir(json_path, payload["index_dir"])
            if not index_dir.is_dir():
                raise CorruptIndexError(f"{where}: its index folder {index_dir.name} is missing")
            store.index = check_backend(store_files.saving_class(where, payload, index).load(index_dir))
            if store.dim != int(store.index.dim):
                raise CorruptIndexError(f"{where}: dim {store.dim!r} but the index has dim {store.index.dim}")
        elif index is not None:
            raise InvalidParameterError(
                f"{where}: index={index.__name__} is a class, but this store's vectors were not saved "
                "in its folder: pass the index that holds them"
            )
        elif isinstance(external := payload.get("external_index"), dict):
            raise StoreNotFoundError(
                f"{where}: this store keeps its vectors in {store_files.external_index(external)}, "
                "not in this folder (it does not save itself: "
                "normrank.SavingBackend): pass that index to the load (KeyedStore.load(..., index=); "
                "the adapters: load_local(..., index=) in LangChain, from_persist_dir(..., index=) "
                "in LlamaIndex; a store kept in PostgreSQL with its records: from_postgres(connection, "
                "table, ...))"
            )
        have = set() if store.index is None else set(np.asarray(store.index.ids).tolist())
        if have != set(store._id_of):
            raise CorruptIndexError(f"{where}: the records and the index hold different ids")
        return store, payload
