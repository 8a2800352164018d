"""The ``normrank`` command line from a user's side: version, help, errors as one line and exit 2."""

from __future__ import annotations

from typer.testing import CliRunner

import normrank
from normrank.cli import app

runner = CliRunner()


def test_version_prints_the_package_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"normrank {normrank.__version__}"


def test_every_command_is_registered() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("index", "sweep", "probe"):
        assert command in result.output


def test_probe_on_a_missing_folder_is_one_error_line(tmp_path) -> None:
    result = runner.invoke(app, ["probe", str(tmp_path / "nope"), "--model", "x", "--quiet"])
    assert result.exit_code == 2
    assert "error" in result.output and "not found" in result.output
    assert "Traceback" not in result.output


def _write_beir(folder, n_docs: int = 120, n_queries: int = 30, seed: int = 0):
    import json

    import numpy as np

    rng = np.random.default_rng(seed)
    (folder / "qrels").mkdir(parents=True)
    docs = [
        {"_id": f"d{i}", "title": "", "text": " ".join(["w"] * int(rng.integers(2, 60)))}
        for i in range(n_docs)
    ]
    (folder / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in docs))
    (folder / "queries.jsonl").write_text(
        "\n".join(json.dumps({"_id": f"q{i}", "text": "x"}) for i in range(n_queries))
    )
    rows = [f"q{i}\td{j}\t1" for i in range(n_queries) for j in rng.choice(n_docs, 2, replace=False)]
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n")


def test_diagnose_json_is_the_pinned_schema(tmp_path, monkeypatch) -> None:
    """`normrank diagnose DATA --model M --json F` on a collection it has never seen (embeddings
    patched in: the encoder is not what this checks): exactly the pinned keys and types."""
    import json

    import numpy as np

    from normrank.sweep import diagnosis as diagnose_module

    folder = tmp_path / "unseen"
    _write_beir(folder)
    rng = np.random.default_rng(1)

    def fake_embed(ds, model, cache, encoders, batch_size, show_progress, options, qids, qtexts):
        return rng.standard_normal((len(qids), 8)), rng.standard_normal((len(ds.doc_ids), 8)) * rng.uniform(
            0.5, 2, (len(ds.doc_ids), 1)
        )

    monkeypatch.setattr(diagnose_module, "embed_dataset", fake_embed)
    out = tmp_path / "diag.json"
    result = runner.invoke(
        app, ["diagnose", str(folder), "--model", "toy", "--json", str(out), "--out", str(tmp_path / "o"),
              "--permutations", "9", "--quiet"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    got = json.loads(out.read_text())
    schema = {
        "dataset": str, "model": str, "n_docs": int, "n_queries": int, "spearman_norm_length": float,
        "norm": {"cv_gain_pct": float, "p_value": float, "best_alpha": float},
        "length": {"cv_gain_pct": float, "p_value": float, "best_beta": float},
        "residual": {"cv_gain_pct": float, "p_value": float, "best_alpha": float},
        "permutation": {"k": int, "p_value": float, "null_cv_gain_pct": list}, "verdict": str,
    }  # fmt: skip
    assert set(got) == set(schema)
    for key, typ in schema.items():
        if isinstance(typ, dict):
            assert set(got[key]) == set(typ), key
            for k2, t2 in typ.items():
                assert isinstance(got[key][k2], t2), (key, k2)
        else:
            assert isinstance(got[key], typ), key
    assert got["n_docs"] == 120 and got["n_queries"] == 30 and got["permutation"]["k"] == 9
    assert len(got["permutation"]["null_cv_gain_pct"]) == 9 and got["verdict"] in result.output
    assert (tmp_path / "o" / "diagnosis.png").stat().st_size > 1000
    assert "\x1b[" not in result.output  # no raw escape codes


def test_the_sweeps_summary_is_one_line_in_a_file(tmp_path, monkeypatch) -> None:
    """`normrank sweep` with stderr not a terminal (CliRunner's streams, as a file or a CI log):
    each run's summary, with its controls (~200 characters), stays one line; no escape codes."""
    import numpy as np

    from normrank.sweep import run as run_module

    folder = tmp_path / "a-collection-with-a-rather-long-name"
    _write_beir(folder)
    rng = np.random.default_rng(2)

    def fake_embed(ds, model, cache, encoders, batch_size, show_progress, options, qids, qtexts):
        return rng.standard_normal((len(qids), 8)), rng.standard_normal((len(ds.doc_ids), 8)) * rng.uniform(
            0.5, 2, (len(ds.doc_ids), 1)
        )

    monkeypatch.setattr(run_module, "embed_dataset", fake_embed)
    result = runner.invoke(
        app, ["sweep", str(folder), "--model", "a-model-name-as-long-as-a-hub-path", "--alphas", "-1:1:0.5",
              "--permutations", "9", "--out", str(tmp_path / "o"), "--quiet"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = [line for line in result.stderr.splitlines() if "cosine" in line]
    assert len(summary) == 1, result.stderr
    line = summary[0]
    assert line.startswith(
        "a-collection-with-a-rather-long-name · a-model-name-as-long-as-a-hub-path: cosine"
    )
    assert "permutation p=" in line and len(line) > 120 and line == line.rstrip(), line
    assert "\x1b[" not in result.output
