"""The typer application that every command module registers on."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="normrank",
    help="Norm-aware vector search: score = cos(q, d) * ||d||^alpha.",
    no_args_is_help=True,
    add_completion=False,
)
