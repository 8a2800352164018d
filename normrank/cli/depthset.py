"""``normrank depthset build SOURCE... --out DIR``: a depth-stratified collection from headings."""

from __future__ import annotations

import warnings
from pathlib import Path

import typer

from normrank.cli.app import app

depthset_app = typer.Typer(
    help="Depth-stratified collections (TREC CAR's recipe) from HTML / Markdown docs.", no_args_is_help=True
)
app.add_typer(depthset_app, name="depthset")


@depthset_app.command("build")
def build_command(
    sources: list[str] = typer.Argument(
        ..., help="HTML / Markdown files or folders (recursive), or a TREC CAR ir_datasets id (car/...)."
    ),
    out: Path = typer.Option(
        ..., "--out", "-o", help="Folder for corpus.jsonl, queries.jsonl, qrels/test.tsv."
    ),
    fmt: str = typer.Option("auto", "--format", help="auto (by file suffix) | html | markdown."),
    qrels: str = typer.Option(
        "hierarchical",
        help="hierarchical (a paragraph judges its lowest heading) | tree (every heading above too).",
    ),
    max_pages: int = typer.Option(
        None, help="Sample this many whole pages (seeded), so a run fits a laptop."
    ),
    seed: int = typer.Option(0, help="Seed of the page sample."),
    min_words: int = typer.Option(5, help="Paragraphs with fewer words are left out."),
    quiet: bool = typer.Option(False, help="No progress bar."),
) -> None:
    """Each heading path is a query (page title, then headings); the paragraphs under it are its
    relevant passages. Writes a BEIR-layout folder for ``normrank sweep DIR --by-depth``."""
    from normrank.cli.sweep import user_errors
    from normrank.corpus.depthset import build_depthset

    with user_errors(), warnings.catch_warnings():  # an error: one plain "error:" line, exit 2
        warnings.simplefilter("ignore")  # the skipped files are listed below, from the stats
        st = build_depthset(
            sources, out, fmt=fmt, qrels=qrels, max_pages=max_pages, seed=seed, min_words=min_words,
            show_progress=not quiet,
        )  # fmt: skip
    for why in st.unreadable:
        typer.echo(f"warning: skipped {why}", err=True)
    for rel in st.not_utf8:
        typer.echo(f"warning: {rel}: not UTF-8; read as Windows-1252 (Latin-1)", err=True)
    depths = ", ".join(f"{b}: {n}" for b, n in st.queries_per_depth.items())
    skipped = ", ".join(f"{n} {why}" for why, n in st.pages_skipped.items()) or "none"
    print(
        f"{st.pages_used} pages ({st.pages_found} found; skipped: {skipped}), {st.paragraphs} paragraphs "
        f"({st.duplicates_merged} duplicates merged), queries {depths}, {st.qrels} qrels, {st.seconds:.1f} s"
    )
    typer.echo(f"wrote {out}/corpus.jsonl, queries.jsonl, qrels/test.tsv, depthset.json", err=True)
