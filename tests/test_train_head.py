"""normrank.train and ``normrank train-head`` on a tiny BERT built here and on synthetic features:
the loss falls, norms converge (to one equilibrium from different starts), the saved folder
loads through the resolver and gives the training-time embeddings, outputs are not unit length."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
pytest.importorskip("safetensors")

from typer.testing import CliRunner  # noqa: E402

from normrank.cli import app  # noqa: E402
from normrank.encoders import load_encoder, model_identity  # noqa: E402
from normrank.errors import InvalidInputError, InvalidParameterError, NormrankError  # noqa: E402
from normrank.train import TrainConfig, fit, symmetric_infonce, train_head, train_head_on_features  # noqa: E402
from normrank.train.loop import convergence_steps, sgdw_step  # noqa: E402
from normrank.train.pairs import cache_model_key  # noqa: E402
from normrank.train.run import save_head_folder  # noqa: E402
from normrank.train.synthetic import concepts, frequency_sets  # noqa: E402
from normrank.train.trainables import LastBlockOnStates, LinearOnFeatures, make_head  # noqa: E402

WORDS = [
    "protein",
    "cell",
    "gene",
    "yeast",
    "folding",
    "heat",
    "flow",
    "wing",
    "air",
    "pressure",
    "library",
    "index",
    "query",
    "search",
    "paper",
    "norm",
    "length",
    "model",
    "train",
    "data",
    "test",
    "fast",
    "slow",
    "small",
    "large",
    "blue",
    "red",
    "green",
    "house",
    "river",
    "stone",
]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: one torch thread is fastest, and on a shared machine many threads thrash."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def tiny_st(tmp_path_factory) -> Path:
    """A 2-layer, 32-wide BERT with mean pooling, saved as a sentence-transformers folder."""
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-st")
    bert = folder / "bert"
    bert.mkdir()
    (bert / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    BertTokenizerFast(vocab_file=str(bert / "vocab.txt")).save_pretrained(bert)
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=5 + len(WORDS),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        initializer_range=0.5,
    )
    bert_model = BertModel(cfg)
    # so texts differ by their words (a random BERT's outputs are otherwise near-collinear)
    with torch.no_grad():
        bert_model.embeddings.token_type_embeddings.weight.zero_()
        bert_model.embeddings.position_embeddings.weight.mul_(0.1)
    bert_model.save_pretrained(bert)
    tr = models.Transformer(str(bert), max_seq_length=32)
    st = SentenceTransformer(modules=[tr, models.Pooling(32, "mean")], device="cpu")
    out = folder / "st"
    st.save(str(out))
    return out


def _sentences(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 9)))) for _ in range(n)]


@pytest.fixture
def pairs_tsv(tmp_path: Path) -> Path:
    p = tmp_path / "pairs.tsv"
    # the positive: the anchor's words reversed
    rows = "".join(f"{x}\t{' '.join(x.split()[::-1])}\n" for x in _sentences(48, 1))
    p.write_text("# anchor\tpositive\n" + rows)
    return p


# ------------------------------------------------------------------------------- the objective
def test_loss_equals_an_independent_numpy_infonce_and_masks_repeated_anchors() -> None:
    from normrank.probe.loss import symmetric_infonce as probe_loss

    rng = np.random.default_rng(0)
    za, zb = rng.standard_normal((6, 5)), rng.standard_normal((6, 5))
    groups = np.array([0, 1, 1, 2, 3, 3])

    def ref(mask: bool) -> float:
        a = za / np.linalg.norm(za, axis=1, keepdims=True)
        b = zb / np.linalg.norm(zb, axis=1, keepdims=True)
        s = a @ b.T / 0.1
        if mask:
            s[(groups[:, None] == groups[None, :]) & ~np.eye(6, dtype=bool)] = -np.inf
        lse_r = np.log(np.exp(s).sum(1))
        lse_c = np.log(np.exp(s).sum(0))
        return float(0.5 * ((lse_r - np.diag(s)).mean() + (lse_c - np.diag(s)).mean()))

    ta, tb = torch.tensor(za), torch.tensor(zb)
    assert float(symmetric_infonce(ta, tb, 0.1)) == pytest.approx(ref(False), rel=1e-10)
    assert symmetric_infonce is probe_loss  # one objective for the probe and the head
    assert float(symmetric_infonce(ta, tb, 0.1, torch.tensor(groups))) == pytest.approx(ref(True), rel=1e-10)
    # scale invariance (the paper's assumption A): rescaling either side changes nothing
    assert float(symmetric_infonce(3 * ta, 0.2 * tb, 0.1)) == pytest.approx(ref(False), rel=1e-10)


def test_sgdw_is_the_task_step_then_the_decoupled_decay() -> None:
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    p.grad = torch.tensor([0.5, 0.25], dtype=torch.float64)
    sgdw_step([p], lr=0.1, weight_decay=0.2)
    expect = (np.array([1.0, -2.0]) - 0.1 * np.array([0.5, 0.25])) * (1 - 0.1 * 0.2)
    np.testing.assert_allclose(p.detach().numpy(), expect, rtol=0, atol=1e-15)


def test_bad_settings_are_typed_errors() -> None:
    with pytest.raises(InvalidParameterError, match="batch_size"):
        TrainConfig(weight_decay=0.1, batch_size=500).check(100)
    with pytest.raises(InvalidParameterError, match="weight_decay"):
        TrainConfig(weight_decay=-1).check(100)
    with pytest.raises(InvalidParameterError, match=r"lr \* weight_decay"):
        TrainConfig(weight_decay=20, lr=0.1).check(100)
    assert convergence_steps(0.1, 0.01) == 1000 and convergence_steps(0.1, 0.0) == 0


# ------------------------------------------------------------------------ training on features
def _train(anchors, contexts, ia, ib, lam: float, lr: float = 0.1, scale: float = 1.0, max_epochs: int = 80):
    cfg = TrainConfig(
        weight_decay=lam,
        lr=lr,
        batch_size=16,
        steps_per_epoch=20,
        max_epochs=max_epochs,
        tol=0.03,
        checks_per_epoch=5,
    )
    head = make_head(anchors.shape[1], anchors.shape[1], cfg.seed)
    with torch.no_grad():
        head.weight.mul_(scale)
    model = LinearOnFeatures(anchors, contexts, ia, ib, head, monitor=anchors)
    return head, fit(model, len(ia), cfg, groups=ia)


def _with_nuisance(x: np.ndarray, seed: int, dims: int = 8, scale: float = 3.0) -> np.ndarray:
    """Large random directions beside the signal: raw cosines are mostly noise until a head drops them."""
    rng = np.random.default_rng(seed)
    return np.hstack([x, scale * rng.standard_normal((len(x), dims)).astype(np.float32) / np.sqrt(dims)])


def test_the_loss_falls_when_the_head_has_something_to_learn() -> None:
    cs = concepts(16, 8, 8, spread=(0.3, 0.6), seed=3)
    a, c = _with_nuisance(cs.anchors, 0), _with_nuisance(cs.contexts, 1)
    _, res = _train(a, c, cs.ia, cs.ib, 0.1, lr=0.05, max_epochs=30)
    assert res.epochs[-1]["loss"] < 0.5 * res.epochs[0]["loss"]


def test_the_norm_converges_to_one_equilibrium_from_different_starts() -> None:
    cs = concepts(16, 8, 8, seed=3)
    _, small = _train(cs.anchors, cs.contexts, cs.ia, cs.ib, 0.3, scale=1.0)
    _, large = _train(cs.anchors, cs.contexts, cs.ia, cs.ib, 0.3, scale=4.0)
    for res in (small, large):
        assert res.converged, res.stop_reason
        assert res.epochs[-1]["steps"] >= res.min_steps
        assert all(e["norm_rel_change"] < res.config.tol for e in res.epochs[-res.config.patience :])
    # the equilibrium is set by heat and decay, not by where the weights started (4x apart)
    assert large.initial_norm > 3.5 * small.initial_norm
    assert large.final_norm == pytest.approx(small.final_norm, rel=0.05)
    assert small.final_norm < 0.7 * small.initial_norm


def test_more_weight_decay_gives_smaller_norms() -> None:
    cs = concepts(16, 8, 8, seed=3)
    tail = [
        np.mean([e["mean_norm"] for e in r.epochs[-5:]])
        for _, r in (_train(cs.anchors, cs.contexts, cs.ia, cs.ib, lam, max_epochs=20) for lam in (0.3, 3.0))
    ]
    assert tail[1] < 0.85 * tail[0]


def test_a_small_decay_cannot_stop_before_its_relaxation_time() -> None:
    cs = concepts(16, 4, 8, seed=0)
    cfg = TrainConfig(weight_decay=0.05, lr=0.1, batch_size=16, steps_per_epoch=20, max_epochs=50, tol=0.5)
    _, res = train_head_on_features(cs.anchors, cs.contexts, cs.ia, cs.ib, cfg)
    assert res.min_steps == 200
    assert res.converged and res.epochs[-1]["steps"] == 200  # tol=0.5 alone would stop at epoch 5


def test_synthetic_frequency_sets_hold_the_semantic_content_fixed() -> None:
    sets = frequency_sets((5, 20), n_targets=2, n_background=3, background_positives=4, dim=8)
    a, b = sets[5], sets[20]
    np.testing.assert_array_equal(a.anchors, b.anchors)
    # rho=5 contexts of target 0 are the first five of rho=20's
    np.testing.assert_array_equal(a.contexts[:5], b.contexts[:5])
    np.testing.assert_array_equal(a.contexts[10:], b.contexts[40:])  # the same background
    assert (a.ia == 0).sum() == 5 and (b.ia == 0).sum() == 20


# ------------------------------------------------------------------- the runner and its folder
def test_cache_key_is_the_sweeps() -> None:
    from normrank.sweep.embed import model_key

    for m, o in [
        ("all-MiniLM-L6-v2", None),
        ("sentence-transformers/x", {"max_seq_length": 64, "device": "cpu"}),
    ]:
        assert cache_model_key(m, o) == model_key(m, o)


def test_train_head_cli_writes_a_folder_the_resolver_loads(tiny_st, pairs_tsv, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("NORMRANK_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "head"
    args = [
        "train-head",
        str(pairs_tsv),
        "--model",
        str(tiny_st),
        "--weight-decay",
        "0.5",
        "--out",
        str(out),
        "--batch-size",
        "16",
        "--lr",
        "0.05",
        "--steps-per-epoch",
        "20",
        "--max-epochs",
        "40",
        "--quiet",
    ]
    r = CliRunner().invoke(app, args)
    log = json.loads((out / "train_log.json").read_text())
    # exit 0 when the norm converged, 1 (the folder still written, the log saying so) when not
    assert r.exit_code == (0 if log["converged"] else 1), r.output
    assert ("NOT converged" in r.output) == (not log["converged"])
    assert set(log) >= {"epochs", "converged", "stop_reason", "convergence", "config", "initial"}
    assert all(isinstance(e["loss"], float) and isinstance(e["mean_norm"], float) for e in log["epochs"])
    assert min(e["loss"] for e in log["epochs"][-5:]) < log["epochs"][0]["loss"]
    assert (out / "tokenizer.json").is_file()

    enc = load_encoder(out)
    assert enc.kind == "normrank-head" and model_identity(out)["kind"] == "normrank-head"
    # the training-time embeddings: the cached base features of the anchors through the saved head
    from normrank.corpus.embedding_cache import EmbeddingCache
    from normrank.train.pairs import tsv_pair_set

    side = tsv_pair_set(pairs_tsv).anchors
    feats = EmbeddingCache().load(cache_model_key(str(tiny_st), None), side.ids, "text", texts=side.texts)
    assert feats is not None
    with torch.no_grad():
        expect = enc.head(torch.as_tensor(feats)).numpy()
    got = enc.encode(side.texts)
    np.testing.assert_allclose(got, expect, rtol=1e-4, atol=1e-5)
    norms = np.linalg.norm(got, axis=1)
    assert not np.allclose(norms, 1.0, atol=1e-3) and norms.std() > 0
    assert norms.mean() == pytest.approx(log["epochs"][-1]["final_norm"], rel=0.5)

    # an existing head is not replaced silently
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 2 and "--overwrite" in again.output
    assert CliRunner().invoke(app, [*args, "--overwrite", "--max-epochs", "1"]).exit_code in (0, 1)
    assert json.loads((out / "train_log.json").read_text())["config"]["max_epochs"] == 1


def test_sweep_runs_unchanged_on_a_trained_head(tiny_st, pairs_tsv, tmp_path, monkeypatch) -> None:
    from normrank.sweep import run_sweep

    monkeypatch.setenv("NORMRANK_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "head"
    train_head(
        [str(pairs_tsv)],
        str(tiny_st),
        0.5,
        out,
        batch_size=16,
        steps_per_epoch=10,
        max_epochs=3,
        progress=False,
    )
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    docs, queries = _sentences(30, 5), _sentences(6, 6)
    (beir / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n" for i, t in enumerate(docs))
    )
    (beir / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": t}) + "\n" for i, t in enumerate(queries))
    )
    (beir / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{3 * i}\t1\n" for i in range(6))
    )
    (run,) = run_sweep([str(beir)], [str(out)], show_progress=False, permutations=9)
    assert run.controls["length_unit"] == "tokens"  # the copied tokenizer.json is found
    assert np.isfinite(run.cv_gain_pct)


def test_last_block_variant_saves_what_it_trained(tiny_st, tmp_path) -> None:
    enc = load_encoder(tiny_st)
    a, b = _sentences(24, 7), _sentences(24, 8)
    ia = ib = np.arange(24)
    head = make_head(enc.dim, 16, 0)
    trainable = LastBlockOnStates(enc, a, b, ia, ib, head, batch_size=8)
    assert trainable.block_path.endswith(".1")
    before = {k: v.clone() for k, v in trainable.block.state_dict().items()}
    cfg = TrainConfig(weight_decay=0.5, lr=0.05, batch_size=8, steps_per_epoch=6, max_epochs=30, tol=0.05)
    res = fit(trainable, 24, cfg, groups=trainable.ia)
    assert res.epochs[-1]["loss"] < res.epochs[0]["loss"]
    assert any(not torch.equal(before[k], v) for k, v in trainable.block.state_dict().items())
    with torch.no_grad():
        expect = trainable._embed_rows(np.arange(5)).numpy()  # the first 5 distinct texts are a[:5]
    meta = {
        "format": 1,
        "kind": "normrank-head",
        "base": str(tiny_st),
        "variant": "last-block",
        "in_dim": 32,
        "out_dim": 16,
        "bias": False,
        "block": trainable.block_path,
    }
    out = tmp_path / "lb"
    save_head_folder(out, meta, head, trainable.block, res, str(tiny_st), overwrite=False)
    loaded = load_encoder(out)
    assert loaded.dim == 16
    np.testing.assert_allclose(loaded.encode(a[:5]), expect, rtol=1e-4, atol=1e-5)
    # the base model on disk is untouched: a fresh load has the old block
    fresh = load_encoder(tiny_st).torch_module.get_submodule(trainable.block_path).state_dict()
    assert all(torch.equal(before[k], v) for k, v in fresh.items())


def test_probe_scope_head_moves_the_trained_head(tiny_st, pairs_tsv, tmp_path, monkeypatch) -> None:
    from normrank.probe import probe

    monkeypatch.setenv("NORMRANK_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "head"
    train_head(
        [str(pairs_tsv)],
        str(tiny_st),
        0.5,
        out,
        batch_size=16,
        steps_per_epoch=5,
        max_epochs=2,
        progress=False,
    )
    enc = load_encoder(out)
    texts = _sentences(5, 9)
    res = probe(
        enc, texts, [(x, x + " river") for x in _sentences(20, 10)], steps=4, batch_size=8, scope="head"
    )
    assert res.settings["n_scoped_params"] == enc.head.weight.numel()
    assert np.all(res.heat > 0)


def test_bad_inputs_are_typed_errors(tiny_st, tmp_path) -> None:
    from normrank.encoders import ModelNotFoundError

    keep = tmp_path / "notes"
    keep.mkdir()
    (keep / "mine.txt").write_text("x")
    with pytest.raises(InvalidInputError, match="not a trained-head folder"):
        train_head(["x.tsv"], str(tiny_st), 0.1, keep, progress=False)
    beir = tmp_path / "b"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text('{"_id": "d1", "text": "a"}\n')
    (beir / "queries.jsonl").write_text('{"_id": "q1", "text": "a"}\n')
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    with pytest.raises(InvalidInputError, match=r"train\.tsv does not exist"):
        train_head([str(beir)], str(tiny_st), 0.1, tmp_path / "h", progress=False)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "normrank_head.json").write_text('{"format": 99}')
    with pytest.raises(NormrankError, match="format"):
        load_encoder(bad)
    with pytest.raises(ModelNotFoundError):
        load_encoder("normrank-head:" + str(tmp_path / "missing"))


# ------------------------------------------------------------------------------- output folders
def test_out_under_a_file_is_refused_before_training(tiny_st, pairs_tsv, tmp_path, monkeypatch) -> None:
    """``--out ff/sub`` with ``ff`` a file: refused before the pairs are even read (it used to train,
    then fail to save with FileExistsError)."""
    import normrank.train.run as run

    (tmp_path / "ff").write_text("x")

    def no_training(*a, **k):
        raise AssertionError("training started")

    monkeypatch.setattr(run, "load_pair_sets", no_training)
    for out in (tmp_path / "ff" / "sub", tmp_path / "ff" / "a" / "b"):
        with pytest.raises(InvalidInputError, match="is a file, so no folder can be made under it"):
            train_head([str(pairs_tsv)], str(tiny_st), 0.1, out, progress=False)
    args = ["train-head", str(pairs_tsv), "--model", str(tiny_st), "--weight-decay", "0.1", "--quiet"]
    r = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "ff" / "sub")])
    assert r.exit_code == 2 and "is a file" in r.output


_KILLED_SAVE = """
import os, signal, sys
from pathlib import Path
import torch
from normrank.train.loop import TrainConfig, TrainResult
from normrank.train.run import save_head_folder

out, base, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
meta = {"format": 1, "kind": "normrank-head", "base": base, "variant": "linear", "in_dim": 32,
        "out_dim": 8, "bias": False, "block": None, "version": 2}
res = TrainResult(TrainConfig(weight_decay=0.1), initial_norm=1.0, initial_weight_norm=1.0)
try:
    import normrank.encoders.head_folder as hf
except ImportError:  # the old code: only the two renames
    hf = None
real_replace = os.replace
if mode == "renames":  # SIGKILL right after the old folder is renamed away
    if hf is not None:
        hf.exchange = lambda a, b: False
    def replace(a, b):
        real_replace(a, b)
        if Path(b).name.startswith(f".{out.name}.old-"):
            os.kill(os.getpid(), signal.SIGKILL)
    os.replace = replace
else:  # SIGKILL right after the exchange (where the filesystem has one)
    real_exchange = hf.exchange
    def exchange(a, b):
        real_exchange(a, b)
        os.kill(os.getpid(), signal.SIGKILL)
    hf.exchange = exchange
save_head_folder(out, meta, torch.nn.Linear(32, 8, bias=False), None, res, base, overwrite=True)
"""


@pytest.mark.parametrize("mode", ["renames", "exchange"])
def test_overwrite_killed_midway_is_put_back_at_the_next_load(tiny_st, tmp_path, mode) -> None:
    """A SIGKILL inside ``--overwrite``'s replace: after the old folder is renamed away (the
    fallback where the filesystem has no RENAME_EXCHANGE), or right after the exchange. The next
    load finds the folder whole (the old head put back, said in a warning) and no leftovers."""
    import subprocess
    import sys

    from normrank.encoders.head import read_head_config
    from normrank.train.loop import TrainResult

    if mode == "exchange":
        pytest.importorskip("normrank.encoders.head_folder")
    out = tmp_path / "head"
    meta = {"format": 1, "kind": "normrank-head", "base": str(tiny_st), "variant": "linear", "in_dim": 32,
            "out_dim": 8, "bias": False, "block": None, "version": 1}  # fmt: skip
    res = TrainResult(TrainConfig(weight_decay=0.1), initial_norm=1.0, initial_weight_norm=1.0)
    save_head_folder(out, meta, torch.nn.Linear(32, 8, bias=False), None, res, str(tiny_st), overwrite=False)
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_SAVE, str(out), str(tiny_st), mode], capture_output=True
    )
    assert child.returncode == -9, child.stderr.decode()[-2000:]
    if mode == "renames":
        assert not out.exists()  # what the kill leaves: the head is in .head.old-PID
    else:
        assert read_head_config(out)["version"] in (1, 2)  # never absent
    with pytest.warns(UserWarning, match="interrupted"):
        enc = load_encoder(out)
    assert enc.dim == 8
    assert read_head_config(out)["version"] == (1 if mode == "renames" else read_head_config(out)["version"])
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".head")] == []


@pytest.mark.parametrize(
    ("flag", "value"), [("--weight-decay", "inf"), ("--lr", "inf"), ("--temperature", "nan")]
)
def test_non_finite_settings_say_finite_before_any_encoding(
    tmp_path, pairs_tsv, monkeypatch, flag, value
) -> None:
    import normrank.train.run as run

    def no_pairs(*a, **k):
        raise AssertionError("pairs read before the settings were checked")

    monkeypatch.setattr(run, "load_pair_sets", no_pairs)
    args = [
        "train-head",
        str(pairs_tsv),
        "--model",
        "m",
        "--weight-decay",
        "0.1",
        "--out",
        str(tmp_path / "o"),
    ]
    r = CliRunner().invoke(app, [*args, flag, value, "--quiet"])
    assert r.exit_code == 2 and "must be finite" in r.output, r.output
