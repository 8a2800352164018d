"""Atomic, checksummed, pickle-free saving and loading of a NormIndex's
:class:`~normrank.index.state.IndexState` (this module never sees the index class).

A saved index is a directory::

    manifest.json          two sections, each versioned: ``data`` (format_version: the
                           generation, dim, count, and size + SHA-256 of each file) and
                           ``options`` (options_version: alpha, k_factor, ann, n_tail, max_depth)
    gen-<id>/index.faiss   the FAISS index over unit vectors, in FAISS's own format
    gen-<id>/ids.npy       int64 ids
    gen-<id>/norms.npy     float32 raw norms
    gen-<id>/weights.npy   float32 custom bases, NormIndex.set_bases (only when set)
    gen-<id>/tombstones.npy int64 ids removed from an index that cannot delete (HNSW)

Saving writes a new generation folder, fsyncs it, then replaces ``manifest.json`` with one
``os.replace``; older generations are deleted only after that. A crash at any point leaves a
manifest that names a complete generation, so the previous (or the new) save loads. A save that
fails (disk full, read-only) removes what it created and raises :class:`SaveError`. Nothing is
written that the load would refuse: the state is checked first (``check_state``).
The folder named may be a symlink to a folder; it is resolved once (:func:`save_path`).
Loading trusts nothing: names come from a fixed set, no symlinks are followed, sizes and
checksums are verified before any file is parsed, and ``.npy`` headers are read by hand so
no pickle can run.

Data and options are versioned apart, so that a new search option does not make the data
unreadable: a version above this reader's, an option name or ``ann`` method it does not know is
:class:`NewerFormatError` ("upgrade normrank"), not corruption. Older layouts stay readable:
format 1 kept everything in one flat manifest (read by :func:`_sections`).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import re
import shutil
import stat
import time
import uuid
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from normrank.errors import CorruptIndexError, InvalidInputError, NewerFormatError, NormrankError, SaveError
from normrank.index.faiss_io import read_faiss_index
from normrank.index.state import IndexState, check_state
from normrank.search.faiss_info import ann_params, inner_index, is_gpu, is_idmap, ivf_of, stored_ids
from normrank.validation import ANN_METHODS

__all__ = ["FORMAT_VERSION", "OPTIONS_VERSION", "load_state", "save_path", "save_state"]

FORMAT = "normrank-index"
#: Version of the data section (files, ids, counts); 1: the flat manifest before issue 47.
FORMAT_VERSION = 2
#: Version of the options section; raise it with any option or value an older reader would refuse.
OPTIONS_VERSION = 1
#: Every name the options section may hold (``search_params`` is for people: index.faiss holds it).
_OPTION_NAMES = frozenset({"alpha", "k_factor", "ann", "n_tail", "max_depth", "search_params"})
MANIFEST = "manifest.json"
_MAX_MANIFEST_BYTES = 1 << 20
_GENERATION = re.compile(r"^gen-[0-9a-f]{32}$")
# Only names a save itself creates are ever deleted: a save into a folder holding other files
# must not touch them.
_DEBRIS = re.compile(r"^(gen-[0-9a-f]{32}(\.tmp)?|manifest\.json\.[0-9a-f]{32}\.tmp)$")
_LOCK = ".normrank.lock"
# The exact header numpy's write_array_header_1_0 emits for a 1-D C-order array. Parsing it with a
# regex instead of ast.literal_eval means a hostile header cannot exhaust the parser.
_NPY_HEADER = re.compile(
    rb"^\{'descr': '([<>|=]?[a-zA-Z][0-9]{0,3})', 'fortran_order': (True|False), "
    rb"'shape': \(([0-9]{1,19}),\), \} *\n$"
)
_LOAD_RETRIES = 5
# file name -> expected dtype; nothing outside this set is ever opened.
_ARRAYS = {"ids.npy": "<i8", "norms.npy": "<f4", "weights.npy": "<f4", "tombstones.npy": "<i8"}
_FAISS_FILE = "index.faiss"
_CHUNK = 1 << 20  # bytes of the FAISS file gathered per os.write while saving


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be fsynced
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_file(path: Path, data: bytes) -> dict[str, Any]:
    """Write a new file (never an existing one) and fsync it; every step goes through ``os``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _write_faiss(path: Path, index: faiss.Index) -> dict[str, Any]:
    """:func:`_write_file` for a FAISS index, streamed: FAISS's writer hands its bytes to a
    callback that writes them through ``os`` in chunks of ``_CHUNK`` and hashes them on the way,
    so no serialised copy of the index is ever held (``serialize_index`` held two)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    digest, size, pending = hashlib.sha256(), 0, bytearray()

    def flush() -> None:
        view = memoryview(pending)
        while view:
            view = view[os.write(fd, view) :]
        view.release()
        pending.clear()

    def write(chunk: bytes) -> int:
        nonlocal size
        digest.update(chunk)
        size += len(chunk)
        pending.extend(chunk)  # FAISS writes field by field: gather them, one os.write a chunk
        if len(pending) >= _CHUNK:
            flush()
        return len(chunk)

    try:
        # An OSError raised in write() comes out of write_index as itself (FAISS re-raises it).
        faiss.write_index(index, faiss.PyCallbackIOWriter(write, _CHUNK))
        flush()
        os.fsync(fd)
    finally:
        os.close(fd)
    return {"bytes": size, "sha256": digest.hexdigest()}


def _npy_bytes(arr: np.ndarray, dtype: str) -> bytes:
    a = np.ascontiguousarray(arr, dtype=np.dtype(dtype))
    bio = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        bio, {"descr": a.dtype.str, "fortran_order": False, "shape": a.shape}
    )
    return bio.getvalue() + a.tobytes()


def save_path(path: str | os.PathLike[str]) -> Path:
    """The folder a save or load uses. The path you name may be a symlink to a folder (or pass
    through symlinked parents): it is resolved once, here, and nothing inside the folder is
    ever followed. A NUL byte or a non-path is refused."""
    try:
        raw = os.fspath(path)
    except TypeError as e:
        raise InvalidInputError(f"path must be a str or os.PathLike, got {type(path).__name__}") from e
    if ("\0" if isinstance(raw, str) else b"\0") in raw:
        raise InvalidInputError("path contains a NUL byte")
    if os.path.islink(raw) and not os.path.exists(raw):
        raise InvalidInputError(
            f"{raw} is a symlink to a missing target: create the target or name another path"
        )
    return Path(os.path.realpath(raw))


def save_state(state: IndexState, path: str | os.PathLike[str]) -> None:
    """Write ``state`` to directory ``path`` atomically (see the module docstring).

    A failure at any step (disk full, read-only, any OSError) removes what this save created,
    raises :class:`SaveError` and leaves the previous save loadable; a later save needs no
    clean-up first."""
    root = save_path(path)
    if root.exists() and not root.is_dir():
        raise InvalidInputError(f"{root} exists and is not a directory")
    try:
        os.makedirs(root, exist_ok=True)
    except (NotADirectoryError, FileExistsError) as e:
        raise InvalidInputError(f"cannot create {root}: a parent is not a directory ({e.strerror})") from e
    except OSError as e:
        raise SaveError(f"cannot create {root}: {e.strerror or e}") from e
    try:
        with _save_lock(root):
            _save_locked(state, root)
    except OSError as e:
        if isinstance(e, NormrankError):
            raise
        raise SaveError(f"saving to {root} failed ({e.strerror or e}); the previous save is intact") from e


@contextlib.contextmanager
def _save_lock(root: Path):
    """Serialise saves into one directory (across processes) so that one save's clean-up never
    deletes the generation another save is about to commit."""
    try:
        import fcntl
    except ImportError:  # Windows: no flock; concurrent saves into one directory are unsupported
        yield
        return
    fd = os.open(root / _LOCK, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock, also when the process dies


def _state_arrays(state: IndexState) -> dict[str, np.ndarray]:
    """What is written besides the FAISS file."""
    arrays = {"ids": state.ids, "norms": state.norms}
    if state.weights is not None:
        arrays["weights"] = state.weights
    if state.tombstones.size:
        arrays["tombstones"] = state.tombstones
    return arrays


def _save_locked(state: IndexState, root: Path) -> None:
    check_state(state)  # what load would refuse is never written
    generation = f"gen-{uuid.uuid4().hex}"
    staging = root / f"{generation}.tmp"
    tmp = root / f"{MANIFEST}.{uuid.uuid4().hex}.tmp"
    faiss_index = state.faiss_index
    if is_gpu(faiss_index):
        faiss_index = faiss.index_gpu_to_cpu(faiss_index)
    try:
        os.mkdir(staging)
        files = {_FAISS_FILE: _write_faiss(staging / _FAISS_FILE, faiss_index)}
        for name, arr in _state_arrays(state).items():
            fname = f"{name}.npy"
            files[fname] = _write_file(staging / fname, _npy_bytes(arr, _ARRAYS[fname]))
        _fsync_dir(staging)
        os.rename(staging, root / generation)
        _fsync_dir(root)
        _write_file(tmp, json.dumps(_manifest_of(state, faiss_index, generation, files), indent=2).encode())
        os.replace(tmp, root / MANIFEST)  # the commit point
    except BaseException:
        # Nothing this save created may stay: a full disk must not fill up with staging folders.
        for leftover in (staging, root / generation):
            shutil.rmtree(leftover, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(root)
    for entry in root.iterdir():  # older generations and debris of interrupted saves
        if entry.name != generation and _DEBRIS.match(entry.name):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    entry.unlink()


def _manifest_of(state: IndexState, faiss_index: faiss.Index, generation: str, files: dict) -> dict:
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,  # top level, where every older reader looks for it
        "data": {
            "generation": generation,
            "dim": int(faiss_index.d),
            "count": int(state.ids.size),
            "factory": state.factory,
            "faiss_type": type(faiss_index).__name__,
            "tombstones": int(state.tombstones.size),
            "next_id": state.next_id,  # default ids never reuse a removed one, also after a reload
            "files": files,
        },
        "options_version": OPTIONS_VERSION,
        "options": {
            "alpha": state.alpha,
            "k_factor": state.k_factor,
            "ann": state.ann,
            "n_tail": state.n_tail,
            "max_depth": state.max_depth,
            "search_params": ann_params(inner_index(faiss_index)),  # for people; index.faiss holds them
        },
    }


def _open_dir(path: Path) -> int:
    """A descriptor of directory ``path`` itself, refusing a symlink in its place."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode):
            raise CorruptIndexError(f"{path} is not a directory (symlinks are not followed)")
        return os.open(path, flags)
    except FileNotFoundError as e:
        raise CorruptIndexError(f"{path} is missing") from e
    except OSError as e:
        raise CorruptIndexError(f"cannot open {path}: {e}") from e


def _read_regular(dir_fd: int, name: str, expected_size: int | None, limit: int | None = None) -> bytes:
    """Read regular file ``name`` inside the directory ``dir_fd``, not following symlinks,
    refusing a size other than ``expected_size`` (or above ``limit``) before reading a byte."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)  # a FIFO must not block
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError as e:
        raise CorruptIndexError(f"missing file {name}") from e
    except OSError as e:  # ELOOP: a symlink
        raise CorruptIndexError(
            f"{name} cannot be opened as a regular file (symlinks are not followed): {e}"
        ) from e
    st = os.fstat(fd)  # of what was opened, so nothing can be swapped in between
    if not stat.S_ISREG(st.st_mode):  # before fdopen, which refuses a directory (IsADirectoryError)
        os.close(fd)
        raise CorruptIndexError(f"{name} is not a regular file")
    with os.fdopen(fd, "rb") as f:
        if expected_size is not None and st.st_size != expected_size:
            raise CorruptIndexError(
                f"{name} has {st.st_size} bytes, the manifest says {expected_size} (truncated?)"
            )
        if limit is not None and st.st_size > limit:
            raise CorruptIndexError(f"{name} is {st.st_size} bytes, more than the {limit} allowed")
        data = f.read(st.st_size + 1)
    if len(data) != st.st_size:
        raise CorruptIndexError(f"{name} changed while it was read")
    return data


def _parse_npy(data: bytes, name: str, count: int) -> np.ndarray:
    """Parse ``.npy`` bytes of an expected dtype and length without ``np.load``."""
    if len(data) < 10 or data[:6] != b"\x93NUMPY":
        raise CorruptIndexError(f"{name} is not a .npy file")
    if data[6:8] != b"\x01\x00":  # save writes version 1.0 only
        raise CorruptIndexError(f"{name}: unsupported .npy version {data[6]}.{data[7]}")
    hlen = int.from_bytes(data[8:10], "little")
    if 10 + hlen > len(data):
        raise CorruptIndexError(f"{name}: .npy header length {hlen} runs past the end of the file")
    header = _NPY_HEADER.match(data[10 : 10 + hlen])
    if header is None:
        raise CorruptIndexError(f"{name}: the .npy header is not a plain 1-D array header")
    descr, fortran, shape = header.group(1).decode(), header.group(2), int(header.group(3))
    if descr != _ARRAYS[name] or fortran != b"False":
        raise CorruptIndexError(f"{name}: dtype {descr!r}, expected {_ARRAYS[name]!r}")
    if shape != count:
        raise CorruptIndexError(f"{name}: shape ({shape},), the manifest says ({count},)")
    body = data[10 + hlen :]
    itemsize = np.dtype(_ARRAYS[name]).itemsize
    if len(body) != count * itemsize:
        raise CorruptIndexError(f"{name}: {len(body)} data bytes for {count} values")
    return np.frombuffer(body, dtype=_ARRAYS[name]).copy()


def _count(m: dict[str, Any], key: str, minimum: int = 0) -> int:
    v = m.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum or v >= 1 << 62:
        raise CorruptIndexError(f"bad {key!r} in the manifest: {str(v)[:40]!r}")
    return v


def _manifest(root_fd: int, root: Path) -> dict[str, Any]:
    """The manifest's data entries, checked, with its options (checked where they are plain
    values; ``check_state`` judges them after) under ``"options"``, whatever its layout."""
    raw = _read_regular(root_fd, MANIFEST, None, limit=_MAX_MANIFEST_BYTES)
    try:
        m = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise CorruptIndexError(f"{root / MANIFEST} is not valid JSON ({type(e).__name__})") from e
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise CorruptIndexError(f"{root} is not a normrank index (no {FORMAT!r} manifest)")
    data, options = _sections(m, root)
    generation = data.get("generation")
    files = data.get("files")
    if not isinstance(generation, str) or not _GENERATION.match(generation):
        raise CorruptIndexError(f"bad generation name {str(generation)[:80]!r} in the manifest")
    if not isinstance(files, dict) or not set(files) <= {_FAISS_FILE, *_ARRAYS}:
        shown = sorted(str(f)[:80] for f in files)[:10] if isinstance(files, dict) else type(files).__name__
        raise CorruptIndexError(f"the manifest names unexpected files: {shown}")
    for name in (_FAISS_FILE, "ids.npy", "norms.npy"):
        if name not in files:
            raise CorruptIndexError(f"the manifest lacks {name}")
    for name, meta in files.items():
        ok = (
            isinstance(meta, dict)
            and isinstance(meta.get("bytes"), int)
            and not isinstance(meta["bytes"], bool)
        )
        if not ok or not 0 <= meta["bytes"] < 1 << 62 or not isinstance(meta.get("sha256"), str):
            raise CorruptIndexError(f"bad manifest entry for {name}")
    _count(data, "dim", 1)
    _count(data, "count")
    alpha = options.get("alpha")
    try:
        finite = (
            isinstance(alpha, int | float) and not isinstance(alpha, bool) and math.isfinite(float(alpha))
        )
    except OverflowError:
        finite = False
    if not finite:
        raise CorruptIndexError("bad 'alpha' in the manifest")
    return {**data, "options": options}


def _version(m: dict[str, Any], key: str) -> int:
    v = m.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise CorruptIndexError(f"unknown {key.replace('_', ' ')} {str(v)[:40]!r} in the manifest")
    return v


def _newer(root: Path, m: dict[str, Any], what: str) -> NewerFormatError:
    said = {key: str(m.get(key, "?"))[:20] for key in ("format_version", "options_version")}
    return NewerFormatError(
        f"{root} was saved by a newer normrank (format {said['format_version']} / "
        f"options {said['options_version']}; this one reads format {FORMAT_VERSION} / "
        f"options {OPTIONS_VERSION}{what}): upgrade normrank (pip install -U normrank) to load it"
    )


def _sections(m: dict[str, Any], root: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The data and the options of a manifest of any layout this reader knows.

    Format 1 (before issue 47) is one flat mapping holding both, the ann options as
    ``{"method", "n_tail", "max_depth"}``; no newer normrank writes it, so an option there that
    this reader refuses is corruption. From format 2 the sections are apart: options this reader
    does not know are a newer normrank's."""
    if _version(m, "format_version") > FORMAT_VERSION:
        raise _newer(root, m, "")
    if m["format_version"] == 1:
        ann = m.get("ann", {})
        if not isinstance(ann, dict) or not set(ann) <= {"method", "n_tail", "max_depth"}:
            raise CorruptIndexError("bad 'ann' options in the manifest")
        method = ann.get("method", "adaptive")
        if not isinstance(method, str):
            raise CorruptIndexError("bad 'ann' options in the manifest")
        options = {
            "alpha": m.get("alpha"),
            "k_factor": m.get("k_factor", 10),
            "ann": method,
            "n_tail": ann.get("n_tail"),
            "max_depth": ann.get("max_depth"),
        }
        return m, options
    data, options = m.get("data"), m.get("options")
    if not isinstance(data, dict) or not isinstance(options, dict):
        raise CorruptIndexError("the manifest lacks its data or options section")
    if _version(m, "options_version") > OPTIONS_VERSION:
        raise _newer(root, m, "")
    unknown = sorted(str(name)[:40] for name in set(options) - _OPTION_NAMES)
    if unknown:
        raise _newer(root, m, f"; options it does not know: {unknown[:10]}")
    method = options.get("ann", "adaptive")
    if isinstance(method, str) and method not in ANN_METHODS:
        raise _newer(root, m, f"; ann method {method[:40]!r} is not one of {list(ANN_METHODS)}")
    return data, {"k_factor": 10, "ann": "adaptive", "n_tail": None, "max_depth": None, **options}


def load_state(path: str | os.PathLike[str]) -> IndexState:
    """Read a directory written by :func:`save_index`; every inconsistency is a CorruptIndexError.

    A save running concurrently in another process may delete the generation a load is reading;
    the load then re-reads the manifest and tries the new generation (a few times).
    """
    root = save_path(path)
    if not root.is_dir():
        raise CorruptIndexError(f"{root} is not a directory")
    for attempt in range(_LOAD_RETRIES):
        root_fd = _open_dir(root)
        try:
            m = _manifest(root_fd, root)
            try:
                return _load_generation(root, root_fd, m)
            except CorruptIndexError:
                if attempt + 1 == _LOAD_RETRIES:
                    raise
                try:
                    moved_on = _manifest(root_fd, root)["generation"] != m["generation"]
                except CorruptIndexError:
                    moved_on = False
                if not moved_on:
                    raise
                time.sleep(0.01 * (attempt + 1))
        finally:
            os.close(root_fd)
    raise AssertionError("unreachable")  # the loop returns or raises


def _load_generation(root: Path, root_fd: int, m: dict[str, Any]) -> IndexState:
    try:
        gen_fd = os.open(
            m["generation"],
            os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0),
            dir_fd=root_fd,
        )
    except OSError as e:  # missing, a symlink (ELOOP / ENOTDIR) or a file
        raise CorruptIndexError(
            f"{root / m['generation']} is missing or not a directory: {e.strerror}"
        ) from e
    blobs = {}
    try:
        for name, meta in m["files"].items():
            data = _read_regular(gen_fd, name, meta["bytes"])
            if hashlib.sha256(data).hexdigest() != meta["sha256"]:
                raise CorruptIndexError(f"checksum mismatch in {name}: the file is corrupt or was modified")
            blobs[name] = data
    finally:
        os.close(gen_fd)
    count = m["count"]
    ids = _parse_npy(blobs["ids.npy"], "ids.npy", count)
    norms = _parse_npy(blobs["norms.npy"], "norms.npy", count)
    weights = _parse_npy(blobs["weights.npy"], "weights.npy", count) if "weights.npy" in blobs else None
    tombstones = np.empty(0, np.int64)
    if "tombstones.npy" in blobs:
        tombstones = _parse_npy(blobs["tombstones.npy"], "tombstones.npy", _count(m, "tombstones"))
    if not (np.isfinite(norms).all() and (norms > 0).all()):
        raise CorruptIndexError("norms.npy holds non-finite or non-positive norms")
    if weights is not None and not (np.isfinite(weights).all() and (weights > 0).all()):
        raise CorruptIndexError("weights.npy holds non-finite or non-positive weights")
    if (ids < 0).any() or (tombstones < 0).any():
        raise CorruptIndexError("ids.npy or tombstones.npy holds negative ids")
    if np.unique(tombstones).size != tombstones.size or np.isin(tombstones, ids).any():
        raise CorruptIndexError("tombstones.npy repeats an id or names a live id")
    index = read_faiss_index(blobs[_FAISS_FILE], dim=m["dim"], count=count + tombstones.size)
    del blobs
    stored = _faiss_ids(index)
    if stored is not None:
        live = stored[~np.isin(stored, tombstones)] if tombstones.size else stored
        same = np.array_equal(live, ids) if is_idmap(index) else np.array_equal(np.sort(live), np.sort(ids))
        if not same or live.size != stored.size - tombstones.size:
            raise CorruptIndexError("ids.npy does not match the ids inside index.faiss")
    options = m["options"]
    state = IndexState(
        index, ids, norms, weights, tombstones,
        next_id=_optional(m, "next_id", 0),
        alpha=float(options["alpha"]),
        k_factor=_optional(options, "k_factor", 10),
        factory=_optional(m, "factory", None, str),
        ann=options["ann"],  # check_state judges it, and n_tail / max_depth
        n_tail=options["n_tail"],
        max_depth=options["max_depth"],
    )  # fmt: skip
    try:
        check_state(state)
    except NormrankError as e:  # consistent checksums, impossible contents
        raise CorruptIndexError(f"{root}: the saved index is inconsistent: {e}") from e
    return state


def _optional(m: dict[str, Any], key: str, default: Any, kind: type = int) -> Any:
    """A manifest entry older saves may lack; present, it must be of its kind (checked later)."""
    v = m.get(key, default)
    if v is not None and (not isinstance(v, kind) or isinstance(v, bool)):
        raise CorruptIndexError(f"bad {key!r} in the manifest: {str(v)[:40]!r}")
    return v


def _faiss_ids(index: faiss.Index) -> np.ndarray | None:
    """The ids stored inside ``index`` (id map or IVF lists), or None where it keeps none.

    For IVF a direct map (id -> (list, offset)) saved in the file is rebuilt from the lists
    rather than trusted: ``reconstruct`` follows it without bounds checks. None is added.
    """
    stored = stored_ids(index)
    ivf = None if stored is None or is_idmap(index) else ivf_of(index)
    if ivf is None:
        return stored
    if stored.size != index.ntotal:
        raise CorruptIndexError("index.faiss: the IVF lists do not hold ntotal vectors")
    if stored.size and (stored.min() < 0 or np.unique(stored).size != stored.size):
        raise CorruptIndexError("index.faiss: the IVF lists hold negative or repeated ids")
    try:  # (an index saved before issue 36 has the hash table; a new one none, read by position)
        kind = ivf.direct_map.type
        if kind != faiss.DirectMap.NoMap:
            ivf.set_direct_map_type(faiss.DirectMap.NoMap)
            ivf.set_direct_map_type(kind)
    except RuntimeError as e:
        raise CorruptIndexError(f"index.faiss: cannot rebuild the IVF direct map: {e}") from e
    return stored
