"""Crash safety, measured: SIGKILL a process at random moments while it saves over an existing
save (and while it does ``remove`` + ``save``); every time, the directory must load and hold the
complete old or the complete new index, never a mix.

Profiles (env NORMRANK_TEST_PROFILE): ``small`` (default, CI) kills a few times on a small
index; ``full`` kills >= 50 times per scenario on an index large enough that a save takes
~0.5 s, so most kills land inside ``save``. Each test prints its counts (run with ``-s``).
"""

from __future__ import annotations

import os
import random
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from kill_child import run_and_kill

from normrank import NormIndex

FULL = os.environ.get("NORMRANK_TEST_PROFILE", "small") == "full"
KILLS = 50 if FULL else 4
N = 200_000 if FULL else 40_000
DIM = 32
REPO = Path(__file__).resolve().parents[2]

# The child builds (or loads) an index, says "saving", saves, then writes a marker file.
# Building the data from a seed keeps the parent's expectation independent of the child.
_CHILD = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    from normrank import NormIndex
    mode, path, seed, n, dim, marker = sys.argv[1:7]
    seed, n, dim = int(seed), int(n), int(dim)
    if mode == "save":
        x = np.random.default_rng(seed).standard_normal((n, dim), dtype=np.float32)
        x *= np.float32(1 + seed % 7)
        index = NormIndex(dim, alpha=seed / 100)
        index.add(x, ids=np.arange(n, dtype=np.int64) + seed * 10_000_000)
    else:
        index = NormIndex.load(path)
        drop = np.random.default_rng(seed).choice(index.ids, size=max(1, len(index) // 50), replace=False)
        index.remove(drop)
    print("saving", flush=True)
    t = time.perf_counter()
    index.save(path)
    elapsed = time.perf_counter() - t
    # written whole or not at all: a kill between open() and write() must not leave an empty marker
    open(marker + ".tmp", "w").write(str(elapsed))
    os.replace(marker + ".tmp", marker)
    print("saved", elapsed, flush=True)
    """
)


def _version(seed: int, n: int = N) -> tuple[np.ndarray, np.ndarray, float]:
    """(ids, norms, alpha) that the child's "save" mode writes for ``seed``."""
    x = np.random.default_rng(seed).standard_normal((n, DIM), dtype=np.float32)
    x *= np.float32(1 + seed % 7)
    norms = np.sqrt(np.einsum("ij,ij->i", x.astype(np.float64), x.astype(np.float64))).astype(np.float32)
    return np.arange(n, dtype=np.int64) + seed * 10_000_000, norms, seed / 100


@dataclass
class Tally:
    kills: int = 0
    mid_save: int = 0
    found_old: int = 0
    found_new: int = 0
    completed: int = 0
    save_seconds: list[float] = field(default_factory=list)


def _run_child(mode: str, path: Path, seed: int, marker: Path, delay: float | None) -> bool:
    """Start the child; SIGKILL it ``delay`` s after it starts saving (None: let it finish).
    Returns True when the child was killed before its save returned."""
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    args = [sys.executable, "-c", _CHILD, mode, str(path), str(seed), str(N), str(DIM), str(marker)]
    return run_and_kill(args, env, marker, delay, timeout=120)


def _check_state(path: Path, candidates: dict[str, tuple[np.ndarray, np.ndarray, float]]) -> str:
    """Load ``path`` and return which candidate state it holds completely; fail on anything else."""
    index = NormIndex.load(path)
    ids, norms = index.ids, index.norms
    for name, (want_ids, want_norms, want_alpha) in candidates.items():
        if ids.shape == want_ids.shape and np.array_equal(ids, want_ids):
            assert np.allclose(norms, want_norms, rtol=1e-6), f"{name}: ids match but norms are torn"
            assert index.alpha == pytest.approx(want_alpha), f"{name}: alpha from another save"
            # The FAISS file belongs to the same save: stored directions reproduce the norms.
            for pos in np.linspace(0, len(ids) - 1, 5).astype(int):
                raw = index.reconstruct(int(ids[pos]))
                assert np.isclose(np.linalg.norm(raw), want_norms[pos], rtol=1e-5), (
                    f"{name}: torn index.faiss"
                )
            q = np.random.default_rng(0).standard_normal((2, DIM))
            _, got = index.search(q, 3)
            assert np.isin(got, want_ids).all()
            return name
    raise AssertionError(f"directory holds neither state: {len(ids)} ids, first {ids[:3]}")


def _report(record_property, name: str, t: Tally) -> None:
    """The tally, to the report file (``pytest --junitxml``)."""
    record_property(f"{name}:kills", t.kills)
    record_property(f"{name}:mid_save", t.mid_save)
    record_property(f"{name}:found_old", t.found_old)
    record_property(f"{name}:found_new", t.found_new)
    median = float(np.median(t.save_seconds)) if t.save_seconds else None
    record_property(f"{name}:save_seconds_median", median)


def test_kill_during_save_over_existing(tmp_path, record_property):
    path = tmp_path / "ix"
    marker = tmp_path / "done"
    rng = random.Random(12345)
    seeds = (1, 2)
    states = {s: _version(s) for s in seeds}
    _run_child("save", path, seeds[0], marker, None)  # the existing save
    current = seeds[0]
    t = Tally(save_seconds=[float(marker.read_text())])
    while t.kills < KILLS or (not t.mid_save and t.kills < 10 * KILLS):  # until a save was interrupted
        target = seeds[1] if current == seeds[0] else seeds[0]
        # Up to 1.3x the measured save time after "saving": mostly mid-write, some after commit;
        # on a busy machine every one may land after the commit: then at once, until one is mid-save.
        delay = rng.uniform(0, 1.3 * max(t.save_seconds)) if t.kills < KILLS else 0.0
        killed_mid = _run_child("save", path, target, marker, delay)
        t.kills += 1
        t.mid_save += killed_mid
        if not killed_mid:
            t.save_seconds.append(float(marker.read_text()))
        found = _check_state(path, {"old": states[current], "new": states[target]})
        t.found_old += found == "old"
        t.found_new += found == "new"
        current = target if found == "new" else current
    _report(record_property, "save", t)
    assert t.kills >= KILLS
    assert t.mid_save >= 1  # the test really interrupted saves


def test_kill_during_remove_and_save(tmp_path, record_property):
    path = tmp_path / "ix"
    marker = tmp_path / "done"
    rng = random.Random(54321)
    _run_child("save", path, 3, marker, None)
    ids, norms, alpha = _version(3)
    t = Tally(save_seconds=[float(marker.read_text())])
    while t.kills < KILLS or (not t.mid_save and t.kills < 10 * KILLS):  # until a save was interrupted
        seed = 1000 + t.kills
        drop = np.random.default_rng(seed).choice(ids, size=max(1, len(ids) // 50), replace=False)
        keep = ~np.isin(ids, drop)
        after = (ids[keep], norms[keep], alpha)
        delay = rng.uniform(0, 1.3 * max(t.save_seconds)) if t.kills < KILLS else 0.0
        killed_mid = _run_child("remove", path, seed, marker, delay)
        t.kills += 1
        t.mid_save += killed_mid
        found = _check_state(path, {"old": (ids, norms, alpha), "new": after})
        t.found_old += found == "old"
        t.found_new += found == "new"
        if found == "new":
            ids, norms = after[0], after[1]
    _report(record_property, "remove+save", t)
    assert t.kills >= KILLS
    assert t.mid_save >= 1
    # One save that completes removes the debris of every interrupted one.
    _run_child("remove", path, 99, marker, None)
    assert len([p for p in path.iterdir() if p.name.startswith("gen-")]) == 1
