"""The typer application that every command module registers on."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="normrank",
    help="Norm-aware vector search: score = cos(q, d) * ||d||^alpha.",
    no_args_is_help=True,
    add_completion=False,
)


def _print_version(value: bool) -> None:
    if value:
        from normrank import __version__

        typer.echo(f"normrank {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Norm-aware vector search: score = cos(q, d) * ||d||^alpha."""
