"""The one progress display of every sagerl stage: a rich bar on stderr, with elapsed time and ETA.

Evaluation counts samples, training counts optimizer steps; both use :func:`progress_display`, so a
terminal shows one bar per stage in one style. Third-party bars (the HF Trainer's tqdm, transformers'
"Loading weights" and "Writing model shards") are turned off by the CLI and the demo
(:func:`sagerl.cli.quiet.quiet_third_party_progress`).
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def progress_display(unit: str, enabled: bool = True, console: Console | None = None) -> Progress:
    """A rich :class:`~rich.progress.Progress`: ``<description> ━━━━ 12/96 <unit> 0:00:41 ETA 0:02:05``.

    Args:
        unit: what is counted (``"samples"``, ``"steps"``).
        enabled: False gives a display that prints nothing.
        console: where to draw (default: a console on stderr, so stdout keeps only results).
    """
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console or Console(stderr=True),
        disable=not enabled,
        transient=False,
    )
