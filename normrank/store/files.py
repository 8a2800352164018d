"""A JSON record file committed atomically beside a saved index (a
:class:`~normrank.store.contract.SavingBackend`: NormIndex or yours).

The adapters (LangChain ``save_local``, LlamaIndex ``persist``) keep their documents in JSON and
the vectors in the index's directory. For ``<name>.json`` the index lives in
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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from normrank.errors import (
    CorruptIndexError,
    InvalidInputError,
    InvalidParameterError,
    NonConformingIndexError,
)
from normrank.store.contract import SavingBackend, loads_saved

__all__ = [
    "StoreNotFoundError",
    "checked_index_dir",
    "external_index",
    "make_folder",
    "new_index_dirname",
    "read_json",
    "remove_empty_folders",
    "remove_stale_index_dirs",
    "saving_class",
    "write_json_atomic",
]


class StoreNotFoundError(CorruptIndexError, FileNotFoundError):
    """Nothing was saved at the given place (also a ``FileNotFoundError``), or what was saved
    there needs what the load was not given (the index holding the vectors, or its class)."""


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


def saving_class(where: str, payload: Mapping[str, Any], given: type | None) -> type[SavingBackend]:
    """The class whose ``load`` reads a store's index folder: the one saved there (``index_type``;
    NormIndex where the file predates it), which must be ``given`` unless it is NormIndex."""
    from normrank.index.norm_index import NormIndex

    saved = payload.get("index_type", NormIndex.__name__)
    if not isinstance(saved, str):
        raise CorruptIndexError(f"{where}: index_type must be a class name, got {saved!r}")
    if given is None and saved == NormIndex.__name__:
        return NormIndex
    if given is None:  # (or the file was tampered with: nothing here can load it either way)
        raise StoreNotFoundError(
            f"{where}: its vectors were saved by {saved}.save: pass that class to the load "
            f"(KeyedStore.load(..., index={saved}); the adapters: load_local(..., index=) in "
            "LangChain, from_persist_dir(..., index=) in LlamaIndex)"
        )
    if given.__name__ != saved:
        raise InvalidParameterError(
            f"{where}: its vectors were saved by {saved}, not by index={given.__name__}"
        )
    if not loads_saved(given):
        raise NonConformingIndexError(f"index={given.__name__} has no save and load (normrank.SavingBackend)")
    return given


def external_index(external: Mapping[str, Any]) -> str:
    """The index holding a saved store's vectors, from its file's ``external_index``: its type
    and where it keeps them (``location``; ``table`` in files saved before issue 47)."""
    location = external.get("location")
    if location is None and isinstance(external.get("table"), str):
        location = f"table {external['table']!r}"
    return f"a {external.get('type')}" + (f" ({location})" if isinstance(location, str) else "")
