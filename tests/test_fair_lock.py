"""FairLock (NormIndex's lock): a thread that waits gets the lock before a thread that asks later,
so writers that ask again at once cannot starve a waiting search. No clock: each step waits until
the threads are queued (the lock's own count), with a generous bound that only a deadlock reaches."""

from __future__ import annotations

import linecache
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


# -- interrupts (issue 46, defect 3) ---------------------------------------------------------------
# An exception raised at any line a waiting thread runs inside the lock (Ctrl-C, a SIGALRM
# handler, PyThreadState_SetAsyncExc) must leave the lock usable. A line tracer raises at the
# n-th line the thread runs in FairLock's code, for every n until the call ends untouched.

_LOCK_CODE = {f.__code__ for f in (FairLock.acquire, FairLock._undo, FairLock._settle, FairLock.release)}


class _Interrupt(BaseException):
    """Stands for KeyboardInterrupt (a BaseException that nothing here catches)."""


def _unreachable_line(frame) -> bool:
    """Lines whose line event no real interrupt can use. CPython delivers signals and async
    exceptions when a function starts, after a call returns and at a backward jump; a tracer
    raises at every line event. Two kinds differ: a ``with`` line's event also fires on the way
    out, between the body and the call to ``__exit__`` (raising there leaves the mutex held), and
    a ``return`` line's event fires after the ``try`` that guards it has been left (a return of
    a constant or a name makes no call). The walk skips both."""
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).lstrip()
    return line.startswith(("with ", "return True", "return False")) or (
        frame.f_code is FairLock.release.__code__ and frame.f_lineno <= _RELEASE_TRY_LINE
    )


# release's lines up to its ``try`` (the ``try`` line itself is a no-op before the guarded
# range, where no real interrupt lands): an interrupt before it is one at the function's start, the
# window fair_lock's docstring names (no lock written in Python can close it)
_RELEASE_TRY_LINE = next(
    FairLock.release.__code__.co_firstlineno + i
    for i, text in enumerate(
        linecache.getlines(FairLock.release.__code__.co_filename)[
            FairLock.release.__code__.co_firstlineno - 1 :
        ]
    )
    if text.strip() == "try:"
)


def _interrupting_tracer(at: int, fired: list[int]):
    seen = [0]

    def local(frame, event, _arg):
        if event == "line" and not _unreachable_line(frame):
            seen[0] += 1
            if seen[0] == at:
                fired.append(frame.f_lineno)
                raise _Interrupt
        return local

    def tracer(frame, event, _arg):
        return local if event == "call" and frame.f_code in _LOCK_CODE else None

    return tracer


def _run_interrupted(lock: FairLock, at: int, *, while_queued: bool) -> tuple[list[int], list[str]]:
    """The main thread holds ``lock``; thread W asks for it with an interrupt at its ``at``-th line
    in the lock's code, thread X asks after W; then the main thread releases. Returns the lines
    interrupted (empty: W's call ran to its end) and what each thread got."""
    import sys

    fired: list[int] = []
    got: list[str] = []

    def w() -> None:
        sys.settrace(_interrupting_tracer(at, fired))
        try:
            with lock:
                sys.settrace(None)
                got.append("w")
        except _Interrupt:
            sys.settrace(None)
            got.append("w interrupted")

    def x() -> None:
        with lock:
            got.append("x")

    lock.acquire()
    tw = threading.Thread(target=w)
    tw.start()
    wait_until(lambda: lock.waiting() == 1 or not tw.is_alive(), "W queued or gone")
    tx = threading.Thread(target=x)
    tx.start()
    wait_until(lambda: lock.waiting() == (2 if tw.is_alive() else 1), "X queued")
    if not while_queued:
        lock.release()
    else:  # W is interrupted (if at all) while the main thread still holds the lock
        lock.release()
    tw.join(60)
    tx.join(60)
    assert not tw.is_alive() and not tx.is_alive(), "deadlock: a thread never got the lock"
    return fired, got


def test_an_interrupt_at_any_line_of_a_waiting_acquire_leaves_the_lock_usable() -> None:
    lines: set[int] = set()
    for at in range(1, 200):
        lock = FairLock()
        fired, got = _run_interrupted(lock, at, while_queued=False)
        assert "x" in got, f"interrupt at line event {at} ({fired}): X never got the lock"
        assert lock.acquire(blocking=False), f"interrupt at line event {at} ({fired}): the lock stayed taken"
        lock.release()
        assert lock.waiting() == 0 and not lock._holds
        if not fired:
            break  # W's whole call ran: every line of it was interrupted once
        lines.update(fired)
    else:
        raise AssertionError("the tracer never let W's call finish")
    # the walk really went through the waiting path, the wait itself included
    wait_line = next(
        n
        for n, text in enumerate(linecache.getlines(FairLock.acquire.__code__.co_filename), 1)
        if ".wait(" in text
    )
    assert wait_line in lines and len(lines) >= 8


def _release_interrupted(at: int) -> tuple[list[int], list[str]]:
    """A thread owns the lock and releases it with an interrupt at its ``at``-th line in the
    lock's code while another waits. Returns the lines interrupted and what the waiter got."""
    import sys

    lock = FairLock()
    fired: list[int] = []
    got: list[str] = []

    def owner() -> None:
        lock.acquire()
        wait_until(lambda: lock.waiting() == 1, "the waiter queued")
        sys.settrace(_interrupting_tracer(at, fired))
        try:
            lock.release()
        except _Interrupt:
            pass
        finally:
            sys.settrace(None)

    def waiter() -> None:
        with lock:
            got.append("w")

    t_owner = threading.Thread(target=owner)
    t_owner.start()
    wait_until(lambda: bool(lock._holds), "owner has it")
    t_wait = threading.Thread(target=waiter)
    t_wait.start()
    t_owner.join(60)
    t_wait.join(60)
    return fired, got


def test_an_interrupt_inside_release_still_hands_the_lock_on() -> None:
    for at in range(1, 100):
        fired, got = _release_interrupted(at)
        assert got == ["w"], f"interrupt at line event {at} ({fired}) of release: the waiter never got it"
        if not fired:
            break
    else:
        raise AssertionError("the tracer never let release finish")


def test_async_exception_delivered_to_a_thread_waiting_on_the_index() -> None:
    """PyThreadState_SetAsyncExc lands when the waiting thread wakes: after release() handed it
    the lock. The index must go on serving every later call."""
    import ctypes

    index = NormIndex(4)
    index.add(np.eye(4))
    outcome: list[str] = []

    def waiter() -> None:
        try:
            index.search(np.ones(4, dtype=np.float32), 2)
            outcome.append("searched")
        except _Interrupt:
            outcome.append("interrupted")

    index._lock.acquire()
    t = threading.Thread(target=waiter)
    t.start()
    wait_until(lambda: index._lock.waiting() == 1, "the search queued")
    hit = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(t.ident), ctypes.py_object(_Interrupt))
    assert hit == 1
    index._lock.release()
    t.join(60)
    assert not t.is_alive() and outcome == ["interrupted"]
    done = []
    t2 = threading.Thread(target=lambda: done.append(index.search(np.ones(4, dtype=np.float32), 2)))
    t2.start()
    t2.join(60)
    assert done, "the index deadlocked after an interrupted wait"
    assert index._lock.waiting() == 0 and not index._lock._holds


def test_sigalrm_inside_a_wait_in_the_main_thread() -> None:
    import signal

    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        pytest.skip("needs SIGALRM in the main thread")
    index = NormIndex(4)
    index.add(np.eye(4))
    holder_has_it, stop = threading.Event(), threading.Event()

    def holder() -> None:
        with index._lock:
            holder_has_it.set()
            stop.wait(60)

    t = threading.Thread(target=holder)
    t.start()
    holder_has_it.wait(60)

    def on_alarm(_sig, _frame):
        raise _Interrupt

    old = signal.signal(signal.SIGALRM, on_alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(_Interrupt):
            index.search(np.ones(4, dtype=np.float32), 2)  # waits for the holder: the alarm lands there
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    stop.set()
    t.join(60)
    assert index.search(np.ones(4, dtype=np.float32), 2)[1].shape == (1, 2)
    assert index._lock.waiting() == 0 and not index._lock._holds
