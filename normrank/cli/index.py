"""``normrank index build|search``: the core index from the shell, on .npy embeddings."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from normrank.cli.app import app

index_app = typer.Typer(help="Build and search a NormIndex from .npy embeddings.", no_args_is_help=True)
app.add_typer(index_app, name="index")


def _load_npy(path: Path, what: str):
    """A .npy array, or exit 2 with one line saying why not (.npz archives, empty or truncated
    files, pickled object arrays and missing files included)."""
    import numpy as np

    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except OSError as e:
        _fail(f"cannot read {what} {path}: {e.strerror or e}")
    # numpy's own message for a text or other non-.npy file suggests allow_pickle=: never here
    if head and head != np.lib.format.MAGIC_PREFIX and not head.startswith(b"PK"):
        _fail(f"{what} {path} is not a .npy file (no NumPy header): save the array with numpy.save")
    try:
        arr = np.load(path, allow_pickle=False, mmap_mode="r")
    except (OSError, ValueError, EOFError) as e:  # EOFError: an empty file
        if "pickled" in str(e) or "Python objects" in str(e):
            _fail(f"{what} {path} holds Python objects, not numbers: save a float32 array with numpy.save")
        _fail(f"cannot read {what} {path} as a .npy array: {type(e).__name__}: {e}")
    if not isinstance(arr, np.ndarray):  # an .npz archive
        _fail(f"{what} {path} is an .npz archive, not a .npy array: save one array with numpy.save")
    return arr


def _fail(err: Exception | str) -> None:
    """Every user error: exit code 2 and one line on stderr."""
    lines = str(err).strip().splitlines() or [type(err).__name__]
    typer.echo(f"error: {lines[0]}", err=True)
    raise typer.Exit(code=2)


@index_app.command("build")
def build(
    embeddings: Path = typer.Argument(..., help="Raw (unnormalised) embeddings, .npy (n, d)."),
    out: Path = typer.Option(..., "--out", help="Directory to write the index to."),
    alpha: float = typer.Option(0.0, "--alpha", help="Default exponent: score = cos * ||d||^alpha."),
    factory: str = typer.Option("Flat", "--factory", help='faiss.index_factory string, e.g. "HNSW32".'),
    ids: Path | None = typer.Option(None, "--ids", help="Optional int64 ids, .npy (n,)."),
    nprobe: int | None = typer.Option(None, "--nprobe", help="IVF: lists probed per query (saved)."),
    ef_search: int | None = typer.Option(None, "--ef-search", help="HNSW: search beam width (saved)."),
) -> None:
    """Build an index from EMBEDDINGS and save it to OUT."""
    from normrank import NormIndex, NormrankError

    x = _load_npy(embeddings, "embeddings")
    if x.ndim != 2:
        _fail(f"embeddings must be a 2-D array (n, d), got shape {x.shape}")
    try:
        index = NormIndex(x.shape[1], alpha=alpha, factory=factory, nprobe=nprobe, ef_search=ef_search)
        if not index.is_trained:
            index.train(x)
        index.add(x, None if ids is None else _load_npy(ids, "--ids"))
        index.save(out)
    except NormrankError as e:
        _fail(e)
    shown = "".join(f", {k}={v}" for k, v in index.search_params.items())
    typer.echo(
        f"saved {len(index)} vectors of dimension {index.dim} to {out} (factory {factory}{shown})", err=True
    )


@index_app.command("search")
def search(
    index_dir: Path = typer.Argument(..., help="Directory written by `normrank index build`."),
    queries: Path = typer.Argument(..., help="Query embeddings, .npy (nq, d)."),
    k: int = typer.Option(10, "-k", "--k", help="Results per query."),
    alpha: float | None = typer.Option(
        None, "--alpha", help="Exponent for this search (default: the index's)."
    ),
    nprobe: int | None = typer.Option(None, "--nprobe", help="IVF: lists probed (default: the saved value)."),
    ef_search: int | None = typer.Option(
        None, "--ef-search", help="HNSW: beam width (default: the saved value)."
    ),
) -> None:
    """Search INDEX_DIR with QUERIES; one JSON line per query: {"query", "ids", "scores"}."""
    from normrank import NormIndex, NormrankError

    q = _load_npy(queries, "queries")
    try:
        index = NormIndex.load(index_dir)
        scores, ids = index.search(q, k, alpha=alpha, nprobe=nprobe, ef_search=ef_search)
    except NormrankError as e:
        _fail(e)
    out = sys.stdout
    for row, (s, i) in enumerate(zip(scores, ids, strict=True)):
        keep = i >= 0
        out.write(json.dumps({"query": row, "ids": i[keep].tolist(), "scores": s[keep].tolist()}) + "\n")
