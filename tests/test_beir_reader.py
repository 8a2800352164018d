"""The BEIR reader validates as it reads (issue 25, items 6 and 12): every malformed folder is one
typed error naming the file and line, and ``normrank sweep`` / ``diagnose`` turn it into one
``error:`` line on stderr with exit code 2, never a traceback. A UTF-8 byte-order mark is accepted."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from normrank.cli import app
from normrank.corpus.beir import Dataset, load_dataset, read_jsonl, read_qrels, validate_dataset
from normrank.errors import DuplicateIdError, InvalidInputError, NormrankError

runner = CliRunner()
N_DOCS, N_QUERIES = 12, 6


def corpus_lines() -> list[str]:
    return [json.dumps({"_id": f"d{i}", "title": f"t{i}", "text": f"text of doc {i}"}) for i in range(N_DOCS)]


def query_lines() -> list[str]:
    return [json.dumps({"_id": f"q{i}", "text": f"query {i}"}) for i in range(N_QUERIES)]


def qrels_lines() -> list[str]:
    return ["query-id\tcorpus-id\tscore"] + [
        f"q{i}\td{(2 * i + j) % N_DOCS}\t1" for i in range(N_QUERIES) for j in (0, 1)
    ]


def write_folder(
    root: Path, corpus: list[str] | bytes | None = None, queries=None, qrels=None, name: str = "coll"
) -> Path:
    """A valid BEIR folder, with any of its three files replaced (text lines, or raw bytes)."""
    d = root / name
    (d / "qrels").mkdir(parents=True, exist_ok=True)
    for path, given, default in (
        (d / "corpus.jsonl", corpus, corpus_lines),
        (d / "queries.jsonl", queries, query_lines),
        (d / "qrels" / "test.tsv", qrels, qrels_lines),
    ):
        content = default() if given is None else given
        path.write_bytes(content if isinstance(content, bytes) else ("\n".join(content) + "\n").encode())
    return d


def _replace(lines: list[str], i: int, new: str) -> list[str]:
    return [*lines[:i], new, *lines[i + 1 :]]


# (case, which file, its content, the error's type, words it must say, the line it must name)
CASES = [
    ("truncated JSON", "corpus", _replace(corpus_lines(), 3, corpus_lines()[3][:-7]), InvalidInputError,
     "not valid JSON", "corpus.jsonl:4"),
    ("a line that is a list", "corpus", _replace(corpus_lines(), 0, '["d0", "text"]'), InvalidInputError,
     "got a JSON list", "corpus.jsonl:1"),
    ("a number line", "queries", _replace(query_lines(), 2, "42"), InvalidInputError, "got a JSON number",
     "queries.jsonl:3"),
    ("a row without _id", "corpus", _replace(corpus_lines(), 5, '{"title": "x", "text": "y"}'),
     InvalidInputError, 'has no "_id"', "corpus.jsonl:6"),
    ("a null _id", "queries", _replace(query_lines(), 1, '{"_id": null, "text": "y"}'), InvalidInputError,
     '"_id" must be a string', "queries.jsonl:2"),
    ("an empty _id", "corpus", _replace(corpus_lines(), 1, '{"_id": " ", "text": "y"}'), InvalidInputError,
     'empty "_id"', "corpus.jsonl:2"),
    ("a text that is an object", "corpus", _replace(corpus_lines(), 2, '{"_id": "d2", "text": {"a": 1}}'),
     InvalidInputError, '"text" of document', "corpus.jsonl:3"),
    ("non-UTF-8 bytes", "corpus", "\n".join(corpus_lines()[:4]).encode() + b'\n{"_id": "d4", "text": "caf\xe9"}\n',
     InvalidInputError, "not UTF-8", "corpus.jsonl:5"),
    ("UTF-16", "queries", ("\n".join(query_lines()) + "\n").encode("utf-16"), InvalidInputError, "UTF-16",
     "queries.jsonl:1"),
    ("a score that is not a number", "qrels", _replace(qrels_lines(), 3, "q1\td2\thigh"), InvalidInputError,
     "is not an integer relevance grade", "test.tsv:4"),
    ("a fractional score", "qrels", _replace(qrels_lines(), 2, "q0\td1\t0.5"), InvalidInputError,
     "is not an integer relevance grade", "test.tsv:3"),
    ("two columns", "qrels", _replace(qrels_lines(), 1, "q0\td0"), InvalidInputError, "3 tab-separated",
     "test.tsv:2"),
    ("columns separated by spaces", "qrels", _replace(qrels_lines(), 2, "q0 d1 1"), InvalidInputError,
     "separated by spaces?", "test.tsv:3"),
    ("TREC's four columns", "qrels", _replace(qrels_lines(), 1, "q0\t0\td0\t1"), InvalidInputError,
     "TREC qrels line", "test.tsv:2"),
    ("an empty corpus", "corpus", b"", InvalidInputError, "no documents: the file is empty", "corpus.jsonl"),
    ("a blank corpus", "corpus", b"\n  \n", InvalidInputError, "no documents", "corpus.jsonl"),
    ("an empty queries file", "queries", b"", InvalidInputError, "no queries: the file is empty",
     "queries.jsonl"),
    ("qrels with a header only", "qrels", qrels_lines()[:1], InvalidInputError, "no judgements", "test.tsv"),
    ("qrels whose query ids are all unknown", "qrels",
     [qrels_lines()[0]] + [r.replace("q", "Q", 1) for r in qrels_lines()[1:]], InvalidInputError,
     "not among the queries", "test.tsv:2"),
    ("qrels whose document ids are all unknown", "qrels",
     [qrels_lines()[0]] + [r.replace("\td", "\tD") for r in qrels_lines()[1:]], InvalidInputError,
     "no judged document to evaluate", "test.tsv:2"),
    ("no relevant document judged", "qrels", [r[:-1] + "0" for r in qrels_lines()], InvalidInputError,
     "no judged query has a relevant document", "test.tsv"),
    ("duplicate document ids", "corpus", _replace(corpus_lines(), 7, corpus_lines()[2]), DuplicateIdError,
     "duplicate document id 'd2' (first on line 3)", "corpus.jsonl:8"),
    ("an integer id colliding with a string id", "corpus",
     [*corpus_lines()[:3], '{"_id": 1, "text": "x"}', '{"_id": "1", "text": "y"}'], DuplicateIdError,
     "duplicate document id '1' (first on line 4)", "corpus.jsonl:5"),
    ("duplicate query ids", "queries", [*query_lines(), query_lines()[0]], DuplicateIdError,
     "duplicate query id 'q0'", "queries.jsonl:7"),
    ("a judgement repeated", "qrels", [*qrels_lines(), "q0\td0\t2"], DuplicateIdError, "judges document 'd0' twice",
     "test.tsv:14"),
]  # fmt: skip
IDS = [c[0] for c in CASES]


def _folder_for(root: Path, which: str, content) -> Path:
    return write_folder(root, **{which: content})


@pytest.mark.parametrize(("case", "which", "content", "error", "says", "where"), CASES, ids=IDS)
def test_reader_names_the_file_and_line(tmp_path, case, which, content, error, says, where) -> None:
    folder = _folder_for(tmp_path, which, content)
    with pytest.raises(error) as info:
        load_dataset(folder)
    message = str(info.value)
    assert says in message and where in message, message
    assert "\n" not in message
    if where.endswith(".jsonl") or where.endswith(".tsv"):  # no line to name: the file alone
        assert not re.search(re.escape(where) + r":\d", message)


@pytest.mark.parametrize(("case", "which", "content", "error", "says", "where"), CASES, ids=IDS)
@pytest.mark.parametrize("command", ["sweep", "diagnose"])
def test_cli_is_one_error_line_exit_2(tmp_path, command, case, which, content, error, says, where) -> None:
    folder = _folder_for(tmp_path, which, content)
    extra = ["--no-controls"] if command == "sweep" and case.startswith("duplicate") else []
    result = runner.invoke(
        app,
        [command, str(folder), "--model", "no-such-model", "--quiet", "--out", str(tmp_path / "o"), *extra],
    )
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert says in lines[0] and where in lines[0], lines[0]
    assert "Traceback" not in result.output


def test_single_judged_query_is_too_few_for_cv(tmp_path) -> None:
    folder = write_folder(tmp_path, qrels=[qrels_lines()[0], "q3\td1\t1", "q3\td4\t2"])
    load_dataset(folder)  # a valid collection, but not one that can be cross-validated
    for command in ("sweep", "diagnose"):
        result = runner.invoke(app, [command, str(folder), "--model", "no-such-model", "--quiet"])
        assert result.exit_code == 2, result.output
        (line,) = result.stderr.splitlines()
        assert line.startswith("error: ") and "test.tsv" in line, line
        assert "only 1 judged query ('q3')" in line and "too few for cross-validation" in line, line


def test_byte_order_mark_is_accepted(tmp_path) -> None:
    plain = load_dataset(write_folder(tmp_path / "a"))
    bom = b"\xef\xbb\xbf"

    def with_bom(lines: list[str]) -> bytes:
        return bom + ("\r\n".join(lines) + "\r\n").encode()  # an editor's file: a mark and CRLF

    got = load_dataset(
        write_folder(
            tmp_path / "b",
            corpus=with_bom(corpus_lines()),
            queries=with_bom(query_lines()),
            qrels=with_bom(qrels_lines()),
            name="coll",
        )
    )
    for field in ("doc_ids", "doc_texts", "doc_titles", "query_ids", "query_texts", "qrels"):
        assert getattr(got, field) == getattr(plain, field), field


def test_valid_edge_cases_are_read_as_before(tmp_path) -> None:
    """Integer ids, numbers and nulls as text, blank lines, a qrels file without a header and
    grades written as ``2.0`` all read as BEIR's loader reads them."""
    corpus = ['{"_id": 7, "title": null, "text": 3.5}', "", '{"_id": "x", "text": "plain"}', "   "]
    # an unjudged query may lack a text (a judged one is refused: test_judged_queries_with_no_words...)
    queries = ['{"_id": 1, "text": "one"}', '{"_id": "2", "text": 2}', '{"_id": "3"}']
    ds = load_dataset(write_folder(tmp_path, corpus=corpus, queries=queries, qrels=["1\t7\t2.0", "2\tx\t1"]))
    assert ds.doc_ids == ["7", "x"] and ds.doc_texts == ["3.5", "plain"]
    assert ds.query_ids == ["1", "2", "3"] and ds.query_texts == ["one", "2", ""]
    assert ds.qrels == {"1": {"7": 2}, "2": {"x": 1}}


def test_partly_unknown_ids_warn_with_the_line(tmp_path) -> None:
    rows = [*qrels_lines(), "q9\td1\t1", "q1\tgone\t1"]
    with pytest.warns(UserWarning) as caught:
        ds = load_dataset(write_folder(tmp_path, qrels=rows))
    said = [str(w.message) for w in caught]
    assert any(
        "test.tsv:14" in m and "1 of 7 judged queries ('q9' first) is not among the queries" in m
        for m in said
    )
    assert any(
        "test.tsv:15" in m and "1 of 13 judgements names a document not in the corpus" in m for m in said
    )
    assert "q9" not in ds.judged()[0]


def test_cli_prints_a_warning_as_one_line(tmp_path, monkeypatch) -> None:
    from normrank.sweep import diagnosis as diagnose_module

    folder = write_folder(tmp_path, qrels=[*qrels_lines(), "q1\tgone\t1"])
    rng = np.random.default_rng(0)
    monkeypatch.setattr(
        diagnose_module,
        "embed_dataset",
        lambda ds, *a: (
            rng.standard_normal((len(a[-2]), 8)),
            rng.standard_normal((len(ds.doc_ids), 8)) + 0.1,
        ),
    )
    result = runner.invoke(
        app,
        [
            "diagnose",
            str(folder),
            "--model",
            "toy",
            "--quiet",
            "--permutations",
            "3",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert result.exit_code == 0, result.output
    warned = [ln for ln in result.stderr.splitlines() if ln.startswith("warning: ")]
    assert len(warned) == 1 and "names a document not in the corpus" in warned[0], result.stderr


def test_in_memory_dataset_is_validated_like_a_folder() -> None:
    ds = Dataset("mem", ["a", "b", "a"], ["x", "y", "z"], [""] * 3, ["q"], ["t"], {"q": {"a": 1}})
    with pytest.raises(DuplicateIdError, match="duplicate document id 'a'"):
        validate_dataset(ds)
    from normrank.sweep import run_sweep

    with pytest.raises(DuplicateIdError):
        run_sweep([ds], ["no-such-model"], show_progress=False)


def test_readers_alone(tmp_path) -> None:
    (tmp_path / "q.tsv").write_text("query-id\tcorpus-id\tscore\nq\td\t1\n")
    assert read_qrels(tmp_path / "q.tsv") == {"q": {"d": 1}}
    (tmp_path / "c.jsonl").write_text('{"_id": "a"}\n{"_id": "b", "text": "t"}\n')
    assert read_jsonl(tmp_path / "c.jsonl") == (["a", "b"], [{"_id": "a"}, {"_id": "b", "text": "t"}])
    with pytest.raises(NormrankError, match="cannot be read"):
        read_jsonl(tmp_path / "missing.jsonl")


def test_console_script_prints_no_traceback(tmp_path) -> None:
    """The installed entry point as a user runs it (not typer's test runner)."""
    folder = write_folder(tmp_path, corpus=_replace(corpus_lines(), 3, "{not json"))
    script = "import sys; sys.argv[0] = 'normrank'; from normrank.cli import main; main()"
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            "sweep",
            str(folder),
            "--model",
            "x",
            "--quiet",
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 2, res.stderr
    assert res.stderr.splitlines() == [res.stderr.strip()] and res.stderr.startswith("error: ")
    assert "corpus.jsonl:4: not valid JSON" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("kind", ["device link", "fifo", "directory"])
def test_qrels_that_are_not_a_regular_file_say_so(tmp_path, kind) -> None:
    """qrels/test.tsv a link to /dev/null, a FIFO or a folder: named as such, not "no qrels for
    split 'test'; available: ['test']"."""
    import os

    d = write_folder(tmp_path)
    q = d / "qrels" / "test.tsv"
    q.unlink()
    if kind == "device link":
        q.symlink_to("/dev/null")
    elif kind == "fifo":
        os.mkfifo(q)
    else:
        q.mkdir()
    want = {"device link": "a device, FIFO or socket (a link to /dev/null)", "fifo": "a device, FIFO or socket",
            "directory": "a directory"}[kind]  # fmt: skip
    with pytest.raises(InvalidInputError, match=re.escape(f"test.tsv is {want}, not a regular file")):
        load_dataset(str(d))
    r = runner.invoke(
        app, ["diagnose", str(d), "--model", "no-such-model", "--quiet", "--out", str(tmp_path / "o")]
    )
    assert r.exit_code == 2 and "not a regular file" in r.stderr and "available" not in r.stderr, r.output


@pytest.mark.parametrize("blank", ["", "   ", "\t\n"])
def test_judged_queries_with_no_words_are_refused_by_id(tmp_path, blank) -> None:
    """An empty or blank judged query is refused naming its id (it used to be swept as an empty
    string, lowering the mean NDCG with no word); an unjudged one does not matter."""
    queries = query_lines()
    queries[2] = json.dumps({"_id": "q2", "text": blank})
    queries.append(json.dumps({"_id": "unjudged", "text": blank}))
    d = write_folder(tmp_path, queries=queries)
    with pytest.raises(InvalidInputError, match=r"1 judged query has an empty or blank text \('q2'\)"):
        load_dataset(str(d))
    r = runner.invoke(
        app, ["diagnose", str(d), "--model", "no-such-model", "--quiet", "--out", str(tmp_path / "o")]
    )
    assert r.exit_code == 2 and "'q2'" in r.stderr, r.output
