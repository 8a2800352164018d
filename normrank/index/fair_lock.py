"""A reentrant lock that hands itself to waiting threads in arrival order.

``threading.RLock`` is not fair: a writer that releases it and asks again at once usually wins
again (it still holds the GIL, the woken waiter does not), so two threads writing continuously can
starve every search for as long as they write. :class:`FairLock` queues the threads that wait and
passes the lock to the first of them on release, so a search that waits behind ``w`` writers runs
after at most ``w`` writes, however fast they ask again.
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
        self._depth = 0
        self._waiters: deque[tuple[int, threading.Lock]] = deque()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        me = threading.get_ident()
        with self._mutex:
            if self._owner == me:
                self._depth += 1
                return True
            if self._owner is None and not self._waiters:
                self._owner, self._depth = me, 1
                return True
            if not blocking:
                return False
            gate = threading.Lock()
            gate.acquire()
            self._waiters.append((me, gate))
        if gate.acquire(timeout=timeout if timeout >= 0 else -1):
            return True  # release() made this thread the owner before opening its gate
        with self._mutex:
            if self._owner == me:  # handed over between the timeout and here
                return True
            self._waiters.remove((me, gate))
            return False

    def release(self) -> None:
        with self._mutex:
            if self._owner != threading.get_ident():
                raise RuntimeError("cannot release un-acquired lock")
            self._depth -= 1
            if self._depth:
                return
            if self._waiters:
                self._owner, gate = self._waiters.popleft()
                self._depth = 1
                gate.release()
            else:
                self._owner = None

    def waiting(self) -> int:
        """Threads queued for the lock now (for tests and diagnostics)."""
        with self._mutex:
            return len(self._waiters)

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
