"""The ``normrank`` command line. Each command group lives in its own module and registers on
the shared typer app; heavy imports happen inside the commands, so ``--help`` is fast."""

from __future__ import annotations

import importlib
import sys

from normrank.cli.app import app

for _module in ("index", "sweep", "diagnose", "probe", "depthset", "train"):
    try:
        importlib.import_module(f"normrank.cli.{_module}")
    except ModuleNotFoundError as e:  # a command module not present in this build
        if e.name != f"normrank.cli.{_module}":
            raise

__all__ = ["app", "main"]


def main() -> None:
    """The ``normrank`` console script: typer's ``app()``, except that a usage error (a misspelt
    option, a missing argument, an unknown command) is one line on stderr with exit code 2, as
    every other user error is, instead of typer's multi-line panel."""
    try:
        from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
    except ImportError:  # typer before 0.26 uses click itself
        from click.exceptions import ClickException, NoArgsIsHelpError, UsageError
    from typer import Abort, rich_utils

    try:
        code = app(standalone_mode=False)
    except NoArgsIsHelpError as e:  # `normrank` or `normrank index` alone: the help, as typer shows it
        rich_utils.rich_format_error(e)
        sys.exit(e.exit_code)
    except UsageError as e:
        where = f" (see {e.ctx.command_path} --help)" if e.ctx is not None else ""
        print(f"error: {e.format_message()}{where}", file=sys.stderr)
        sys.exit(e.exit_code)
    except ClickException as e:
        rich_utils.rich_format_error(e)
        sys.exit(e.exit_code)
    except Abort:
        print("Aborted!", file=sys.stderr)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
