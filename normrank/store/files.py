"""A JSON record file committed atomically beside a saved :class:`~normrank.NormIndex`.

The adapters (LangChain ``save_local``, LlamaIndex ``persist``) keep their documents in JSON and
the vectors in a NormIndex directory. For ``<name>.json`` the index lives in
``<name>.json.index-<32 hex>`` beside it. A save writes a fresh index directory first, then
swaps the JSON in with ``os.replace`` (the commit point), then deletes older index
directories of that same JSON file. A crash at any point leaves the previous or the new save
readable, never a mix. Nothing is pickled.
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

__all__ = [
    "checked_index_dir",
    "make_folder",
    "new_index_dirname",
    "read_json",
    "remove_empty_folders",
    "remove_stale_index_dirs",
    "write_json_atomic",
]


def _pattern(json_path: Path) -> re.Pattern[str]:
    return re.compile(re.escape(json_path.name) + r"\.index-[0-9a-f]{32}$")


def new_index_dirname(json_path: Path) -> str:
    """A fresh directory name (beside ``json_path``) for one save's index."""
    return f"{json_path.name}.index-{uuid.uuid4().hex}"


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` through a temp file, fsync and ``os.replace``."""
    try:
        text = json.dumps(payload, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidInputError(
            "cannot save: metadata must be JSON-serialisable (str, numbers, bool, None, lists, "
            f"dicts with str keys; no NaN): {e}"
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
    """Read a record file; every failure is a :class:`CorruptIndexError`."""
    if not path.is_file():
        raise CorruptIndexError(f"{path} not found: nothing was saved there")
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise CorruptIndexError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(payload, dict):
        raise CorruptIndexError(f"{path}: top level is not an object")
    return payload


def checked_index_dir(json_path: Path, name: Any) -> Path:
    """The index directory named in the record, refusing any name a save would not write."""
    if not isinstance(name, str) or not _pattern(json_path).match(name):
        raise CorruptIndexError(f"bad index directory name in {json_path}: {name!r}")
    return json_path.parent / name


def remove_stale_index_dirs(json_path: Path, keep: str | None) -> None:
    """Delete index directories of earlier saves (only after the record points elsewhere)."""
    pattern = _pattern(json_path)
    for child in json_path.parent.iterdir():
        if child.name != keep and pattern.match(child.name) and child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)


def make_folder(folder: Path) -> list[Path]:
    """``mkdir -p folder``; returns the folders it created, innermost first, so that a failed
    save can remove them again with :func:`remove_empty_folders`."""
    created = [p for p in (folder, *folder.parents) if not p.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        remove_empty_folders(created)
        raise InvalidInputError(f"cannot create the folder {folder}: {e}") from e
    return created


def remove_empty_folders(folders: list[Path]) -> None:
    """Remove ``folders`` (innermost first), stopping at the first that is not empty."""
    for p in folders:
        try:
            p.rmdir()
        except OSError:
            break
