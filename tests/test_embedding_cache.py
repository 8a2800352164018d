"""The embedding cache is keyed by what determines the embeddings, not by where the data lives."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from normrank.corpus.beir import load_dataset
from normrank.corpus.embedding_cache import EmbeddingCache, content_digest
from normrank.encoders import model_identity
from normrank.errors import InvalidInputError
from normrank.sweep import embed_dataset


class CountingEncoder:
    """Deterministic stand-in for a model: each text's embedding depends on the text alone."""

    kind = "fake"

    def __init__(self) -> None:
        self.calls: list[int] = []

    def encode(self, texts, batch_size=64, show_progress=False):
        self.calls.append(len(texts))
        return np.array([[len(t), t.count("e") + 1.0, 3.0] for t in texts], dtype=np.float32)


def write_beir(folder: Path, docs: dict[str, tuple[str, str]]) -> Path:
    folder.mkdir(parents=True)
    with (folder / "corpus.jsonl").open("w") as f:
        for did, (title, text) in docs.items():
            f.write(json.dumps({"_id": did, "title": title, "text": text}) + "\n")
    (folder / "queries.jsonl").write_text(
        json.dumps({"_id": "1", "text": "what is heat"})
        + "\n"
        + json.dumps({"_id": "2", "text": "norms"})
        + "\n"
    )
    (folder / "qrels").mkdir()
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\t1\t1\n2\t3\t1\n")
    return folder


DOCS = {"1": ("Heat", "heat is energy"), "2": ("", "nothing here"), "3": ("Norms", "vector length")}


def embed(folder: Path, cache: EmbeddingCache, model: str, enc: CountingEncoder):
    ds = load_dataset(folder)
    qids, qtexts = ds.judged()
    return embed_dataset(ds, model, cache, {model: enc}, 64, False, None, qids, qtexts)


def test_a_copied_collection_hits_the_cache(tmp_path: Path) -> None:
    cache, enc = EmbeddingCache(tmp_path / "cache"), CountingEncoder()
    a = write_beir(tmp_path / "data" / "scifact", DOCS)
    q1, d1 = embed(a, cache, "fake-model", enc)
    assert enc.calls == [3, 2]
    b = tmp_path / "elsewhere" / "copy-of-scifact"
    shutil.copytree(a, b)
    fresh = EmbeddingCache(tmp_path / "cache")  # a new process, same cache folder
    q2, d2 = embed(b, fresh, "fake-model", enc)
    assert enc.calls == [3, 2]  # no encoder call: the moved, renamed copy is the same content
    np.testing.assert_array_equal(d1, d2)
    np.testing.assert_array_equal(q1, q2)
    # The docs really are "title + ' ' + text": the key sees exactly what was encoded.
    np.testing.assert_array_equal(
        d1[:, 0], [len("Heat heat is energy"), len("nothing here"), len("Norms vector length")]
    )


def test_a_changed_text_misses_and_the_rest_still_hits(tmp_path: Path) -> None:
    cache, enc = EmbeddingCache(tmp_path / "cache"), CountingEncoder()
    embed(write_beir(tmp_path / "a", DOCS), cache, "fake-model", enc)
    changed = dict(DOCS, **{"2": ("", "nothing here at all")})
    _, d = embed(write_beir(tmp_path / "b", changed), cache, "fake-model", enc)
    assert enc.calls == [3, 2, 3]  # the corpus is re-encoded; the unchanged queries hit
    assert d[1, 0] == len("nothing here at all")
    # The same built text from other fields (the title moved into the text) is the same input.
    moved = dict(DOCS, **{"1": ("", "Heat heat is energy")})
    embed(write_beir(tmp_path / "c", moved), cache, "fake-model", enc)
    assert enc.calls == [3, 2, 3]  # same built text "Heat heat is energy": same embeddings, a hit
    reordered = {k: DOCS[k] for k in ("3", "1", "2")}
    embed(write_beir(tmp_path / "d", reordered), cache, "fake-model", enc)
    assert enc.calls == [3, 2, 3, 3]  # same texts, other order: rows would not line up, so a miss


def test_a_different_model_or_option_misses(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "cache")
    folder = write_beir(tmp_path / "a", DOCS)
    e1, e2, e3 = CountingEncoder(), CountingEncoder(), CountingEncoder()
    embed(folder, cache, "fake-model", e1)
    embed(folder, cache, "other-model", e2)
    assert e1.calls == [3, 2] and e2.calls == [3, 2]
    ds = load_dataset(folder)
    qids, qtexts = ds.judged()
    embed_dataset(
        ds, "fake-model", cache, {"fake-model": e3}, 64, False, {"max_seq_length": 32}, qids, qtexts
    )
    assert e3.calls == [3, 2]


def fake_model_folder(folder: Path, weights: bytes) -> Path:
    folder.mkdir(parents=True)
    (folder / "modules.json").write_text("[]")
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "README.md").write_text(f"copied to {folder}")  # not part of the identity
    return folder


def test_model_identity_is_the_weights_not_the_location(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("NORMRANK_CACHE", str(tmp_path / "nr"))
    a = fake_model_folder(tmp_path / "a" / "model", b"\x00\x01weights")
    b = fake_model_folder(tmp_path / "b" / "renamed", b"\x00\x01weights")
    c = fake_model_folder(tmp_path / "c" / "model", b"\x00\x02weights")
    ia, ib, ic = model_identity(a), model_identity(b), model_identity(c)
    assert ia == ib and ia["weights_sha256"] != ic["weights_sha256"]
    assert ia["kind"] == "sentence-transformers" and "name" not in ia
    # Through the cache: the copied model folder hits, the changed weights miss.
    cache, enc = EmbeddingCache(tmp_path / "cache"), CountingEncoder()
    ids, texts = ["x", "y"], ["alpha", "beta"]
    cache.get_or_encode(str(a), "ds", "corpus", ids, texts, enc, show_progress=False)
    _, hit_b = cache.get_or_encode(str(b), "ds", "corpus", ids, texts, enc, show_progress=False)
    _, hit_c = cache.get_or_encode(str(c), "ds", "corpus", ids, texts, enc, show_progress=False)
    assert (hit_b, hit_c) == (True, False) and enc.calls == [2, 2]
    # Changed weights in place (new bytes, new mtime) are noticed, not served from the digest memo.
    (a / "model.safetensors").write_bytes(b"\x00\x03weights, longer")
    assert model_identity(a)["weights_sha256"] != ia["weights_sha256"]


def test_entries_are_atomic_npy_and_json_without_pickle(tmp_path: Path) -> None:
    cache, enc = EmbeddingCache(tmp_path), CountingEncoder()
    ids, texts = ["a", "b"], ["x", "yy"]
    emb, hit = cache.get_or_encode("m", "my-data", "corpus", ids, texts, enc, show_progress=False)
    assert not hit
    (meta,) = cache.entries()
    assert (meta["model"], meta["dataset"], meta["part"], meta["n"], meta["dim"]) == (
        "m",
        "my-data",
        "corpus",
        2,
        3,
    )
    assert meta["content_sha256"] == content_digest(ids, texts)
    arr = np.load(cache.path(meta["key"]), allow_pickle=False)
    np.testing.assert_array_equal(arr, emb)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"{meta['key']}.json",
        f"{meta['key']}.npy",
    ]  # no temp left
    # A manifest that does not describe the array is a miss, never a wrong hit.
    mpath = cache.path(meta["key"]).with_suffix(".json")
    mpath.write_text(json.dumps({**meta, "content_sha256": "0" * 64}))
    _, hit = cache.get_or_encode("m", "my-data", "corpus", ids, texts, enc, show_progress=False)
    assert not hit and enc.calls == [2, 2]


def test_ids_and_texts_must_pair_up(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="2 ids but 1 texts"):
        EmbeddingCache(tmp_path).load("m", ["a", "b"], "text", texts=["x"])
    # Length prefixes: ("ab", "c") and ("a", "bc") are different content.
    assert content_digest(["ab"], ["c"]) != content_digest(["a"], ["bc"])
