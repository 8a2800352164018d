"""Atomic JSON + NormIndex persistence for ``persist`` / ``from_persist_path``.

``persist(path)`` writes ``path`` (JSON: nodes, settings, the name of the index directory) and
an index directory ``<path>.index-<32 hex>`` beside it. The index is written first under a fresh
name, then the JSON is swapped in with ``os.replace`` (the commit point), then older index
directories of the same JSON file are removed. No pickle.
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


def _pattern(json_path: Path) -> re.Pattern[str]:
    return re.compile(re.escape(json_path.name) + r"\.index-[0-9a-f]{32}$")


def new_index_dirname(json_path: Path) -> str:
    return f"{json_path.name}.index-{uuid.uuid4().hex}"


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    try:
        text = json.dumps(payload, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidInputError(f"cannot persist: node metadata must be JSON-serialisable: {e}") from e
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
    if not path.is_file():
        raise CorruptIndexError(f"{path} not found: nothing was persisted there")
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptIndexError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(payload, dict):
        raise CorruptIndexError(f"{path}: top level is not an object")
    return payload


def checked_index_dir(json_path: Path, name: Any) -> Path:
    if not isinstance(name, str) or not _pattern(json_path).match(name):
        raise CorruptIndexError(f"bad index directory name in {json_path}: {name!r}")
    return json_path.parent / name


def remove_stale_index_dirs(json_path: Path, keep: str | None) -> None:
    pat = _pattern(json_path)
    for child in json_path.parent.iterdir():
        if child.name != keep and pat.match(child.name) and child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
