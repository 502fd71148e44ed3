"""The typer application that every ``sagerl`` command registers on (one module per command group)."""

from __future__ import annotations

import typer

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    help="SAGE (Shaping Anchors for Guided Exploration) for RLVR on LLMs: train, evaluate pass@k, compare runs.",
)


def _print_version(value: bool) -> None:
    if value:
        from sagerl import __version__

        typer.echo(f"sagerl {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Options before the command (``sagerl --version``)."""


def split_list(value: str) -> list[str]:
    """Split a comma-separated option value into its non-blank items."""
    return [v.strip() for v in value.split(",") if v.strip()]
