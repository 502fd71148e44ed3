"""The typer application that every ``sagerl`` command registers on (one module per command group)."""

from __future__ import annotations

import typer

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="SAGE (Shaping Anchors for Guided Exploration) for RLVR on LLMs: train, evaluate pass@k, compare runs.",
)


def split_list(value: str) -> list[str]:
    """Split a comma-separated option value into its non-blank items."""
    return [v.strip() for v in value.split(",") if v.strip()]
