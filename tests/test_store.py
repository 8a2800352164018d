"""normrank.store.keyed_store.KeyedStore (the core under both adapters) against numpy, and its store file
against tampering: everything the file claims is checked at load, or CorruptIndexError."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import numpy as np
import pytest

from normrank.errors import CorruptIndexError, NormrankError
from normrank.store.checks import UnstorableMetadataError
from normrank.store.keyed_store import KeyedStore, StoreNotFoundError

N, DIM = 200, 8
HEADER = {"format": "test-store", "version": 1}


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(N, DIM)) * np.exp(rng.normal(0, 0.7, size=(N, 1)))
    return x.astype(np.float32), rng.normal(size=DIM).astype(np.float32)


def filled(data, alpha: float = 0.0) -> KeyedStore:
    store = KeyedStore(alpha=alpha)
    store.add([f"d{i}" for i in range(N)], data[0], [{"i": i, "odd": i % 2} for i in range(N)])
    return store


def brute(data, alpha: float, allowed=None, k: int = 10):
    x, q = data[0].astype(np.float64), data[1].astype(np.float64)
    norms = np.linalg.norm(x, axis=1)
    cos = (x @ q) / (norms * np.linalg.norm(q))
    s = cos * norms**alpha
    if allowed is not None:
        s = np.where(allowed, s, -np.inf)
    order = np.argsort(-s, kind="stable")[:k]
    return [f"d{i}" for i in order], s[order], cos[order]


@pytest.mark.parametrize("alpha", [-1.0, 0.0, 0.5])
def test_search_scores_and_cosines_equal_numpy(data, alpha):
    hits = filled(data, alpha).search(data[1], 10)
    ids, scores, cos = brute(data, alpha)
    assert [h.id for h in hits] == ids
    np.testing.assert_allclose([h.score for h in hits], scores, rtol=1e-5)
    np.testing.assert_allclose([h.cosine for h in hits], cos, rtol=1e-4, atol=1e-6)


def test_filtered_search_is_exact_whatever_fetch_k(data):
    store = filled(data, -1.0)
    rare = np.arange(N) % 37 == 0  # 6 documents
    for fetch_k in (None, 1, 10, 500):
        hits = store.search(data[1], 5, passes=lambda s: int(s[1:]) % 37 == 0, fetch_k=fetch_k)
        assert [h.id for h in hits] == brute(data, -1.0, rare, k=5)[0]


def test_overwrite_and_delete_keep_ids_and_index_in_step(data):
    store = filled(data)
    store.add(["d0"], data[0][1:2], [{"i": 1}])
    assert len(store) == N and len(store.index) == N
    assert {h.id for h in store.search(data[0][1], 2)} == {"d0", "d1"}
    assert store.delete(["d0", "d1", "missing", "d1"]) == 2
    assert len(store) == len(store.index) == N - 2


def test_rejected_add_changes_nothing(data):
    store = filled(data)
    with pytest.raises(UnstorableMetadataError):
        store.add(["new"], data[0][:1], [{"when": datetime.date(2020, 1, 1)}])
    with pytest.raises(NormrankError):  # a zero vector, refused by the index
        store.add(["new"], np.zeros((1, DIM)), [{}])
    assert len(store) == N and "new" not in store and len(store.index) == N


# ---------------------------------------------------------------------------- persistence
def _saved(tmp_path: Path, data) -> Path:
    path = tmp_path / "s" / "store.json"
    filled(data, -0.5).save(path, HEADER)
    return path


def _load(path: Path) -> KeyedStore:
    return KeyedStore.load(path, HEADER, check_record=lambda r: None)[0]


def test_round_trip(tmp_path, data):
    path = _saved(tmp_path, data)
    loaded = _load(path)
    assert loaded.alpha == -0.5 and len(loaded) == N
    assert [h.id for h in loaded.search(data[1], 10)] == brute(data, -0.5)[0]
    loaded.add(["more"], data[0][:1], [{}])  # keys continue after the saved ones
    assert len(loaded) == N + 1


def _tamper(path: Path, edit) -> None:
    payload = json.loads(path.read_text())
    edit(payload)
    path.write_text(json.dumps(payload))


def _deep(levels: int) -> dict:
    out: dict = {}
    cur = out
    for _ in range(levels):
        cur["x"] = {}
        cur = cur["x"]
    return out


TAMPERS = {
    "alpha 1e308": lambda p: p.update(alpha=1e308),
    "alpha -17": lambda p: p.update(alpha=-17),
    "alpha string": lambda p: p.update(alpha="0"),
    "index_dir missing": lambda p: p.pop("index_dir"),
    "index_dir outside": lambda p: p.update(index_dir="/etc"),
    "next_key 0": lambda p: p.update(next_key=0),
    "next_key 2**70": lambda p: p.update(next_key=2**70),
    "next_key float": lambda p: p.update(next_key=300.0),
    "key repeated": lambda p: p["records"][1].update(key=p["records"][0]["key"]),
    "id repeated": lambda p: p["records"][1].update(id=p["records"][0]["id"]),
    "record dropped": lambda p: p["records"].pop(),
    "metadata 700 deep": lambda p: p["records"][0].update(record=_deep(700)),
    "dim wrong": lambda p: p.update(dim=DIM + 1),
    "format": lambda p: p.update(format="other"),
    "version as string": lambda p: p.update(version="1"),
}


@pytest.mark.parametrize("case", sorted(TAMPERS))
def test_every_claim_is_checked_at_load(tmp_path, data, case):
    path = _saved(tmp_path, data)
    _tamper(path, TAMPERS[case])
    with pytest.raises(CorruptIndexError):
        _load(path)


def test_next_key_1e400_and_missing_index_folder(tmp_path, data):
    path = _saved(tmp_path, data)
    text = path.read_text()
    payload = json.loads(text)
    path.write_text(text.replace(f'"next_key": {payload["next_key"]}', '"next_key": 1e400'))
    with pytest.raises(CorruptIndexError, match="next_key"):
        _load(path)
    path.write_text(text)
    index_dir = path.parent / payload["index_dir"]
    os.rename(index_dir, path.parent / "moved")
    with pytest.raises(CorruptIndexError, match="missing"):
        _load(path)


def test_a_record_the_adapter_refuses_is_corrupt(tmp_path, data):
    path = _saved(tmp_path, data)

    def refuse(rec):
        raise ValueError("not a node")

    with pytest.raises(CorruptIndexError, match="not a node"):
        KeyedStore.load(path, HEADER, check_record=refuse)


def test_missing_folder_is_also_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        _load(tmp_path / "nowhere" / "store.json")
    assert isinstance(e.value, StoreNotFoundError) and isinstance(e.value, CorruptIndexError)


@pytest.mark.parametrize("fail_at", ["index", "json"])
def test_a_failed_save_removes_what_it_created(tmp_path, data, monkeypatch, fail_at):
    from normrank import NormIndex
    from normrank.store import files as store_files

    store = filled(data)
    path = tmp_path / "s" / "store.json"
    store.save(path, HEADER)
    before = sorted(p.name for p in path.parent.iterdir())
    real_save = NormIndex.save

    def disk_full(*args, **kwargs):
        if fail_at == "index":
            real_save(*args, **kwargs)  # the index folder is written in full, then the disk fills
        raise OSError(28, "No space left on device")

    target = (NormIndex, "save") if fail_at == "index" else (store_files, "write_json_atomic")
    monkeypatch.setattr(*target, disk_full)
    with pytest.raises(OSError, match="No space"):
        store.save(path, HEADER)
    with pytest.raises(OSError, match="No space"):
        store.save(tmp_path / "new" / "deeper" / "store.json", HEADER)
    monkeypatch.undo()
    assert sorted(p.name for p in path.parent.iterdir()) == before  # nothing left behind
    assert not (tmp_path / "new").exists()  # folders the failed save made are gone too
    assert len(_load(path)) == N  # the previous save still loads
    store.save(path, HEADER)  # and the next one succeeds
    assert len(_load(path)) == N


HOSTILE = [0, -1, 1, 2**31, 2**63, 2**70, -(2**70), 0.5, -0.0, 1e-320, 1e308, float("inf"), float("nan"),
           "1", "", None, True, [], {}, [1, 2], {"a": 1}, "x" * 10_000, _deep(200)]  # fmt: skip


def _paths(payload: dict) -> list[tuple]:
    out = [(k,) for k in payload]
    for i in range(2):
        out += [("records", i, k) for k in payload["records"][i]]
        out += [("records", i, "record", k) for k in payload["records"][i]["record"]]
    return out


def test_fuzz_store_file_values_load_or_refuse(tmp_path, data, record_property):
    """Any single value of the store file replaced by a hostile one: the load raises
    CorruptIndexError, or the store it gives searches, adds and saves without an untyped error."""
    import random

    rng = random.Random(99)
    small = KeyedStore(alpha=0.25)
    small.add([f"d{i}" for i in range(12)], data[0][:12], [{"i": i, "v": {"w": [i]}} for i in range(12)])
    path = tmp_path / "s" / "store.json"
    small.save(path, HEADER)
    clean = json.loads(path.read_text())
    loaded_ok = refused = 0
    for case in range(300):
        payload = json.loads(json.dumps(clean))
        where = rng.choice(_paths(payload))
        target = payload
        for step in where[:-1]:
            target = target[step]
        target[where[-1]] = rng.choice(HOSTILE)
        path.write_text(json.dumps(payload))  # NaN / Infinity as JSON extensions, which json reads
        try:
            store = _load(path)
        except CorruptIndexError:
            refused += 1
            continue
        loaded_ok += 1
        store.search(data[1], 5)
        store.add([f"new{case}"], data[0][12:13], [{}])
        store.save(tmp_path / "again" / "store.json", HEADER)
        assert len(_load(tmp_path / "again" / "store.json")) == len(store)
    record_property("refused", refused)
    record_property("loaded_and_worked", loaded_ok)
    assert refused > 200 and loaded_ok > 0  # most values are impossible; some are harmless


def test_a_factory_needing_training_is_refused_at_the_first_add_before_anything_changes(data):
    """Where the dimension was not known when the store was made (PQ7 cannot be built at the
    adapters' stand-in dim), the first add refuses the factory, naming from_index, instead of
    NormIndex's "call train(x) first"."""
    from normrank.errors import InvalidParameterError

    store = KeyedStore(factory="PQ7")
    x = np.repeat(data[0], 2, axis=1)[:, :14]  # dim 14: PQ7 builds, untrained
    with pytest.raises(InvalidParameterError, match=r"must be trained.*from_index"):
        store.add(["a"], x[:1], [{}])
    assert store.index is None and len(store) == 0 and store.next_key == 0
