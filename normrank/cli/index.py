"""``normrank index build|search``: the core index from the shell, on .npy embeddings."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from normrank.cli.app import app

index_app = typer.Typer(help="Build and search a NormIndex from .npy embeddings.", no_args_is_help=True)
app.add_typer(index_app, name="index")


def _load_npy(path: Path):
    import numpy as np

    try:
        return np.load(path, allow_pickle=False, mmap_mode="r")
    except (OSError, ValueError) as e:
        raise typer.BadParameter(f"cannot read {path} as a .npy array: {e}") from e


def _fail(err: Exception) -> None:
    typer.echo(f"error: {err}", err=True)
    raise typer.Exit(code=2)


@index_app.command("build")
def build(
    embeddings: Path = typer.Argument(..., help="Raw (unnormalised) embeddings, .npy (n, d)."),
    out: Path = typer.Option(..., "--out", help="Directory to write the index to."),
    alpha: float = typer.Option(0.0, "--alpha", help="Default exponent: score = cos * ||d||^alpha."),
    factory: str = typer.Option("Flat", "--factory", help='faiss.index_factory string, e.g. "HNSW32".'),
    ids: Path | None = typer.Option(None, "--ids", help="Optional int64 ids, .npy (n,)."),
) -> None:
    """Build an index from EMBEDDINGS and save it to OUT."""
    from normrank import NormIndex, NormrankError

    x = _load_npy(embeddings)
    try:
        index = NormIndex(x.shape[1] if x.ndim == 2 else -1, alpha=alpha, factory=factory)
        if not index.is_trained:
            index.train(x)
        index.add(x, None if ids is None else _load_npy(ids))
        index.save(out)
    except NormrankError as e:
        _fail(e)
    typer.echo(f"saved {len(index)} vectors of dimension {index.dim} to {out}", err=True)


@index_app.command("search")
def search(
    index_dir: Path = typer.Argument(..., help="Directory written by `normrank index build`."),
    queries: Path = typer.Argument(..., help="Query embeddings, .npy (nq, d)."),
    k: int = typer.Option(10, "-k", "--k", help="Results per query."),
    alpha: float | None = typer.Option(None, "--alpha", help="Exponent for this search (default: the index's)."),
) -> None:
    """Search INDEX_DIR with QUERIES; one JSON line per query: {"query", "ids", "scores"}."""
    from normrank import NormIndex, NormrankError

    q = _load_npy(queries)
    try:
        index = NormIndex.load(index_dir)
        scores, ids = index.search(q, k, alpha=alpha)
    except NormrankError as e:
        _fail(e)
    out = sys.stdout
    for row, (s, i) in enumerate(zip(scores, ids, strict=True)):
        keep = i >= 0
        out.write(json.dumps({"query": row, "ids": i[keep].tolist(), "scores": s[keep].tolist()}) + "\n")
