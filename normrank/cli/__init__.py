"""The ``normrank`` command line. Each command group lives in its own module and registers on
the shared typer app; heavy imports happen inside the commands, so ``--help`` is fast."""

from __future__ import annotations

import importlib

from normrank.cli.app import app

for _module in ("index", "sweep", "diagnose", "probe"):
    try:
        importlib.import_module(f"normrank.cli.{_module}")
    except ModuleNotFoundError as e:  # a command module not present in this build
        if e.name != f"normrank.cli.{_module}":
            raise

__all__ = ["app", "main"]


def main() -> None:
    app()
