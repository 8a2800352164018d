"""FairLock (NormIndex's lock): a thread that waits gets the lock before a thread that asks later,
so writers that ask again at once cannot starve a waiting search. No clock: each step waits until
the threads are queued (the lock's own count), with a generous bound that only a deadlock reaches."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from normrank import NormIndex
from normrank.index.fair_lock import FairLock


def wait_until(cond, what: str) -> None:
    deadline = time.monotonic() + 120  # only a deadlock gets here
    while not cond():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.001)


def test_a_waiting_reader_gets_in_between_a_writers_back_to_back_writes() -> None:
    lock, order = FairLock(), []

    def writer() -> None:
        for _ in range(3):
            with lock:  # released and asked again at once, as a writing loop does
                order.append("w")

    def reader() -> None:
        with lock:
            order.append("r")

    lock.acquire()
    tw = threading.Thread(target=writer)
    tw.start()
    wait_until(lambda: lock.waiting() == 1, "the writer queued")
    tr = threading.Thread(target=reader)
    tr.start()
    wait_until(lambda: lock.waiting() == 2, "the reader queued behind it")
    lock.release()
    tw.join(60)
    tr.join(60)
    assert order == ["w", "r", "w", "w"]  # threading.RLock lets the writer win again: w, w, w, r


def test_two_writers_let_the_search_in_after_one_write_each() -> None:
    """NormIndex: a search queued behind two writers runs after at most their two queued writes."""
    index = NormIndex(4)
    index.add(np.eye(4), ids=np.arange(4))
    order: list[str] = []

    def writer(w: int) -> None:
        for i in range(3):
            with index._lock:  # reentrant: recorded in the order the writes ran
                index.add(np.ones((1, 4)), ids=np.array([100 * (w + 1) + i]))
                order.append(f"w{w}")

    def search() -> None:
        with index._lock:
            index.search(np.ones(4), 2)
            order.append("s")

    index._lock.acquire()
    threads = []
    for n, target in enumerate([lambda: writer(0), lambda: writer(1), search]):
        threads.append(threading.Thread(target=target))
        threads[-1].start()
        wait_until(lambda n=n: index._lock.waiting() == n + 1, f"thread {n} queued")
    index._lock.release()
    for t in threads:
        t.join(60)
    assert order == ["w0", "w1", "s", "w0", "w1", "w0", "w1"]


def test_reentrant_timeout_and_errors() -> None:
    lock = FairLock()
    with lock, lock:  # reentrant
        got = []
        t = threading.Thread(target=lambda: got.append(lock.acquire(timeout=0.01)))
        t.start()
        t.join(60)
        assert got == [False] and lock.waiting() == 0  # a timed-out waiter leaves the queue
        assert lock.acquire(blocking=True)  # the owner again
        lock.release()
    assert lock.acquire(blocking=False)
    lock.release()
    with pytest.raises(RuntimeError):
        lock.release()
    t = threading.Thread(target=lock.acquire)
    t.start()
    t.join(60)
    with pytest.raises(RuntimeError):  # another thread's
        lock.release()
