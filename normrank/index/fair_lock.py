"""A reentrant lock that hands itself to waiting threads in arrival order, and survives waits
that an exception interrupts.

``threading.RLock`` is not fair: a writer that releases it and asks again at once usually wins
again (it still holds the GIL, the woken waiter does not), so two threads writing continuously can
starve every search for as long as they write. :class:`FairLock` queues the threads that wait and
passes the lock to the first of them on release, so a search that waits behind ``w`` writers runs
after at most ``w`` writes, however fast they ask again.

Interrupts. An exception can reach a waiting thread at any point of :meth:`FairLock.acquire`:
Ctrl-C or a ``SIGALRM`` handler in the main thread, ``PyThreadState_SetAsyncExc`` in any thread,
also after :meth:`FairLock.release` already handed it the lock. The lock's state is kept so that
whatever a call did before the exception can be undone by running one clean-up again:

* each hold is a token in ``_holds`` (appending it is one C call: the lock is either taken or
  not), and the lock is free exactly when ``_holds`` is empty;
* a waiter is woken through an :class:`threading.Event` (setting it twice is harmless);
* :meth:`FairLock._settle` finishes any hand-over in progress and is idempotent.

An interrupted ``acquire`` removes its token and its place in the queue, settles, then raises:
the lock is as if the call had never been made, and every later call proceeds.

One window stays open, as in any lock written in Python: CPython also checks for interrupts when
a Python function starts, so one can land in ``__exit__`` or ``release`` before the release
begins, and the lock stays taken. ``threading.RLock`` is C and has no such window. A thread
spends a few instructions there and can wait in ``acquire`` for seconds, which is where
interrupts land in practice. (A second interrupt inside the clean-up of a first is also
answered only in part.)
"""

from __future__ import annotations

import threading
from collections import deque
from types import TracebackType

__all__ = ["FairLock"]


class FairLock:
    """Reentrant and first-come first-served (drop-in for ``threading.RLock`` in ``with``)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._owner: int | None = None
        self._holds: list[object] = []  # one token per acquire not yet released
        self._waiters: deque[tuple[int, object, threading.Event]] = deque()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        me = threading.get_ident()
        token, entry = object(), None
        try:
            with self._mutex:
                if self._owner == me and self._holds:
                    self._holds.append(token)
                    return True
                if not self._holds and not self._waiters:
                    self._owner = me
                    self._holds.append(token)
                    return True
                if not blocking:
                    return False
                entry = (me, token, threading.Event())
                self._waiters.append(entry)
            if entry[2].wait(None if timeout < 0 else timeout):
                return True  # release() made this thread the owner before waking it
            with self._mutex:
                if token in self._holds:  # handed over between the timeout and here
                    return True
                self._waiters.remove(entry)
                return False
        except BaseException:
            self._undo(token, entry)
            raise

    def _undo(self, token: object, entry: tuple | None) -> None:
        """Forget an interrupted acquire (its token, its place in the queue), then settle. Run
        again if interrupted itself: every step is idempotent."""
        while True:
            try:
                with self._mutex:
                    if entry is not None and entry in self._waiters:
                        self._waiters.remove(entry)
                    if token in self._holds:
                        self._holds.remove(token)
                    self._settle()
                return
            except BaseException:  # a second interrupt inside the clean-up: finish it first
                continue

    def _settle(self) -> None:
        """Under the mutex: a free lock goes to the first waiter, and a waiter that holds it is
        woken and leaves the queue. Idempotent, so a clean-up interrupted half way runs again."""
        if not self._holds:
            if self._waiters:
                owner, token, _ = self._waiters[0]
                self._owner = owner
                self._holds.append(token)
            else:
                self._owner = None
        if self._waiters and self._waiters[0][1] in self._holds:
            self._waiters[0][2].set()
            self._waiters.popleft()

    def release(self) -> None:
        # Which hold this call gives up is fixed once (its token), so an interrupt anywhere in the
        # loop's body is answered by running the body again: removing that token and settling
        # are idempotent. The interrupt is raised once the lock is released and handed on.
        token, unowned, interrupt = None, False, None
        while True:
            try:
                with self._mutex:
                    if token is None:
                        if self._owner != threading.get_ident() or not self._holds:
                            unowned = True
                        else:
                            token = self._holds[-1]
                    if token is not None:
                        if token in self._holds:
                            self._holds.remove(token)
                        self._settle()
                break
            except BaseException as e:
                interrupt = e
        if interrupt is not None:
            raise interrupt
        if unowned:
            raise RuntimeError("cannot release un-acquired lock")

    def waiting(self) -> int:
        """Threads queued for the lock now (for tests and diagnostics)."""
        with self._mutex:
            return len(self._waiters)

    # ``with lock:`` calls acquire itself: a Python ``__enter__`` wrapping it would give an
    # interrupt one more place to land (after acquire returned, before the ``with`` block is
    # entered), and the lock would stay taken.
    __enter__ = acquire

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
