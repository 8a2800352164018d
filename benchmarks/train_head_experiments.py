"""The paper's Section 5 with a projection head trained here, on CPU (issue 24). One subcommand
per experiment; each writes JSON + Markdown (+ PNG) under benchmarks/results/train_head/::

    python benchmarks/train_head_experiments.py fig2     # R against lambda; log R^4 vs log(V~^2/lambda)
    python benchmarks/train_head_experiments.py table1   # norm against rho (positive contexts), its CV
    python benchmarks/train_head_experiments.py sweep    # head vs no head, alpha-sweep with controls

fig2 / table1 train a linear head on synthetic concept features (normrank.train.synthetic);
sweep trains one linear head per evaluated collection on cached all-MiniLM-L6-v2 features of the
*other* seven collections' qrels pairs (leave one collection out), then sweeps the held-out
collection with and without the head. Seeded; runs from nothing (features encoded and cached
on the first run).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

OUT = Path(__file__).resolve().parent / "results" / "train_head"
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "beir"
COLLECTIONS = ["adi", "medline", "cranfield", "cisi", "cacm", "nfcorpus-test-preprocessed", "npl", "scifact"]
BASE = "all-MiniLM-L6-v2"


def _threads() -> None:
    import torch

    torch.set_num_threads(1)  # a shared 2-core machine: one thread per process avoids oversubscription


class FeatureModel:
    """A head on fixed feature rows, as the probe sees a model: ``embed_tensor(keys) -> head(F[keys])``."""

    def __init__(self, head: Any, feats: np.ndarray, prefix: str) -> None:
        import torch

        self.torch_module = head
        self.f = torch.as_tensor(np.ascontiguousarray(feats, dtype=np.float32))
        self.keys = {f"{prefix}{i}": i for i in range(len(feats))}

    def embed_tensor(self, texts: list[str]) -> Any:
        return self.torch_module(self.f[[self.keys[t] for t in texts]])


class PairFeatureModel(FeatureModel):
    """Anchors ``a<i>`` and positives ``p<j>`` in one key space."""

    def __init__(self, head: Any, anchors: np.ndarray, positives: np.ndarray) -> None:
        super().__init__(head, np.concatenate([anchors, positives]), "")
        self.keys = {f"a{i}": i for i in range(len(anchors))}
        self.keys.update({f"p{j}": len(anchors) + j for j in range(len(positives))})


def _write(name: str, payload: dict, md: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps(payload, indent=1))
    (OUT / f"{name}.md").write_text(md)
    print(md)


def _env() -> dict[str, Any]:
    import os
    import platform

    return {
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "load_at_start": os.getloadavg()[0],
        "python": platform.python_version(),
    }


# --------------------------------------------------------------------------------- Figure 2
def fig2(args: argparse.Namespace) -> None:
    from normrank.probe import probe
    from normrank.probe.theory import loglog_fit, pearson, predicted_norm
    from normrank.train import TrainConfig, train_head_on_features
    from normrank.train.synthetic import concepts

    _threads()
    t0 = time.time()
    cs = concepts(args.concepts, args.positives, args.dim, spread=(0.5, 2.0), seed=args.seed)
    lams = [float(x) for x in args.lambdas.split(",")]
    rows, points = [], []
    for lam in lams:
        cfg = TrainConfig(
            weight_decay=lam,
            lr=args.lr,
            batch_size=args.batch_size,
            max_epochs=args.max_epochs,
            steps_per_epoch=args.steps_per_epoch,
            mask_duplicates=False,
            seed=args.seed,
        )
        head, res = train_head_on_features(cs.anchors, cs.contexts, cs.ia, cs.ib, cfg, monitor=cs.anchors)
        model = PairFeatureModel(head, cs.anchors, cs.contexts)
        keys = [f"a{i}" for i in range(len(cs.anchors))]
        pairs = [(f"a{a}", f"p{b}") for a, b in zip(cs.ia, cs.ib, strict=True)]
        pr = probe(
            model,
            keys,
            pairs,
            steps=args.probe_steps,
            batch_size=args.batch_size,
            lr=args.lr,
            temperature=cfg.temperature,
            scope="full",
            seed=args.seed,
        )
        pred = predicted_norm(pr.drift, pr.heat, pr.energy, args.lr, lam)
        r_window = float(np.mean([e["mean_norm"] for e in res.epochs[-cfg.patience :]]))
        row = {
            "lambda": lam,
            "converged": res.converged,
            "stop_reason": res.stop_reason,
            "epochs": len(res.epochs),
            "steps": res.epochs[-1]["steps"],
            "min_steps": res.min_steps,
            "final_loss": res.epochs[-1]["loss"],
            "R_mean": r_window,
            "R_probe_mean": float(pr.norm.mean()),
            "heat_mean": float(pr.heat.mean()),
            "drift_mean": float(pr.drift.mean()),
            "energy_mean": float(pr.energy.mean()),
            "R_pred_eq415_mean": float(pred.mean()),
            "r_heat_norm_across_concepts": pearson(pr.heat, pr.norm),
            "seconds": round(res.seconds, 1),
        }
        rows.append(row)
        points += [(lam, float(r), float(v)) for r, v in zip(pr.norm, pr.heat, strict=True)]
        print(json.dumps(row), flush=True)
    lam_a = np.array([r["lambda"] for r in rows])
    r_a = np.array([r["R_mean"] for r in rows])
    v_a = np.array([r["heat_mean"] for r in rows])
    fit_means = loglog_fit(v_a / lam_a, r_a**4)
    pl, pr_, pv = (np.array(x) for x in zip(*points, strict=True))
    fit_points = loglog_fit(pv / pl, pr_**4)
    fit_r_lam = loglog_fit(lam_a, r_a)
    payload = {
        "experiment": "Figure 2 (paper Sec. 5.1): equilibrium norm against weight decay",
        "setup": {
            "concepts": args.concepts,
            "positives": args.positives,
            "dim": args.dim,
            "spread": [0.5, 2.0],
            "lr": args.lr,
            "batch_size": args.batch_size,
            "temperature": 0.05,
            "steps_per_epoch": args.steps_per_epoch,
            "probe_steps": args.probe_steps,
            "optimizer": "SGD + decoupled weight decay (task step, then decay)",
            "loss": "symmetric InfoNCE, in-batch negatives (no duplicate masking, as the probe)",
            "R": "mean norm of the concept anchors, averaged over the last 5 epochs' checks",
            "heat": "normrank.probe V~^2 (paper eq. H.3) on the trained head, M virtual steps of the training lr",
        },
        "runs": rows,
        "fit_R4_vs_heat_over_lambda_per_lambda": fit_means,
        "fit_R4_vs_heat_over_lambda_all_points": fit_points,
        "fit_R_vs_lambda": fit_r_lam,
        "paper": {
            "slope_R4_vs_heat_over_lambda": "close to 1 (Figure 2, right)",
            "R_decreases_with_lambda": True,
        },
        "env": _env(),
        "seconds": round(time.time() - t0, 1),
    }
    md = [
        "# Figure 2 in miniature: a linear head trained here, R against λ\n",
        f"Synthetic concepts ({args.concepts} × {args.positives} positive contexts, d = {args.dim}), "
        f"linear head, symmetric InfoNCE, SGDW lr = {args.lr}, batch {args.batch_size}; Ṽ² by normrank's probe "
        "on the trained head. `python benchmarks/train_head_experiments.py fig2`.\n",
        "| λ | converged | steps | loss | mean R | Ṽ² (mean) | D̃ (mean) | R from eq. 4.15 | r(Ṽ², R) over concepts |",
        "|---:|:---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        md.append(
            f"| {r['lambda']:g} | {'yes' if r['converged'] else 'no'} | {r['steps']} | {r['final_loss']:.4f} | "
            f"{r['R_mean']:.4f} | {r['heat_mean']:.3e} | {r['drift_mean']:+.2e} | {r['R_pred_eq415_mean']:.4f} | "
            f"{r['r_heat_norm_across_concepts']:+.2f} |"
        )
    md += [
        "",
        f"- log R⁴ against log(Ṽ²/λ), one point per λ: **slope {fit_means['slope']:.3f}, r = {fit_means['r']:.3f}** "
        f"(paper: slope ≈ 1).",
        f"- the same over every (λ, concept) point ({fit_points['n']}): slope {fit_points['slope']:.3f}, r = {fit_points['r']:.3f}.",
        f"- log R against log λ: slope {fit_r_lam['slope']:.3f} (R falls with λ where negative; −0.25 if Ṽ² did not change with λ).",
        f"\n{_env_line()} Total {payload['seconds']:.0f} s.\n",
    ]
    _write("fig2", payload, "\n".join(md))
    _plot_fig2(rows, points, fit_means)


def _env_line() -> str:
    import os
    import platform

    model = (
        next(
            (
                ln.split(":", 1)[1].strip()
                for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")
            ),
            platform.processor() or platform.machine(),
        )
        if Path("/proc/cpuinfo").is_file()
        else platform.machine()
    )
    return f"{os.cpu_count()} cores ({model}), load {os.getloadavg()[0]:.1f} at the end."


def _plot_fig2(rows: list[dict], points: list[tuple], fit: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lam = np.array([r["lambda"] for r in rows])
    R = np.array([r["R_mean"] for r in rows])
    V = np.array([r["heat_mean"] for r in rows])
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.6))
    ax[0].plot(lam, R, "o-")
    ax[0].set_xscale("log")
    ax[0].set_xlabel("weight decay λ")
    ax[0].set_ylabel("mean norm R (concept anchors)")
    x = V / lam
    ax[1].loglog(x, R**4, "o", label="one run per λ")
    xs = np.geomspace(x.min(), x.max(), 20)
    ax[1].loglog(
        xs,
        np.exp(fit["intercept"]) * xs ** fit["slope"],
        "--",
        label=f"fit: slope {fit['slope']:.2f}, r={fit['r']:.2f}",
    )
    ax[1].set_xlabel("Ṽ² / λ")
    ax[1].set_ylabel("R⁴")
    ax[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "fig2.png", dpi=110)


# --------------------------------------------------------------------------------- Table 1
def table1(args: argparse.Namespace) -> None:
    from normrank.train import TrainConfig, fit
    from normrank.train.synthetic import frequency_sets
    from normrank.train.trainables import LinearOnFeatures, make_head

    _threads()
    t0 = time.time()
    rhos = tuple(int(x) for x in args.rhos.split(","))
    sets = frequency_sets(rhos, n_targets=args.targets, dim=args.dim, seed=args.seed)
    rows = []
    import torch

    for rho, cs in sets.items():
        cfg = TrainConfig(
            weight_decay=args.weight_decay,
            lr=args.lr,
            batch_size=args.batch_size,
            max_epochs=args.max_epochs,
            steps_per_epoch=args.steps_per_epoch,
            seed=args.seed,
            mask_duplicates=False,
        )
        targets = torch.as_tensor(cs.anchors[: args.targets])
        seen: list[np.ndarray] = []
        holder: dict[str, Any] = {}

        def on_epoch(_row: dict, seen=seen, holder=holder, targets=targets) -> None:
            with torch.no_grad():
                seen.append(holder["head"](targets).norm(dim=1).numpy().copy())

        # convergence is judged on every anchor's mean norm (stable); the targets' norms are read
        # at each epoch's end and averaged over the last `patience` epochs and the targets
        head = make_head(cs.anchors.shape[1], cs.anchors.shape[1], cfg.seed)
        holder["head"] = head
        model = LinearOnFeatures(
            cs.anchors, cs.contexts, cs.ia, cs.ib, head, seed=cfg.seed, monitor=cs.anchors
        )
        res = fit(model, cs.n_pairs, cfg, groups=cs.ia, on_epoch=on_epoch)
        last = np.array(seen[-cfg.patience :])  # (epochs, targets)
        row = {
            "rho": rho,
            "n_pairs": cs.n_pairs,
            "converged": res.converged,
            "steps": res.epochs[-1]["steps"],
            "final_loss": res.epochs[-1]["loss"],
            "R_targets": float(last.mean()),
            "R_per_target": [float(x) for x in last.mean(axis=0)],
            "R_all_anchors": float(np.mean([e["mean_norm"] for e in res.epochs[-cfg.patience :]])),
            "seconds": round(res.seconds, 1),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    r = np.array([x["R_targets"] for x in rows])
    cv = float(r.std(ddof=0) / r.mean())
    per = np.array([x["R_per_target"] for x in rows])  # (rho, target)
    cvs = (per.std(axis=0) / per.mean(axis=0)).tolist()
    payload = {
        "experiment": "Table 1 (paper Sec. 5.2): norm against the number of positive contexts rho",
        "setup": {
            "rhos": list(rhos),
            "targets": args.targets,
            "background": "252 concepts x 100 contexts",
            "dim": args.dim,
            "spread": 0.75,
            "weight_decay": args.weight_decay,
            "lr": args.lr,
            "batch_size": args.batch_size,
            "steps_per_epoch": args.steps_per_epoch,
            "loss": "symmetric InfoNCE, in-batch negatives, no duplicate masking (as the paper's MultipleNegativesRankingLoss)",
            "semantic content": "target contexts are prefixes of one fixed seeded stream around a fixed centre",
        },
        "runs": rows,
        "cv_of_mean_target_norm": cv,
        "cv_per_target": cvs,
        "paper": {"max_cv": "< 2%", "distilbert": [7.346, 7.307, 7.294, 7.303, 7.344]},
        "env": _env(),
        "seconds": round(time.time() - t0, 1),
    }
    md = [
        "# Table 1 in miniature: the norm does not follow how often a concept is seen?\n",
        f"{args.targets} target concepts with ρ positive contexts each beside 252 background concepts × 100; "
        f"linear head, λ = {args.weight_decay}, lr = {args.lr}, batch {args.batch_size}, each ρ trained to norm "
        "convergence. `python benchmarks/train_head_experiments.py table1`.\n",
        "| | " + " | ".join(f"ρ={x}" for x in rhos) + " | CV |",
        "|---|" + "---:|" * (len(rhos) + 1),
        "| mean norm of the targets (last 5 epochs' ends) | "
        + " | ".join(f"{x:.4f}" for x in r)
        + f" | **{100 * cv:.2f}%** |",
        "| converged | " + " | ".join("yes" if x["converged"] else "no" for x in rows) + " | |",
        "| DistilBERT, paper | 7.346 | 7.307 | 7.294 | 7.303 | 7.344 | 0.28% |",
        "",
        "Per target concept, CV over ρ: median "
        + f"{100 * float(np.median(cvs)):.2f}%, max {100 * max(cvs):.2f}%.",
        f"\n{_env_line()} Total {payload['seconds']:.0f} s.\n",
    ]
    _write("table1", payload, "\n".join(md))


# --------------------------------------------------------------------------------- the sweep
def _collection(name: str, split: str = "test"):
    """(dataset, judged query features, document features) of a collection, raw MiniLM, from the
    embedding cache the sweep fills (encoded and cached on a miss)."""
    from normrank.corpus.beir import load_dataset
    from normrank.corpus.embedding_cache import EmbeddingCache
    from normrank.sweep.embed import embed_dataset

    ds = load_dataset(str(DATA / name), split)
    qids, qtexts = ds.judged()
    q, d = embed_dataset(ds, BASE, EmbeddingCache(), _ENCODERS, 64, False, None, qids, qtexts)
    return ds, q, d


_ENCODERS: dict[str, Any] = {}


def _pairs_of(ds, q: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(query features, doc features, ia, ib): every positive judgement of ``ds``'s split."""
    qids, _ = ds.judged()
    where = {x: i for i, x in enumerate(ds.doc_ids)}
    ia, ib = [], []
    for k, qid in enumerate(qids):
        for did, grade in ds.qrels[qid].items():
            if grade > 0 and did in where:
                ia.append(k)
                ib.append(where[did])
    return q, d, np.array(ia), np.array(ib)


def sweep(args: argparse.Namespace) -> None:
    """Leave one collection out: a linear head per evaluated collection, trained on the qrels pairs
    (query -> relevant document) of the other collections, then the alpha-sweep with its controls
    on the held-out collection, with the head ("VL+proj") and without it ("VL-proj": raw MiniLM)."""
    from normrank.settings import DEFAULT_ALPHAS, DEFAULT_METRICS
    from normrank.sweep.grid import parse_alphas
    from normrank.sweep.metrics import parse_metrics
    from normrank.sweep.report import write_all
    from normrank.sweep.run import sweep_embeddings
    from normrank.train import TrainConfig, train_head_on_features

    _threads()
    import torch

    t0 = time.time()
    names = args.collections.split(",")
    feats = {n: _collection(n) for n in names}
    sources = {n: [_pairs_of(*feats[n])] for n in names}
    if "scifact" in names and (DATA / "scifact" / "qrels" / "train.tsv").is_file():
        sources["scifact"].append(_pairs_of(*_collection("scifact", "train")))
    alphas, metrics = parse_alphas(DEFAULT_ALPHAS), parse_metrics(DEFAULT_METRICS)
    runs, rows = [], []
    for held in names:
        parts = [p for n in names if n != held for p in sources[n]]
        fa = np.concatenate([p[0] for p in parts])
        fb = np.concatenate([p[1] for p in parts])
        oa = np.cumsum([0] + [len(p[0]) for p in parts])[:-1]
        ob = np.cumsum([0] + [len(p[1]) for p in parts])[:-1]
        ia = np.concatenate([p[2] + o for p, o in zip(parts, oa, strict=True)])
        ib = np.concatenate([p[3] + o for p, o in zip(parts, ob, strict=True)])
        # One global scale so the features' mean norm is 1 (cosines and norm ratios unchanged;
        # cos * ||d||^alpha ranks the same): the same lr / lambda regime as the synthetic runs.
        scale = float(np.mean(np.linalg.norm(np.concatenate([fa, fb]), axis=1)))
        cfg = TrainConfig(
            weight_decay=args.weight_decay,
            lr=args.lr,
            batch_size=args.batch_size,
            steps_per_epoch=args.steps_per_epoch,
            max_epochs=args.max_epochs,
            seed=args.seed,
        )
        head, res = train_head_on_features(fa / scale, fb / scale, ia, ib, cfg)
        ds, q, d = feats[held]
        with torch.no_grad():
            hq = head(torch.as_tensor(q / scale)).numpy()
            hd = head(torch.as_tensor(d / scale)).numpy()
        pair = []
        for label, qq, dd in (("MiniLM-L6 (no head)", q, d), ("MiniLM-L6 + trained head", hq, hd)):
            run = sweep_embeddings(
                ds,
                BASE,
                qq,
                dd,
                alphas=alphas,
                metrics=metrics,
                folds=5,
                seed=args.seed,
                controls=True,
                permutations=99,
            )
            run.model = label
            runs.append(run)
            pair.append(run)
        rows.append(
            {
                "collection": held,
                "trained_on": [n for n in names if n != held],
                "n_pairs": len(ia),
                "converged": res.converged,
                "epochs": len(res.epochs),
                "final_loss": res.epochs[-1]["loss"],
                "head_mean_norm": res.final_norm,
                "runs": [_run_summary(r) for r in pair],
                "seconds": round(res.seconds, 1),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    write_all(runs, OUT / "sweep")
    payload = {
        "experiment": "head vs no head, alpha-sweep with controls, leave one collection out",
        "setup": {
            "base": BASE,
            "variant": "linear",
            "weight_decay": args.weight_decay,
            "lr": args.lr,
            "batch_size": args.batch_size,
            "steps_per_epoch": args.steps_per_epoch,
            "pairs": "qrels (query -> relevant document) of every other collection; "
            "scifact contributes test and train qrels when it is not the held-out one",
        },
        "rows": rows,
        "env": _env(),
        "seconds": round(time.time() - t0, 1),
    }
    _write("sweep", payload, _sweep_md(rows, args, payload["seconds"]))


def _run_summary(run) -> dict[str, Any]:
    c = run.controls
    return {
        "model": run.model,
        "cosine": float(run.mean("ndcg@10")[run.i0]),
        "best_alpha": run.best_alpha,
        "cv_gain_pct": run.cv_gain_pct,
        "cv_p": run.p_value,
        "cv_alphas": [float(a) for a in run.cv_alphas],
        "spearman_norm_length": c["spearman_norm_length"],
        "length_betas": c["length"]["cv"]["betas"],
        "length_gain_pct": c["length"]["cv"]["gain_pct"],
        "length_p": c["length"]["cv"]["p_value"],
        "residual_gain_pct": c["residual"]["cv"]["gain_pct"],
        "residual_p": c["residual"]["cv"]["p_value"],
        "perm_max_gain_pct": c["permutation"]["null_max_pct"],
        "perm_p": c["permutation"]["p_value"],
        "norm_cv": run.norm_stats.get("cv"),
    }


def _sweep_md(rows: list[dict], args: argparse.Namespace, seconds: float) -> str:
    md = [
        "# The retrieval question: a head trained here vs the same encoder without it\n",
        f"Linear head on frozen raw all-MiniLM-L6-v2 features, one per evaluated collection, trained on the "
        f"qrels pairs of the *other* collections (λ = {args.weight_decay}, lr = {args.lr}); NDCG@10, 5-fold CV "
        "over queries, paired t-test p in brackets, controls as `normrank sweep`. "
        "`python benchmarks/train_head_experiments.py sweep`.\n",
        "| collection | model | cosine | Spearman(‖d‖, len) | norm ‖d‖^α CV | length len^β CV | norm, length regressed out | shuffled norms: max / perm. p |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        for k, s in enumerate(r["runs"]):
            md.append(
                f"| {r['collection'] if k == 0 else ''} | {s['model']} | {s['cosine']:.4f} | "
                f"{s['spearman_norm_length']:+.2f} | {s['cv_gain_pct']:+.1f}% ({s['cv_p']:.3g}) | "
                f"{s['length_gain_pct']:+.1f}% ({s['length_p']:.3g}) | {s['residual_gain_pct']:+.1f}% "
                f"({s['residual_p']:.3g}) | {_f(s['perm_max_gain_pct'])} / {s['perm_p']:.3f} |"
            )
    md += [
        "",
        "Heads: "
        + "; ".join(
            f"{r['collection']}: {r['n_pairs']} pairs, "
            f"{'converged' if r['converged'] else 'NOT converged'} after {r['epochs']} epochs"
            for r in rows
        )
        + ".",
        f"\n{_env_line()} Total {seconds:.0f} s.\n",
    ]
    return "\n".join(md)


def _f(x: Any) -> str:
    return "n/a" if x is None else f"{x:+.1f}%"


def main(argv: list[str] | None = None) -> None:
    global OUT
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fig2")
    f.add_argument("--lambdas", default="0.01,0.03,0.1,0.3,1.0")
    f.add_argument("--concepts", type=int, default=512)
    f.add_argument("--positives", type=int, default=100)
    f.add_argument("--dim", type=int, default=128)
    f.add_argument("--lr", type=float, default=0.05)
    f.add_argument("--batch-size", type=int, default=64)
    f.add_argument("--steps-per-epoch", type=int, default=250)
    f.add_argument("--max-epochs", type=int, default=120)
    f.add_argument("--probe-steps", type=int, default=64)
    f.add_argument("--seed", type=int, default=0)
    t = sub.add_parser("table1")
    t.add_argument("--rhos", default="5,20,100,500,2000")
    t.add_argument("--targets", type=int, default=16)
    t.add_argument("--dim", type=int, default=128)
    t.add_argument("--weight-decay", type=float, default=0.3)
    t.add_argument("--lr", type=float, default=0.05)
    t.add_argument("--batch-size", type=int, default=64)
    t.add_argument("--steps-per-epoch", type=int, default=250)
    t.add_argument("--max-epochs", type=int, default=60)
    t.add_argument("--seed", type=int, default=0)
    s = sub.add_parser("sweep")
    s.add_argument("--collections", default=",".join(COLLECTIONS))
    s.add_argument("--weight-decay", type=float, default=0.01)
    s.add_argument("--lr", type=float, default=0.05)
    s.add_argument("--batch-size", type=int, default=128)
    s.add_argument("--steps-per-epoch", type=int, default=250)
    s.add_argument("--max-epochs", type=int, default=60)
    s.add_argument("--seed", type=int, default=0)
    for p in (f, t, s):
        p.add_argument("--out", type=Path, default=OUT, help="Results folder.")
    args = ap.parse_args(argv)
    OUT = args.out
    {"fig2": fig2, "table1": table1, "sweep": sweep}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
