"""normrank.corpus.beir: BEIR folders, name resolution, query depth, splits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from normrank.corpus.beir import (
    DatasetNotFoundError,
    available_splits,
    depth_bucket,
    load_dataset,
    query_depth,
)
from normrank.errors import InvalidInputError

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "beir"


def make_beir(root: Path, name: str = "toy", *, split: str = "test") -> Path:
    d = root / name
    (d / "qrels").mkdir(parents=True)
    docs = [
        {"_id": "1", "title": "Alpha", "text": "first doc"},
        {"_id": "2", "title": "", "text": " untitled doc "},
        {"_id": "d3", "title": "Only title", "text": ""},
    ]
    (d / "corpus.jsonl").write_text("\n".join(json.dumps(x) for x in docs) + "\n")
    qs = [{"_id": "1", "text": "query one"}, {"_id": "q2", "text": "unjudged"}]
    (d / "queries.jsonl").write_text("\n".join(json.dumps(x) for x in qs) + "\n")
    (d / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n1\t1\t2\n1\td3\t1\n")
    return d


def test_beir_folder_texts_ids_and_qrels(tmp_path: Path) -> None:
    ds = load_dataset(make_beir(tmp_path))
    assert ds.name == "toy"
    assert ds.doc_ids == ["1", "2", "d3"]
    # BEIR: title + " " + text, stripped.
    assert ds.doc_texts == ["Alpha first doc", "untitled doc", "Only title"]
    assert ds.doc_titles == ["Alpha", "", "Only title"]
    assert ds.qrels == {"1": {"1": 2, "d3": 1}}
    # Query "1" and document "1" are unrelated; nothing drops identical ids.
    assert ds.judged() == (["1"], ["query one"])
    assert "1" in ds.doc_ids


def test_missing_split_lists_available(tmp_path: Path) -> None:
    d = make_beir(tmp_path)
    assert available_splits(d) == ["test"]
    with pytest.raises(DatasetNotFoundError, match="available: \\['test'\\]"):
        load_dataset(d, split="train")


def test_bad_qrels_row(tmp_path: Path) -> None:
    d = make_beir(tmp_path)
    (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\t1\n")
    with pytest.raises(InvalidInputError, match="3 tab-separated"):
        load_dataset(d)


def test_name_resolution_data_dir_then_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    make_beir(a, "mycoll")
    make_beir(b, "other")
    assert load_dataset("mycoll", data_dir=a).source == str((a / "mycoll").resolve())
    monkeypatch.setenv("NORMRANK_DATA", str(b))
    assert load_dataset("other").name == "other"


def test_unknown_name_offline_fails_clearly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import normrank.corpus.beir as data

    monkeypatch.setattr(data, "_default_dirs", lambda d: [tmp_path])
    with pytest.raises(DatasetNotFoundError, match="not in"):
        # The downloader is pointed at an unreachable address so the test is offline-safe.
        monkeypatch.setattr(data, "_BEIR_URL", "http://127.0.0.1:9/{}.zip")
        load_dataset("no-such-collection", data_dir=tmp_path)


@pytest.mark.parametrize("where", ["/no/such/beir/adi", "./adi_typo", "~/no-such-folder"])
def test_missing_folder_path_is_named_as_a_path(where: str) -> None:
    """`normrank diagnose ./adi_typo` must say the folder is missing, not 'unknown ir_datasets id'."""
    with pytest.raises(DatasetNotFoundError, match="does not exist: pass a BEIR folder"):
        load_dataset(where)


def test_file_given_as_a_collection(tmp_path) -> None:
    (tmp_path / "corpus.jsonl").write_text("{}\n")
    with pytest.raises(DatasetNotFoundError, match="is a file, not a folder"):
        load_dataset(tmp_path / "corpus.jsonl")


def test_unknown_ir_datasets_id() -> None:
    pytest.importorskip("ir_datasets")
    with pytest.raises(DatasetNotFoundError, match="ir_datasets"):
        load_dataset("nonexistent-collection/v9/test")


@pytest.mark.parametrize(
    ("qid", "depth"),
    [
        ("enwiki:Aftertaste", 1),
        ("enwiki:Aftertaste/Aftertaste%20of%20alcohol", 2),
        ("Page/Section/Subsection", 3),
        ("enwiki:A/B/C/D/E", 5),
        ("enwiki:AC%2FDC/History", 2),  # an escaped slash is part of one heading
        ("42", 1),
    ],
)
def test_query_depth(qid: str, depth: int) -> None:
    assert query_depth(qid) == depth


def test_depth_buckets_follow_appendix_c() -> None:
    assert [depth_bucket(d) for d in (1, 2, 3, 4, 7)] == ["d=1", "d=2", "d=3", "d=4+", "d=4+"]


@pytest.mark.skipif(not (DATA / "scifact").is_dir(), reason="shared SciFact data not present")
def test_scifact_splits_and_sizes() -> None:
    assert available_splits(DATA / "scifact") == ["test", "train"]
    ds = load_dataset(DATA / "scifact")
    assert (len(ds.doc_ids), len(ds.query_ids), len(ds.qrels)) == (5183, 1109, 300)
    assert len(load_dataset(DATA / "scifact", split="train").qrels) == 809


@pytest.mark.skipif(not (DATA / "adi").is_dir(), reason="shared ADI data not present")
def test_adi_keeps_identical_ids() -> None:
    ds = load_dataset("adi", data_dir=DATA)
    assert len(ds) == 82 and len(ds.qrels) == 35
    # Query ids and document ids overlap (both numbered from 1), and both sides keep them all.
    assert set(ds.qrels) & set(ds.doc_ids)
    assert sum(len(v) for v in ds.qrels.values()) == 170
