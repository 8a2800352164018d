"""normrank.probe on tiny torch models whose answers are known in closed form (no downloads)."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from normrank.errors import InvalidInputError, InvalidParameterError  # noqa: E402
from normrank.probe import (  # noqa: E402
    load_pairs,
    pairs_from_qrels,
    pairs_from_tsv,
    predicted_norm,
    probe,
    sample_batches,
    self_pairs,
    write_probe,
)
from normrank.probe.theory import loglog_fit, pearson  # noqa: E402

VOCAB = [f"w{i}" for i in range(40)]


class LinearModel:
    """z(x) = W f(x) + b with fixed features f (a buffer): a linear map of fixed features.

    With ``depth`` > 0, ``f`` first goes through ``depth`` tanh(Linear) blocks (a ModuleList),
    so scopes have different parameters to move.
    """

    def __init__(self, d_in: int = 6, d_out: int = 5, depth: int = 0, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        m = nn.Module()
        m.register_buffer("feats", torch.randn(len(VOCAB), d_in, generator=g, dtype=torch.float64))
        m.blocks = nn.ModuleList([nn.Linear(d_in, d_in).double() for _ in range(depth)])
        m.head = nn.Linear(d_in, d_out).double()
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
        self.torch_module = m
        self.index = {t: i for i, t in enumerate(VOCAB)}
        self.calls: list[list[str]] = []

    def features(self, texts: list[str]) -> torch.Tensor:
        f = self.torch_module.feats[[self.index[t] for t in texts]]
        for block in self.torch_module.blocks:
            f = torch.tanh(block(f))
        return f

    def embed_tensor(self, texts: list[str]) -> torch.Tensor:
        self.calls.append(list(texts))
        return self.torch_module.head(self.features(texts))


class _BlockOutput(nn.Module):
    """BERT's output sub-layer: LayerNorm(dense(h) + residual)."""

    def __init__(self, d_ff: int, d: int) -> None:
        super().__init__()
        self.dense = nn.Linear(d_ff, d)
        self.LayerNorm = nn.LayerNorm(d)
        self.dropout = nn.Dropout(0.5)  # must be off while probing

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class Pooling(nn.Module):
    """Masked mean over tokens, sentence-transformers style (a features dict in and out)."""

    def forward(self, features: dict) -> dict:
        m = features["attention_mask"].unsqueeze(-1).to(features["token_embeddings"].dtype)
        features["sentence_embedding"] = (features["token_embeddings"] * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return features


class TokenModel:
    """Word tokens -> embedding -> up-projection -> BERT-style output sub-layer -> mean pooling."""

    def __init__(self, d: int = 4, d_ff: int = 7, seed: int = 0) -> None:
        torch.manual_seed(seed)
        m = nn.Module()
        m.emb = nn.Embedding(len(VOCAB) + 1, d)
        m.up = nn.Linear(d, d_ff)
        m.layers = nn.ModuleList([_BlockOutput(d_ff, d)])  # a one-block stack, for scope "last:1"
        m.pool = Pooling()
        self.torch_module = m.double()
        self.index = {t: i + 1 for i, t in enumerate(VOCAB)}

    def embed_tensor(self, texts: list[str]) -> torch.Tensor:
        toks = [[self.index[w] for w in t.split()] for t in texts]
        width = max(len(t) for t in toks)
        ids = torch.tensor([t + [0] * (width - len(t)) for t in toks])
        mask = (ids > 0).long()
        m = self.torch_module
        x = m.emb(ids)
        h = m.layers[0](torch.nn.functional.gelu(m.up(x)), x)
        return m.pool({"token_embeddings": h, "attention_mask": mask})["sentence_embedding"]


def _pairs(n: int = 24, seed: int = 1) -> list[tuple[str, str]]:
    rng = np.random.default_rng(seed)
    return [(VOCAB[a], VOCAB[b]) for a, b in rng.integers(0, len(VOCAB), size=(n, 2))]


def _closed_form(model: LinearModel, probe_texts, pairs, steps, batch_size, lr, tau, seed):
    """Independent numpy derivation: the InfoNCE gradient of a linear map, by hand."""
    W = model.torch_module.head.weight.detach().numpy().copy()
    b = model.torch_module.head.bias.detach().numpy().copy()
    F = model.torch_module.feats.numpy()
    f = lambda texts: F[[model.index[t] for t in texts]]  # noqa: E731
    fx = f(probe_texts)
    z = fx @ W.T + b
    R = np.linalg.norm(z, axis=1)
    dzs = []
    for idx in sample_batches(len(pairs), steps, batch_size, seed):
        fa, fb = f([pairs[i][0] for i in idx]), f([pairs[i][1] for i in idx])
        a, c = fa @ W.T + b, fb @ W.T + b
        na, nc = np.linalg.norm(a, axis=1, keepdims=True), np.linalg.norm(c, axis=1, keepdims=True)
        ah, ch = a / na, c / nc
        S = ah @ ch.T / tau
        Prow = np.exp(S - S.max(1, keepdims=True))
        Prow /= Prow.sum(1, keepdims=True)
        Pcol = np.exp(S - S.max(0, keepdims=True))
        Pcol /= Pcol.sum(0, keepdims=True)
        n = len(idx)
        G = 0.5 * ((Prow - np.eye(n)) + (Pcol - np.eye(n))) / n  # dL/dS
        g_ah, g_ch = G @ ch / tau, G.T @ ah / tau
        g_a = (g_ah - ah * (ah * g_ah).sum(1, keepdims=True)) / na
        g_c = (g_ch - ch * (ch * g_ch).sum(1, keepdims=True)) / nc
        gW = g_a.T @ fa + g_c.T @ fb
        gb = g_a.sum(0) + g_c.sum(0)
        dzs.append(-lr * (fx @ gW.T + gb))  # linear output: z(W') - z(W) exactly
    dzt = np.stack(dzs) * R[None, :, None]  # (M, n, d), fine at this size
    mean = dzt.mean(0)
    heat = ((dzt - mean) ** 2).sum(axis=(2,)).sum(0) / (steps - 1)
    drift = ((z / R[:, None]) * mean).sum(1)
    return R, drift, heat, (mean**2).sum(1)


@pytest.mark.parametrize(("scope", "fast"), [("head", True), ("head", False), ("full", False)])
def test_linear_model_matches_closed_form(scope, fast):
    model = LinearModel()
    texts, pairs = VOCAB[:12], _pairs()
    kw = dict(steps=7, batch_size=8, lr=1e-2, temperature=0.1, seed=3)
    r = probe(model, texts, pairs, scope=scope, fast_path=fast, **kw)
    assert r.settings["path"] == ("fast-linear" if fast else "generic")
    tau = kw.pop("temperature")
    R, drift, heat, energy = _closed_form(model, texts, pairs, tau=tau, **kw)
    np.testing.assert_allclose(r.norm, R, rtol=1e-5)
    np.testing.assert_allclose(r.heat, heat, rtol=1e-5, atol=1e-12)
    np.testing.assert_allclose(r.drift, drift, rtol=1e-5, atol=1e-12)
    np.testing.assert_allclose(r.energy, energy, rtol=1e-5, atol=1e-12)
    assert np.all(r.heat > 0) and np.ptp(r.heat) > 0


@pytest.mark.parametrize("model_cls", [LinearModel, TokenModel])
def test_fast_path_equals_generic_path(model_cls):
    model = model_cls()
    texts = [" ".join(VOCAB[i : i + k]) for i, k in [(0, 3), (5, 1), (9, 6), (20, 2), (30, 4)]]
    if model_cls is LinearModel:
        texts = VOCAB[:5]
    pairs = _pairs(16)
    kw = dict(steps=5, batch_size=6, lr=1e-2, temperature=0.05, seed=0, scope="head", encode_batch_size=2)
    fast = probe(model, texts, pairs, fast_path=True, **kw)
    slow = probe(model, texts, pairs, fast_path=False, **kw)
    assert fast.settings["path"] == ("fast-linear" if model_cls is LinearModel else "fast-tail")
    assert slow.settings["path"] == "generic"
    for name in ("norm", "drift", "heat", "energy"):
        np.testing.assert_allclose(
            getattr(fast, name), getattr(slow, name), rtol=1e-7, atol=1e-15, err_msg=name
        )


@pytest.mark.parametrize("scope", ["full", "head", "last:1"])
def test_parameters_and_flags_restored_exactly(scope):
    model = TokenModel()
    m = model.torch_module
    m.train()  # probing must switch dropout off and put the mode back
    m.emb.weight.requires_grad_(False)
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    flags = {n: p.requires_grad for n, p in m.named_parameters()}
    texts = ["w1 w2", "w3", "w4 w5 w6"]
    probe(
        model,
        texts,
        [("w1", "w2"), ("w3", "w4"), ("w5 w6", "w7")],
        steps=3,
        batch_size=3,
        lr=0.5,
        scope=scope,
    )
    assert m.training
    for n, p in m.named_parameters():
        assert torch.equal(p, before[n]), n
        assert p.requires_grad == flags[n], n
        assert p.grad is None, n


class _Spy(LinearModel):
    """Records which parameters differ from their original values whenever it encodes."""

    def __init__(self) -> None:
        super().__init__(depth=2)
        self.orig = {n: p.detach().clone() for n, p in self.torch_module.named_parameters()}
        self.moved: set[str] = set()

    def embed_tensor(self, texts):
        for n, p in self.torch_module.named_parameters():
            if not torch.equal(p, self.orig[n]):
                self.moved.add(n)
        return super().embed_tensor(texts)


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        ("head", {"head.weight", "head.bias"}),
        ("last:1", {"blocks.1.weight", "blocks.1.bias"}),
        ("last:2", {"blocks.0.weight", "blocks.0.bias", "blocks.1.weight", "blocks.1.bias"}),
        (
            "full",
            {
                "head.weight",
                "head.bias",
                "blocks.0.weight",
                "blocks.0.bias",
                "blocks.1.weight",
                "blocks.1.bias",
            },
        ),
    ],
)
def test_scope_restricts_which_parameters_move(scope, expected):
    model = _Spy()
    r = probe(model, VOCAB[:4], _pairs(), steps=3, batch_size=4, scope=scope, fast_path=False)
    assert model.moved == expected
    assert r.settings["n_scoped_params"] == sum(model.orig[n].numel() for n in expected)


def test_deterministic_for_a_seed():
    model = TokenModel()
    texts, pairs = ["w1 w2", "w3 w9 w4", "w5"], _pairs()
    a = probe(model, texts, pairs, steps=4, batch_size=5, seed=7, scope="full")
    b = probe(model, texts, pairs, steps=4, batch_size=5, seed=7, scope="full")
    c = probe(model, texts, pairs, steps=4, batch_size=5, seed=8, scope="full")
    for name in ("norm", "drift", "heat", "energy"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(a.heat, c.heat)


def test_duplicated_probe_texts_get_identical_values():
    model = TokenModel()
    texts = ["w1 w2", "w3", "w1 w2", "w4 w5 w6", "w3"]
    r = probe(model, texts, _pairs(), steps=3, batch_size=4, scope="full", encode_batch_size=2)
    single = probe(model, ["w1 w2", "w3", "w4 w5 w6"], _pairs(), steps=3, batch_size=4, scope="full")
    for name in ("norm", "drift", "heat", "energy"):
        v = getattr(r, name)
        assert v[0] == v[2] and v[1] == v[4]
        np.testing.assert_allclose(v[[0, 1, 3]], getattr(single, name), rtol=1e-12)
    assert r.settings["n_unique_probe_texts"] == 3


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        (dict(steps=1), InvalidParameterError),
        (dict(batch_size=1), InvalidParameterError),
        (dict(batch_size=999), InvalidParameterError),
        (dict(lr=0.0), InvalidParameterError),
        (dict(temperature=-1.0), InvalidParameterError),
        (dict(scope="middle"), InvalidParameterError),
        (dict(scope="last:9"), InvalidParameterError),
        (dict(scope="last:x"), InvalidParameterError),
        (dict(encode_batch_size=0), InvalidParameterError),
    ],
)
def test_invalid_arguments_raise_typed_errors(kwargs, error):
    with pytest.raises(error):
        probe(LinearModel(depth=1), VOCAB[:3], _pairs(), **{"steps": 3, "batch_size": 4, **kwargs})


def test_invalid_inputs_raise():
    with pytest.raises(InvalidInputError):
        probe(LinearModel(), "w1", _pairs())
    with pytest.raises(InvalidInputError):
        probe(LinearModel(), [], _pairs())
    with pytest.raises(InvalidInputError):
        probe(LinearModel(), VOCAB[:2], [("w1", "w2")])


def test_self_pairs_and_tsv(tmp_path):
    assert self_pairs(["T1", "", ""], ["body one", "a b c d e", "x"]) == [
        ("T1", "body one"),
        ("a b", "c d e"),
    ]
    f = tmp_path / "p.tsv"
    f.write_text("# comment\nq one\td one\n\nq two\td two\textra\n")
    assert pairs_from_tsv(f) == [("q one", "d one"), ("q two", "d two")]
    f.write_text("only one column\n")
    with pytest.raises(InvalidInputError):
        pairs_from_tsv(f)


def test_pairs_from_beir_train_qrels(tmp_path):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text(
        "\n".join(
            json.dumps(r)
            for r in [{"_id": "d1", "title": "T", "text": "x y"}, {"_id": "d2", "title": "", "text": "z"}]
        )
    )
    (tmp_path / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "what"}) + "\n")
    (tmp_path / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\n")
    assert pairs_from_qrels(tmp_path) == [("what", "T x y")]
    pairs, src = load_pairs(tmp_path)
    assert pairs == [("what", "T x y")] and "train" in src
    (tmp_path / "qrels" / "train.tsv").unlink()
    pairs, src = load_pairs(tmp_path, titles=["T", ""], texts=["x y", "z w"])
    assert pairs == [("T", "x y"), ("z", "w")] and "self" in src


def test_theory_helpers_against_references():
    rng = np.random.default_rng(0)
    x, y = rng.random(50), rng.random(50)
    assert pearson(x, y) == pytest.approx(np.corrcoef(x, y)[0, 1], rel=1e-12)
    heat = rng.uniform(0.1, 10, 200)
    assert loglog_fit(heat, 3.0 * heat**0.25)["slope"] == pytest.approx(0.25, rel=1e-9)
    drift, energy, lr, lam = rng.normal(size=20), rng.random(20), 1e-3, 0.01
    R = predicted_norm(drift, heat[:20], energy, lr, lam)
    d_star, v_star2 = drift / (lr * lam), (energy + heat[:20]) / (lr * lam)
    np.testing.assert_allclose(
        2 * R**4 - 2 * d_star * R**2 - v_star2, 0, atol=1e-6 * np.max(v_star2)
    )  # eq. 4.14
    assert np.all(R > 0)


def test_write_probe_outputs(tmp_path):
    model = TokenModel()
    texts = ["w1 w2", "w3", "w4 w5 w6", "w7 w8", "w9"]
    r = probe(model, texts, _pairs(), steps=4, batch_size=6, scope="full")
    payload = write_probe(r, ["a", "b", "c", "d", "e"], tmp_path, weight_decay=0.01)
    with np.load(tmp_path / "probe.npz", allow_pickle=False) as z:
        assert z["doc_ids"].dtype.kind == "U" and list(z["doc_ids"]) == ["a", "b", "c", "d", "e"]
        got = json.loads((tmp_path / "probe.json").read_text())
        for key, (u, v) in {
            "heat_norm": ("heat", "norm"),
            "drift_norm": ("drift", "norm"),
            "drift_heat": ("drift", "heat"),
        }.items():
            assert got["correlations"][key] == pytest.approx(np.corrcoef(z[u], z[v])[0, 1], rel=1e-9)
    assert (
        got["settings"]["scope"] == "full"
        and "equilibrium" in got
        and payload["loglog_slope_norm_vs_heat"] == got["loglog_slope_norm_vs_heat"]
    )
    assert (tmp_path / "probe.png").stat().st_size > 1000
    with pytest.raises(InvalidInputError):
        write_probe(r, ["a"], tmp_path / "x")


def test_run_probe_orchestrates_pairs_subset_and_batch_clamp(tmp_path):
    """The library call the CLI makes: self-pairs from a corpus-only folder, a seeded subset,
    the minibatch clamped to the pairs available, and the same estimates as calling probe()."""
    from normrank.probe import run_probe

    docs = [{"_id": f"d{i}", "title": f"w{i}", "text": f"w{i + 10} w{i + 20}"} for i in range(8)]
    (tmp_path / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in docs))
    model = TokenModel()
    run = run_probe(tmp_path, model, scope="full", steps=3, batch_size=50, probe_docs=5, pairs="self", seed=2)
    sel = np.sort(np.random.default_rng(2).choice(8, 5, replace=False))
    assert run.doc_ids == [f"d{i}" for i in sel]
    assert run.batch_size == 8 and run.notes and "8 pairs" in run.notes[0]
    assert run.pair_source == "self-pairs"
    texts = [f"w{i} w{i + 10} w{i + 20}" for i in sel]
    pairs = [(f"w{i}", f"w{i + 10} w{i + 20}") for i in range(8)]
    ref = probe(TokenModel(), texts, pairs, steps=3, batch_size=8, scope="full", seed=2)
    np.testing.assert_allclose(run.result.heat, ref.heat, rtol=1e-12)
    # "auto" on a folder without train qrels falls back to self-pairs from the same documents.
    assert run_probe(tmp_path, TokenModel(), scope="full", steps=2, batch_size=4).pair_source.startswith(
        "self-pairs"
    )
    with pytest.raises(InvalidParameterError):
        run_probe(tmp_path, model, probe_docs=-1)
    with pytest.raises(InvalidParameterError, match="torch"):
        run_probe(tmp_path, object(), steps=1)
    from normrank.errors import NormrankError

    with pytest.raises(NormrankError, match="not found"):
        run_probe(tmp_path / "missing-folder-x", model)


@pytest.mark.parametrize("model_cls", [LinearModel, TokenModel])
def test_replay_model_gives_the_models_own_step_gradients(model_cls):
    """The public pieces the probe benchmark times: gradients through the replayed stand-in equal
    those through the model itself."""
    from normrank.probe.estimator import replay_model, step_gradients
    from normrank.probe.fastpath import detect_tail
    from normrank.probe.scopes import resolve_scope

    model = model_cls()
    model.torch_module.eval()  # as probe() does: dropout off
    pairs = _pairs(16)
    sample = VOCAB[:4] if model_cls is LinearModel else [" ".join(VOCAB[i : i + 3]) for i in (0, 5, 9, 20)]
    sc = resolve_scope(model, "head", sample[0])
    tail = detect_tail(model, sc.head, sc.head_path or "", sample)
    assert tail is not None
    idx = np.arange(6)
    stand_in = replay_model(model, tail, pairs, [idx], encode_batch_size=4)
    assert stand_in is not model
    for got, want in zip(
        step_gradients(stand_in, sc, pairs, idx, 0.05),
        step_gradients(model, sc, pairs, idx, 0.05),
        strict=True,
    ):
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-9, atol=1e-12)


def test_the_probe_reads_collections_through_the_validating_reader(tmp_path):
    from normrank.probe.pairs import pairs_from_qrels, read_corpus

    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text(
        '{"_id": "d1", "title": "t", "text": "x"}\n{"_id": "d2", "text": \n'
    )
    (tmp_path / "queries.jsonl").write_text('\ufeff{"_id": "q1", "text": "a query"}\n')  # a BOM is fine
    (tmp_path / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    with pytest.raises(InvalidInputError, match=r"corpus\.jsonl:2: not valid JSON"):
        read_corpus(tmp_path)
    (tmp_path / "corpus.jsonl").write_text('{"_id": "d1", "title": "t", "text": "x"}\n')
    assert pairs_from_qrels(tmp_path) == [("a query", "t x")]
    (tmp_path / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\tone\n")
    with pytest.raises(InvalidInputError, match=r"train\.tsv:2"):
        pairs_from_qrels(tmp_path)


def test_cli_probe_on_a_malformed_collection_is_one_error_line_exit_2(tmp_path):
    from typer.testing import CliRunner

    from normrank.cli import app

    (tmp_path / "corpus.jsonl").write_text('{"_id": "d1", "text": "a [b] c"}\n{"_id": \n')
    result = CliRunner().invoke(app, ["probe", str(tmp_path), "--model", "no-such-model", "--quiet"])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and "corpus.jsonl:2: not valid JSON" in line, line
