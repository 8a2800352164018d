"""Shared by the kill tests: run a child that saves, and SIGKILL it at a chosen moment."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path


def run_and_kill(
    args: list[str], env: dict[str, str], marker: Path, delay: float | None, timeout: float
) -> bool:
    """Start ``args``; once it prints "saving", SIGKILL it ``delay`` s later (None: let it finish).

    Returns True when it was killed before writing ``marker``, i.e. before its save returned.
    """
    marker.unlink(missing_ok=True)
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "saving", proc.stderr.read()[-3000:]
        if delay is None:
            proc.wait(timeout=timeout)
            assert proc.returncode == 0, proc.stderr.read()[-3000:]
            return False
        time.sleep(delay)
        proc.kill()  # SIGKILL: no cleanup handlers, no flush
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    return not marker.exists()
