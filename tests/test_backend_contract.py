"""The backend contract (``normrank.IndexBackend``, docs/backends.md) over every backend: NormIndex
on Flat / IVF / HNSW, Qdrant (qdrant-client's local mode), Qdrant Edge, PostgreSQL (both index
kinds, on the real server of the root conftest) and the docs' numpy backend. One scenario for all,
against numpy in float64: add with ids, search at alpha -1 / 0 / 1 and one alpha per query,
norms and vectors back, remove, k above the count (FAISS's padding), reopening where the backend
persists; then the store core over each: overwrite, delete, filtered search, save and load."""

from __future__ import annotations

import inspect
import itertools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import assert_same_topk, brute_force

import normrank
from normrank import IndexBackend, NonConformingIndexError, NormIndex, RecordBackend, check_backend
from normrank.store.keyed_store import KeyedStore

REPO = Path(__file__).resolve().parents[1]
DIM, N, NQ = 12, 150, 6
TOL = 3e-5  # float32 storage and the engines' own arithmetic (pgvector, Qdrant) against float64
_tables = itertools.count()


def docs_backend() -> type:
    """``BruteForceIndex`` as docs/backends.md defines it: its first python block, run."""
    text = (REPO / "docs" / "backends.md").read_text(encoding="utf-8")
    code = re.search(r"^```python\n(.*?)^```", text, re.S | re.M).group(1)
    namespace: dict[str, Any] = {"__name__": "docs_backends"}
    exec(compile(code, "docs/backends.md", "exec"), namespace)
    return namespace["BruteForceIndex"]


@dataclass
class Made:
    index: Any
    reopen: Callable[[], Any] | None  # closes the index and opens its storage again
    close: Callable[[], None]


def _flat(tmp: Path, request: pytest.FixtureRequest, factory: str = "Flat") -> Made:
    index = NormIndex(DIM, factory=factory)
    if factory.startswith("IVF"):
        index.train(data(0)[0])
        index.nprobe = 4  # every list: exact
    if factory.startswith("HNSW"):
        index.efSearch = 256  # wider than the collection: every document is reached
    box = {"index": index}

    def reopen() -> Any:
        box["index"].save(tmp / "saved")
        return NormIndex.load(tmp / "saved")

    return Made(index, reopen, lambda: None)


def _qdrant(tmp: Path, request: pytest.FixtureRequest) -> Made:
    qdrant_client = pytest.importorskip("qdrant_client")
    from normrank.backends.qdrant import QdrantNormIndex

    box = {"client": qdrant_client.QdrantClient(path=str(tmp / "qdrant"))}
    index = QdrantNormIndex(DIM, client=box["client"], collection="docs")

    def reopen() -> Any:
        box["client"].close()
        box["client"] = qdrant_client.QdrantClient(path=str(tmp / "qdrant"))
        return QdrantNormIndex(DIM, client=box["client"], collection="docs")

    return Made(index, reopen, lambda: box["client"].close())


def _edge(tmp: Path, request: pytest.FixtureRequest) -> Made:
    pytest.importorskip("qdrant_edge")
    from normrank.backends.qdrant_edge import QdrantEdgeNormIndex

    box = {"index": QdrantEdgeNormIndex(tmp / "shard", DIM, exact=True)}

    def reopen() -> Any:
        box["index"].close()
        box["index"] = QdrantEdgeNormIndex(tmp / "shard", exact=True)
        return box["index"]

    return Made(box["index"], reopen, lambda: box["index"].close())


def _pg(records: bool) -> Callable[[Path, pytest.FixtureRequest], Made]:
    def make(tmp: Path, request: pytest.FixtureRequest) -> Made:
        uri = request.getfixturevalue("pg_uri")  # skips where no server can start
        from normrank.backends.pgvector import PgVectorNormIndex
        from normrank.backends.pgvector_records import PgVectorRecordIndex

        kind = PgVectorRecordIndex if records else PgVectorNormIndex
        table = f"contract_{next(_tables)}"
        box = {"index": kind(uri, table, DIM, exact=True)}

        def reopen() -> Any:
            box["index"].close()
            box["index"] = kind(uri, table, DIM, exact=True)
            return box["index"]

        return Made(box["index"], reopen, lambda: box["index"].close())

    return make


def _docs(tmp: Path, request: pytest.FixtureRequest) -> Made:
    return Made(docs_backend()(DIM), None, lambda: None)


BACKENDS = {
    "normindex-flat": _flat,
    "normindex-ivf": lambda t, r: _flat(t, r, "IVF4,Flat"),
    "normindex-hnsw": lambda t, r: _flat(t, r, "HNSW16"),
    "qdrant-local": _qdrant,
    "qdrant-edge": _edge,
    "pgvector": _pg(records=False),
    "pgvector-records": _pg(records=True),
    "docs-numpy": _docs,
}


@pytest.fixture(params=sorted(BACKENDS))
def made(request: pytest.FixtureRequest, tmp_path: Path):
    got = BACKENDS[request.param](tmp_path, request)
    yield got
    got.close()


def data(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Clustered directions with log-normal norms, and queries near the clusters."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(6, DIM))
    x = centers[rng.integers(6, size=N)] + 0.8 * rng.normal(size=(N, DIM))
    x = x / np.linalg.norm(x, axis=1, keepdims=True) * rng.lognormal(0.0, 0.5, size=(N, 1))
    q = centers[rng.integers(6, size=NQ)] + rng.normal(size=(NQ, DIM))
    return x.astype(np.float32), q.astype(np.float32)


KEYS = np.arange(N, dtype=np.int64) * 7 + 3  # not positions: a backend must keep the keys given


def assert_like_numpy(index: Any, x: np.ndarray, keys: np.ndarray, q: np.ndarray, alpha, k: int) -> None:
    scores, got = index.search(q, k, alpha=alpha)
    assert scores.shape == got.shape == (len(q), k)
    assert scores.dtype == np.float32 and got.dtype == np.int64
    ref, ref_ids = brute_force(x, q, np.broadcast_to(np.asarray(alpha, np.float64), (len(q),)), keys)
    assert_same_topk(ref, ref_ids, scores, got, k, tol=TOL)


# ---------------------------------------------------------------------------------------------
# The protocol and the signatures


def test_every_backend_answers_to_the_protocol_with_the_stores_signatures(made: Made):
    index = made.index
    assert isinstance(index, IndexBackend)
    assert check_backend(index) is index
    assert isinstance(index.dim, int) and index.dim == DIM and len(index) == 0
    x, keys, q = np.zeros((1, DIM), np.float32), np.zeros(1, np.int64), np.zeros((1, DIM), np.float32)
    calls = {  # each call exactly as KeyedStore makes it
        "add": ((x,), {"ids": keys}),
        "remove": ((keys,), {}),
        "search": ((q, 1), {"alpha": 0.0}),
        "norm_of": (([0],), {}),
        "reconstruct": ((0,), {}),
    }
    if getattr(index, "keeps_records", False):
        assert isinstance(index, RecordBackend)
        calls |= {
            "add_records": ((x, keys, ["a"], [{}], keys), {}),
            "update_records": (([0], [{}]), {}),
            "load_records": ((), {}),
            "stored_alpha": ((), {}),
            "store_alpha": ((0.0,), {}),
            "next_key": ((), {}),
            "search_where": ((q, 1), {"alpha": 0.0, "where": None}),
        }
    for name, (args, kwargs) in calls.items():
        inspect.signature(getattr(index, name)).bind(*args, **kwargs)


# ---------------------------------------------------------------------------------------------
# The scenario, on the index itself


@pytest.mark.parametrize("alpha", [-1.0, 0.0, 1.0, "per-query"])
def test_search_ranks_as_numpy(made: Made, alpha):
    x, q = data(1)
    made.index.add(x, ids=KEYS)
    assert len(made.index) == N
    a = np.linspace(-1.0, 1.0, NQ) if alpha == "per-query" else alpha
    assert_like_numpy(made.index, x, KEYS, q, a, 10)
    assert_like_numpy(made.index, x, KEYS, q[:1], a if np.ndim(a) == 0 else a[:1], 10)  # the store's shape


def test_norms_vectors_and_ids_come_back(made: Made):
    x, _ = data(2)
    made.index.add(x, ids=KEYS)
    assert sorted(np.asarray(made.index.ids).tolist()) == KEYS.tolist()
    picked = KEYS[[5, 0, 77, 149]]
    np.testing.assert_allclose(
        made.index.norm_of(picked), np.linalg.norm(x[[5, 0, 77, 149]], axis=1), rtol=1e-5
    )
    for row in (0, 77, 149):
        np.testing.assert_allclose(made.index.reconstruct(int(KEYS[row])), x[row], rtol=1e-4, atol=1e-5)


def test_remove_then_k_above_the_count_pads_as_faiss(made: Made):
    x, q = data(3)
    made.index.add(x, ids=KEYS)
    gone = KEYS[::3]
    assert made.index.remove(gone) == len(gone)
    keep = ~np.isin(KEYS, gone)
    assert len(made.index) == keep.sum()
    assert sorted(np.asarray(made.index.ids).tolist()) == KEYS[keep].tolist()
    for a in (-1.0, 0.5):
        assert_like_numpy(made.index, x[keep], KEYS[keep], q, a, N + 5)  # padded with -inf / -1
        _, got = made.index.search(q, N + 5, alpha=a)
        assert not np.isin(got, gone).any()


def test_reopening_gives_the_same_index_back(made: Made):
    if made.reopen is None:
        pytest.skip("keeps its vectors in memory only: nothing to reopen")
    x, q = data(4)
    made.index.add(x, ids=KEYS)
    made.index.remove(KEYS[:10])
    before = made.index.search(q, 12, alpha=-0.5)
    again = made.reopen()
    assert len(again) == N - 10 and int(again.dim) == DIM
    assert sorted(np.asarray(again.ids).tolist()) == KEYS[10:].tolist()
    after = again.search(q, 12, alpha=-0.5)
    np.testing.assert_allclose(after[0], before[0], rtol=1e-6)
    assert_like_numpy(again, x[10:], KEYS[10:], q, -0.5, 12)


# ---------------------------------------------------------------------------------------------
# The store core over each backend


def test_the_store_core_over_each_backend_overwrites_deletes_and_filters_exactly(made: Made, tmp_path):
    x, q = data(5)
    store = KeyedStore.for_index(made.index, check_record=lambda r: None, alpha=-0.5)
    sids = [f"d{i}" for i in range(N)]
    store.add(sids, x, [{"even": i % 2 == 0} for i in range(N)])
    new = data(6)[0][:3]
    store.add(sids[:3], new, [{"even": True}] * 3)  # overwrite: same ids, new vectors
    current = x.copy()
    current[:3] = new
    assert store.delete(sids[-4:]) == 4
    alive = np.arange(N - 4)
    for a in (-1.0, 0.0, 1.0):
        ref, _ = brute_force(current[alive], q[:1], a)
        even = np.array([i % 2 == 0 or i < 3 for i in alive])
        hits = store.search(q[0], 5, alpha=a, passes=lambda s: store.records[s]["even"])
        order = np.argsort(-ref[0][even], kind="stable")[:5]
        np.testing.assert_allclose([h.score for h in hits], ref[0][even][order], rtol=TOL)
        assert [h.id for h in hits] == [sids[i] for i in alive[even][order]]
        assert len(store.search(q[0], N + 10, alpha=a)) == N - 4  # k above the count: every document
    np.testing.assert_allclose(store.vectors([sids[1]])[0], new[1], rtol=1e-4, atol=1e-5)
    expected = [h.id for h in store.search(q[0], 7)]  # before a reopen closes the index
    if getattr(made.index, "keeps_records", False):
        store.sync_records()
        again = KeyedStore.for_index(made.reopen(), check_record=lambda r: None)
    elif made.reopen is None:
        store.save(tmp_path / "store.json", {"format": "t"})
        fresh = docs_backend()(DIM)  # what a restart leaves: an empty index
        with pytest.raises(normrank.CorruptIndexError, match="different ids"):
            KeyedStore.load(
                tmp_path / "store.json", {"format": "t"}, check_record=lambda r: None, index=fresh
            )
        again = KeyedStore.load(
            tmp_path / "store.json", {"format": "t"}, check_record=lambda r: None, index=made.index
        )[0]
    else:
        store.save(tmp_path / "store.json", {"format": "t"})
        if isinstance(made.index, NormIndex):  # a NormIndex is saved in the store's folder
            again = KeyedStore.load(tmp_path / "store.json", {"format": "t"}, check_record=lambda r: None)[0]
        else:
            with pytest.raises(normrank.store.keyed_store.StoreNotFoundError, match="index="):
                KeyedStore.load(tmp_path / "store.json", {"format": "t"}, check_record=lambda r: None)
            again = KeyedStore.load(
                tmp_path / "store.json", {"format": "t"}, check_record=lambda r: None, index=made.reopen()
            )[0]
    assert again.alpha == -0.5 and set(again.records) == set(sids[: N - 4])
    assert [h.id for h in again.search(q[0], 7)] == expected


# ---------------------------------------------------------------------------------------------
# What does not conform is refused, naming what is missing


class Partial:
    """Has some of the contract, with a wrong ``search`` signature."""

    dim = DIM

    def __len__(self) -> int:
        return 0

    def add(self, x, ids):
        pass

    def search(self, q, k):  # no alpha
        pass


def test_a_non_conforming_index_is_refused_naming_each_missing_member():
    assert not isinstance(Partial(), IndexBackend)
    for attempt in (
        lambda: check_backend(Partial()),
        lambda: KeyedStore(index=Partial()),
        lambda: KeyedStore.for_index(Partial(), check_record=lambda r: None),
    ):
        with pytest.raises(NonConformingIndexError) as e:
            attempt()
        said = str(e.value)
        for name in ("ids", "remove", "norm_of", "reconstruct"):
            assert name in said
        assert "search(q, k) cannot take the store's call search(q, k, alpha=a)" in said
        assert isinstance(e.value, TypeError) and "docs/backends.md" in said


def test_a_record_index_needs_the_record_members_and_dim_must_be_an_int():
    cls = docs_backend()

    class SaysRecords(cls):
        keeps_records = True

    with pytest.raises(NonConformingIndexError, match=r"RecordBackend.*add_records.*search_where"):
        check_backend(SaysRecords(DIM))
    odd = cls(DIM)
    odd.dim = "12"
    with pytest.raises(NonConformingIndexError, match="dim '12'"):
        check_backend(odd)


def test_a_non_empty_index_points_to_loading_the_saved_store():
    index = docs_backend()(DIM)
    index.add(data(7)[0][:2], ids=[0, 1])
    with pytest.raises(normrank.InvalidParameterError, match="load_local"):
        KeyedStore.for_index(index, check_record=lambda r: None)


# ---------------------------------------------------------------------------------------------
# Each member as the store uses it (issue 46, defect 9), and nothing read outside the contract


def _variant(**members: Any) -> Any:
    """An instance of the docs' backend with ``members`` put on a subclass (and not shadowed by
    the instance's own attributes of those names)."""
    index = type("Variant", (docs_backend(),), members)(DIM)
    for name in members:
        vars(index).pop(name, None)
    return index


def _ids_method(self):
    return self._ids.copy()


MISUSED = {
    "ids is a method": ({"ids": _ids_method}, "ids is a method"),
    "dim is a method": ({"dim": lambda self: DIM}, "dim is a method"),
    "keeps_records is a method": ({"keeps_records": lambda self: True}, "keeps_records is a method"),
    "keeps_records is not a bool": ({"keeps_records": 1}, "keeps_records is 1, not a bool"),
    "alpha is a method": ({"alpha": lambda self: 0.5}, "alpha is a method"),
    "alpha is a string": ({"alpha": "0.5"}, "alpha is '0.5', not a Real"),
    "location is not a str": ({"location": 5}, "location is 5, not a str"),
    "save without load": ({"save": lambda self, path: None}, "has save but no load"),
    "load without save": ({"load": classmethod(lambda cls, path: cls(DIM))}, "has load but no save"),
    "load on the instance": (
        {"save": lambda self, path: None, "load": lambda self, path: self},
        "load is not a classmethod",
    ),
    "save takes no path": (
        {"save": lambda self: None, "load": classmethod(lambda cls, path: cls(DIM))},
        "cannot take the store's call save(path)",
    ),
}


@pytest.mark.parametrize("case", sorted(MISUSED))
def test_each_member_is_checked_as_the_store_uses_it(case):
    """Before issue 46 an ``ids`` method passed check_backend, and a store's load over it failed
    later with ``TypeError: 'method' object is not iterable``."""
    members, words = MISUSED[case]
    with pytest.raises(NonConformingIndexError) as e:
        check_backend(_variant(**members))
    assert words in str(e.value) and "docs/backends.md" in str(e.value)


def test_an_ids_method_is_refused_at_the_load_not_after_it(tmp_path):
    store = KeyedStore.for_index(docs_backend()(DIM), check_record=lambda r: None)
    store.add(["a", "b"], data(8)[0][:2], [{}, {}])
    store.save(tmp_path / "store.json", {"format": "t"})
    odd = _variant(ids=_ids_method)
    odd.add(data(8)[0][:2], ids=np.arange(2))
    with pytest.raises(NonConformingIndexError, match="ids is a method"):
        KeyedStore.load(tmp_path / "store.json", {"format": "t"}, check_record=lambda r: None, index=odd)


class Watched:
    """The docs' backend behind a log of every attribute the store reads on it."""

    def __init__(self, inner: Any, read: set[str]) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_read", read)

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("__"):
            return object.__getattribute__(self, name)
        object.__getattribute__(self, "_read").add(name)
        return getattr(object.__getattribute__(self, "_inner"), name)

    def __len__(self) -> int:
        return len(object.__getattribute__(self, "_inner"))

    # What check_backend finds by its static look-up; every read goes to the inner index.
    dim = ids = property(lambda self: None)

    def add(self, x, ids): ...

    def remove(self, ids): ...

    def search(self, q, k, *, alpha): ...

    def norm_of(self, ids): ...

    def reconstruct(self, id_): ...


CONTRACT = {"dim", "ids", "add", "remove", "search", "norm_of", "reconstruct"}
OPTIONAL = {"alpha", "keeps_records", "search_where", "location", "save", "load"}


def test_the_store_reads_nothing_outside_the_contract(tmp_path):
    """Before issue 47 a save read ``index.table`` (and a reopen ``records_table``) by getattr."""
    read: set[str] = set()
    index = Watched(docs_backend()(DIM), read)
    store = KeyedStore.for_index(index, check_record=lambda r: None)
    x, q = data(9)
    store.add([f"d{i}" for i in range(20)], x[:20], [{"i": i} for i in range(20)])
    store.add(["d0"], x[20:21], [{"i": 0}])
    store.search(q[0], 5, passes=lambda s: s != "d1")
    store.mmr(q[0], 3, fetch_k=8, lambda_mult=0.5)
    store.delete(["d2"])
    store.save(tmp_path / "store.json", {"format": "t"})
    KeyedStore.load(tmp_path / "store.json", {"format": "t"}, check_record=lambda r: None, index=index)
    assert read <= CONTRACT | OPTIONAL, read - CONTRACT - OPTIONAL
    assert {"add", "search", "norm_of", "reconstruct", "ids"} <= read  # the log sees the reads


# ---------------------------------------------------------------------------------------------
# Saving through the contract (issue 47, item 5): SavingBackend


def _saving_backend() -> type:
    base = docs_backend()

    class SavingIndex(base):
        """The docs' backend saving itself: three .npy files in the folder it is given."""

        def save(self, path) -> None:
            path = Path(path)
            path.mkdir()
            for name in ("_unit", "_norms", "_ids"):
                np.save(path / f"{name[1:]}.npy", getattr(self, name), allow_pickle=False)

        @classmethod
        def load(cls, path) -> Any:
            unit = np.load(Path(path) / "unit.npy", allow_pickle=False)
            index = cls(unit.shape[1])
            index._unit = unit
            index._norms = np.load(Path(path) / "norms.npy", allow_pickle=False)
            index._ids = np.load(Path(path) / "ids.npy", allow_pickle=False)
            return index

    return SavingIndex


def test_a_backend_that_saves_itself_is_saved_in_the_stores_folder(tmp_path):
    saving = _saving_backend()
    index = saving(DIM)
    assert isinstance(index, normrank.SavingBackend) and check_backend(index) is index
    store = KeyedStore.for_index(saving(DIM), check_record=lambda r: None, alpha=-0.5)
    x, q = data(10)
    store.add([f"d{i}" for i in range(30)], x[:30], [{} for _ in range(30)])
    store.delete(["d3"])
    path = tmp_path / "s" / "store.json"
    store.save(path, {"format": "t"})
    saved = json.loads(path.read_text())
    assert saved["index_type"] == "SavingIndex" and (path.parent / saved["index_dir"] / "ids.npy").is_file()
    with pytest.raises(normrank.store.keyed_store.StoreNotFoundError, match=r"SavingIndex\.save.*index="):
        KeyedStore.load(path, {"format": "t"}, check_record=lambda r: None)
    with pytest.raises(normrank.InvalidParameterError, match="saved by SavingIndex, not by index=NormIndex"):
        KeyedStore.load(path, {"format": "t"}, check_record=lambda r: None, index=NormIndex)
    again = KeyedStore.load(path, {"format": "t"}, check_record=lambda r: None, index=saving)[0]
    assert type(again.index) is saving and again.alpha == -0.5
    assert [h.id for h in again.search(q[0], 8)] == [h.id for h in store.search(q[0], 8)]


def test_a_backend_without_saving_is_named_at_the_load(tmp_path):
    store = KeyedStore.for_index(docs_backend()(DIM), check_record=lambda r: None)
    store.add(["a"], data(11)[0][:1], [{}])
    path = tmp_path / "store.json"
    store.save(path, {"format": "t"})
    assert json.loads(path.read_text())["index_dir"] is None
    with pytest.raises(normrank.store.keyed_store.StoreNotFoundError) as e:
        KeyedStore.load(path, {"format": "t"}, check_record=lambda r: None)
    assert "BruteForceIndex" in str(e.value) and "does not save itself" in str(e.value)
    with pytest.raises(normrank.InvalidParameterError, match="is a class"):
        KeyedStore.load(path, {"format": "t"}, check_record=lambda r: None, index=_saving_backend())


def test_store_files_saved_before_the_contract_load(tmp_path):
    """Files without ``index_type`` hold a NormIndex; ``external_index`` named a ``table``."""
    store = KeyedStore(alpha=0.5)
    store.add(["a", "b"], data(12)[0][:2], [{}, {}])
    path = tmp_path / "store.json"
    store.save(path, {"format": "t"})
    payload = json.loads(path.read_text())
    del payload["index_type"]
    path.write_text(json.dumps(payload))
    again = KeyedStore.load(path, {"format": "t"}, check_record=lambda r: None)[0]
    assert isinstance(again.index, NormIndex) and set(again.records) == {"a", "b"}
    path.write_text(
        json.dumps(
            {**payload, "index_dir": None, "external_index": {"type": "PgVectorNormIndex", "table": "docs"}}
        )
    )
    with pytest.raises(
        normrank.store.keyed_store.StoreNotFoundError, match="PgVectorNormIndex \\(table 'docs'\\)"
    ):
        KeyedStore.load(path, {"format": "t"}, check_record=lambda r: None)
