"""What determines a model's embeddings, without loading it: the kind, the weights' digest, options.

Used to key the embedding cache, so a copied model folder (or the same package installed into
another environment) hits, and changed weights miss. A weight file is hashed once; its digest is
remembered by (real path, size, mtime) in ``<cache root>/file-digests.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from normrank.encoders.spec import resolve_spec
from normrank.settings import cache_root

__all__ = ["ENCODER_FORMAT", "model_identity", "path_digest"]

# Bump when normrank's own readout of a model family changes (pooling, truncation, prefixes):
# every cached embedding made before then misses.
ENCODER_FORMAT = 1

# Files that do not change the outputs (a re-packaged copy may differ in them).
_IRRELEVANT = re.compile(r"^(README|LICENSE|NOTICE|CHANGELOG)|\.(md|txt\.license)$|^\.gitattributes$", re.I)

_memo: dict[str, list] | None = None


def _memo_file() -> Path:
    return cache_root() / "file-digests.json"


def _load_memo() -> dict[str, list]:
    global _memo
    if _memo is None:
        try:
            _memo = json.loads(_memo_file().read_text())
            if not isinstance(_memo, dict):
                _memo = {}
        except (OSError, ValueError):
            _memo = {}
    return _memo


def _save_memo(memo: dict[str, list]) -> None:
    path = _memo_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(memo))
        os.replace(tmp, path)
    except OSError:  # a read-only cache only costs re-hashing next time
        pass


def _file_sha256(path: Path, memo: dict[str, list]) -> tuple[str, bool]:
    st = path.stat()
    real = str(path.resolve())
    hit = memo.get(real)
    if hit is not None and hit[:2] == [st.st_size, st.st_mtime_ns]:
        return hit[2], False
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    memo[real] = [st.st_size, st.st_mtime_ns, h.hexdigest()]
    return h.hexdigest(), True


def path_digest(path: str | Path) -> str:
    """sha256 of a model file, or of a folder's files (relative names and contents; READMEs and
    licences left out). The same bytes anywhere give the same digest."""
    path = Path(path)
    if path.is_file():
        files = [(path.name, path)]
    else:
        files = []
        for p in sorted(path.rglob("*")):
            rel = p.relative_to(path)
            if (
                p.is_file()
                and not any(s.startswith(".") for s in rel.parts)
                and not _IRRELEVANT.search(p.name)
            ):
                files.append((rel.as_posix(), p))
    memo = _load_memo()
    h, changed = hashlib.sha256(), False
    for rel, p in files:
        digest, new = _file_sha256(p, memo)
        changed |= new
        h.update(f"{rel}\0{digest}\n".encode())
    if changed:
        _save_memo(memo)
    return h.hexdigest()


def _option_value(value: Any) -> Any:
    if isinstance(value, (str, Path)) and str(value) and Path(str(value)).expanduser().exists():
        return {"sha256": path_digest(Path(str(value)).expanduser())}  # a tokenizer folder, a checkpoint
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    try:
        return json.loads(json.dumps(value, sort_keys=True))
    except (TypeError, ValueError):
        return repr(value)


def model_identity(name_or_path: str | Path, kind: str = "auto", **options: Any) -> dict[str, Any]:
    """A JSON-able description of what determines this model spec's embeddings.

    Same spec syntax as :func:`normrank.encoders.load_encoder`. A local (or offline-package) model
    is identified by the digest of its files, not its name or location; a hub id or open_clip tag
    that is not on disk is trusted to name fixed weights. ``device`` is left out (CPU and GPU
    agree to float rounding).
    """
    options = dict(options)
    kind, name, path, local, _device = resolve_spec(name_or_path, kind, options)
    ident: dict[str, Any] = {"format": ENCODER_FORMAT, "kind": kind}
    if local:
        ident["weights_sha256"] = path_digest(path)
    else:
        ident["name"] = name
    ident["options"] = {k: _option_value(v) for k, v in sorted(options.items())}
    return ident
