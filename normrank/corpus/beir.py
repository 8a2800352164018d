"""Retrieval collections: BEIR-layout folders, BEIR names, ir_datasets ids (TREC CAR included).

Documents are the BEIR text ``(title + " " + text).strip()``. Query and document ids are kept as
strings and are never compared with each other: in the classic collections (Cranfield, CISI, ...)
query "1" and document "1" are unrelated, so BEIR's ``ignore_identical_ids`` must not be applied.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from normrank.errors import DuplicateIdError, InvalidInputError, MissingDependencyError, NormrankError

__all__ = [
    "Dataset",
    "DatasetNotFoundError",
    "available_splits",
    "depth_bucket",
    "load_beir_folder",
    "load_dataset",
    "query_depth",
    "read_jsonl",
    "read_qrels",
    "resolve_beir_folder",
    "validate_dataset",
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
    qrels_path: str = ""  # the qrels file read, for messages ("" when not read from a file)

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


_UTF16_MARKS = (b"\xff\xfe", b"\xfe\xff")
_TEXT_TYPES = (str, int, float)  # a title or text BEIR writes (numbers are read as their text)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number from 1, text)`` of every non-blank line of a UTF-8 file, checked as read.

    Lines end at ``\\n`` only (a U+2028 inside a JSON string is no line end); a trailing ``\\r``
    and a leading UTF-8 byte-order mark (editors write one) are dropped.

    Raises:
        InvalidInputError: the file cannot be read, or a line is not UTF-8 (file and line named).
    """
    try:
        f = path.open("rb")
    except OSError as e:
        raise InvalidInputError(f"{path}: cannot be read ({e.strerror or e})") from e
    with f:
        for no, raw in enumerate(f, 1):
            if no == 1 and raw.startswith(_UTF16_MARKS):
                raise InvalidInputError(
                    f"{path}:1: the file is UTF-16 (it starts with a UTF-16 mark): save it as UTF-8"
                )
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InvalidInputError(
                    f"{path}:{no}: not UTF-8 (byte {raw[e.start]:#04x} at byte {e.start + 1} of the line): "
                    "save the file as UTF-8"
                ) from e
            text = text.removeprefix("\ufeff").rstrip("\r\n")
            if text.strip():
                yield no, text


def _json_kind(value: object) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


def read_jsonl(
    path: str | Path, what: str = "row", fields: Sequence[str] = ()
) -> tuple[list[str], list[dict]]:
    """``(ids, rows)`` of a BEIR ``corpus.jsonl`` / ``queries.jsonl``, every line validated.

    Each non-blank line must be one JSON object with an ``_id`` (a string or an integer, read as
    its text, not empty) unique in the file; each of ``fields`` present must be a string, a number
    or null. A UTF-8 byte-order mark is accepted.

    Raises:
        InvalidInputError: a line that is not UTF-8, not JSON, not an object, without ``_id``, or a
            field of the wrong type; or a file without rows. The message names the file and line.
        DuplicateIdError: an ``_id`` seen before (both lines named).
    """
    path = Path(path)
    ids: list[str] = []
    rows: list[dict] = []
    first: dict[str, int] = {}
    for no, text in _lines(path):
        try:
            row = json.loads(text)
        except json.JSONDecodeError as e:
            raise InvalidInputError(
                f"{path}:{no}: not valid JSON ({e.msg} at column {e.colno}): each line must be one JSON object"
            ) from e
        except RecursionError as e:  # nesting deeper than Python's parser goes
            raise InvalidInputError(f"{path}:{no}: not a BEIR {what}: JSON nested too deeply") from e
        if not isinstance(row, dict):
            raise InvalidInputError(
                f'{path}:{no}: expected a JSON object with an "_id", got a JSON {_json_kind(row)}'
            )
        if "_id" not in row:
            raise InvalidInputError(f'{path}:{no}: the {what} has no "_id" (keys: {sorted(row)[:5]})')
        rid = row["_id"]
        if isinstance(rid, bool) or not isinstance(rid, str | int):
            raise InvalidInputError(
                f'{path}:{no}: "_id" must be a string or an integer, got a JSON {_json_kind(rid)}'
            )
        rid = str(rid)
        if not rid.strip():
            raise InvalidInputError(f'{path}:{no}: the {what} has an empty "_id"')
        for key in fields:
            value = row.get(key)
            if value is not None and not isinstance(value, _TEXT_TYPES):
                raise InvalidInputError(
                    f'{path}:{no}: "{key}" of {what} {rid!r} must be a string, got a JSON {_json_kind(value)}'
                )
        if rid in first:
            raise DuplicateIdError(f"{path}:{no}: duplicate {what} id {rid!r} (first on line {first[rid]})")
        first[rid] = no
        ids.append(rid)
        rows.append(row)
    if not ids:
        raise InvalidInputError(f"{path}: {_plural(0, what).replace('0', 'no', 1)}: the file is empty")
    return ids, rows


def _grade(text: str) -> int | None:
    """An integer relevance grade (``"2"``, also ``"2.0"``), else None."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if math.isfinite(value) and value == int(value) else None


def _read_qrels(path: Path) -> tuple[dict[str, dict[str, int]], dict[str, int], dict[tuple[str, str], int]]:
    """:func:`read_qrels`, plus the first line of each query id and the line of each judgement."""
    qrels: dict[str, dict[str, int]] = {}
    qline: dict[str, int] = {}
    line_of: dict[tuple[str, str], int] = {}
    first = True
    for no, text in _lines(path):
        row = text.split("\t")
        if first:
            first = False
            if row[0] == "query-id" or (len(row) == 3 and row[2].strip().lower() == "score"):
                continue  # the header
        if len(row) != 3:
            hint = " (a TREC qrels line 'query 0 doc grade'?)" if len(row) == 4 else ""
            if len(row) == 1 and len(text.split()) >= 3:
                hint = " (columns separated by spaces? BEIR qrels separate them by tabs)"
            raise InvalidInputError(
                f"{path}:{no}: expected 3 tab-separated columns (query-id, corpus-id, score), "
                f"got {len(row)}{hint}: {text[:80]!r}"
            )
        qid, did, score = row
        if not qid.strip() or not did.strip():
            raise InvalidInputError(
                f"{path}:{no}: empty {'query' if not qid.strip() else 'corpus'} id: {text[:80]!r}"
            )
        grade = _grade(score.strip())
        if grade is None:
            raise InvalidInputError(f"{path}:{no}: score {score[:40]!r} is not an integer relevance grade")
        if (qid, did) in line_of:
            raise DuplicateIdError(
                f"{path}:{no}: query {qid!r} judges document {did!r} twice (first on line {line_of[qid, did]})"
            )
        line_of[qid, did] = no
        qline.setdefault(qid, no)
        qrels.setdefault(qid, {})[did] = grade
    if not qrels:
        raise InvalidInputError(f"{path}: no judgements: the file has no rows besides its header")
    return qrels, qline, line_of


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """BEIR qrels TSV (header ``query-id corpus-id score``) -> {qid: {docid: score}}.

    Raises:
        InvalidInputError: a line without exactly 3 tab-separated columns, an empty id, a score
            that is not an integer grade, non-UTF-8 bytes, or no judgement (file and line named).
        DuplicateIdError: a (query, document) pair judged twice.
    """
    return _read_qrels(Path(path))[0]


def _plural(n: int, word: str) -> str:
    if n == 1:
        return f"{n} {word}"
    return f"{n} {word[:-1]}ies" if word.endswith("y") else f"{n} {word}s"


def validate_dataset(
    ds: Dataset,
    *,
    qline: dict[str, int] | None = None,
    line_of: dict[tuple[str, str], int] | None = None,
) -> None:
    """Refuse a collection that cannot be evaluated; warn where part of the judgements is unused.

    Errors: repeated document or query ids, judged queries with an empty or blank text, no qrels
    query id among the queries, no judged
    document in the corpus, no relevant (grade >= 1) document in the corpus. Warnings: some qrels
    query ids not among the queries (not evaluated), some judged documents not in the corpus
    (each counted as a relevant document never retrieved, as ranx counts it).
    Messages name ``ds.qrels_path`` (else the dataset's name) and, given the line maps of
    :func:`_read_qrels`, the line.

    Raises:
        DuplicateIdError, InvalidInputError: as above.
    """
    where = ds.qrels_path or ds.name

    def at(line: int | None) -> str:
        return f"{where}:{line}" if line else where

    for kind, ids in (("document", ds.doc_ids), ("query", ds.query_ids)):
        if len(set(ids)) != len(ids):
            seen: set[str] = set()
            dup = next(i for i in ids if i in seen or seen.add(i))
            raise DuplicateIdError(f"{ds.name}: duplicate {kind} id {dup!r}")
    queries, docs = set(ds.query_ids), set(ds.doc_ids)
    # A judged query with no words cannot be encoded into a query: refused, not swept as an empty
    # string (that drags the mean) nor dropped (that changes the denominator against published numbers).
    blank = [
        q for q, t in zip(ds.query_ids, ds.query_texts, strict=True) if not str(t).strip() and q in ds.qrels
    ]
    if blank:
        shown = ", ".join(map(repr, blank[:10])) + (f" and {len(blank) - 10} more" if len(blank) > 10 else "")
        src = str(Path(ds.qrels_path).parent.parent / "queries.jsonl") if ds.qrels_path else ds.name
        raise InvalidInputError(
            f"{src}: {_plural(len(blank), 'judged query')} {'has' if len(blank) == 1 else 'have'} an empty or "
            f"blank text ({shown}); give them text, or remove them from the queries and the qrels"
        )
    unknown_q = [q for q in ds.qrels if q not in queries]
    if unknown_q:
        q0 = unknown_q[0]
        said = f"{len(unknown_q)} of {_plural(len(ds.qrels), 'judged query')} ({q0!r} first) {'is' if len(unknown_q) == 1 else 'are'} not among the queries"
        if len(unknown_q) == len(ds.qrels):
            raise InvalidInputError(
                f"{at((qline or {}).get(q0))}: {said}: the qrels do not belong to these queries"
            )
        warnings.warn(
            f"{at((qline or {}).get(q0))}: {said}; they are not evaluated", UserWarning, stacklevel=3
        )
    pairs = [(q, d, g) for q, judged in ds.qrels.items() if q in queries for d, g in judged.items()]
    missing = [(q, d) for q, d, _ in pairs if d not in docs]
    if missing:
        q0, d0 = missing[0]
        said = (
            f"{len(missing)} of {_plural(len(pairs), 'judgement')} {'names a document' if len(missing) == 1 else 'name documents'} "
            "not in the corpus "
            f"({d0!r}, for query {q0!r}, first)"
        )
        if len(missing) == len(pairs):
            raise InvalidInputError(
                f"{at((line_of or {}).get((q0, d0)))}: {said}: no judged document to evaluate; "
                "are these the qrels of this corpus?"
            )
        warnings.warn(
            f"{at((line_of or {}).get((q0, d0)))}: {said}; each counts as a relevant document never "
            "retrieved (as ranx counts it)",
            UserWarning,
            stacklevel=3,
        )
    if not any(g >= 1 and d in docs for _, d, g in pairs):
        raise InvalidInputError(
            f"{where}: no judged query has a relevant document (grade >= 1) in the corpus: nothing to evaluate"
        )


def available_splits(folder: str | Path) -> list[str]:
    """The qrels splits of a BEIR folder (``["test", "train"]`` for SciFact), sorted."""
    qdir = Path(folder) / "qrels"
    return sorted(p.stem for p in qdir.glob("*.tsv")) if qdir.is_dir() else []


def _not_a_file(path: Path) -> None:
    """A path that exists (through its links) but is no regular file: say so, not "missing"."""
    if path.exists() and not path.is_file():
        kind = "a directory" if path.is_dir() else "a device, FIFO or socket"
        link = f" (a link to {os.path.realpath(path)})" if path.is_symlink() else ""
        raise InvalidInputError(f"{path} is {kind}{link}, not a regular file")


def load_beir_folder(folder: str | Path, split: str = "test", name: str | None = None) -> Dataset:
    """Read a BEIR-layout folder: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``.

    Every line is validated as it is read (:func:`read_jsonl`, :func:`read_qrels`) and the files
    against each other (:func:`validate_dataset`); each error names the file and line.

    Raises:
        DatasetNotFoundError: a file of the layout is missing.
        InvalidInputError, DuplicateIdError: a malformed line, repeated ids, or judgements that
            cannot be evaluated.
    """
    folder = Path(folder)
    for needed in ("corpus.jsonl", "queries.jsonl"):
        _not_a_file(folder / needed)
        if not (folder / needed).is_file():
            raise DatasetNotFoundError(f"{folder} is not a BEIR folder: {needed} is missing")
    qrels_path = folder / "qrels" / f"{split}.tsv"
    _not_a_file(qrels_path)
    if not qrels_path.is_file():
        raise DatasetNotFoundError(
            f"{folder}: no qrels for split {split!r}; available: {available_splits(folder) or 'none'}"
        )
    doc_ids, docs = read_jsonl(folder / "corpus.jsonl", "document", ("title", "text"))
    query_ids, queries = read_jsonl(folder / "queries.jsonl", "query", ("text",))
    qrels, qline, line_of = _read_qrels(qrels_path)
    titles = [str(d.get("title") or "") for d in docs]
    texts = [(t + " " + str(d.get("text") or "")).strip() for t, d in zip(titles, docs, strict=True)]
    ds = Dataset(
        name=name or folder.name,
        doc_ids=doc_ids,
        doc_texts=texts,
        doc_titles=titles,
        query_ids=query_ids,
        query_texts=[str(q.get("text") or "") for q in queries],
        qrels=qrels,
        split=split,
        source=str(folder.resolve()),
        qrels_path=str(qrels_path),
    )
    validate_dataset(ds, qline=qline, line_of=line_of)
    return ds


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
    ds = Dataset(dataset_id.replace("/", "_"), doc_ids, texts, titles, qids, qtexts, qrels, source=dataset_id)
    validate_dataset(ds)
    return ds


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
