"""Model-based test of ``NormIndex`` (issue 46): a hypothesis state machine drives add, remove,
set_bases / clear_bases, save + load and search against a pure-numpy model, and after every
step the index must equal the model.

The model is ``{id: raw float64 vector}`` plus optional per-document base overrides and the set
of ids removed earlier. Its search oracle is brute force ``cos(q, d) * w_d**alpha`` over the live
documents (``w_d`` the override or ``||d||``), compared with ties allowed (``assert_same_topk``:
sorted scores agree position by position, and each returned id's oracle score is the one
reported). ANN kinds are searched exhaustively (IVF ``nprobe = nlist``, HNSW ``efSearch`` far
above ``ntotal``), so the oracle is exact for every kind.

Kinds (one machine each, so that every kind runs in every profile): ``NormIndex(d)`` over Flat,
IVF, HNSW and an IVF with a refine stage; and user-built ``faiss.IndexIDMap`` /
``faiss.IndexIDMap2`` over Flat, IVF and HNSW wrapped with ``NormIndex.from_faiss`` (unit vectors
with ``norms={id: norm}``, or raw vectors whose norms it recovers).

What it proves: ids, membership, norms, bases and reconstructed vectors follow every accepted
call; refused calls (a duplicate id, an id removed from an index that keeps removed vectors, an
unknown id in a removal, an add without bases where bases are set) raise their typed error
and change nothing; a save + load continues as the same index; every search is exact.
A user's own FAISS ``remove_ids`` before wrapping an id map over an IVF (refused with
"Rebuild") is covered by ``test_round5_defects.py`` and not repeated here.

Profiles (env NORMRANK_TEST_PROFILE): default (CI) ``small``, derandomized; ``full`` explores
with many more examples and steps. ``test_counts_are_recorded`` records how many rules ran.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable

import faiss
import numpy as np
import pytest
from conftest import assert_same_topk
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from normrank import NormIndex
from normrank.errors import DuplicateIdError, InvalidInputError, UnknownIdError
from normrank.scoring import WEIGHT_CAP
from normrank.search.plan import SearchStats

FULL = os.environ.get("NORMRANK_TEST_PROFILE", "small") == "full"
D = 8
NLIST = 4
EF_SEARCH = 1000  # far above any ntotal here: HNSW's search visits the whole graph
SETTINGS = settings(
    max_examples=100 if FULL else 20,
    stateful_step_count=50 if FULL else 30,
    deadline=None,
    derandomize=not FULL,  # CI is reproducible; the full profile explores
    suppress_health_check=list(HealthCheck),
    database=None,
    print_blob=True,  # a failure in the full profile (not derandomized) prints its @reproduce_failure
)
COUNTS: Counter[str] = Counter()
TRAIN = np.random.default_rng(46).normal(size=(256, D))  # IVF centroids: fixed, not part of a case
TRAIN_UNIT = (TRAIN / np.linalg.norm(TRAIN, axis=1, keepdims=True)).astype(np.float32)
KEEPS_REMOVED = {"hnsw", "refine", "idmap-hnsw", "idmap2-hnsw"}  # FAISS cannot delete: tombstones


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _user_ivf() -> faiss.IndexIVFFlat:
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(D), D, NLIST, faiss.METRIC_INNER_PRODUCT)
    ivf.train(TRAIN_UNIT)
    return ivf


def _user_hnsw() -> faiss.IndexHNSWFlat:
    return faiss.IndexHNSWFlat(D, 8, faiss.METRIC_INNER_PRODUCT)


def build(kind: str, ids: np.ndarray, x: np.ndarray) -> NormIndex:
    """The index of ``kind`` holding raw vectors ``x`` under ``ids``, searched exhaustively."""
    if kind in ("flat", "ivf", "hnsw", "refine"):
        factory = {
            "flat": "Flat",
            "ivf": f"IVF{NLIST},Flat",
            "hnsw": "HNSW8",
            "refine": f"IVF{NLIST},Flat,RFlat",
        }
        index = NormIndex(D, factory=factory[kind])
        if not index.is_trained:
            index.train(TRAIN)
        if ids.size:
            index.add(x, ids=ids)
    else:  # a user's own id map, filled before wrapping
        idmap_name, inner_name, *raw = kind.split("-")
        inner: faiss.Index = {
            "flat": lambda: faiss.IndexFlatIP(D),
            "flatl2": lambda: faiss.IndexFlatL2(D),
            "ivf": _user_ivf,
            "hnsw": _user_hnsw,
        }[inner_name]()
        user = (faiss.IndexIDMap2 if idmap_name == "idmap2" else faiss.IndexIDMap)(inner)
        if raw:  # raw vectors: from_faiss recovers the norms and rebuilds over unit vectors
            user.add_with_ids(x.astype(np.float32), ids)
            index = NormIndex.from_faiss(user)
        else:
            user.add_with_ids(_unit(x) if ids.size else x.astype(np.float32), ids)
            norms = dict(zip(ids.tolist(), np.linalg.norm(x, axis=1).tolist(), strict=True))
            index = NormIndex.from_faiss(user, norms=norms)
    if "ivf" in kind or kind == "refine":
        index.set_search_params(nprobe=NLIST)
    if "hnsw" in kind:
        index.set_search_params(ef_search=EF_SEARCH)
    return index


def oracle(x: np.ndarray, w: np.ndarray, q: np.ndarray, alpha: float | np.ndarray) -> np.ndarray:
    """``cos(q, d) * w_d**alpha`` in float64, independent of normrank's code, with its documented
    float32 range rule: a power beyond ``WEIGHT_CAP`` (half float32's maximum) saturates there."""
    cos = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (x / np.linalg.norm(x, axis=1, keepdims=True)).T
    a = np.asarray(alpha, dtype=np.float64)
    with np.errstate(over="ignore"):
        power = w[None, :] ** (a[:, None] if a.ndim else a)
    return cos * np.minimum(power, WEIGHT_CAP)


vector_seed = st.integers(0, 2**32 - 1)
alpha_scalar = st.one_of(st.floats(-2.0, 2.0), st.sampled_from([0.0, 1.0, -1.0, -16.0, 16.0]))


class IndexModel(RuleBasedStateMachine):
    """One index against the model; ``KIND`` is set by each subclass."""

    KIND = "flat"

    def __init__(self) -> None:
        super().__init__()
        self.vectors: dict[int, np.ndarray] = {}  # live id -> raw vector (float64)
        self.bases: dict[int, float] | None = None  # the override, when set
        self.removed: set[int] = set()  # ids removed earlier (and not added again)
        self.next_id = 0
        self.since_save = 0  # steps since the last save + load
        self.dir = tempfile.mkdtemp(prefix="normrank-model-")
        self.index: NormIndex

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- helpers ------------------------------------------------------------------------------

    def fresh_ids(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """New ids, ascending or scattered (gaps make the ids not ``0 .. n - 1``)."""
        if n == 0:
            return np.empty(0, np.int64)
        step = int(rng.integers(1, 4))
        out = self.next_id + step * np.arange(n, dtype=np.int64)
        self.next_id = int(out[-1]) + 1
        return rng.permutation(out)

    def raw_vectors(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Norms over four orders of magnitude; some copy a live document's direction (exact ties
        in cosine, or in score too when the norm is the same)."""
        x = rng.normal(size=(n, D)) * rng.lognormal(0.0, 1.5, size=(n, 1))
        live = list(self.vectors.values())
        for row in range(n):
            if live and rng.random() < 0.2:
                x[row] = live[int(rng.integers(len(live)))] * rng.choice([1.0, 1.0, 0.5, 3.0])
        return x

    def check_unchanged(self, before: tuple[np.ndarray, np.ndarray]) -> None:
        ids, norms = self.index.ids, self.index.norms
        np.testing.assert_array_equal(ids, before[0])
        np.testing.assert_array_equal(norms, before[1])

    def snapshot(self) -> tuple[np.ndarray, np.ndarray]:
        return self.index.ids, self.index.norms

    # -- rules --------------------------------------------------------------------------------

    @initialize(n=st.integers(0, 6), seed=vector_seed)
    def start(self, n: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        if self.KIND.endswith("raw"):
            n = max(n, 1)  # from_faiss recovers norms from stored vectors: an empty index is refused
        ids = self.fresh_ids(n, rng) if n else np.empty(0, np.int64)
        x = self.raw_vectors(n, rng)
        self.index = build(self.KIND, ids, x)
        self.vectors = {int(i): v for i, v in zip(ids, x, strict=True)}
        COUNTS[f"{self.KIND}:start"] += 1

    @rule(n=st.integers(1, 8), seed=vector_seed)
    def add_fresh(self, n: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        ids, x = self.fresh_ids(n, rng), self.raw_vectors(n, rng)
        w = None
        if self.bases is not None:
            w = rng.lognormal(0.0, 1.0, size=n)
            before = self.snapshot()
            with pytest.raises(InvalidInputError, match="bases"):
                self.index.add(x, ids=ids)  # rows without bases where bases are set
            self.check_unchanged(before)
        got = self.index.add(x, ids=ids, bases=w)
        np.testing.assert_array_equal(got, ids)
        for j, i in enumerate(ids.tolist()):
            self.vectors[i] = x[j]
            if self.bases is not None:
                self.bases[i] = float(np.float32(w[j]))
        COUNTS["add_fresh"] += 1

    @precondition(lambda self: self.vectors)
    @rule(data=st.data(), seed=vector_seed)
    def add_duplicate(self, data: st.DataObject, seed: int) -> None:
        rng = np.random.default_rng(seed)
        dup = data.draw(st.sampled_from(sorted(self.vectors)))
        ids = np.array([dup, *self.fresh_ids(int(rng.integers(0, 3)), rng)], dtype=np.int64)
        ids = rng.permutation(ids)  # the duplicate anywhere in the batch
        before = self.snapshot()
        w = None if self.bases is None else np.ones(ids.size)
        with pytest.raises(DuplicateIdError):
            self.index.add(self.raw_vectors(ids.size, rng), ids=ids, bases=w)
        self.check_unchanged(before)  # nothing of the batch was added
        COUNTS["add_duplicate"] += 1

    @precondition(lambda self: self.removed)
    @rule(data=st.data(), seed=vector_seed)
    def add_removed(self, data: st.DataObject, seed: int) -> None:
        rng = np.random.default_rng(seed)
        old = data.draw(st.sampled_from(sorted(self.removed)))
        x = self.raw_vectors(1, rng)
        w = None if self.bases is None else np.array([2.5])
        if self.KIND in KEEPS_REMOVED:
            before = self.snapshot()
            with pytest.raises(DuplicateIdError, match="removed earlier"):
                self.index.add(x, ids=[old], bases=w)
            self.check_unchanged(before)
            COUNTS["add_removed:refused"] += 1
            return
        self.index.add(x, ids=[old], bases=w)
        self.vectors[old] = x[0]
        self.removed.discard(old)
        if self.bases is not None:
            self.bases[old] = 2.5
        COUNTS["add_removed:added"] += 1

    @precondition(lambda self: self.vectors)
    @rule(data=st.data())
    def remove_present(self, data: st.DataObject) -> None:
        ids = data.draw(st.lists(st.sampled_from(sorted(self.vectors)), min_size=1, max_size=5, unique=True))
        assert self.index.remove(ids) == len(ids)
        for i in ids:
            del self.vectors[i]
            self.removed.add(i)
            if self.bases is not None:
                del self.bases[i]
        COUNTS["remove_present"] += 1

    @rule(data=st.data(), absent=st.integers(0, 10**6))
    def remove_absent(self, data: st.DataObject, absent: int) -> None:
        """An unknown id (never added, or removed earlier) raises UnknownIdError and the batch's
        present ids stay: ``remove`` checks every id before changing anything."""
        pool = [*sorted(self.removed), self.next_id + absent]
        bad = data.draw(st.sampled_from(pool))
        present = (
            data.draw(st.lists(st.sampled_from(sorted(self.vectors)), max_size=3, unique=True))
            if self.vectors
            else []
        )
        before = self.snapshot()
        with pytest.raises(UnknownIdError):
            self.index.remove([*present, bad])
        self.check_unchanged(before)
        COUNTS["remove_absent"] += 1

    @precondition(lambda self: self.vectors)
    @rule(seed=vector_seed, by_ids=st.booleans())
    def set_bases(self, seed: int, by_ids: bool) -> None:
        rng = np.random.default_rng(seed)
        w = rng.lognormal(0.0, 1.0, size=len(self.vectors))
        if by_ids:  # any order, through ids=
            ids = rng.permutation(np.array(sorted(self.vectors), dtype=np.int64))
            self.index.set_bases(w, ids=ids)
        else:  # in the index's storage order
            ids = self.index.ids
            self.index.set_bases(w)
        self.bases = {int(i): float(np.float32(v)) for i, v in zip(ids, w, strict=True)}
        COUNTS["set_bases"] += 1

    @precondition(lambda self: self.bases is not None)  # (else chosen far more often than the rest)
    @rule()
    def clear_bases(self) -> None:
        self.index.clear_bases()
        self.bases = None
        COUNTS["clear_bases"] += 1

    @precondition(
        lambda self: self.since_save >= 4
    )  # (hypothesis picked it most otherwise: the slowest rule)
    @rule()
    def save_and_load(self) -> None:
        params = self.index.search_params
        path = os.path.join(self.dir, "index")
        self.index.save(path)
        self.index = NormIndex.load(path)  # the machine goes on with the loaded copy
        self.since_save = 0
        assert self.index.search_params == params
        COUNTS["save_and_load"] += 1

    @rule(
        seed=vector_seed,
        nq=st.integers(1, 3),
        k=st.integers(1, 12),
        alpha=st.one_of(alpha_scalar, st.lists(alpha_scalar, min_size=3, max_size=3)),
        one_d=st.booleans(),
        stats=st.booleans(),
    )
    def search(
        self, seed: int, nq: int, k: int, alpha: float | list[float], one_d: bool, stats: bool
    ) -> None:
        rng = np.random.default_rng(seed)
        if one_d:  # one (dim,) query: ANN kinds take their single-query path
            nq = 1
        a: float | np.ndarray = np.array(alpha[:nq]) if isinstance(alpha, list) else alpha
        q = rng.normal(size=(nq, D))
        live = sorted(self.vectors)
        got = self.index.search(q[0] if one_d else q, k, alpha=a, return_stats=stats)
        if stats:
            assert len(got) == 3 and isinstance(got[2], SearchStats)
        scores, ids = got[0], got[1]
        assert scores.shape == ids.shape == (nq, k)
        x = np.array([self.vectors[i] for i in live]).reshape(len(live), D)
        w = np.array(
            [self.bases[i] if self.bases is not None else np.linalg.norm(self.vectors[i]) for i in live]
        )
        ref = oracle(x, w, q, a) if live else np.empty((nq, 0))
        assert_same_topk(ref, np.array(live, dtype=np.int64), scores, ids, k, tol=1e-4)
        COUNTS[f"search:{'array' if isinstance(alpha, list) else 'scalar'}"] += 1

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def matches_model(self) -> None:
        if not hasattr(self, "index"):
            return  # (before initialize)
        live = sorted(self.vectors)
        assert len(self.index) == len(live)
        ids = self.index.ids
        assert ids.size == np.unique(ids).size, "an id twice"
        assert sorted(ids.tolist()) == live
        for i in [*live[:3], *sorted(self.removed)[:3], self.next_id, -1]:
            assert (i in self.index) == (i in self.vectors), i
        if live:
            norms = np.linalg.norm(np.array([self.vectors[i] for i in live]), axis=1)
            np.testing.assert_allclose(self.index.norm_of(live), norms, rtol=1e-6)
            for i in live[:: max(1, len(live) // 3)]:  # a few vectors read back
                np.testing.assert_allclose(
                    self.index.reconstruct(i), self.vectors[i], rtol=1e-5, atol=1e-5 * norms.max()
                )
        if self.bases is not None:
            assert sorted(self.bases) == live
            want = np.array([self.bases[int(i)] for i in ids], dtype=np.float32)
            np.testing.assert_array_equal(self.index.bases, want)
        else:
            np.testing.assert_array_equal(self.index.bases, self.index.norms)
        self.since_save += 1
        COUNTS["steps"] += 1


KINDS = [
    "flat", "ivf", "hnsw", "refine",
    "idmap-flat", "idmap2-flat", "idmap-ivf", "idmap2-ivf", "idmap-hnsw", "idmap2-hnsw",
    "idmap2-flatl2-raw",
]  # fmt: skip


def _machine(kind: str) -> type:
    cls = type(f"IndexModel_{kind.replace('-', '_')}", (IndexModel,), {"KIND": kind})
    case = cls.TestCase
    case.settings = SETTINGS
    return case


TestFlat = _machine("flat")
TestIVF = _machine("ivf")
TestHNSW = _machine("hnsw")
TestRefine = _machine("refine")
TestIDMapFlat = _machine("idmap-flat")
TestIDMap2Flat = _machine("idmap2-flat")
TestIDMapIVF = _machine("idmap-ivf")
TestIDMap2IVF = _machine("idmap2-ivf")
TestIDMapHNSW = _machine("idmap-hnsw")
TestIDMap2HNSW = _machine("idmap2-hnsw")
TestIDMap2FlatL2Raw = _machine("idmap2-flatl2-raw")
assert len(KINDS) == 11  # one TestCase per kind above


def test_counts_are_recorded(record_property: Callable[[str, object], None]) -> None:
    """Runs after the machines (file order): every rule ran, and the counts go to the report."""
    record_property("profile", "full" if FULL else "small")
    record_property("counts", dict(sorted(COUNTS.items())))
    if not all(COUNTS[f"{kind}:start"] for kind in KINDS):
        pytest.skip("not every machine ran in this session (a -k selection)")
    for name in ("add_fresh", "add_duplicate", "remove_present", "remove_absent", "set_bases",
                 "clear_bases", "save_and_load", "search:scalar", "search:array", "steps",
                 "add_removed:refused", "add_removed:added"):  # fmt: skip
        assert COUNTS[name] > 0, f"rule {name} never ran"
