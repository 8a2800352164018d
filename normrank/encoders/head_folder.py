"""Replacing a trained-head folder (``train-head --overwrite``) so that a kill at any moment leaves
the folder complete, or a leftover that the next run or load puts back and says so.

Where Linux's ``renameat2(RENAME_EXCHANGE)`` works (glibc 2.28+, local filesystems), the new folder
and the old one swap names in one step: ``DIR`` is never absent, and the old head is left in
``.DIR.tmp-PID`` until it is removed. Elsewhere ``DIR`` is renamed to ``.DIR.old-PID`` and the new
folder renamed in; a kill between the two renames leaves no ``DIR``. :func:`recover_folder` finds
the leftovers of a process that is no longer running: a missing ``DIR`` gets its old head back (the
interrupted run never finished its save), and other leftovers are removed.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import shutil
import warnings
from pathlib import Path

__all__ = ["exchange", "recover_folder", "replace_folder"]

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_UNSUPPORTED = {errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV}


def exchange(a: Path, b: Path) -> bool:
    """Swap the names of ``a`` and ``b`` atomically; False where the system cannot (nothing moved)."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # not Linux, or a libc without it
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in _UNSUPPORTED:
        return False
    raise OSError(err, os.strerror(err), str(b))


def replace_folder(tmp: Path, out: Path) -> None:
    """Put the complete folder ``tmp`` at ``out`` (a sibling), replacing what ``out`` holds."""
    if not out.exists():
        os.replace(tmp, out)
    elif exchange(tmp, out):  # out is the new head now; tmp holds the old one
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        os.replace(out, old)
        os.replace(tmp, out)  # a kill before this line: recover_folder puts `old` back
        shutil.rmtree(old, ignore_errors=True)


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True  # this process's own save may be in flight in another thread
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: running, as another user
        return True
    return True


def recover_folder(out: str | Path) -> list[str]:
    """Undo or finish what an interrupted replace of ``out`` left, warn, and return what was done."""
    out = Path(out)
    try:
        names = sorted(os.listdir(out.parent))
    except OSError:
        return []
    pattern = re.compile(rf"\.{re.escape(out.name)}\.(old|tmp)-(\d+)")
    done = []
    for name in names:
        m = pattern.fullmatch(name)
        if not m or _running(int(m.group(2))):
            continue
        left = out.parent / name
        try:
            if m.group(1) == "old" and not out.exists():
                os.replace(left, out)
                done.append(f"{out} was missing after an interrupted --overwrite: put the previous head back from {name}")  # fmt: skip
            else:
                shutil.rmtree(left)
                done.append(f"removed {left}, left by an interrupted save of {out}")
        except OSError as e:  # a read-only folder: say where the head is rather than fail the load
            done.append(
                f"{left} is left by an interrupted save of {out} and could not be moved ({e.strerror})"
            )
    for line in done:
        warnings.warn(line, UserWarning, stacklevel=2)
    return done
