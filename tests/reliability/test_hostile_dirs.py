"""Hostile index directories: every one is refused with a CorruptIndexError that names the
problem, no code runs, and "claims huge" files do not make the loader allocate what they claim.

The attacker model is a directory someone downloaded: they control every byte, including the
manifest's checksums, so most cases re-sign the manifest after tampering (``_resign``) to make
sure the refusal comes from the structural check, not from the checksum.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import normrank
from normrank import CorruptIndexError, NormIndex

DIM = 8


def _manifest(d: Path) -> dict:
    return json.loads((d / "manifest.json").read_text())


def _gen(d: Path) -> Path:
    return d / _manifest(d)["data"]["generation"]


def _write_manifest(d: Path, m: dict) -> None:
    (d / "manifest.json").write_text(json.dumps(m))


def _resign(d: Path) -> None:
    """Recompute sizes and checksums, as an attacker who edits the files would."""
    m = _manifest(d)
    for name in m["data"]["files"]:
        data = (_gen(d) / name).read_bytes()
        m["data"]["files"][name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    _write_manifest(d, m)


_TOP_KEYS = {"format", "format_version", "options_version"}
_OPTION_KEYS = {"alpha", "k_factor", "ann", "n_tail", "max_depth", "search_params"}


def _update(m: dict, changes: dict) -> None:
    """Each change into the manifest's section that holds that key (top level, options, data)."""
    for key, value in changes.items():
        section = m if key in _TOP_KEYS else m["options"] if key in _OPTION_KEYS else m["data"]
        section[key] = value


def _edit_manifest(**changes) -> Callable[[Path], None]:
    def tamper(d: Path) -> None:
        m = _manifest(d)
        _update(m, changes)
        _write_manifest(d, m)

    return tamper


def _npy_with_header(header: bytes, body: bytes = b"") -> bytes:
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + body


def _replace_file(name: str, data: bytes, count: int | None = None) -> Callable[[Path], None]:
    def tamper(d: Path) -> None:
        (_gen(d) / name).write_bytes(data)
        if count is not None:
            m = _manifest(d)
            m["data"]["count"] = count
            _write_manifest(d, m)
        _resign(d)

    return tamper


def _npy(arr: np.ndarray) -> bytes:
    bio = io.BytesIO()
    np.save(bio, arr, allow_pickle=True)
    return bio.getvalue()


def _symlink_gen_outside(d: Path) -> None:
    gen = _gen(d)
    outside = d.parent / "outside-gen"
    shutil.move(gen, outside)
    os.symlink(outside, gen)


def _symlink_file_outside(name: str) -> Callable[[Path], None]:
    def tamper(d: Path) -> None:
        target = d.parent / f"outside-{name}"
        shutil.move(_gen(d) / name, target)  # same bytes, so size and checksum still match
        os.symlink(target, _gen(d) / name)

    return tamper


def _symlink_manifest(d: Path) -> None:
    target = d.parent / "outside-manifest.json"
    shutil.move(d / "manifest.json", target)
    os.symlink(target, d / "manifest.json")


def _fifo_norms(d: Path) -> None:
    (_gen(d) / "norms.npy").unlink()
    os.mkfifo(_gen(d) / "norms.npy")


def _flip_norms_byte(d: Path) -> None:
    p = _gen(d) / "norms.npy"
    data = bytearray(p.read_bytes())
    data[-3] ^= 0x10
    p.write_bytes(bytes(data))


def _truncate(name: str, keep: float, resign: bool) -> Callable[[Path], None]:
    def tamper(d: Path) -> None:
        p = _gen(d) / name
        data = p.read_bytes()
        p.write_bytes(data[: int(len(data) * keep)])
        if resign:
            _resign(d)

    return tamper


def _faiss_patch(offset: int, fmt: str, value: int) -> Callable[[Path], None]:
    def tamper(d: Path) -> None:
        p = _gen(d) / "index.faiss"
        data = bytearray(p.read_bytes())
        struct.pack_into(fmt, data, offset, value)
        p.write_bytes(bytes(data))
        _resign(d)

    return tamper


def _huge_manifest(d: Path) -> None:
    with open(d / "manifest.json", "r+b") as f:  # sparse: 8 GiB claimed, nothing written
        f.truncate(8 << 30)


def _swap_ids(d: Path) -> None:
    ids = np.load(_gen(d) / "ids.npy")
    ids[[0, 1]] = ids[[1, 0]]
    (_gen(d) / "ids.npy").write_bytes(_npy(ids))
    _resign(d)


def _huge_npys(d: Path) -> None:
    """ids and norms both claim 10**12 entries, and so does the manifest: only the file size
    tells the truth."""
    for name, descr in (("ids.npy", b"<i8"), ("norms.npy", b"<f4")):
        header = b"{'descr': '" + descr + b"', 'fortran_order': False, 'shape': (1000000000000,), }\n"
        (_gen(d) / name).write_bytes(_npy_with_header(header, b"\0" * 64))
    m = _manifest(d)
    m["data"]["count"] = 10**12
    _write_manifest(d, m)
    _resign(d)


def _array_file(name: str, arr: np.ndarray) -> Callable[[Path], None]:
    return _replace_file(name, _npy(arr))


# IxM2 header: fourcc, d, ntotal, 2 dummies, is_trained, metric = 37 bytes; the inner IxFI
# header is 37 more, then the codes vector's length (size_t).
_INNER_CODES_LEN = 74

CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "generation ../": (_edit_manifest(generation="../../etc"), "generation"),
    "generation absolute": (_edit_manifest(generation="/etc"), "generation"),
    "file name ../": (
        _edit_manifest(files={"../ids.npy": {"bytes": 1, "sha256": "0"}}),
        "unexpected files",
    ),
    "file name absolute": (
        _edit_manifest(files={"/etc/passwd": {"bytes": 1, "sha256": "0"}}),
        "unexpected files",
    ),
    "files not a mapping": (_edit_manifest(files=5), "unexpected files"),
    "generation dir symlinked outside": (_symlink_gen_outside, "not a directory"),
    "norms.npy symlinked outside": (_symlink_file_outside("norms.npy"), "symlink"),
    "index.faiss symlinked outside": (_symlink_file_outside("index.faiss"), "symlink"),
    "manifest symlinked outside": (_symlink_manifest, "symlink"),
    "norms.npy is a FIFO": (_fifo_norms, "norms.npy"),
    "npy header claims huge shape": (_huge_npys, "data bytes"),
    "npy object dtype": (_array_file("ids.npy", np.array([object()] * 60, dtype=object)), "ids.npy"),
    "npy pickled content": (_array_file("norms.npy", np.array([{"x": 1}] * 60, dtype=object)), "norms.npy"),
    "npy raw pickle": (_replace_file("norms.npy", pickle.dumps([1.0] * 60)), "not a .npy"),
    "npy hostile header": (
        _replace_file("norms.npy", _npy_with_header(b"{'descr':" + b"-" * 60000 + b"1}")),
        "header",
    ),
    "npy 2-D shape": (_array_file("norms.npy", np.ones((60, 1), np.float32)), "header"),
    "npy float64 norms": (_array_file("norms.npy", np.ones(60, np.float64)), "dtype"),
    "npy fortran order": (
        _replace_file(
            "norms.npy",
            _npy_with_header(b"{'descr': '<f4', 'fortran_order': True, 'shape': (60,), }\n", b"\0" * 240),
        ),
        "dtype",
    ),
    "npy version 3": (_replace_file("ids.npy", b"\x93NUMPY\x03\x00" + b"\0" * 64), "version"),
    "faiss truncated (re-signed)": (_truncate("index.faiss", 0.6, resign=True), "index.faiss"),
    "faiss truncated (not re-signed)": (_truncate("index.faiss", 0.6, resign=False), "truncated"),
    "faiss tiny": (_truncate("index.faiss", 0.001, resign=True), "index.faiss"),
    "faiss claims more vectors": (_faiss_patch(8, "<q", 10**12), "index.faiss"),
    "faiss inner claims more vectors": (_faiss_patch(37 + 8, "<q", 10**12), "index.faiss"),
    "faiss codes length huge": (_faiss_patch(_INNER_CODES_LEN, "<Q", 1 << 50), "index.faiss"),
    "faiss bad fourcc": (_faiss_patch(0, "<I", 0x01020304), "index.faiss"),
    "faiss dim mismatch": (_faiss_patch(4, "<i", DIM + 1), "dimension"),
    "norms shorter than ids": (_array_file("norms.npy", np.ones(59, np.float32)), "norms.npy"),
    "ids shorter than norms": (_array_file("ids.npy", np.arange(59, dtype=np.int64)), "ids.npy"),
    "count above index": (_edit_manifest(count=61), "ids.npy"),
    "ids not those in index.faiss": (_swap_ids, "ids.npy does not match"),
    "negative ids": (_array_file("ids.npy", -np.arange(1, 61, dtype=np.int64)), "negative"),
    "duplicate ids": (_array_file("ids.npy", np.zeros(60, np.int64)), "ids"),
    "nan norm": (_array_file("norms.npy", np.full(60, np.nan, np.float32)), "non-finite"),
    "zero norm": (_array_file("norms.npy", np.zeros(60, np.float32)), "non-positive"),
    "format version zero": (_edit_manifest(format_version=0), "format version"),
    "format version a string": (_edit_manifest(format_version="2"), "format version"),
    "options version missing": (
        lambda d: _write_manifest(d, {**_manifest(d), "options_version": None}),
        "options version",
    ),
    "no options section": (lambda d: _write_manifest(d, {**_manifest(d), "options": []}), "options section"),
    "not a normrank manifest": (_edit_manifest(format="something-else"), "not a normrank index"),
    "flipped byte in norms": (_flip_norms_byte, "checksum mismatch"),
    "manifest not JSON": (lambda d: (d / "manifest.json").write_bytes(b"\x80{not json"), "not valid JSON"),
    "manifest deeply nested": (lambda d: (d / "manifest.json").write_bytes(b"[" * 500_000), "not valid JSON"),
    "manifest huge": (_huge_manifest, "allowed"),
    "manifest missing": (lambda d: (d / "manifest.json").unlink(), "manifest.json"),
    "generation dir missing": (lambda d: shutil.rmtree(_gen(d)), "missing"),
    "alpha overflows": (_edit_manifest(alpha=10**400), "alpha"),
    "alpha nan": (
        lambda d: (d / "manifest.json").write_text(
            (d / "manifest.json").read_text().replace('"alpha": 0.5', '"alpha": NaN')
        ),
        "alpha",
    ),
    "dim zero": (_edit_manifest(dim=0), "dim"),
    "count negative": (_edit_manifest(count=-1), "count"),
    "count a bool": (_edit_manifest(count=True), "count"),
    "bytes not a number": (
        _edit_manifest(files={"index.faiss": {"bytes": "1", "sha256": "0"}, "ids.npy": {}, "norms.npy": {}}),
        "bad manifest entry",
    ),
}


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(60, DIM)) * rng.lognormal(size=(60, 1))
    index = NormIndex(DIM, alpha=0.5)
    index.add(x)
    d = tmp_path_factory.mktemp("template") / "index"
    index.save(d)
    return d


@pytest.fixture
def victim(template, tmp_path) -> Path:
    d = tmp_path / "index"
    shutil.copytree(template, d)
    NormIndex.load(d)  # the untouched copy loads
    return d


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_directory_is_refused(case, victim):
    tamper, words = CASES[case]
    tamper(victim)
    with pytest.raises(CorruptIndexError) as info:
        NormIndex.load(victim)
    assert words.lower() in str(info.value).lower(), str(info.value)


def test_hnsw_graph_out_of_range_is_refused(tmp_path):
    """A neighbour id outside the graph would be followed blindly at search time."""
    import faiss

    index = NormIndex(DIM, factory="HNSW8")
    index.add(np.random.default_rng(1).normal(size=(60, DIM)))
    hnsw = faiss.downcast_index(index.faiss_index.index).hnsw
    nb = faiss.vector_to_array(hnsw.neighbors)
    nb[5] = 10**6
    faiss.copy_array_to_vector(nb, hnsw.neighbors)
    index.save(tmp_path / "ix")
    with pytest.raises(CorruptIndexError, match=r"index\.faiss"):
        NormIndex.load(tmp_path / "ix")


def test_ivf_ids_must_match_lists(tmp_path):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(200, DIM))
    index = NormIndex(DIM, factory="IVF4,Flat")
    index.train(x)
    index.add(x)
    d = tmp_path / "ix"
    index.save(d)
    ids = np.load(_gen(d) / "ids.npy")
    ids[0] = 10_000
    (_gen(d) / "ids.npy").write_bytes(_npy(ids))
    _resign(d)
    with pytest.raises(CorruptIndexError, match=r"ids\.npy does not match"):
        NormIndex.load(d)


def test_load_touches_nothing_outside(victim, tmp_path):
    """A refused load neither reads through nor deletes anything the manifest points at."""
    secret = tmp_path / "secret"
    secret.write_text("keep me")
    _edit_manifest(generation="../secret")(victim)
    with pytest.raises(CorruptIndexError):
        NormIndex.load(victim)
    assert secret.read_text() == "keep me"


def test_save_never_deletes_foreign_files(tmp_path):
    """Saving into a folder that holds other files removes only the save's own debris."""
    d = tmp_path / "shared"
    d.mkdir()
    for name in ("notes.tmp", "gen-mine", "generation.txt", "manifest.json.bak"):
        (d / name).write_text("user data")
    index = NormIndex(DIM)
    index.add(np.ones((2, DIM)))
    index.save(d)
    index.save(d)
    for name in ("notes.tmp", "gen-mine", "generation.txt", "manifest.json.bak"):
        assert (d / name).read_text() == "user data"
    assert len(NormIndex.load(d)) == 2


_RSS_SCRIPT = textwrap.dedent(
    """
    import json, resource, sys
    from normrank import NormIndex, CorruptIndexError
    NormIndex.load(sys.argv[1])  # warm up: imports, FAISS, a normal load
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {}
    for d in sys.argv[2:]:
        try:
            NormIndex.load(d)
            out[d] = "loaded"
        except CorruptIndexError as e:
            out[d] = "refused: " + str(e)[:200]
        out[d + ":rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
    print(json.dumps(out))
    """
)

HUGE_CLAIMS = [
    "npy header claims huge shape",
    "faiss claims more vectors",
    "faiss inner claims more vectors",
    "faiss codes length huge",
    "manifest huge",
]


def test_huge_claims_do_not_allocate(template, tmp_path):
    """Peak RSS of a process loading files that claim terabytes stays within a few MB."""
    dirs = []
    for case in HUGE_CLAIMS:
        d = tmp_path / case.replace(" ", "_")
        shutil.copytree(template, d)
        CASES[case][0](d)
        dirs.append(str(d))
    proc = subprocess.run(
        [sys.executable, "-c", _RSS_SCRIPT, str(template), *dirs],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for d in dirs:
        assert out[d].startswith("refused"), (d, out[d])
        # The claims are >= 4 TB; the whole template directory is a few kB.
        assert out[d + ":rss_kib"] < 64 * 1024, (d, out[d + ":rss_kib"])


# -- consistent but impossible: re-signed directories whose claims no index can hold (issue #12) --


def _faiss_bytes(index) -> bytes:
    import faiss

    return faiss.serialize_index(index).tobytes()


def _save_state_files(d: Path, *, faiss_index=None, edits: dict | None = None, **arrays: np.ndarray) -> None:
    """Replace the generation's files (and manifest fields), then re-sign, as an attacker would."""
    m = _manifest(d)
    gen = _gen(d)
    if faiss_index is not None:
        (gen / "index.faiss").write_bytes(_faiss_bytes(faiss_index))
        m["data"]["files"].setdefault("index.faiss", {})
    for name, arr in arrays.items():
        (gen / f"{name}.npy").write_bytes(_npy(arr))
        m["data"]["files"].setdefault(f"{name}.npy", {})
    _update(m, edits or {})
    _write_manifest(d, m)
    _resign(d)


def test_tombstones_in_a_flat_save_are_refused(tmp_path):
    """Reproducer (a): a Flat save with tombstones.npy added, one id dropped from ids/norms, the
    count adjusted and re-signed once loaded, then searched the removed vector under a
    neighbour's id (and raised ValueError / IndexError)."""
    ix = NormIndex(DIM)
    ix.add(np.random.default_rng(3).normal(size=(10, DIM)))
    d = tmp_path / "ix"
    ix.save(d)
    ids, norms = ix.ids, ix.norms
    _save_state_files(
        d, ids=ids[1:], norms=norms[1:], tombstones=ids[:1], edits={"count": 9, "tombstones": 1}
    )
    with pytest.raises(CorruptIndexError, match="cannot hold tombstones"):
        NormIndex.load(d)


def _hnsw_with_metric_lie(metric_outer, metric_inner):
    import faiss

    x = np.random.default_rng(4).normal(size=(40, DIM)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    hnsw = faiss.IndexHNSWFlat(DIM, 8, metric_inner)
    wrapped = faiss.IndexIDMap2(hnsw)
    wrapped.add_with_ids(x, np.arange(40))
    wrapped.metric_type = metric_outer  # the header claims what the graph inside is not
    return wrapped, x


@pytest.mark.parametrize("level", ["inner HNSW uses L2", "storage uses L2"])
def test_metric_is_checked_at_every_level(tmp_path, level):
    """Reproducer (b): an IndexIDMap2 that says inner product, wrapping an HNSW that uses L2,
    once loaded and returned L2 distances as scores."""
    import faiss

    ix = NormIndex(DIM, factory="HNSW8")
    ix.add(np.random.default_rng(4).normal(size=(40, DIM)))
    d = tmp_path / "ix"
    ix.save(d)
    if level == "inner HNSW uses L2":
        bad, _ = _hnsw_with_metric_lie(faiss.METRIC_INNER_PRODUCT, faiss.METRIC_L2)
    else:
        bad, _ = _hnsw_with_metric_lie(faiss.METRIC_INNER_PRODUCT, faiss.METRIC_INNER_PRODUCT)
        faiss.downcast_index(bad.index).storage.metric_type = faiss.METRIC_L2
    _save_state_files(d, faiss_index=bad, ids=np.arange(40, dtype=np.int64), norms=ix.norms)
    with pytest.raises(CorruptIndexError, match="inner product"):
        NormIndex.load(d)


def test_ivf_with_an_l2_quantizer_is_refused(tmp_path):
    import faiss

    rng = np.random.default_rng(5)
    x = rng.normal(size=(200, DIM)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    ix = NormIndex(DIM, factory="IVF4,Flat")
    ix.train(x)
    ix.add(x)
    d = tmp_path / "ix"
    ix.save(d)
    bad = faiss.IndexIVFFlat(faiss.IndexFlatL2(DIM), DIM, 4, faiss.METRIC_INNER_PRODUCT)
    bad.train(x)
    bad.add_with_ids(x, ix.ids)
    _save_state_files(d, faiss_index=bad, ids=ix.ids, norms=ix.norms)
    with pytest.raises(CorruptIndexError, match="inner product"):
        NormIndex.load(d)


def test_ivf_pq_with_an_l2_quantizer_is_refused_before_its_table(tmp_path):
    """FAISS precomputes an IVF-PQ's table (nlist * M * ksub floats, not in the file) only for a
    quantizer that is not inner product: such a file is refused before anything is allocated."""
    import faiss

    rng = np.random.default_rng(6)
    x = rng.normal(size=(300, DIM)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    ix = NormIndex(DIM, factory="IVF4,Flat")
    ix.train(x)
    ix.add(x)
    d = tmp_path / "ix"
    ix.save(d)
    bad = faiss.IndexIVFPQ(faiss.IndexFlatL2(DIM), DIM, 4, 4, 4, faiss.METRIC_INNER_PRODUCT)
    bad.train(x)
    bad.add_with_ids(x, ix.ids)
    _save_state_files(d, faiss_index=bad, ids=ix.ids, norms=ix.norms)
    with pytest.raises(CorruptIndexError, match="quantizer does not use inner product"):
        NormIndex.load(d)


RESIGNED: dict[str, tuple[dict, dict, str]] = {
    # name: (manifest edits, arrays to write, words in the error)
    "alpha 1e308": ({"alpha": 1e308}, {}, "alpha"),
    "alpha -17": ({"alpha": -17}, {}, "alpha"),
    "k_factor a string": ({"k_factor": "x"}, {}, "k_factor"),
    "k_factor zero": ({"k_factor": 0}, {}, "k_factor"),
    "next_id negative": ({"next_id": -5}, {}, "next_id"),
    "next_id huge": ({"next_id": 2**70}, {}, "next_id"),
    "ann not a string": ({"ann": {"method": "adaptive"}}, {}, "ann"),
    "n_tail negative": ({"n_tail": -1}, {}, "n_tail"),
    "max_depth a string": ({"max_depth": "9"}, {}, "max_depth"),
    "factory not a string": ({"factory": 5}, {}, "factory"),
    "norms inf": ({}, {"norms": np.full(60, np.inf, np.float32)}, "non-finite"),
    "norms subnormal": ({}, {"norms": np.full(60, 1e-45, np.float32)}, "float32"),
    "weights zero": ({}, {"weights": np.zeros(60, np.float32)}, "weights"),
    "weights subnormal": ({}, {"weights": np.full(60, 1e-40, np.float32)}, "float32"),
    "ids permuted": ({}, {"ids": np.arange(60, dtype=np.int64)[::-1].copy()}, "does not match"),
}


@pytest.mark.parametrize("case", sorted(RESIGNED))
def test_resigned_impossible_claims_are_refused(case, victim):
    edits, arrays, words = RESIGNED[case]
    _save_state_files(victim, edits=edits, **arrays)
    with pytest.raises(CorruptIndexError) as info:
        NormIndex.load(victim)
    assert words.lower() in str(info.value).lower(), str(info.value)


def test_a_symlinked_folder_saves_and_loads_alike(tmp_path):
    """One behaviour for both: the folder you name may be a symlink (``current -> v3``)."""
    (tmp_path / "v3").mkdir()
    os.symlink(tmp_path / "v3", tmp_path / "current")
    ix = NormIndex(DIM)
    ix.add(np.ones((3, DIM)))
    ix.save(tmp_path / "current")
    assert (tmp_path / "v3" / "manifest.json").is_file()
    assert len(NormIndex.load(tmp_path / "current")) == 3
    os.symlink(tmp_path / "missing", tmp_path / "dangling")
    with pytest.raises(normrank.InvalidInputError, match="missing target"):
        ix.save(tmp_path / "dangling")


@pytest.mark.parametrize("knob", ["efSearch", "nprobe"])
def test_hostile_search_breadth_is_refused(tmp_path, knob):
    """FAISS allocates the beam / probe list per query: a re-signed file claiming efSearch = 10**6
    or nprobe > nlist would make every search allocate it."""
    import faiss

    rng = np.random.default_rng(6)
    x = rng.normal(size=(200, DIM)).astype(np.float32)
    factory = "HNSW8" if knob == "efSearch" else "IVF4,Flat"
    ix = NormIndex(DIM, factory=factory)
    if not ix.is_trained:
        ix.train(x)
    ix.add(x)
    d = tmp_path / "ix"
    ix.save(d)
    bad = faiss.deserialize_index(faiss.serialize_index(ix.faiss_index))
    if knob == "efSearch":
        faiss.downcast_index(bad.index).hnsw.efSearch = 10**6
    else:
        faiss.extract_index_ivf(bad).nprobe = 5
    _save_state_files(d, faiss_index=bad)
    with pytest.raises(CorruptIndexError, match="breadth"):
        NormIndex.load(d)
