"""Save / load round trips against the in-memory index, and corrupt or truncated files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_same_topk, brute_force

from normrank import CorruptIndexError, NormIndex

DIM = 16


def _data(n: int = 400, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, DIM)) * rng.lognormal(sigma=0.7, size=(n, 1))


def _gen(d: Path) -> Path:
    return d / json.loads((d / "manifest.json").read_text())["data"]["generation"]


def _assert_same(a: NormIndex, b: NormIndex, q: np.ndarray) -> None:
    assert np.array_equal(a.ids, b.ids)
    assert np.array_equal(a.norms, b.norms)
    assert np.array_equal(a.bases, b.bases)
    assert (a.dim, a.alpha, a.k_factor, len(a)) == (b.dim, b.alpha, b.k_factor, len(b))
    for alpha in (-1.0, 0.0, 0.7):
        sa, ia = a.search(q, 7, alpha=alpha)
        sb, ib = b.search(q, 7, alpha=alpha)
        assert np.array_equal(ia, ib)
        assert np.array_equal(sa, sb)


@pytest.mark.parametrize("factory", ["Flat", "IVF8,Flat", "HNSW16"])
def test_round_trip_with_removals(factory, tmp_path):
    x = _data()
    index = NormIndex(DIM, alpha=-0.5, factory=factory, k_factor=20)
    if not index.is_trained:
        index.train(x)
    index.add(x, ids=np.arange(1000, 1000 + len(x)))
    index.remove([1003, 1100, 1399])  # HNSW cannot delete: these become tombstones
    index.save(tmp_path / "ix")
    loaded = NormIndex.load(tmp_path / "ix")
    _assert_same(index, loaded, _data(20, seed=1))
    assert 1100 not in loaded and 1101 in loaded
    assert np.allclose(loaded.reconstruct(1101), x[101], rtol=1e-5, atol=1e-5)
    # The loaded index stays usable: removed ids stay unavailable and new ones get fresh ids.
    new = loaded.add(_data(3, seed=2))
    assert new.min() >= 1400


def test_flat_round_trip_is_exact_against_numpy(tmp_path):
    x = _data()
    index = NormIndex(DIM, alpha=0.5)
    index.add(x)
    index.save(tmp_path / "ix")
    loaded = NormIndex.load(tmp_path / "ix")
    q = _data(10, seed=3)
    for alpha in (-1.5, 0.0, 1.0):
        # against numpy in float64: the same top-5 up to float32 rounding and ties (the two sides
        # run different products, so bit equality would hold only for one BLAS kernel)
        scores, ids = loaded.search(q, 5, alpha=alpha)
        ref_scores, ref_ids = brute_force(x, q, alpha)
        assert_same_topk(ref_scores, ref_ids, scores, ids, 5)


def test_custom_weights_round_trip(tmp_path):
    x = _data()
    index = NormIndex(DIM, alpha=1.0)
    index.add(x)
    w = np.random.default_rng(4).uniform(0.5, 2.0, size=len(x))
    index.set_bases(w)
    index.save(tmp_path / "ix")
    loaded = NormIndex.load(tmp_path / "ix")
    assert np.allclose(loaded.bases, w.astype(np.float32))
    _assert_same(index, loaded, _data(5, seed=5))
    loaded.clear_bases()
    assert np.array_equal(loaded.bases, loaded.norms)


def test_empty_index_round_trip(tmp_path):
    index = NormIndex(DIM, alpha=0.3)
    index.save(tmp_path / "ix")
    loaded = NormIndex.load(tmp_path / "ix")
    assert len(loaded) == 0 and loaded.alpha == 0.3
    s, i = loaded.search(np.ones(DIM), 3)
    assert (i == -1).all() and np.isneginf(s).all()


def test_save_replaces_and_cleans_old_generation(tmp_path):
    d = tmp_path / "ix"
    index = NormIndex(DIM)
    index.add(_data(10))
    index.save(d)
    first = _gen(d).name
    index.add(_data(5, seed=9))
    index.save(d)
    assert not (d / first).exists()
    assert len(NormIndex.load(d)) == 15
    assert sorted(p.name for p in d.iterdir() if p.name.startswith("gen-")) == [_gen(d).name]


def test_save_onto_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    index = NormIndex(DIM)
    with pytest.raises(ValueError):
        index.save(tmp_path / "f")


@pytest.fixture
def saved(tmp_path) -> Path:
    index = NormIndex(DIM, alpha=0.5)
    index.add(_data())
    index.save(tmp_path / "ix")
    return tmp_path / "ix"


@pytest.mark.parametrize("name", ["norms.npy", "ids.npy", "index.faiss"])
@pytest.mark.parametrize("where", [0, 0.5, -1])
def test_flipped_byte_is_refused(saved, name, where):
    p = _gen(saved) / name
    data = bytearray(p.read_bytes())
    pos = int(len(data) * where) if where >= 0 else len(data) - 1
    data[pos] ^= 0x01
    p.write_bytes(bytes(data))
    with pytest.raises(CorruptIndexError, match="checksum mismatch"):
        NormIndex.load(saved)


@pytest.mark.parametrize("name", ["norms.npy", "ids.npy", "index.faiss", "manifest.json"])
def test_truncated_file_is_refused(saved, name):
    p = saved / name if name == "manifest.json" else _gen(saved) / name
    size = p.stat().st_size
    os.truncate(p, size // 2)
    with pytest.raises(CorruptIndexError):
        NormIndex.load(saved)


@pytest.mark.parametrize("name", ["norms.npy", "ids.npy", "index.faiss"])
def test_missing_file_is_refused(saved, name):
    (_gen(saved) / name).unlink()
    with pytest.raises(CorruptIndexError, match=name):
        NormIndex.load(saved)


def test_not_a_directory(tmp_path):
    with pytest.raises(CorruptIndexError):
        NormIndex.load(tmp_path / "nothing")
    with pytest.raises(CorruptIndexError):
        NormIndex.load(tmp_path)  # exists, but holds no manifest


@pytest.mark.parametrize("name", ["manifest.json", "norms.npy"])
def test_a_directory_in_place_of_a_file_is_corrupt(saved, name):
    """A directory where the manifest or a data file should be: CorruptIndexError (as
    docs/guarantees.md says), not IsADirectoryError."""
    target = saved / name if name == "manifest.json" else _gen(saved) / name
    target.unlink()
    target.mkdir()
    with pytest.raises(CorruptIndexError, match=f"{name} is not a regular file"):
        NormIndex.load(saved)


def test_no_pickle_on_disk(saved):
    """Every .npy file is a plain numeric array that numpy can read without pickle."""
    for p in _gen(saved).glob("*.npy"):
        arr = np.load(p, allow_pickle=False)
        assert arr.dtype.kind in "if" and arr.ndim == 1


@pytest.mark.parametrize("factory", ["Flat", "HNSW8", "IVF2,Flat"])
def test_what_is_accepted_at_float32_ends_saves_and_loads(tmp_path, factory):
    """The invariant "what is accepted can be saved and loaded", at the edges: norms near
    float32's maximum and smallest accepted, weights at both ends of its normal range,
    tombstones, and searches at alpha = +-16 before and after."""
    rng = np.random.default_rng(9)
    x = rng.normal(size=(12, DIM))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    x *= np.array([1e-29, 1e-10, 1.0, 1e10, 1e20, 1e37, 3e38, 1.0, 2.0, 3.0, 4.0, 5.0])[:, None]
    ix = NormIndex(DIM, factory=factory)
    if not ix.is_trained:
        ix.train(rng.normal(size=(64, DIM)))
    ix.add(x)
    ix.remove([3])
    ix.set_bases(np.array([np.finfo(np.float32).tiny, np.finfo(np.float32).max] + [1.0] * 9))
    ix.save(tmp_path / "ix")
    loaded = NormIndex.load(tmp_path / "ix")
    q = rng.normal(size=(4, DIM))
    _assert_same(ix, loaded, q)
    for alpha in (-16.0, 16.0):
        a, b = ix.search(q, 11, alpha=alpha), loaded.search(q, 11, alpha=alpha)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


# -- every kind NormIndex builds saves and loads (issue 36: an IVF-PQ was refused at load) --

KIND_DIM = 32


def _hnsw_pq(x: np.ndarray) -> NormIndex:
    """HNSW-PQ: FAISS's factory builds it with L2 (refused), so over inner product it comes
    wrapped from FAISS, of unit vectors with their norms."""
    import faiss

    norms = np.linalg.norm(x, axis=1)
    unit = (x / norms[:, None]).astype(np.float32)
    hnsw = faiss.IndexHNSWPQ(KIND_DIM, 8, 16, 8, faiss.METRIC_INNER_PRODUCT)
    hnsw.train(unit)
    hnsw.add(unit)
    return NormIndex.from_faiss(hnsw, norms=norms, alpha=-0.5)


KINDS = {
    "Flat": "Flat",
    "IVF-Flat": "IVF16,Flat",
    "IVF-PQ": "IVF16,PQ8",
    "IVF-SQ8": "IVF16,SQ8",
    "HNSW-Flat": "HNSW16",
    "HNSW-SQ8": "HNSW16,SQ8",
    "HNSW-PQ": _hnsw_pq,
    "IVF-Flat,RFlat": "IVF16,Flat,RFlat",
    "IVF-PQ,RFlat": "IVF16,PQ8,RFlat",
    "IVF-SQ8,RFlat": "IVF16,SQ8,RFlat",
    "HNSW-SQ8,RFlat": "HNSW16,SQ8,RFlat",
    "OPQ,IVF-PQ": "OPQ8,IVF16,PQ8",
}


def _kind(name: str, x: np.ndarray) -> NormIndex:
    factory = KINDS[name]
    if callable(factory):
        return factory(x)
    index = NormIndex(KIND_DIM, alpha=-0.5, factory=factory)
    if not index.is_trained:
        index.train(x)
    index.add(x)
    return index


@pytest.mark.filterwarnings("ignore")  # FAISS's k-means: 2,000 points for 256 PQ centroids
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_round_trips(kind, tmp_path):
    """The smallest reproducer of issue 36 is IVF16,PQ8 over 2,000 vectors of dimension 32: its
    precomputed table (16 · 8 · 256 floats) outgrew the file, and load raised CorruptIndexError."""
    rng = np.random.default_rng(11)
    x = rng.normal(size=(2_000, KIND_DIM)) * rng.lognormal(sigma=0.7, size=(2_000, 1))
    index = _kind(kind, x)
    index.remove([5, 17, 1_999])  # deletes (Flat, IVF) or tombstones (HNSW, refine stages)
    index.save(tmp_path / "ix")
    loaded = NormIndex.load(tmp_path / "ix")
    assert type(loaded.faiss_index) is type(index.faiss_index)
    _assert_same(index, loaded, rng.normal(size=(20, KIND_DIM)))
    loaded.save(tmp_path / "again")  # what was loaded saves and loads again
    _assert_same(index, NormIndex.load(tmp_path / "again"), rng.normal(size=(5, KIND_DIM)))


@pytest.mark.filterwarnings("ignore")
def test_loaded_ivf_pq_against_numpy(tmp_path):
    """The loaded IVF-PQ, searched over every list, ranks exactly by the cosine of its codes:
    numpy over the vectors FAISS decodes (centroid + residual), times norm ** alpha."""
    rng = np.random.default_rng(12)
    x = rng.normal(size=(2_000, KIND_DIM)) * rng.lognormal(sigma=0.7, size=(2_000, 1))
    index = NormIndex(KIND_DIM, alpha=0.5, factory="IVF16,PQ8", nprobe=16)
    index.train(x)
    index.add(x)
    index.save(tmp_path / "ix")
    loaded = NormIndex.load(tmp_path / "ix")
    # FAISS's reconstruct_n finds ids 0 .. n - 1 in the lists (no direct map needed)
    assert np.array_equal(loaded.ids, np.arange(loaded.ntotal))
    decoded = loaded.faiss_index.reconstruct_n(0, loaded.ntotal)
    q = rng.normal(size=(10, KIND_DIM))
    cos = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ decoded.astype(np.float64).T  # not unit
    for alpha in (-1.0, 0.0, 0.7):
        scores, ids = loaded.search(q, 10, alpha=alpha)
        ref = cos * loaded.norms.astype(np.float64)[None, :] ** alpha
        assert_same_topk(ref, loaded.ids, scores, ids, 10, tol=1e-4)


def test_saved_faiss_file_is_faiss_own_serialisation(tmp_path, monkeypatch):
    """The FAISS file is streamed to disk by FAISS's writer: byte for byte what
    ``faiss.serialize_index`` makes, with the size and SHA-256 the manifest records."""
    import hashlib

    import faiss

    import normrank.index.persistence as persistence

    monkeypatch.setattr(persistence, "_CHUNK", 4096)  # many chunks, one partly filled at the end
    index = NormIndex(DIM, factory="HNSW8")
    index.add(_data(3_000))
    index.save(tmp_path / "ix")
    data = (_gen(tmp_path / "ix") / "index.faiss").read_bytes()
    assert data == faiss.serialize_index(index.faiss_index).tobytes()
    meta = json.loads((tmp_path / "ix" / "manifest.json").read_text())["data"]["files"]["index.faiss"]
    assert meta == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


# -- the manifest's sections: data (format_version) apart from options (options_version) ---------


def _v1_manifest(m: dict) -> dict:
    """The manifest of ``m``'s save as normrank wrote it before issue 47 (format 1, one flat
    mapping: ``_manifest_of`` of that release, key for key)."""
    data, options = m["data"], m["options"]
    return {
        "format": "normrank-index",
        "format_version": 1,
        "generation": data["generation"],
        "dim": data["dim"],
        "count": data["count"],
        "alpha": options["alpha"],
        "k_factor": options["k_factor"],
        "ann": {"method": options["ann"], "n_tail": options["n_tail"], "max_depth": options["max_depth"]},
        "factory": data["factory"],
        "faiss_type": data["faiss_type"],
        "search_params": options["search_params"],
        "tombstones": data["tombstones"],
        "next_id": data["next_id"],
        "files": data["files"],
    }


def _edit(d: Path, edit) -> None:
    m = json.loads((d / "manifest.json").read_text())
    edit(m)
    (d / "manifest.json").write_text(json.dumps(m))


def test_the_manifest_keeps_data_and_options_apart_each_versioned(tmp_path):
    from normrank.index.persistence import FORMAT_VERSION, OPTIONS_VERSION

    index = NormIndex(DIM, alpha=0.25, factory="HNSW8", ann="overfetch", n_tail=5)
    index.add(_data(50))
    index.save(tmp_path / "ix")
    m = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    assert (m["format_version"], m["options_version"]) == (FORMAT_VERSION, OPTIONS_VERSION) == (2, 1)
    assert {"generation", "dim", "count", "files"} <= set(m["data"]) and "alpha" not in m["data"]
    assert m["options"]["alpha"] == 0.25 and m["options"]["ann"] == "overfetch"
    assert m["options"]["n_tail"] == 5 and "files" not in m["options"]


@pytest.mark.parametrize("factory", ["Flat", "IVF8,Flat", "HNSW16"])
def test_a_folder_in_the_format_1_layout_still_loads(factory, tmp_path):
    """Saves made before the sections split (format 1, one flat manifest) load as they were,
    options included."""
    x = _data()
    index = NormIndex(DIM, alpha=-0.5, factory=factory, k_factor=20, ann="overfetch", max_depth=300)
    if not index.is_trained:
        index.train(x)
    index.add(x, ids=np.arange(1000, 1000 + len(x)))
    index.remove([1003, 1100])  # HNSW: tombstones, in the data
    index.set_bases(np.linspace(0.5, 2.0, len(index)))
    index.save(tmp_path / "ix")
    m = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    (tmp_path / "ix" / "manifest.json").write_text(json.dumps(_v1_manifest(m)))
    loaded = NormIndex.load(tmp_path / "ix")
    _assert_same(index, loaded, _data(20, seed=1))
    assert (loaded.ann, loaded.max_depth, loaded.n_tail) == ("overfetch", 300, None)
    loaded.save(tmp_path / "again")  # saved again: in the current layout
    assert json.loads((tmp_path / "again" / "manifest.json").read_text())["format_version"] == 2


@pytest.fixture
def small_save(tmp_path) -> Path:
    index = NormIndex(DIM, alpha=0.5)
    index.add(_data(30))
    index.save(tmp_path / "ix")
    return tmp_path / "ix"


NEWER = {
    "data format above this reader's": (lambda m: m.update(format_version=3), "format 3 / options"),
    "options version above this reader's": (lambda m: m.update(options_version=2), "format 2 / options 2"),
    "an option this reader does not know": (lambda m: m["options"].update(rerank="cross"), "rerank"),
    "an ann method this reader does not know": (
        lambda m: m["options"].update(ann="graph-walk"),
        "graph-walk",
    ),
}


@pytest.mark.parametrize("case", sorted(NEWER))
def test_a_save_by_a_newer_normrank_says_so_not_corrupt(case, small_save):
    """Before issue 47 a saved index with a new search mode was refused as CorruptIndexError."""
    from normrank import NewerFormatError, NormrankError

    edit, words = NEWER[case]
    _edit(small_save, edit)
    with pytest.raises(NewerFormatError) as info:
        NormIndex.load(small_save)
    said = str(info.value)
    assert "saved by a newer normrank" in said and "upgrade normrank" in said and words in said, said
    assert not isinstance(info.value, CorruptIndexError) and isinstance(info.value, NormrankError)


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m.update(format_version=0),
        lambda m: m.update(options_version="1"),
        lambda m: m.pop("options"),
        lambda m: m["options"].update(ann=["adaptive"]),
        lambda m: m["options"].update(k_factor=-3),
    ],
    ids=["format version 0", "options version a string", "no options", "ann a list", "k_factor -3"],
)
def test_a_broken_manifest_of_a_known_version_stays_corrupt(edit, small_save):
    _edit(small_save, edit)
    with pytest.raises(CorruptIndexError):
        NormIndex.load(small_save)


def test_an_unknown_ann_method_in_the_format_1_layout_is_corrupt(small_save):
    """No normrank writes format 1 any more: what it cannot hold there is corruption."""
    m = json.loads((small_save / "manifest.json").read_text())
    v1 = _v1_manifest(m)
    v1["ann"]["method"] = "graph-walk"
    (small_save / "manifest.json").write_text(json.dumps(v1))
    with pytest.raises(CorruptIndexError, match="ann"):
        NormIndex.load(small_save)
