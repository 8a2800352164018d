"""The report of benchmarks/specificity_pairs.py: specificity.json, specificity.md, specificity.png."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

__all__ = ["markdown", "plot", "write_report"]


def _f(x: float | None, fmt: str = "{:+.1f}") -> str:
    if x is None:
        return "–"
    if isinstance(x, float) and math.isinf(x):
        return "+inf" if x > 0 else "−inf"
    return fmt.format(x).replace("-", "−")


def _p(p: float | None) -> str:
    return "–" if p is None else (f"{p:.4f}" if p >= 0.001 else f"{p:.0e}")


def _main_cells(st: dict[str, Any]) -> str:
    return f"{_f(st['z'])} | {_f(st['pct_norm_down'], '{:.1f}%')} | {_f(st['pct_cos_down'], '{:.1f}%')} | {_p(st['p'])}"


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    src = {"wordnet": "WordNet glosses", "manuals": "manuals (Python, PostgreSQL)"}
    out = [
        "# Specific vs general answers: the paper's Table 5 on real text (issue 39)",
        "",
        f"Machine: {meta['machine']}; whole run {meta['seconds']:.0f} s (encodes cached after the first run). "
        f"Sign-flip permutations: {meta['permutations']}. Regenerate: `nice -n 10 python benchmarks/specificity_pairs.py`.",
        "",
        "z = √n·mean(Δ)/sd(Δ), Δ = ‖specific‖ − ‖general‖; %Norm↓ = share of pairs with the specific "
        "answer's norm smaller; %Cos↓ = share with cos(q, specific) < cos(q, general); p = two-sided "
        "sign-flip permutation p of mean(Δ). *Repeated*: the general answer encoded twice over (the "
        "paper's protocol); *plain*: as is.",
        "",
        "## Table 5 layout",
        "",
        "| source | model | n | repeated: z | %Norm↓ | %Cos↓ | p | plain: z | %Norm↓ | %Cos↓ | p |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, (z, nd, cd) in meta["paper"].items():
        out.append(
            f"| **paper (LLM triples)** | {name} | 1060 | **{_f(z)}** | **{nd:.1f}%** | **{cd:.1f}%** | – | | | | |"
        )
    for r in rows:
        a, b = r["repeated"]["all"], r["plain"]["all"]
        out.append(
            f"| {src.get(r['source'], r['source'])} | {r['label']} | {a['n']} | {_main_cells(a)} | {_main_cells(b)} |"
        )
    out += [
        "",
        "## Length controls",
        "",
        "Token counts are the model's tokenizer's (words for USE). *matched*: only the pairs whose two "
        "encoded answers are within 10% of each other in tokens. *residual*: log‖x‖ regressed on log "
        "tokens over both answers (slope b, R² of the fit), Δ between the residuals (the part of the "
        "norm gap length does not predict).",
        "",
        "| source | model | protocol | tokens s / g (median) | z (p) | matched: n, z, %Norm↓ (p) | fit: b, R² | residual: z, %Norm↓ (p) |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        for proto in ("repeated", "plain"):
            t = r[proto]
            a, m, res, fit, tok = t["all"], t["matched"], t["residual"], t["fit"], t["tokens"]
            out.append(
                f"| {src.get(r['source'], r['source'])} | {r['label']} | {proto} | "
                f"{tok['specific_median']:.0f} / {tok['general_median']:.0f} | {_f(a['z'])} ({_p(a['p'])}) | "
                f"{m['n']}, {_f(m['z'])}, {_f(m['pct_norm_down'], '{:.1f}%')} ({_p(m['p'])}) | "
                f"{_f(fit['slope'], '{:+.3f}')}, {fit['r2']:.2f} | "
                f"{_f(res['z'])}, {_f(res['pct_norm_down'], '{:.1f}%')} ({_p(res['p'])}) |"
            )
    out += [
        "",
        "## What repetition does to the norm",
        "",
        "The general answer repeated against its single copy: the median of ‖g×2‖ / ‖g‖, and what the "
        "plain protocol's length law (log‖x‖ = a + b log tokens) predicts for a text of the repeated "
        "one's length, 2^b; *above the law*: share of pairs whose repeated general keeps more norm "
        "than a text that long would have.",
        "",
        "| source | model | median ‖g×2‖ / ‖g‖ | length law (2^b) | above the law |",
        "|---|---|---:|---:|---:|",
    ]
    for r in rows:
        rep = r["repetition"]
        out.append(
            f"| {src.get(r['source'], r['source'])} | {r['label']} | {rep['median_norm_ratio']:.3f} | "
            f"{rep['median_law_ratio']:.3f} | {rep['pct_above_law']:.1f}% |"
        )
    out += ["", "## The pairs", ""]
    for s, info in meta["pairs"].items():
        out.append(
            f"- **{s}**: sample of {info['sample']} (seed {info['seed']}); counts: `{json.dumps(info['counts'])}`"
        )
    out += ["", "Sample rows:", ""]
    for s, ps in meta["samples"].items():
        for p in ps[:3]:
            out.append(
                f"- {s}: Q: *{p['question']}* — specific: “{p['specific']}” — general: “{p['general']}”"
            )
    if meta.get("missing"):
        out += ["", "Not run: " + ", ".join(f"{k} ({v})" for k, v in meta["missing"].items())]
    return "\n".join(out) + "\n"


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Per model and source, the distribution of Δ under both protocols."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    sources = sorted({r["source"] for r in rows}, key=["wordnet", "manuals"].index)
    labels = list(dict.fromkeys(r["label"] for r in rows))
    fig, axes = plt.subplots(len(sources), len(labels), figsize=(3.2 * len(labels), 2.8 * len(sources)),
                             squeeze=False)  # fmt: skip
    for r in rows:
        ax = axes[sources.index(r["source"])][labels.index(r["label"])]
        for proto, colour in (("repeated", "tab:red"), ("plain", "tab:blue")):
            d = np.asarray(r["deltas"][proto])
            z = r[proto]["all"]["z"]
            ax.hist(d, bins=40, alpha=0.5, color=colour, label=f"{proto} (z {z:+.1f})")
        ax.axvline(0, color="k", lw=0.8)
        ax.set_title(f"{r['label']} — {r['source']}", fontsize=9)
        ax.set_xlabel("Δ = ‖specific‖ − ‖general‖", fontsize=8)
        ax.legend(fontsize=7)
    fig.suptitle("Specific vs general answer norms (Δ < 0: the paper's prediction)", fontsize=10)
    fig.tight_layout()
    tmp = path.with_suffix(f".{os.getpid()}.tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    os.replace(tmp, path)


def write_report(rows: list[dict[str, Any]], meta: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    slim = [{k: v for k, v in r.items() if k != "deltas"} for r in rows]  # the Δs go to the figure only
    for name, text in (("specificity.json", json.dumps({**meta, "rows": slim}, indent=1)),
                       ("specificity.md", markdown(rows, meta))):  # fmt: skip
        tmp = out / f".{name}.{os.getpid()}"
        tmp.write_text(text)
        os.replace(tmp, out / name)
    if rows:
        plot(rows, out / "specificity.png")
