"""A failed save leaves nothing behind (issue #12, item 2).

Every filesystem call a save makes is failed in turn (ENOSPC, EROFS, EACCES, EIO): the save raises
:class:`normrank.SaveError` (an ``OSError``), removes what it created, the previous save still
loads, and the next save succeeds. Then the same on a real 2 MiB tmpfs filled up, and remounted
read-only (needs root and ``mount``; skipped elsewhere).
"""

from __future__ import annotations

import errno
import os
import subprocess
import types
from pathlib import Path

import numpy as np
import pytest

import normrank.index.persistence as persistence
from normrank import NormIndex, SaveError

DIM = 8
# The calls of ``os`` that write: each may fail on a full or read-only disk.
_WRITES = {"makedirs", "mkdir", "open", "write", "fsync", "rename", "replace"}


class _FailingOS(types.SimpleNamespace):
    """``os`` for persistence, raising ``OSError(code)`` at the ``fail_at``-th writing call."""

    def __init__(self, fail_at: int, code: int) -> None:
        super().__init__()
        self.fail_at, self.code, self.calls = fail_at, code, 0

    def __getattr__(self, name: str):
        real = getattr(os, name)
        if name not in _WRITES:
            return real

        def call(*args, **kwargs):
            self.calls += 1
            if self.calls == self.fail_at:
                raise OSError(self.code, os.strerror(self.code))
            return real(*args, **kwargs)

        return call


def _index(n: int, seed: int) -> NormIndex:
    rng = np.random.default_rng(seed)
    ix = NormIndex(DIM, alpha=0.5)
    ix.add(rng.normal(size=(n, DIM)) * rng.lognormal(size=(n, 1)))
    return ix


def _same(a: NormIndex, b: NormIndex) -> bool:
    return np.array_equal(a.ids, b.ids) and np.array_equal(a.norms, b.norms) and a.alpha == b.alpha


def _entries(d: Path) -> set[str]:
    return {p.name for p in d.iterdir()}


def _only_one_save(d: Path) -> None:
    names = _entries(d)
    gens = [n for n in names if n.startswith("gen-")]
    assert names - set(gens) <= {"manifest.json", ".normrank.lock"}, names
    assert len(gens) == 1 and not gens[0].endswith(".tmp"), names


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EIO])
def test_a_failure_at_every_step_of_save_leaves_the_previous_save(tmp_path, monkeypatch, code):
    old, new = _index(30, 0), _index(50, 1)
    counter = _FailingOS(0, code)
    monkeypatch.setattr(persistence, "os", counter)
    old.save(tmp_path / "probe")
    monkeypatch.setattr(persistence, "os", os)
    steps = counter.calls
    assert steps >= 10  # makedirs, lock, mkdir, 3 files x (open, write, fsync), rename, manifest ...
    failed = 0
    for step in range(1, steps + 1):
        d = tmp_path / f"s{step}"
        old.save(d)
        monkeypatch.setattr(persistence, "os", _FailingOS(step, code))
        try:
            new.save(d)
            outcome = new
        except SaveError as e:
            assert isinstance(e, OSError)
            outcome = old
            failed += 1
        finally:
            monkeypatch.setattr(persistence, "os", os)
        _only_one_save(d)  # no staging folder, no temporary manifest
        assert _same(NormIndex.load(d), outcome)
        new.save(d)  # once the disk is fine again, the next save succeeds
        assert _same(NormIndex.load(d), new)
        _only_one_save(d)
    assert failed >= steps - 6  # only the 3 directory fsyncs (open + fsync, best effort) may fail harmlessly


def _can_mount() -> bool:
    return (
        hasattr(os, "geteuid")
        and os.geteuid() == 0
        and subprocess.run(["which", "mount"], capture_output=True).returncode == 0
    )


@pytest.fixture
def small_tmpfs(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if (
        not _can_mount()
        or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)]).returncode
    ):
        pytest.skip("needs root and mount for a real tmpfs")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_then_read_only_tmpfs(small_tmpfs):
    d = small_tmpfs / "ix"
    small, big = _index(50, 0), _index(20_000, 1)  # big: ~800 kB of files
    small.save(d)
    filler = small_tmpfs / "filler"
    with open(filler, "wb") as f:  # leave about 300 kB free
        stat = os.statvfs(small_tmpfs)
        f.write(b"\0" * max(0, stat.f_bavail * stat.f_frsize - 300_000))
    for _ in range(3):
        with pytest.raises(SaveError, match="previous save is intact"):
            big.save(d)
        _only_one_save(d)
        assert _same(NormIndex.load(d), small)
    filler.unlink()
    big.save(d)
    assert _same(NormIndex.load(d), big)
    _only_one_save(d)
    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    with pytest.raises(SaveError):
        small.save(d)
    assert _same(NormIndex.load(d), big)
