"""The ``sagerl`` command line: ``train``, ``eval`` and ``compare``.

Thin by design: each command parses its options and calls one library function. Errors a user can cause
(:class:`sagerl.errors.SagerlError`) are printed as one line on stderr, without a traceback, and the
process exits with status 2.
"""

from __future__ import annotations

import sys

import typer

from sagerl.errors import SagerlError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="SAGE (Shaping Anchors for Guided Exploration) for RLVR on LLMs: train, evaluate pass@k, compare runs.",
)


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


if __name__ == "__main__":
    main()
