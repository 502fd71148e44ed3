"""The ``sagerl`` command line: ``train``, ``eval`` and ``compare``.

Thin by design: each command parses its options and calls one library function. Errors a user can cause
(:class:`sagerl.errors.SagerlError`) are printed as one line on stderr, without a traceback, and the
process exits with status 2. Each command group lives in its own module and registers on the one
:data:`sagerl.cli.app.app`.
"""

from __future__ import annotations

import importlib
import sys

import typer

from sagerl.cli.app import app
from sagerl.errors import SagerlError

__all__ = ["app", "main"]

COMMAND_MODULES = ("train", "evaluate")
"""Modules under ``sagerl.cli`` that register commands, in the order ``sagerl --help`` lists them."""
for _module in COMMAND_MODULES:
    importlib.import_module(f"sagerl.cli.{_module}")


def main(argv: list[str] | None = None) -> None:
    """Console entry point: runs the typer app and turns user errors into one line and exit status 2."""
    try:
        app(args=argv, standalone_mode=False)
    except SagerlError as exc:
        typer.echo(f"sagerl: error: {exc}", err=True)
        sys.exit(2)
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("sagerl: interrupted (rerun the same command to resume)", err=True)
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:  # click usage errors
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        raise
