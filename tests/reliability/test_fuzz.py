"""Bad input, fuzzed: hypothesis drives ``add``, ``search``, ``remove``, ``save``/``load`` and the
CLI with hostile values. Zero crashes; every exception is a NormrankError (the input errors are
also ValueError / KeyError / TypeError); a rejected call leaves the index exactly as it was.

Profiles (env NORMRANK_TEST_PROFILE): ``small`` (default, CI) runs a few hundred cases;
``full`` runs >= 10,000 in total. The counts are printed at the end of the module (``-s``).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections import Counter

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
    max_examples=2500 if FULL else 50,
    deadline=None,
    derandomize=not FULL,  # CI is reproducible; the full profile explores
    suppress_health_check=list(HealthCheck),
    database=None,
)

# -- hostile values -------------------------------------------------------------------------

SPECIAL = [0.0, -0.0, 1.0, -1.0, np.nan, np.inf, -np.inf, 1e-45, 1e-30, 1e38, 3.5e38, 1e300, -1e300, 1e-320]
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
    st.sampled_from([np.nan, np.inf, -np.inf, 1e308, -1e308, "x", [1.0], [1.0, 2.0, 3.0], [[1.0]]]),
    st.lists(st.one_of(st.floats(-2, 2), st.just(np.nan)), max_size=7),
)
k_st = st.one_of(
    st.integers(1, 12),
    st.integers(-2, 12),
    st.sampled_from([2**31, 2**40, 2**63 - 1, 10**30, 1.5, "3", None, True, np.int64(3)]),
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
    return index.ids, index.norms, index.weights, index.alpha, len(index), s, i


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
@given(factory=FACTORIES, q=arrays(rows=st.integers(0, 4)), k=k_st, alpha=alpha_st)
def test_fuzz_search(factory, q, k, alpha):
    index = _fresh(factory)
    out = _call("search", index, lambda: index.search(q, k, alpha=alpha))
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
            st.tuples(
                st.just("weights"), st.lists(st.sampled_from([0.5, 2.0, 0.0, -1.0, np.nan]), max_size=12)
            ),
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
            _call("add", index, lambda op=op, w=w: index.add(op[1], ids=op[2], weights=w))
        elif op[0] == "remove":
            _call("remove", index, lambda op=op: index.remove(op[1]))
        elif op[0] == "weights":
            _call("set_weights", index, lambda op=op: index.set_weights(op[1]))
        else:

            def set_alpha(value=op[1]):
                index.alpha = value

            _call("alpha", index, set_alpha)
    d = tmp_path_factory.mktemp("fz") / "ix"
    _call("save", index, lambda: index.save(d))
    COUNTS["load"] += 1
    loaded = NormIndex.load(d)
    assert _same(_snapshot(index), _snapshot(loaded))


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


def test_zz_report():
    """Prints the case counts (runs last in this module)."""
    total = sum(COUNTS.values())
    print(f"\n[fuzz] profile={'full' if FULL else 'small'} total_calls={total} {dict(COUNTS)}")
    print(f"[fuzz] outcomes {dict(sorted(OUTCOMES.items()))}")
