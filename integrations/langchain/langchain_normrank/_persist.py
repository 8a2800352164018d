"""Atomic JSON + NormIndex persistence shared by ``save_local`` / ``load_local``.

Layout of a saved folder::

    normrank_store.json          # the commit point: records, settings, name of the index dir
    normrank_index-<32 hex>/     # NormIndex.save output

The index is written first under a fresh name, then the JSON is swapped in with ``os.replace``;
only then are older index directories removed. A crash at any point leaves either the previous
save or the new one readable, never a mix. Nothing is pickled.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from normrank.errors import CorruptIndexError, InvalidInputError

STORE_FILE = "normrank_store.json"
_INDEX_PREFIX = "normrank_index-"
_INDEX_RE = re.compile(r"^normrank_index-[0-9a-f]{32}$")


def new_index_dirname() -> str:
    """A fresh directory name for one save's index."""
    return f"{_INDEX_PREFIX}{uuid.uuid4().hex}"


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` through a temp file + fsync + ``os.replace``."""
    try:
        text = json.dumps(payload, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidInputError(
            f"cannot save: document metadata must be JSON-serialisable (str, numbers, bool, None, "
            f"lists, dicts with str keys; no NaN): {e}"
        ) from e
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path) -> dict[str, Any]:
    """Read a store JSON file, turning every parse failure into :class:`CorruptIndexError`."""
    if not path.is_file():
        raise CorruptIndexError(f"{path} not found: not a folder written by save_local")
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptIndexError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(payload, dict):
        raise CorruptIndexError(f"{path}: top level is not an object")
    return payload


def checked_index_dir(folder: Path, name: Any) -> Path:
    """Resolve the index directory named in the JSON, refusing anything but our own names."""
    if not isinstance(name, str) or not _INDEX_RE.match(name):
        raise CorruptIndexError(f"bad index directory name in {STORE_FILE}: {name!r}")
    return folder / name


def remove_stale_index_dirs(folder: Path, keep: str | None) -> None:
    """Delete index directories of earlier saves (only after the JSON points elsewhere)."""
    for child in folder.iterdir():
        if child.name != keep and _INDEX_RE.match(child.name) and child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
