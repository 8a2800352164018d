"""Retrieval collections: BEIR-layout folders, BEIR names, ir_datasets ids (TREC CAR included).

Documents are the BEIR text ``(title + " " + text).strip()``. Query and document ids are kept as
strings and are never compared with each other: in the classic collections (Cranfield, CISI, ...)
query "1" and document "1" are unrelated, so BEIR's ``ignore_identical_ids`` must not be applied.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from normrank.errors import InvalidInputError, MissingDependencyError, NormrankError

__all__ = [
    "Dataset",
    "DatasetNotFoundError",
    "available_splits",
    "depth_bucket",
    "load_dataset",
    "query_depth",
    "resolve_beir_folder",
]

_BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{}.zip"


class DatasetNotFoundError(NormrankError, FileNotFoundError):
    """The collection is neither a folder, nor found locally by name, nor downloadable now."""


def query_depth(qid: str) -> int:
    """Heading depth of a TREC CAR style id: ``"Page/Section/Subsection"`` -> 3 (a page alone -> 1).

    A leading ``enwiki:`` is ignored. The id is split on literal ``/`` before URL escapes are
    decoded, so a heading containing an escaped slash (``%2F``) stays one heading.
    """
    path = qid.split(":", 1)[1] if qid.startswith("enwiki:") else qid
    return max(1, len([p for p in path.split("/") if unquote(p).strip()]))


def depth_bucket(depth: int) -> str:
    """The paper's Appendix C buckets: ``"d=1"`` page, ``"d=2"``, ``"d=3"``, ``"d=4+"``."""
    return "d=4+" if depth >= 4 else f"d={depth}"


@dataclass
class Dataset:
    """A retrieval collection held in memory.

    ``doc_texts[i]`` is ``(title + " " + text).strip()`` of ``doc_ids[i]``; ``qrels`` maps
    query id -> {doc id -> graded relevance}. Only judged queries (keys of ``qrels``) are evaluated.
    """

    name: str
    doc_ids: list[str]
    doc_texts: list[str]
    doc_titles: list[str]
    query_ids: list[str]
    query_texts: list[str]
    qrels: dict[str, dict[str, int]]
    split: str = "test"
    source: str = ""

    def query_depth(self, qid: str) -> int:
        """Heading depth of query ``qid`` (see :func:`query_depth`)."""
        return query_depth(qid)

    def has_heading_paths(self) -> bool:
        """Whether any judged query id carries a heading path (``a/b``)."""
        return any(query_depth(q) > 1 for q in self.qrels)

    def judged(self) -> tuple[list[str], list[str]]:
        """(ids, texts) of the queries that have qrels, in ``query_ids`` order."""
        pairs = [(q, t) for q, t in zip(self.query_ids, self.query_texts, strict=True) if q in self.qrels]
        return [q for q, _ in pairs], [t for _, t in pairs]

    def __len__(self) -> int:
        return len(self.doc_ids)


def _read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """BEIR qrels TSV (header ``query-id corpus-id score``) -> {qid: {docid: score}}."""
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        for i, row in enumerate(reader):
            if not row or (i == 0 and row[0] == "query-id"):
                continue
            if len(row) < 3:
                raise InvalidInputError(f"{path}:{i + 1}: expected 3 tab-separated columns, got {row!r}")
            qrels.setdefault(row[0], {})[row[1]] = int(float(row[2]))
    return qrels


def available_splits(folder: str | Path) -> list[str]:
    """The qrels splits of a BEIR folder (``["test", "train"]`` for SciFact), sorted."""
    qdir = Path(folder) / "qrels"
    return sorted(p.stem for p in qdir.glob("*.tsv")) if qdir.is_dir() else []


def load_beir_folder(folder: str | Path, split: str = "test", name: str | None = None) -> Dataset:
    """Read a BEIR-layout folder: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``."""
    folder = Path(folder)
    for needed in ("corpus.jsonl", "queries.jsonl"):
        if not (folder / needed).is_file():
            raise DatasetNotFoundError(f"{folder} is not a BEIR folder: {needed} is missing")
    qrels_path = folder / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        raise DatasetNotFoundError(
            f"{folder}: no qrels for split {split!r}; available: {available_splits(folder) or 'none'}"
        )
    docs = _read_jsonl(folder / "corpus.jsonl")
    queries = _read_jsonl(folder / "queries.jsonl")
    titles = [str(d.get("title") or "") for d in docs]
    texts = [(t + " " + str(d.get("text") or "")).strip() for t, d in zip(titles, docs, strict=True)]
    return Dataset(
        name=name or folder.name,
        doc_ids=[str(d["_id"]) for d in docs],
        doc_texts=texts,
        doc_titles=titles,
        query_ids=[str(q["_id"]) for q in queries],
        query_texts=[str(q.get("text") or "") for q in queries],
        qrels=read_qrels(qrels_path),
        split=split,
        source=str(folder.resolve()),
    )


def _default_dirs(data_dir: str | Path | None) -> list[Path]:
    dirs = []
    if data_dir is not None:
        dirs.append(Path(data_dir))
    if os.environ.get("NORMRANK_DATA"):
        dirs.append(Path(os.environ["NORMRANK_DATA"]))
    repo = Path(__file__).resolve().parents[1]
    for base in (repo, Path.cwd()):
        cand = base / ".." / "shared" / "data" / "beir"
        if cand.is_dir():
            dirs.append(cand.resolve())
    return dirs


def resolve_beir_folder(name: str, data_dir: str | Path | None = None, *, download: bool = True) -> Path:
    """Find BEIR dataset ``name`` locally (``data_dir``, ``$NORMRANK_DATA``, ``../shared/data/beir``),
    else download it with beir's downloader into the first of those (or the normrank cache)."""
    searched = _default_dirs(data_dir)
    for d in searched:
        if (d / name / "corpus.jsonl").is_file():
            return d / name
    if not download:
        raise DatasetNotFoundError(f"BEIR dataset {name!r} not found in {[str(d) for d in searched]}")
    from normrank.settings import cache_root

    target = Path(data_dir) if data_dir is not None else cache_root() / "beir"
    try:
        from beir import util
    except ImportError as e:
        raise MissingDependencyError(
            "beir is needed to download datasets: pip install 'normrank[bench]'"
        ) from e
    try:
        return Path(util.download_and_unzip(_BEIR_URL.format(name), str(target)))
    except Exception as e:  # beir raises requests/zip errors of many kinds
        raise DatasetNotFoundError(
            f"BEIR dataset {name!r} is not in {[str(d) for d in searched]} and could not be downloaded "
            f"(offline?): put a BEIR-layout folder there or pass --data-dir"
        ) from e


def load_ir_datasets(dataset_id: str) -> Dataset:
    """Load an ir_datasets collection (e.g. ``car/v1.5/test200``, ``beir/scifact/test``)."""
    try:
        import ir_datasets
    except ImportError as e:
        raise MissingDependencyError("pip install ir_datasets") from e
    try:
        ds = ir_datasets.load(dataset_id)
    except KeyError as e:
        raise DatasetNotFoundError(f"unknown ir_datasets id {dataset_id!r}") from e
    try:
        doc_ids, titles, texts = [], [], []
        for d in ds.docs_iter():
            title = str(getattr(d, "title", "") or "")
            doc_ids.append(str(d.doc_id))
            titles.append(title)
            texts.append((title + " " + str(getattr(d, "text", "") or "")).strip())
        qids, qtexts = [], []
        for q in ds.queries_iter():
            qids.append(str(q.query_id))
            qtexts.append(str(getattr(q, "text", None) or getattr(q, "title", "") or q[1]))
        qrels: dict[str, dict[str, int]] = {}
        for r in ds.qrels_iter():
            qrels.setdefault(str(r.query_id), {})[str(r.doc_id)] = int(r.relevance)
    except Exception as e:  # ir_datasets raises IOError/HTTP errors when it cannot fetch its files
        raise DatasetNotFoundError(
            f"ir_datasets {dataset_id!r}: its files are not available (offline, or they need a manual "
            "download; see ir_datasets' documentation for this collection)"
        ) from e
    return Dataset(
        dataset_id.replace("/", "_"), doc_ids, texts, titles, qids, qtexts, qrels, source=dataset_id
    )


def load_dataset(source: str | Path, split: str = "test", *, data_dir: str | Path | None = None) -> Dataset:
    """Load a collection from a BEIR folder path, a BEIR name, or an ir_datasets id.

    Resolution order: an existing folder; a BEIR name in ``data_dir`` / ``$NORMRANK_DATA`` /
    ``../shared/data/beir``; an ir_datasets id (anything with a ``/``, e.g. ``car/v1.5/trec-y1``);
    finally beir's downloader (fails with :class:`DatasetNotFoundError` when offline).
    """
    src = str(source)
    path = Path(src).expanduser()
    if path.is_dir():
        return load_beir_folder(path, split)
    if path.is_absolute() or src.startswith((".", "~")):  # a path, never an ir_datasets id or a name
        what = "is a file, not a folder" if path.exists() else "does not exist"
        raise DatasetNotFoundError(
            f"{src} {what}: pass a BEIR folder (corpus.jsonl, queries.jsonl, qrels/), a BEIR name "
            "or an ir_datasets id"
        )
    if "/" in src and not path.exists():
        return load_ir_datasets(src)
    return load_beir_folder(resolve_beir_folder(src, data_dir), split, name=src)
