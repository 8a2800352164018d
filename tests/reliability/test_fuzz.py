"""Bad input, fuzzed: hypothesis drives ``add``, ``search``, ``remove``, ``set_bases``,
``norm_of``, ``reconstruct``, ``save``/``load`` and the CLI with hostile values. Zero crashes;
every exception is a NormrankError (the input errors are also ValueError / KeyError /
TypeError); a rejected call leaves the index exactly as it was.

Classes grown for issue #12: values at and beyond float32's range (and their powers at alphas
across [-16, 16]) in every numeric entry point, after which every document must be returnable
and the index must save and load unchanged ("what is accepted can be saved and loaded"); a
filesystem failure at a random step of ``save`` followed by a save that must succeed; valid
saves mutated and re-signed, which must be refused or load into an index that works.

Classes grown for issue #25: the Qdrant Edge backend under the same values and call sequences
(ids, weights, magnitudes, alphas, options), after which every document must be returnable and
the shard must close and reopen unchanged.

Profiles (env NORMRANK_TEST_PROFILE): ``small`` (default, CI) runs ~1,400 calls; ``full`` runs
>= 20,000. The counts are printed at the end of the module (``-s``).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import shutil
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from normrank import NormIndex, NormrankError

FULL = os.environ.get("NORMRANK_TEST_PROFILE", "small") == "full"
DIM = 4
COUNTS: Counter[str] = Counter()
OUTCOMES: Counter[str] = Counter()
SETTINGS = settings(
    max_examples=900 if FULL else 50,
    deadline=None,
    derandomize=not FULL,  # CI is reproducible; the full profile explores
    suppress_health_check=list(HealthCheck),
    database=None,
)

# -- hostile values -------------------------------------------------------------------------

# float32's edges: its max and just beyond, its smallest normal and subnormals, and values whose
# squares (norms) or powers (w**alpha, |alpha| <= 16) leave its range.
F32_EDGES = [3.4028235e38, -3.4028235e38, 3.41e38, 1e39, 2e38, 1.1754944e-38, 1e-40, 1e-20, 1e20, 1e10]
F32_STORABLE = [3.4028235e38, 2e38, 1.1754944e-38, 1e-20, 1e20, 1e10]  # each a valid weight
SPECIAL = [0.0, -0.0, 1.0, -1.0, np.nan, np.inf, -np.inf, 1e-45, 1e-30, 1e38, 3.5e38, 1e300, -1e300, 1e-320,
           *F32_EDGES]  # fmt: skip
DTYPES = ["float32", "float64", "float16", "int32", "int64", "uint8", "bool", "complex64", "object", "str"]


@st.composite
def arrays(draw, *, rows=st.integers(0, 6), dim=st.sampled_from([DIM, DIM, DIM, 0, 1, DIM + 1])):
    """Mostly well-shaped batches with some hostile values, sometimes the wrong shape or dtype."""
    shape_kind = draw(st.sampled_from(["2d", "2d", "2d", "1d", "3d", "scalar", "list", "ragged"]))
    n, d = draw(rows), draw(dim)
    values = draw(
        st.lists(
            st.one_of(st.sampled_from(SPECIAL), st.floats(-1e6, 1e6, allow_nan=False), st.just(0.0)),
            min_size=n * d,
            max_size=n * d,
        )
    )
    base = np.array(values, dtype=np.float64).reshape(n, d)
    dtype = draw(st.sampled_from(DTYPES))
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        if dtype == "str":
            arr = base.astype(str)
        elif dtype == "object":
            arr = base.astype(object)
        else:
            arr = base.astype(dtype)
    if shape_kind == "1d":
        return arr.reshape(-1)
    if shape_kind == "3d":
        return arr.reshape(1, n, d)
    if shape_kind == "scalar":
        return arr.reshape(-1)[0] if arr.size else np.float32(1.0)
    if shape_kind == "list":
        return arr.tolist()
    if shape_kind == "ragged":
        return [[1.0] * DIM, [1.0] * (DIM - 1)]
    return arr


ids_st = st.one_of(
    st.none(),
    st.lists(st.integers(-3, 12), max_size=7),
    st.lists(st.integers(2**62, 2**64), max_size=3),
    st.sampled_from([[0.5], [np.nan], ["a"], [[1, 2]], 3, -1, [True, False], np.array([1.0, 2.0])]),
)
alpha_st = st.one_of(
    st.none(),
    st.floats(-3, 3),
    st.floats(-16, 16),
    st.sampled_from([-16.0, 16.0, -15.999, 16.001, -16.001]),
    st.sampled_from([np.nan, np.inf, -np.inf, 1e308, -1e308, "x", [1.0], [1.0, 2.0, 3.0], [[1.0]]]),
    st.lists(st.one_of(st.floats(-2, 2), st.just(np.nan)), max_size=7),
)
k_st = st.one_of(
    st.integers(1, 12),
    st.integers(-2, 12),
    st.sampled_from(
        [2**31, 2**40, 2**63 - 1, 10**30, 1.5, "3", None, True, np.int64(3), 1 << 24, (1 << 24) + 1]
    ),
)
k_factor_st = st.one_of(
    st.none(), st.integers(-1, 30), st.sampled_from(["x", np.nan, [1], 1.5, 2**21, 2**63, True, np.int32(4)])
)
_good_weight = st.floats(1e-3, 1e3)
weights_st = st.lists(
    st.one_of(st.sampled_from(SPECIAL), _good_weight, _good_weight, _good_weight), max_size=12
)
id_query_st = st.one_of(
    ids_st, st.sampled_from([3.7, 3.0, "3", None, [[1], [2, 3]], [np.nan], np.float32(6), 2**70, [1e30]])
)


# -- the index under test -------------------------------------------------------------------


_TEMPLATES: dict[str, NormIndex] = {}


def _fresh(factory: str) -> NormIndex:
    """A small filled index; built once per factory (IVF training is the slow part), then
    copied through the FAISS serialiser so every example starts from the same state."""
    import faiss

    if factory not in _TEMPLATES:
        rng = np.random.default_rng(0)
        index = NormIndex(DIM, alpha=0.5, factory=factory)
        if not index.is_trained:
            index.train(rng.normal(size=(64, DIM)))
        index.add(rng.normal(size=(10, DIM)) * rng.lognormal(size=(10, 1)), ids=np.arange(10) * 3)
        _TEMPLATES[factory] = index
    t = _TEMPLATES[factory]
    copy = faiss.deserialize_index(faiss.serialize_index(t.faiss_index))
    return NormIndex.from_state(dataclasses.replace(t.to_state(), faiss_index=copy))


_QUERIES = np.random.default_rng(1).normal(size=(3, DIM))


def _snapshot(index: NormIndex):
    s, i = index.search(_QUERIES, 5)
    return index.ids, index.norms, index.bases, index.alpha, len(index), s, i


def _same(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def _call(name: str, index: NormIndex, fn) -> object:
    """Run ``fn``; a raised error must be a NormrankError and leave the index unchanged."""
    COUNTS[name] += 1
    before = _snapshot(index)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = fn()
    except NormrankError as e:
        OUTCOMES[f"{name}:{type(e).__name__}"] += 1
        assert _same(before, _snapshot(index)), f"{name} failed with {e!r} but changed the index"
        return e
    OUTCOMES[f"{name}:ok"] += 1
    return out


FACTORIES = st.sampled_from(["Flat", "Flat", "HNSW8", "IVF2,Flat"])


@SETTINGS
@given(factory=FACTORIES, x=arrays(), ids=ids_st)
def test_fuzz_add(factory, x, ids):
    index = _fresh(factory)
    n_before = len(index)
    out = _call("add", index, lambda: index.add(x, ids=ids))
    if not isinstance(out, NormrankError):
        assert len(index) == n_before + len(out)
        assert np.isfinite(index.norms).all() and (index.norms > 0).all()


@SETTINGS
@given(factory=FACTORIES, q=arrays(rows=st.integers(0, 4)), k=k_st, alpha=alpha_st, k_factor=k_factor_st)
def test_fuzz_search(factory, q, k, alpha, k_factor):
    index = _fresh(factory)
    out = _call("search", index, lambda: index.search(q, k, alpha=alpha, k_factor=k_factor))
    if not isinstance(out, NormrankError):
        scores, ids = out
        assert scores.dtype == np.float32 and ids.dtype == np.int64 and scores.shape == ids.shape
        assert scores.shape[1] == k
        found = ids >= 0
        assert np.isin(ids[found], index.ids).all()
        assert not np.isnan(scores).any()
        assert np.isneginf(scores[~found]).all()


@SETTINGS
@given(factory=FACTORIES, ids=ids_st.filter(lambda v: v is not None))
def test_fuzz_remove(factory, ids):
    index = _fresh(factory)
    n_before = len(index)
    out = _call("remove", index, lambda: index.remove(ids))
    if not isinstance(out, NormrankError):
        assert len(index) == n_before - out


@SETTINGS
@given(
    factory=FACTORIES,
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("add"), arrays(rows=st.integers(0, 3)), ids_st),
            st.tuples(st.just("remove"), ids_st.filter(lambda v: v is not None)),
            st.tuples(st.just("weights"), weights_st),
            st.tuples(st.just("alpha"), alpha_st),
        ),
        max_size=5,
    ),
)
def test_fuzz_sequences_then_save_load(factory, ops, tmp_path_factory):
    """Random call sequences, then a save/load round trip that must reproduce the index."""
    index = _fresh(factory)
    for op in ops:
        if op[0] == "add":
            w = (
                None
                if index.to_state().weights is None
                else np.ones(len(np.atleast_1d(op[1])))
                if np.ndim(op[1])
                else None
            )
            _call("add", index, lambda op=op, w=w: index.add(op[1], ids=op[2], bases=w))
        elif op[0] == "remove":
            _call("remove", index, lambda op=op: index.remove(op[1]))
        elif op[0] == "weights":
            _call("set_bases", index, lambda op=op: index.set_bases(op[1]))
        else:

            def set_alpha(value=op[1]):
                index.alpha = value

            _call("alpha", index, set_alpha)
    _round_trip(index, tmp_path_factory.mktemp("fz") / "ix")


def _round_trip(index: NormIndex, d) -> NormIndex:
    """What is accepted can be saved and loaded: the save succeeds and the load reproduces it."""
    COUNTS["save"] += 1
    index.save(d)  # no _call: a refused save of an accepted state is a failure
    COUNTS["load"] += 1
    loaded = NormIndex.load(d)
    OUTCOMES["save+load:ok"] += 1
    assert _same(_snapshot(index), _snapshot(loaded))
    return loaded


def _every_document_returnable(index: NormIndex, alphas) -> None:
    """A flat search with k = ntotal returns every document at every alpha, with real scores."""
    if not len(index):
        return
    q = np.random.default_rng(len(index)).normal(size=(2, DIM))
    q[0] = -index.reconstruct(int(index.ids[0]))  # cos = -1 with a document: the sentinel case
    for a in alphas:
        COUNTS["search-all"] += 1
        scores, ids = index.search(q, len(index), alpha=a)
        assert not np.isnan(scores).any()
        if index.is_exact:
            assert np.isfinite(scores).all(), (a, scores)
            for row in ids:
                assert sorted(row.tolist()) == sorted(index.ids.tolist()), (a, row)


MAGNITUDES = st.sampled_from([1e-29, 1e-20, 1e-5, 1.0, 1e5, 1e20, 1e37, 1e38, 2e38, 3.4e38, 3.5e38, 1e39])


@SETTINGS
@given(
    factory=FACTORIES,
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.lists(MAGNITUDES, min_size=1, max_size=3), st.booleans()),
            st.tuples(
                st.just("weights"),
                st.one_of(
                    weights_st, st.lists(st.one_of(_good_weight, st.sampled_from(F32_STORABLE)), min_size=1)
                ),
                st.sampled_from([True, True, False]),
            ),
            st.tuples(st.just("remove"), id_query_st),
            st.tuples(st.just("norm_of"), id_query_st),
            st.tuples(st.just("reconstruct"), id_query_st),
        ),
        max_size=5,
    ),
    alphas=st.lists(st.floats(-16, 16), min_size=1, max_size=2),
)
def test_fuzz_float32_edges_every_alpha_then_save_load(factory, ops, alphas, tmp_path_factory):
    """Magnitudes at and beyond float32's range in vectors and weights, and their powers at
    alphas across [-16, 16]: either refused (typed, nothing changed) or stored, searchable with
    every document returnable, and saved and loaded unchanged."""
    index = _fresh(factory)
    rng = np.random.default_rng(len(ops))
    for op in ops:
        if op[0] == "add":
            mags = np.array(op[1])
            x = rng.normal(size=(mags.size, DIM))
            x = x / np.linalg.norm(x, axis=1, keepdims=True) * mags[:, None]
            w = mags if op[2] or index.to_state().weights is not None else None
            _call("add", index, lambda x=x, w=w: index.add(x, bases=w))
        elif op[0] == "weights":  # half the time one value per document, so that it can be accepted
            w = np.resize(np.array(op[1], dtype=object), len(index)).tolist() if op[2] and op[1] else op[1]
            _call("set_bases", index, lambda w=w: index.set_bases(w))
        else:
            _call(op[0], index, lambda op=op: getattr(index, op[0])(op[1]))
    _every_document_returnable(index, [-16.0, -2.0, 0.0, 2.0, 16.0, *alphas])
    loaded = _round_trip(index, tmp_path_factory.mktemp("edge") / "ix")
    _every_document_returnable(loaded, alphas)


# -- saves that fail at some step, then a save that must succeed --------------------------------

_FS_ERRORS = [28, 30, 13, 5, 122]  # ENOSPC, EROFS, EACCES, EIO, EDQUOT


@SETTINGS
@given(
    factory=FACTORIES,
    extra=st.integers(0, 5),
    step=st.integers(1, 40),
    code=st.sampled_from(_FS_ERRORS),
    weights=st.booleans(),
)
def test_fuzz_failing_disk_then_save(factory, extra, step, code, weights, tmp_path_factory):
    from test_save_failures import _FailingOS

    import normrank.index.persistence as persistence
    from normrank import SaveError

    index = _fresh(factory)
    d = tmp_path_factory.mktemp("disk") / "ix"
    index.save(d)
    before = _snapshot(index)
    if extra:
        index.add(np.random.default_rng(extra).normal(size=(extra, DIM)) + 0.1)
    if weights:
        index.set_bases(np.linspace(0.5, 2.0, len(index)))
    COUNTS["save-failing"] += 1
    real_os = persistence.os
    persistence.os = _FailingOS(step, code)
    try:
        index.save(d)
        committed = True
    except SaveError:
        committed = False
    finally:
        persistence.os = real_os
    OUTCOMES[f"save-failing:{'ok' if committed else 'SaveError'}"] += 1
    names = {p.name for p in d.iterdir()}
    assert not [n for n in names if n.endswith(".tmp")], names
    COUNTS["load"] += 1
    loaded = NormIndex.load(d)
    assert _same(_snapshot(index) if committed else before, _snapshot(loaded))
    _round_trip(index, d)  # the disk is fine again: the next save must succeed


# -- valid saves mutated and re-signed: refused, or loaded into something that works --------------


def _resign(d) -> None:
    import hashlib
    import json

    m = json.loads((d / "manifest.json").read_text())
    gen = d / m["data"]["generation"]
    m["data"]["files"] = {
        p.name: {"bytes": p.stat().st_size, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
        for p in gen.iterdir()
    }
    (d / "manifest.json").write_text(json.dumps(m))


_MANIFEST_VALUES = [None, -1, 0, 1, 2**62, 2**70, 1e308, -17, 16, 0.5, "x", [], {}, True, float("nan")]
_MANIFEST_KEYS = [
    "alpha",
    "k_factor",
    "count",
    "dim",
    "tombstones",
    "next_id",
    "factory",
    "ann",
    "faiss_type",
]
_OPTION_KEYS = {"alpha", "k_factor", "ann"}  # in the manifest's options section; the rest in data


def _mutate(d, draw_kind: str, key: str, value, pos: int, rng) -> None:
    import io
    import json

    import faiss

    m = json.loads((d / "manifest.json").read_text())
    data = m["data"]
    gen = d / data["generation"]

    def npy(arr) -> bytes:
        bio = io.BytesIO()
        np.save(bio, arr, allow_pickle=False)
        return bio.getvalue()

    ids = np.load(gen / "ids.npy")
    norms = np.load(gen / "norms.npy")
    if draw_kind == "manifest":
        (m["options"] if key in _OPTION_KEYS else data)[key] = value
        (d / "manifest.json").write_text(json.dumps(m))
    elif draw_kind == "norm value":
        norms[pos % norms.size] = np.float32(value) if isinstance(value, float) else np.float32(1e-45)
        (gen / "norms.npy").write_bytes(npy(norms))
    elif draw_kind == "drop id":  # one id gone from ids/norms, the count kept consistent
        keep = np.arange(ids.size) != pos % ids.size
        (gen / "ids.npy").write_bytes(npy(ids[keep]))
        (gen / "norms.npy").write_bytes(npy(norms[keep]))
        data["count"] = int(keep.sum())
        if rng.random() < 0.5:  # ... and claimed as a tombstone
            (gen / "tombstones.npy").write_bytes(npy(ids[~keep]))
            data["tombstones"] = 1
        (d / "manifest.json").write_text(json.dumps(m))
    elif draw_kind == "permute ids":
        (gen / "ids.npy").write_bytes(npy(rng.permutation(ids)))
    elif draw_kind == "shift ids":
        (gen / "ids.npy").write_bytes(
            npy(ids + int(value) if isinstance(value, int) and abs(value) < 2**40 else ids * 2)
        )
    elif draw_kind == "weights":
        w = np.full(ids.size, value if isinstance(value, float) else 1.0, np.float32)
        (gen / "weights.npy").write_bytes(npy(w))
    elif draw_kind == "other faiss":  # a valid FAISS file of another kind, metric or size
        metric = faiss.METRIC_L2 if rng.random() < 0.5 else faiss.METRIC_INNER_PRODUCT
        kind = ["Flat", "HNSW8", "IVF1,Flat"][pos % 3]
        other = faiss.index_factory(DIM, kind, metric)
        x = rng.normal(size=(ids.size, DIM)).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        if not other.is_trained:
            other.train(x)
        wrapped = other if kind.startswith("IVF") else faiss.IndexIDMap2(other)
        wrapped.add_with_ids(x, ids)
        if rng.random() < 0.5:
            wrapped.metric_type = faiss.METRIC_INNER_PRODUCT  # the header lies about the inside
        (gen / "index.faiss").write_bytes(faiss.serialize_index(wrapped).tobytes())
    _resign(d)


@SETTINGS
@given(
    factory=FACTORIES,
    kind=st.sampled_from(
        ["manifest", "norm value", "drop id", "permute ids", "shift ids", "weights", "other faiss"]
    ),
    key=st.sampled_from(_MANIFEST_KEYS),
    value=st.sampled_from(_MANIFEST_VALUES + F32_EDGES),
    pos=st.integers(0, 100),
    seed=st.integers(0, 2**16),
)
def test_fuzz_resigned_mutations(factory, kind, key, value, pos, seed, tmp_path_factory):
    """A valid save, mutated and re-signed: the load refuses it (CorruptIndexError, or
    NewerFormatError for an ann method this normrank does not know) or what it loads searches,
    saves and loads again without an untyped error."""
    from normrank import CorruptIndexError, NewerFormatError

    d = tmp_path_factory.mktemp("mut") / "ix"
    _fresh(factory).save(d)
    _mutate(d, kind, key, value, pos, np.random.default_rng(seed))
    COUNTS["load-mutated"] += 1
    try:
        loaded = NormIndex.load(d)
    except (CorruptIndexError, NewerFormatError) as e:
        OUTCOMES[f"load-mutated:{type(e).__name__}:{kind}"] += 1
        return
    OUTCOMES[f"load-mutated:ok:{kind}"] += 1
    for a in (-2.0, 0.0, 1.0):
        out = _call("search-mutated", loaded, lambda a=a: loaded.search(_QUERIES, 12, alpha=a))
        assert not isinstance(out, NormrankError), out  # a loaded index must be searchable
        assert np.isin(out[1][out[1] >= 0], loaded.ids).all()
    _round_trip(loaded, tmp_path_factory.mktemp("mut2") / "ix")


# -- CLI --------------------------------------------------------------------------------------

try:
    from typer.testing import CliRunner

    import normrank.cli.index  # noqa: F401  (registers `normrank index`)
    from normrank.cli import app as cli_app
except ImportError:  # pragma: no cover - the CLI module is not in this build
    cli_app = None


@pytest.mark.skipif(cli_app is None, reason="normrank.cli.index is not available")
@settings(
    max_examples=1000 if FULL else 20,
    deadline=None,
    derandomize=not FULL,
    suppress_health_check=list(HealthCheck),
    database=None,
)
@given(
    emb=arrays(rows=st.integers(0, 5)),
    q=arrays(rows=st.integers(0, 3)),
    k=st.sampled_from(["1", "3", "0", "-1", "x", "99999999999", "1e3"]),
    alpha=st.sampled_from([None, "0.5", "-1", "nan", "inf", "x"]),
    factory=st.sampled_from(["Flat", "HNSW8", "bogus", "IVF99,Flat"]),
)
def test_fuzz_cli(emb, q, k, alpha, factory, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    runner = CliRunner()
    for name, arr in (("emb.npy", emb), ("q.npy", q)):
        try:
            np.save(tmp / name, np.asarray(arr), allow_pickle=False)
        except (ValueError, TypeError):
            (tmp / name).write_bytes(b"not an array")
    COUNTS["cli-build"] += 1
    args = ["index", "build", str(tmp / "emb.npy"), "--out", str(tmp / "ix"), "--factory", factory]
    res = runner.invoke(cli_app, args + ([] if alpha is None else ["--alpha", alpha]))
    _cli_ok(res)
    COUNTS["cli-search"] += 1
    args = ["index", "search", str(tmp / "ix"), str(tmp / "q.npy"), "-k", k]
    res = runner.invoke(cli_app, args + ([] if alpha is None else ["--alpha", alpha]))
    _cli_ok(res)
    OUTCOMES[f"cli:exit{res.exit_code}"] += 1


def _cli_ok(res) -> None:
    """A clean exit (0) or a usage/normrank error (2), never a traceback."""
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise AssertionError(f"CLI crashed: {res.exception!r}\n{res.output}") from res.exception
    assert res.exit_code in (0, 2), (res.exit_code, res.output)


# -- the Qdrant Edge backend: the same classes, then a close and a reopen ------------------------

HAVE_EDGE = importlib.util.find_spec("qdrant_edge") is not None


def _fresh_edge(path: Path):
    """A small filled shard, created for every example (not copied: the engine's write-ahead log
    files are sparse, 32 MB each, and a copy writes them out in full)."""
    from normrank.backends.qdrant_edge import QdrantEdgeNormIndex

    rng = np.random.default_rng(0)
    ei = QdrantEdgeNormIndex(path, DIM, alpha=0.5, exact=True)
    ei.add(rng.normal(size=(10, DIM)) * rng.lognormal(size=(10, 1)), ids=np.arange(10) * 3)
    return ei


def _edge_snapshot(ei):
    """Ids (sorted), norms, weights and a search of every document (k = n: no tie is cut at the k-th), its
    rows in (score, id) order so that equal scores (fuzzed vectors repeat) compare alike."""
    s, i = ei.search(_QUERIES, max(len(ei), 1), alpha=0.5)
    order = np.lexsort((i, -s.astype(np.float64)), axis=1)
    s, i = np.take_along_axis(s, order, 1), np.take_along_axis(i, order, 1)
    by_id = np.argsort(ei.ids, kind="stable")  # a reopened shard lists its points by id
    w = None if ei._weights is None else ei._weights[by_id]
    return ei.ids[by_id], ei.norm_of(ei.ids[by_id]), w, len(ei), s, i


def _same_edge(a, b) -> bool:
    return all(
        (x is None and y is None) or (x is not None and y is not None and np.array_equal(x, y))
        for x, y in zip(a, b, strict=True)
    )


def _call_edge(name: str, ei, fn) -> object:
    """As :func:`_call`, on the Edge backend: a raised error is a NormrankError and changes nothing."""
    name = f"edge:{name}"
    COUNTS[name] += 1
    before = _edge_snapshot(ei), (ei.alpha, ei.hnsw_ef, ei.k_factor, ei.n_tail, ei.exact)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = fn()
    except NormrankError as e:
        OUTCOMES[f"{name}:{type(e).__name__}"] += 1
        after = _edge_snapshot(ei), (ei.alpha, ei.hnsw_ef, ei.k_factor, ei.n_tail, ei.exact)
        assert _same_edge(before[0], after[0]) and before[1] == after[1], f"{name}: {e!r} changed the shard"
        return e
    OUTCOMES[f"{name}:ok"] += 1
    return out


def _edge_every_document_returnable(ei, alphas) -> None:
    if not len(ei):
        return
    q = np.random.default_rng(len(ei)).normal(size=(2, DIM))
    for a in alphas:
        COUNTS["edge:search-all"] += 1
        scores, ids = ei.search(q, len(ei), alpha=a)
        assert np.isfinite(scores).all(), (a, scores)
        for row in ids:
            assert sorted(row.tolist()) == sorted(ei.ids.tolist()), (a, row)


def _edge_reference(ei) -> NormIndex:
    """NormIndex over the shard's own points (its unit vectors times their norms, its weights):
    the exact reference an Edge search must equal, score for score (ties may swap ids)."""
    ids = ei.ids
    unit = np.array(ei._unit_vectors(ids), dtype=np.float64)
    ref = NormIndex(DIM)
    ref.add(unit * ei.norm_of(ids).astype(np.float64)[:, None], ids)
    if ei._weights is not None:
        ref.set_bases(ei._weights, ids)
    return ref


_EDGE_OPTIONS = st.tuples(
    st.sampled_from(["hnsw_ef", "k_factor", "n_tail", "exact", "alpha"]),
    st.sampled_from([0, 1, 7, -1, 2**16, 2**16 + 1, 2**64, 1.5, "8", None, True, np.nan, 16.5, [1.0]]),
)


@pytest.mark.skipif(not HAVE_EDGE, reason="qdrant-edge-py is not installed")
@settings(
    max_examples=300 if FULL else 40,
    deadline=None,
    derandomize=not FULL,
    suppress_health_check=list(HealthCheck),
    database=None,
)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("add"), arrays(rows=st.integers(0, 3)), ids_st),
            st.tuples(st.just("add-magnitudes"), st.lists(MAGNITUDES, min_size=1, max_size=3)),
            st.tuples(st.just("search"), arrays(rows=st.integers(0, 3)), k_st, alpha_st),
            st.tuples(st.just("search-valid"), st.integers(1, 12), st.floats(-16, 16)),
            st.tuples(st.just("remove"), id_query_st),
            st.tuples(st.just("norm_of"), id_query_st),
            st.tuples(
                st.just("set_bases"),
                st.one_of(
                    weights_st, st.lists(st.one_of(_good_weight, st.sampled_from(F32_STORABLE)), min_size=1)
                ),
                st.sampled_from([True, True, False]),
            ),
            st.tuples(st.just("clear_bases")),
            st.tuples(st.just("option"), _EDGE_OPTIONS),
        ),
        min_size=2,
        max_size=8,
    ),
    alphas=st.lists(st.floats(-16, 16), min_size=1, max_size=2),
)
def test_fuzz_edge_then_reopen(ops, alphas, tmp_path_factory):
    """The Edge backend under the core's hostile classes: every error typed and changing nothing;
    then every document returnable at alphas across [-16, 16], and the shard, closed and reopened,
    holds the same ids, norms and weights and answers the same."""
    from normrank.backends.qdrant_edge import QdrantEdgeNormIndex

    path = tmp_path_factory.mktemp("edgefz") / "shard"
    ei = _fresh_edge(path)
    rng = np.random.default_rng(len(ops))
    for op in ops:
        w_needed = ei._weights is not None
        if op[0] == "add":
            w = np.ones(len(np.atleast_1d(op[1]))) if w_needed and np.ndim(op[1]) else None
            _call_edge("add", ei, lambda op=op, w=w: ei.add(op[1], ids=op[2], bases=w))
        elif op[0] == "add-magnitudes":
            mags = np.array(op[1])
            x = rng.normal(size=(mags.size, DIM))
            x = x / np.linalg.norm(x, axis=1, keepdims=True) * mags[:, None]
            w = mags if w_needed else None
            _call_edge("add", ei, lambda x=x, w=w: ei.add(x, bases=w))
        elif op[0].startswith("search"):
            q, k, a = (rng.normal(size=(2, DIM)), *op[1:]) if op[0] == "search-valid" else op[1:]
            out = _call_edge("search", ei, lambda q=q, k=k, a=a: ei.search(q, k, alpha=a))
            if not isinstance(out, NormrankError):
                s, i = out
                assert s.dtype == np.float32 and i.dtype == np.int64 and s.shape == i.shape
                assert np.isin(i[i >= 0], ei.ids).all() and not np.isnan(s).any()
                assert np.isneginf(s[i < 0]).all()
                if op[0] == "search-valid" and len(ei):
                    COUNTS["edge:search-vs-normindex"] += 1
                    ref_s, _ = _edge_reference(ei).search(q, k, alpha=a)
                    np.testing.assert_allclose(s, ref_s, rtol=1e-5, atol=1e-30)
        elif op[0] == "set_bases":
            w = np.resize(np.array(op[1], dtype=object), len(ei)).tolist() if op[2] and op[1] else op[1]
            _call_edge("set_bases", ei, lambda w=w: ei.set_bases(w))
        elif op[0] == "clear_bases":
            _call_edge("clear_bases", ei, ei.clear_bases)
        elif op[0] == "option":
            name, value = op[1]
            _call_edge(f"set-{name}", ei, lambda name=name, value=value: setattr(ei, name, value))
        else:
            _call_edge(op[0], ei, lambda op=op: getattr(ei, op[0])(op[1]))
    ei.exact = True  # every document returnable: an exact search (the options fuzzed above may differ)
    _edge_every_document_returnable(ei, [-16.0, -2.0, 0.0, 2.0, 16.0, *alphas])
    before = _edge_snapshot(ei)
    options = {"hnsw_ef": ei.hnsw_ef, "k_factor": ei.k_factor, "n_tail": ei.n_tail}
    ei.close()
    COUNTS["edge:reopen"] += 1
    again = QdrantEdgeNormIndex(path, exact=True, **options)
    assert _same_edge(before, _edge_snapshot(again)), "the reopened shard differs"
    OUTCOMES["edge:reopen:ok"] += 1
    _edge_every_document_returnable(again, alphas)
    again.close()
    shutil.rmtree(path.parent, ignore_errors=True)  # hundreds of examples: keep the disk free


def test_zz_report(record_property):
    """The case counts (runs last in this module), to the report file (``pytest --junitxml``)."""
    record_property("total_calls", sum(COUNTS.values()))
    assert OUTCOMES["save+load:ok"] == COUNTS["save"]  # every save of an accepted state loaded
    assert OUTCOMES["edge:reopen:ok"] == COUNTS["edge:reopen"]  # every Edge shard reopened unchanged
    record_property("profile", "full" if FULL else "small")
    record_property("counts", dict(COUNTS))
    record_property("outcomes", dict(sorted(OUTCOMES.items())))
    # An untyped error is not caught by _call / _call_edge: it fails its test, so reaching here means 0.
    record_property("untyped_errors", 0)
