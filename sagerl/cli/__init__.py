"""The ``sagerl`` command line: ``train``, ``eval`` and ``compare``.

Thin by design: each command parses its options and calls one library function. Errors a user can cause
(:class:`sagerl.errors.SagerlError`) are printed as one line on stderr, without a traceback, and the
process exits with status 2. Each command group lives in its own module and registers on the one
:data:`sagerl.cli.app.app`.
"""

from __future__ import annotations

import importlib
import sys
from typing import NoReturn

import typer

from sagerl.allocator import keep_freed_memory
from sagerl.cli.app import app
from sagerl.cli.quiet import quiet_third_party_progress
from sagerl.cli.warning_filters import silence_harmless_warnings
from sagerl.errors import SagerlError

__all__ = ["app", "main"]

COMMAND_MODULES = ("train", "evaluate", "analyze", "study", "planted", "interop")
"""Modules under ``sagerl.cli`` that register commands, in the order ``sagerl --help`` lists them."""
for _module in COMMAND_MODULES:
    importlib.import_module(f"sagerl.cli.{_module}")


def main(argv: list[str] | None = None) -> None:
    """Console entry point: runs the typer app; user errors become one line and exit status 2.

    A usage error (unknown command or option, missing value, value of the wrong type) prints the
    command's usage line and one error line, exit status 2. The known harmless third-party warnings of
    :mod:`sagerl.cli.warning_filters` are silenced; every other warning shows. Third-party progress bars
    are off (:mod:`sagerl.cli.quiet`): each stage shows sagerl's own display. glibc's malloc keeps the memory
    torch frees (:func:`sagerl.allocator.keep_freed_memory`).
    """
    keep_freed_memory()
    silence_harmless_warnings()
    quiet_third_party_progress()
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        code = app(args=args or ["--help"], prog_name="sagerl", standalone_mode=False)
    except SagerlError as exc:
        typer.echo(f"sagerl: error: {exc}", err=True)
        sys.exit(2)
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("sagerl: interrupted (rerun the same command to resume)", err=True)
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.TyperException as exc:  # click's usage errors (typer vendors click)
        _usage_error(exc, args)
    if isinstance(code, int) and code != 0:  # a command's typer.Exit(code): click returns it, not raises
        sys.exit(code)


def _usage_error(exc: typer.TyperException, args: list[str]) -> NoReturn:
    ctx = getattr(exc, "ctx", None) or _command_context(args)
    format_message = getattr(exc, "format_message", None)
    message = format_message() if format_message is not None else str(exc)
    if ctx is None:
        typer.echo(f"sagerl: error: {message}", err=True)
    else:
        typer.echo(ctx.get_usage(), err=True)
        typer.echo(f"sagerl: error: {message} (see '{ctx.command_path} --help')", err=True)
    sys.exit(2)


def _command_context(args: list[str]):
    """The context of the command named in ``args`` (for its usage line), when an error carries none."""
    group = typer.main.get_command(app)
    try:
        root = group.make_context("sagerl", [], resilient_parsing=True)
        name = next((a for a in args if not a.startswith("-")), None)
        command = group.get_command(root, name) if name else None  # type: ignore[attr-defined]
        if command is None:
            return root
        return command.make_context(name, [], parent=root, resilient_parsing=True)
    except Exception:  # the usage line is a courtesy; the error line is printed regardless
        return None
