"""The BEIR reader, fuzzed (issue 25): hostile ``corpus.jsonl`` / ``queries.jsonl`` / qrels files
(malformed lines, JSON of every kind, encodings, byte-order marks, id collisions, bad grades).

Every folder either loads into a collection that can be evaluated and that equals an independent
reading of the same files (plain ``json`` + ``str.split``), or raises a :class:`NormrankError`
whose message is one line naming the file that is wrong. No other exception, ever. A sample goes
through ``normrank sweep`` / ``diagnose``: exit code 2 and one ``error:`` line, no traceback.

Profiles (env NORMRANK_TEST_PROFILE): ``small`` (default, CI) 600 folders and
40 command lines; ``full`` 9,000 and 400.
The counts are printed at the end of the module (``-s``).
"""

from __future__ import annotations

import json
import os
import warnings
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from normrank.cli import app
from normrank.corpus.beir import load_dataset
from normrank.errors import NormrankError

FULL = os.environ.get("NORMRANK_TEST_PROFILE", "small") == "full"
COUNTS: Counter[str] = Counter()
OUTCOMES: Counter[str] = Counter()
SETTINGS = settings(
    max_examples=9000 if FULL else 600,
    deadline=None,
    derandomize=not FULL,
    suppress_health_check=list(HealthCheck),
    database=None,
)
runner = CliRunner()
FILES = {"corpus": "corpus.jsonl", "queries": "queries.jsonl", "qrels": "test.tsv"}
KINDS = ["not valid JSON", "not UTF-8", "UTF-16", "got a JSON", 'no "_id"', '"_id" must be', 'empty "_id"',
         "must be a string", "duplicate", "twice", "tab-separated", "grade", "no judgements",
         "not among the queries", "no judged document", "no judged query", "the file is empty", "empty"]  # fmt: skip

# -- hostile pieces ---------------------------------------------------------------------------

IDS = st.one_of(
    st.sampled_from(["d0", "d1", "d2", "q0", "q1", "1", "01", " 1", "é", "d0\t", "", " "]),
    st.integers(0, 3),  # an integer id collides with its string ("1" and 1)
    st.text(max_size=4),
)
JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True), st.text(max_size=6)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=5,
)  # fmt: skip


@st.composite
def json_line(draw, text_key: str) -> str:
    kind = draw(
        st.sampled_from(["row", "row", "row", "row", "no-id", "odd-id", "odd-text", "value", "broken"])
    )
    if kind == "value":
        return json.dumps(draw(JSON_VALUES))
    row: dict = {} if kind == "no-id" else {"_id": draw(JSON_VALUES) if kind == "odd-id" else draw(IDS)}
    row[text_key] = draw(JSON_VALUES) if kind == "odd-text" else draw(st.text(max_size=8))
    if draw(st.booleans()):
        row["title"] = draw(st.one_of(st.none(), st.text(max_size=5)))
    line = json.dumps(row, ensure_ascii=draw(st.booleans()))
    if kind == "broken":  # truncated, or a stray byte
        cut = draw(st.integers(0, max(0, len(line) - 1)))
        line = line[:cut] + draw(st.sampled_from(["", "}", ",", "\\", "\x00", '"']))
    return line


@st.composite
def qrels_line(draw) -> str:
    kind = draw(st.sampled_from(["row", "row", "row", "row", "row", "cols", "grade", "text"]))
    if kind == "text":
        return draw(st.text(max_size=12))
    qid, did = draw(IDS), draw(IDS)
    grade = draw(st.sampled_from(["0", "1", "2", "1.0", "-1"])) if kind != "grade" else draw(
        st.sampled_from(["x", "", "1.5", "nan", "inf", "1e3", " 2", "2 ", "٣"])
    )  # fmt: skip
    cols = [str(qid), str(did), grade]
    if kind == "cols":
        cols = draw(st.sampled_from([cols[:2], [cols[0], "0", *cols[1:]], [*cols, "x"], [" ".join(cols)]]))
    return "\t".join(cols)


@st.composite
def encoded(draw, lines: list[str], hostile: bool) -> bytes:
    """The file's bytes: UTF-8, with CRLF or blank lines or a mark; when ``hostile``, sometimes
    another encoding or a stray byte that is not UTF-8."""
    sep = draw(st.sampled_from(["\n", "\n", "\r\n", "\n\n"]))
    text = sep.join(lines) + draw(st.sampled_from(["\n", "", "\n\n"]))
    encodings = ["utf-8", "utf-8", "utf-8-sig"] + (["utf-16", "latin-1", "cp1252"] if hostile else [])
    data = text.encode(draw(st.sampled_from(encodings)), errors="replace")
    if hostile and draw(st.integers(0, 3)) == 0 and data:  # a byte that is not UTF-8 anywhere
        i = draw(st.integers(0, len(data)))
        data = data[:i] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xe9", b"\x80"])) + data[i:]
    return data


@st.composite
def folders(draw) -> dict[str, bytes]:
    """Valid collections with a few hostile lines or bytes (none in about a third of them)."""
    n_docs, n_queries = draw(st.integers(0, 6)), draw(st.integers(0, 4))
    docs = [json.dumps({"_id": f"d{i}", "title": "t", "text": f"doc {i}"}) for i in range(n_docs)]
    queries = [json.dumps({"_id": f"q{i}", "text": f"query {i}"}) for i in range(n_queries)]
    qrels = ["query-id\tcorpus-id\tscore"] * draw(st.integers(0, 1)) + [
        f"q{draw(st.integers(0, 4))}\td{draw(st.integers(0, 6))}\t{draw(st.sampled_from(['0', '1', '1', '2']))}"
        for _ in range(draw(st.integers(0, 6)))
    ]
    files = {"corpus": docs, "queries": queries, "qrels": qrels}
    makers = {"corpus": json_line("text"), "queries": json_line("text"), "qrels": qrels_line()}
    damaged = draw(st.lists(st.sampled_from([*FILES, *FILES]), max_size=3))  # names twice: lines or bytes
    for i, name in enumerate(damaged):
        if i % 2 == 0 or name == "qrels":
            lines = files[name]
            lines.insert(draw(st.integers(0, len(lines))), draw(makers[name]))
    hostile_bytes = {name for i, name in enumerate(damaged) if i % 2 == 1}
    return {name: draw(encoded(lines, name in hostile_bytes)) for name, lines in files.items()}


# -- an independent reading -------------------------------------------------------------------


def reference(files: dict[str, bytes]) -> tuple[list, list, list, list, dict]:
    """What the files say, read with json and str.split alone (valid files only)."""

    def lines(data: bytes) -> list[str]:  # a mark may open any line (files joined by cat)
        text = data.decode("utf-8")
        return [s for ln in text.split("\n") if (s := ln.removeprefix("\ufeff").rstrip("\r")).strip()]

    docs, queries = (
        [json.loads(ln) for ln in lines(files["corpus"])],
        [json.loads(ln) for ln in lines(files["queries"])],
    )
    qrels: dict[str, dict[str, int]] = {}
    for i, ln in enumerate(lines(files["qrels"])):
        cols = ln.split("\t")
        if i == 0 and (cols[0] == "query-id" or cols[2].strip().lower() == "score"):
            continue  # the header: BEIR's, or any whose third column is "score"
        qrels.setdefault(cols[0], {})[cols[1]] = int(float(cols[2]))
    titles = [str(d.get("title") or "") for d in docs]
    texts = [(t + " " + str(d.get("text") or "")).strip() for t, d in zip(titles, docs, strict=True)]
    return [str(d["_id"]) for d in docs], texts, [str(q["_id"]) for q in queries], titles, qrels


def write(root: Path, files: dict[str, bytes]) -> Path:
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    (root / "corpus.jsonl").write_bytes(files["corpus"])
    (root / "queries.jsonl").write_bytes(files["queries"])
    (root / "qrels" / "test.tsv").write_bytes(files["qrels"])
    return root


def check_error(e: NormrankError, folder: Path) -> None:
    message = str(e)
    assert "\n" not in message, message
    assert str(folder) in message or folder.name in message, message  # names the file (or the collection)
    assert any(name in message for name in FILES.values()), message


@SETTINGS
@given(files=folders())
def test_fuzz_reader(files, tmp_path_factory):
    folder = write(tmp_path_factory.mktemp("beir"), files)
    COUNTS["load"] += 1
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ds = load_dataset(folder)
    except NormrankError as e:
        check_error(e, folder)
        said = next((k for k in KINDS if k in str(e)), "other")
        OUTCOMES[f"load:{type(e).__name__}:{said}"] += 1
        return
    except Exception as e:  # the property: nothing untyped escapes
        OUTCOMES["load:UNTYPED"] += 1
        raise AssertionError(f"untyped {type(e).__name__}: {e}") from e
    OUTCOMES["load:ok" + (":warned" if caught else "")] += 1
    # What was accepted can be evaluated, and reads as the files say.
    assert len(set(ds.doc_ids)) == len(ds.doc_ids) and len(set(ds.query_ids)) == len(ds.query_ids)
    judged, _ = ds.judged()
    assert judged and any(g >= 1 and d in set(ds.doc_ids) for q in judged for d, g in ds.qrels[q].items())
    doc_ids, texts, query_ids, titles, qrels = reference(files)
    assert (ds.doc_ids, ds.doc_texts, ds.doc_titles, ds.query_ids, ds.qrels) == (
        doc_ids,
        texts,
        titles,
        query_ids,
        qrels,
    )


@settings(SETTINGS, max_examples=400 if FULL else 40)
@given(files=folders(), command=st.sampled_from(["sweep", "diagnose"]))
def test_fuzz_reader_cli(files, command, tmp_path_factory):
    """Through the command line: whatever the files, exit 2 with one ``error:`` line (a valid
    folder fails later, on the model, which does not exist: also one line)."""
    root = tmp_path_factory.mktemp("cli")
    folder = write(root / "coll", files)
    COUNTS[f"cli-{command}"] += 1
    res = runner.invoke(
        app, [command, str(folder), "--model", "no-such-model", "--quiet", "--out", str(root / "o")]
    )
    errors = [ln for ln in res.stderr.splitlines() if not ln.startswith("warning: ")]
    OUTCOMES[f"cli:exit{res.exit_code}"] += 1
    assert res.exit_code == 2 and len(errors) == 1 and errors[0].startswith("error: "), res.output
    assert "Traceback" not in res.output


def test_zz_report(record_property):
    total = sum(COUNTS.values())
    assert OUTCOMES["load:UNTYPED"] == 0
    assert COUNTS["load"] >= (9000 if FULL else 600) and total > COUNTS["load"]
    ok = sum(v for k, v in OUTCOMES.items() if k.startswith("load:ok"))
    assert 0 < ok < COUNTS["load"]  # the generator reaches both sides
    record_property("profile", "full" if FULL else "small")
    record_property("counts", dict(COUNTS))
    record_property("outcomes", dict(sorted(OUTCOMES.items())))


pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
