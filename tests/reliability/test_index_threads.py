"""Threads against one ``NormIndex`` (issue 46): readers (search, ``in``, ``norm_of``, ``ids`` /
``len``, ``reconstruct``, ``search_params``) beside writers (add fresh ids, remove, set / clear
weights) and a saver, then the same with exceptions injected into the threads at random moments.

Checkable because every id's vector is a closed-form function of the id (each id is added once,
never re-added): any ``(id, score)`` a search returns is checked against that id's vector and
its norm or its weight (``weight_of``, also closed form), and an id must have been added before
the search ended and not removed before it started. Every exception a thread sees must be one of
the documented typed ones (a reader asking for an id a writer just removed: ``UnknownIdError``;
``set_bases`` racing an add or a removal: ``InvalidInputError`` / ``UnknownIdError``).

``test_readers_writers_and_a_saver``: ids stay unique, every result and every norm is right, each
save loads into a consistent state, and after the join the index equals the writers' model.
``test_interrupted_threads_leave_the_index_usable``: after many ``PyThreadState_SetAsyncExc``
interrupts the index is still consistent (ids unique, ``len`` their count, norms right) and
usable (a fresh thread searches and adds; nobody waits on the lock).

No timing is asserted: threads loop until each has made enough calls; the wall-clock bound only
turns a starved or deadlocked thread into a failure instead of a hang. Profiles (env
NORMRANK_TEST_PROFILE): ``small`` (default, CI) and ``full`` (ten times the calls).
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from types import FrameType

import numpy as np
import pytest

from normrank import NormIndex
from normrank.errors import InvalidInputError, UnknownIdError

FULL = os.environ.get("NORMRANK_TEST_PROFILE", "small") == "full"
ENOUGH = 1000 if FULL else 100  # calls each thread makes at least (the saver a fifth: each is slow)
INTERRUPTS = 4000 if FULL else 400  # exceptions injected in the interrupt test
BOUND_S = 300.0  # generous: only a starved or deadlocked thread gets here
JOIN_S = 30.0
DIM = 8
CORE = np.arange(100, dtype=np.int64)  # never removed
WRITER_BASE = 1_000_000  # writer w adds ids WRITER_BASE * (w + 1) + j
FACTORIES = ["Flat", "IVF4,Flat", "HNSW16"]
COUNTS: Counter[str] = Counter()


def vectors(ids: np.ndarray) -> np.ndarray:
    """Raw vector of each id: direction and norm closed-form in the id."""
    i = np.asarray(ids, dtype=np.float64).reshape(-1)[:, None]
    freqs = np.arange(1, DIM // 2 + 1, dtype=np.float64)[None, :] * 0.7368
    direction = np.concatenate([np.cos(i * freqs), np.sin(i * freqs)], axis=1) + 0.05 * (np.arange(DIM) + 1)
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    return direction * norm_of(ids)[:, None]


def norm_of(ids: np.ndarray) -> np.ndarray:
    return 0.5 + (np.asarray(ids, dtype=np.int64).reshape(-1) % 17) * 0.25


def weight_of(ids: np.ndarray) -> np.ndarray:
    """The weight ``set_bases`` gives each id (distinct from its norm)."""
    return 0.3 + (np.asarray(ids, dtype=np.int64).reshape(-1) % 11) * 0.4


def build(factory: str) -> NormIndex:
    index = NormIndex(DIM, factory=factory, k_factor=50)
    if not index.is_trained:
        index.train(vectors(np.arange(10**7, 10**7 + 500)))
    if factory.startswith("IVF"):
        index.set_search_params(nprobe=4)
    if factory.startswith("HNSW"):
        index.set_search_params(ef_search=64)
    index.add(vectors(CORE), ids=CORE)
    return index


def check_results(q: np.ndarray, alpha: float, scores: np.ndarray, ids: np.ndarray) -> None:
    """Each returned id's score is its cosine times its norm's or its weight's power."""
    found = ids >= 0
    got = ids[found]
    u = vectors(got)
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    rows = np.nonzero(found)[0]
    cos = np.einsum("nd,nd->n", qn[rows], u)
    by_norm, by_weight = cos * norm_of(got) ** alpha, cos * weight_of(got) ** alpha
    s = scores[found].astype(np.float64)
    ok = np.isclose(s, by_norm, rtol=2e-4, atol=2e-5) | np.isclose(s, by_weight, rtol=2e-4, atol=2e-5)
    assert ok.all(), f"a score not of its id: {got[~ok][:5]}"
    for row in range(ids.shape[0]):
        r = ids[row][ids[row] >= 0]
        assert np.unique(r).size == r.size, "an id returned twice"
        srow = scores[row][ids[row] >= 0]
        assert (np.diff(srow) <= 1e-5 * np.maximum(1.0, np.abs(srow[1:]))).all(), "not best first"


class Soak:
    """Threads, their counts and errors, and the writers' model (what each writer added and
    removed, in the order the calls returned)."""

    def __init__(self, index: NormIndex) -> None:
        self.index = index
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.ops: Counter[str] = Counter()
        self.started: set[int] = set(CORE.tolist())  # ids whose add has begun
        self.removed: list[int] = []  # ids whose remove has returned
        self.live: list[set[int]] = [set(), set()]  # per writer: its ids in the index
        self.threads: list[threading.Thread] = []
        self.params = index.search_params
        self.reads_faiss = True  # probes reconstruct vectors (read from the FAISS index)

    def spawn(self, name: str, body: Callable[[random.Random], None], seed: int) -> None:
        def run() -> None:
            rng = random.Random(seed)
            try:
                while not self.stop.is_set():
                    body(rng)
                    self.ops[name] += 1
            except BaseException as e:  # surfaced in the main thread
                self.errors.append(e)
                self.stop.set()

        self.threads.append(threading.Thread(target=run, name=name, daemon=True))

    # -- readers ------------------------------------------------------------------------------

    def search(self, rng: random.Random) -> None:
        nq = rng.randint(1, 3)
        q = np.array([[rng.gauss(0, 1) for _ in range(DIM)] for _ in range(nq)])
        alpha = rng.uniform(-1.5, 1.0)
        n_removed = len(self.removed)
        scores, ids = self.index.search(q[0] if nq == 1 else q, rng.randint(1, 30), alpha=alpha)
        gone = set(self.removed[:n_removed])  # removed before the search began
        started = set(self.started)
        for i in ids[ids >= 0].tolist():
            assert i in started, f"id {i} returned before its add began"
            assert i not in gone, f"id {i} returned after its removal"
        check_results(q, alpha, scores, ids)

    def probe(self, rng: random.Random) -> None:
        ids = self.index.ids
        assert np.unique(ids).size == ids.size, "an id twice"
        assert np.isin(CORE, ids).all(), "a core id is missing"
        assert len(self.index) >= CORE.size
        pick = int(rng.choice(ids.tolist()))
        assert pick in self.index or pick >= WRITER_BASE  # (a writer's id may be removed since)
        try:
            np.testing.assert_allclose(self.index.norm_of([pick]), norm_of([pick]), rtol=1e-6)
            if self.reads_faiss:
                np.testing.assert_allclose(
                    self.index.reconstruct(pick), vectors([pick])[0], rtol=1e-5, atol=1e-5
                )
        except UnknownIdError:  # the documented error for an id a writer just removed
            assert pick >= WRITER_BASE, "a core id reported unknown"
            self.ops["probe:unknown"] += 1
        assert self.index.search_params == self.params

    # -- writers ------------------------------------------------------------------------------

    def writer(self, w: int) -> Callable[[random.Random], None]:
        next_j = [0]

        def body(rng: random.Random) -> None:
            live = self.live[w]
            if len(live) < 40 and (not live or rng.random() < 0.6):
                n = rng.randint(1, 4)
                ids = WRITER_BASE * (w + 1) + next_j[0] + np.arange(n, dtype=np.int64)
                next_j[0] += n
                self.started.update(ids.tolist())
                # bases= is required while bases are set, ignored while they are not
                self.index.add(vectors(ids), ids=ids, bases=weight_of(ids))
                live.update(ids.tolist())
            else:
                gone = rng.sample(sorted(live), min(len(live), rng.randint(1, 3)))
                assert self.index.remove(gone) == len(gone)
                live.difference_update(gone)
                self.removed.extend(gone)

        return body

    def weigher(self, rng: random.Random) -> None:
        if rng.random() < 0.5:
            self.index.clear_bases()
            return
        ids = self.index.ids
        try:  # a writer may add or remove between reading the ids and setting
            self.index.set_bases(weight_of(ids), ids=ids)
        except (InvalidInputError, UnknownIdError):
            self.ops["weigher:raced"] += 1

    # -- saver --------------------------------------------------------------------------------

    def saver(self, folder: str) -> Callable[[random.Random], None]:
        def body(rng: random.Random) -> None:
            path = os.path.join(folder, f"save{rng.randint(0, 1)}")
            self.index.save(path)
            check_consistent(NormIndex.load(path))

        return body


def check_consistent(index: NormIndex) -> None:
    """One state: unique ids, ``len`` their count, every norm right, weights all norms or all
    ``weight_of``, and every document findable by its own vector."""
    ids = index.ids
    assert np.unique(ids).size == ids.size == len(index), "ids not unique"
    np.testing.assert_allclose(index.norms, norm_of(ids), rtol=1e-6)
    np.testing.assert_allclose(index.norm_of(ids), norm_of(ids), rtol=1e-6)
    w = index.bases
    assert np.allclose(w, norm_of(ids), rtol=1e-6) or np.allclose(w, weight_of(ids), rtol=1e-6), (
        "mixed weights"
    )


def run_until_enough(soak: Soak, extra: Callable[[], bool] | None = None) -> None:
    """Start the threads, wait until each made ``ENOUGH`` calls (and ``extra`` says done), stop
    and join them; a thread still alive after ``JOIN_S`` is a deadlock."""
    for t in soak.threads:
        t.start()
    t0 = time.monotonic()
    while not soak.stop.is_set() and time.monotonic() - t0 < BOUND_S:
        if all(soak.ops[t.name] >= enough(t.name) for t in soak.threads) and (extra is None or extra()):
            break
        time.sleep(0.01)
    soak.stop.set()
    join_all(soak.threads)


def enough(name: str) -> int:
    return ENOUGH // 5 if name == "saver" else ENOUGH


def join_all(threads: list[threading.Thread]) -> None:
    for t in threads:
        t.join(JOIN_S)
    if any(t.is_alive() for t in threads):
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)  # where each one waits
    assert not any(t.is_alive() for t in threads), "deadlock: a thread did not finish"


@pytest.mark.parametrize("factory", FACTORIES)
def test_readers_writers_and_a_saver(factory: str) -> None:
    index = build(factory)
    soak = Soak(index)
    folder = tempfile.mkdtemp(prefix="normrank-threads-")
    try:
        for s in range(2):
            soak.spawn(f"search{s}", soak.search, seed=s)
        soak.spawn("probe", soak.probe, seed=10)
        for w in range(2):
            soak.spawn(f"writer{w}", soak.writer(w), seed=20 + w)
        soak.spawn("weigher", soak.weigher, seed=30)
        soak.spawn("saver", soak.saver(folder), seed=40)
        run_until_enough(soak)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if soak.errors:
        raise soak.errors[0]
    starved = {t.name: soak.ops[t.name] for t in soak.threads if soak.ops[t.name] < enough(t.name)}
    assert not starved, f"no progress in {BOUND_S:.0f} s (starved?): {starved}"
    # After the join the index is the writers' model.
    want = sorted([*CORE.tolist(), *soak.live[0], *soak.live[1]])
    assert sorted(index.ids.tolist()) == want
    check_consistent(index)
    for i in [*soak.removed[:20], *soak.removed[-20:]]:
        assert i not in index
    COUNTS.update({f"{factory}:{k}": v for k, v in soak.ops.items()})


# -- interrupts ------------------------------------------------------------------------------------


class Interrupt(BaseException):
    """Stands for KeyboardInterrupt: a BaseException that library code must not swallow."""


def queued(index: NormIndex, thread: threading.Thread) -> bool:
    """Whether ``thread`` waits in the index lock's queue.

    The injector interrupts a thread only then. An interrupt delivered as ``FairLock.__exit__`` /
    ``release`` start (or a second one inside the clean-up of a first) leaves the lock taken: the
    window fair_lock's docstring documents, which no lock written in Python can close. Injected
    at any moment, 2 of 4 runs of the reader soak hung with the lock held by a thread that had
    finished (consistent with that window; an interrupt set while a thread is in C code arrives
    at the next Python call, which ends a ``with`` block's body is ``__exit__``). A queued
    thread takes it in ``Event.wait``, or once handed the lock, at the first call of its
    ``with`` body, which ``__exit__`` then releases."""
    return any(entry[0] == thread.ident for entry in list(index._lock._waiters))


def interrupt(thread: threading.Thread) -> bool:
    """Raise ``Interrupt`` in ``thread`` at its next bytecode boundary (False if it has ended)."""
    n = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(Interrupt))
    return n == 1


def aligned(index: NormIndex) -> bool:
    """FAISS holds one row per document (plus the tombstones an HNSW keeps)."""
    return index.faiss_index.ntotal == len(index) + len(index._docs.tombstones)


def interrupt_soak(
    factory: str, targets: tuple[str, ...], *, searching: bool
) -> tuple[NormIndex, Soak, Counter[str], int]:
    """A reader and two writers; ``INTERRUPTS`` exceptions injected into the threads named in
    ``targets``, each at a random moment of its work. The reader searches and probes, or (not
    ``searching``) only reads the doc table. Returns the index, the soak, the interrupts caught
    per place, and how many were sent."""
    index = build(factory)
    soak = Soak(index)
    hits: Counter[str] = Counter()
    last: dict[int, str] = {}  # thread ident -> where its last interrupt landed

    def catching(name: str, body: Callable[[random.Random], None]) -> Callable[[random.Random], None]:
        def run(rng: random.Random) -> None:
            try:
                body(rng)
            except Interrupt as e:
                hits[name] += 1
                tb = e.__traceback__  # where it landed (for a deadlock's message)
                while tb is not None and tb.tb_next is not None:
                    tb = tb.tb_next
                if tb is not None:
                    last[threading.get_ident()] = f"{tb.tb_frame.f_code.co_name}:{tb.tb_lineno}"

        return run

    def sturdy(name: str, body: Callable[[random.Random], None], seed: int) -> None:
        """A thread that survives an interrupt landing anywhere in its loop, not only in ``body``."""

        def run() -> None:
            rng = random.Random(seed)
            while not soak.stop.is_set():
                try:
                    while not soak.stop.is_set():
                        body(rng)
                        soak.ops[name] += 1
                except Interrupt:
                    hits[f"{name}:loop"] += 1
                except BaseException as e:  # surfaced in the main thread
                    soak.errors.append(e)
                    soak.stop.set()

        soak.threads.append(threading.Thread(target=run, name=name, daemon=True))

    soak.reads_faiss = searching
    read = (lambda rng: (soak.search if rng.random() < 0.5 else soak.probe)(rng)) if searching else soak.probe
    sturdy("reader", catching("reader", read), 1)
    for w in range(2):
        sturdy(f"writer{w}", catching(f"writer{w}", interrupted_writer(soak, w)), 20 + w)
    victims = [t for t in soak.threads if t.name.startswith(targets)]
    pick, sent = random.Random(46), [0]

    def inject() -> bool:
        if sent[0] < INTERRUPTS:
            target = pick.choice(victims)
            if queued(index, target):
                sent[0] += interrupt(target)
                time.sleep(pick.uniform(0, 0.002))  # let it take it before the next
            else:
                time.sleep(0.0002)
            return False
        return True

    try:
        run_until_enough_with(soak, inject)
    except AssertionError:
        lock = index._lock
        owner = lock._owner
        raise AssertionError(
            f"deadlock: lock held {len(lock._holds)} times by thread {owner} "
            f"(alive: {any(t.ident == owner and t.is_alive() for t in soak.threads)}), "
            f"whose last interrupt landed in {last.get(owner)}; waiting {lock.waiting()}"
        ) from None
    if soak.errors:
        raise soak.errors[0]
    assert sum(hits.values()) > 0, "no interrupt landed"
    COUNTS.update({f"{factory}:interrupts:{'+'.join(targets)}:{k}": v for k, v in hits.items()})
    COUNTS[f"{factory}:interrupts:{'+'.join(targets)}:sent"] += sent[0]
    return index, soak, hits, sent[0]


def fresh_thread_works(index: NormIndex) -> None:
    """A new thread searches and adds within the join bound, and nobody waits on the lock."""
    done: list[str] = []
    new = np.array([9 * WRITER_BASE], dtype=np.int64)

    def fresh() -> None:
        index.add(vectors(new), ids=new, bases=weight_of(new))
        q = vectors(new)
        scores, ids = index.search(q, 5, alpha=0.0)
        check_results(q, 0.0, scores, ids)
        assert new[0] in ids[0] and abs(scores[0, 0] - 1.0) < 1e-5, "a document's own vector does not find it"
        done.append("ok")

    t = threading.Thread(target=fresh, daemon=True)
    t.start()
    join_all([t])
    assert index._lock.waiting() == 0
    assert done == ["ok"] and int(new[0]) in index


@pytest.mark.parametrize("factory", FACTORIES)
def test_interrupted_readers_leave_the_index_usable_and_right(factory: str) -> None:
    """Interrupts into the searching / probing thread only (they may land while it waits for the
    lock, holds it, or checks a result): every result stays right and the index usable."""
    index, _, _, _ = interrupt_soak(factory, ("reader",), searching=True)
    check_consistent(index)
    assert aligned(index), "a reader's interrupt changed the FAISS index"
    fresh_thread_works(index)
    check_consistent(index)


@pytest.mark.parametrize("factory", FACTORIES)
def test_interrupted_writers_leave_the_lock_and_ids_consistent(factory: str) -> None:
    """Interrupts into the writers too: the lock is free and usable, the documents stay one
    consistent table (ids unique, ``len`` their count, every norm right; the model is re-derived
    from the index), and FAISS holds exactly one row per document, so every search stays right.
    (Interrupts reach a thread while it waits for the lock, see ``queued``; an add / remove
    interrupted between FAISS's change and the table's is ``test_an_interrupt_between_faiss_and_
    the_doc_table``.)"""
    index, _, _, _ = interrupt_soak(factory, ("reader", "writer"), searching=True)
    check_consistent(index)
    assert np.isin(CORE, index.ids).all()
    assert aligned(index), f"FAISS holds {index.faiss_index.ntotal} rows for {len(index)} documents"
    fresh_thread_works(index)
    check_consistent(index)


class _Stop(BaseException):
    pass


@pytest.mark.parametrize("step", ["append", "drop"])
def test_an_interrupt_between_faiss_and_the_doc_table(step: str) -> None:
    """Deterministic: an exception raised as ``DocTable.append`` / ``DocTable.drop`` starts, the
    moment CPython delivers a pending async exception (``PyThreadState_SetAsyncExc``, a signal
    handler's KeyboardInterrupt) when a Python function begins. The call must then either have
    happened or not, as for every other interrupted call."""
    from normrank.index.doc_table import DocTable

    index = build("Flat")
    target = getattr(DocTable, step).__code__

    def tracer(frame: FrameType, event: str, _arg: object) -> None:
        if event == "call" and frame.f_code is target:
            sys.settrace(None)
            raise _Stop
        return None

    new = np.array([WRITER_BASE], dtype=np.int64)
    sys.settrace(tracer)
    try:
        if step == "append":
            index.add(vectors(new), ids=new)
        else:
            index.remove([5])
    except _Stop:
        pass
    finally:
        sys.settrace(None)
    later = np.array([WRITER_BASE + 1], dtype=np.int64)
    index.add(vectors(later), ids=later)
    assert aligned(index), f"FAISS holds {index.faiss_index.ntotal} rows for {len(index)} documents"
    q = vectors(later)
    scores, ids = index.search(q, 3, alpha=0.5)
    check_results(q, 0.5, scores, ids)
    np.testing.assert_allclose(index.reconstruct(int(later[0])), q[0], rtol=1e-5)


def interrupted_writer(soak: Soak, w: int) -> Callable[[random.Random], None]:
    """Adds fresh ids and removes the writer's own, reading what is live from the index (an
    interrupted call may or may not have taken effect)."""
    next_j = [0]

    def body(rng: random.Random) -> None:
        base = WRITER_BASE * (w + 1)
        ids = soak.index.ids
        mine = ids[(ids >= base) & (ids < base + WRITER_BASE)]
        if mine.size < 40 and (not mine.size or rng.random() < 0.6):
            n = rng.randint(1, 4)
            new = base + next_j[0] + np.arange(n, dtype=np.int64)
            next_j[0] += n  # before the add: an interrupted add never reuses its ids
            soak.started.update(new.tolist())
            soak.index.add(vectors(new), ids=new, bases=weight_of(new))
        else:
            gone = rng.sample(mine.tolist(), min(int(mine.size), rng.randint(1, 3)))
            soak.index.remove(gone)
            soak.removed.extend(gone)

    return body


def run_until_enough_with(soak: Soak, step: Callable[[], bool]) -> None:
    """As :func:`run_until_enough`, calling ``step`` in the loop (the injector)."""
    for t in soak.threads:
        t.start()
    t0 = time.monotonic()
    while not soak.stop.is_set() and time.monotonic() - t0 < BOUND_S:
        done = step()
        if done and all(soak.ops[t.name] >= ENOUGH for t in soak.threads):
            break
    soak.stop.set()
    join_all(soak.threads)


def test_counts_are_recorded(record_property: Callable[[str, object], None]) -> None:
    """Runs after the soaks (file order): the calls each thread made go to the report."""
    record_property("profile", "full" if FULL else "small")
    record_property("counts", dict(sorted(COUNTS.items())))
