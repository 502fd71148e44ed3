"""``sagerl study``."""

from __future__ import annotations

import typer

from sagerl.cli.app import app


@app.command("study")
def study_command(
    study_file: str = typer.Argument(
        ..., help="Study YAML: presets x seeds x overrides, model, task, steps, eval."
    ),
    out: str | None = typer.Option(None, "--out", "-o", help="Study folder (default runs/study-<name>)."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print the sagerl command of every cell (for a scheduler) and exit."
    ),
    aggregate_only: bool = typer.Option(
        False, "--aggregate-only", help="Build the table from the cells already run; train nothing."
    ),
    progress: bool = typer.Option(False, "--progress/--no-progress", help="Progress bars of each cell."),
) -> None:
    """Run a study cell by cell (resumable; failed cells reported) and write one table with 95% CIs over seeds."""
    import json

    from rich.console import Console

    from sagerl.study import (
        cell_commands,
        check_finished_cells,
        load_study,
        reference_command,
        run_study,
        study_folder,
    )
    from sagerl.study.folders import read_cell_status
    from sagerl.study.table import finished_summary, render_terminal, write_study_table

    study = load_study(study_file)
    folder = study_folder(study, out)
    if dry_run:
        check_finished_cells(study, folder)  # commands into a changed finished cell would fail on the cluster
        typer.echo(reference_command(study, folder))
        for cell in study.cells:
            for command in cell_commands(study, folder, cell):
                typer.echo(command)
        typer.echo(f"sagerl study {study_file} --out {folder} --aggregate-only")
        return
    if aggregate_only:
        check_finished_cells(study, folder)
        data = write_study_table(study, folder)
    else:
        run_study(study, folder, progress=progress, log=typer.echo)
        data = json.loads((folder / "study.json").read_text(encoding="utf-8"))
    Console().print(render_terminal(data))
    typer.echo(f"{finished_summary(study, folder)}; every column: {folder / 'table.md'}")
    statuses = [read_cell_status(folder, cell) for cell in study.cells]
    failed = sum(1 for status in statuses if status is not None and status.get("status") != "ok")
    if failed:  # exit status 1, so that scripts and schedulers notice
        typer.echo(f"sagerl study: {failed} of {len(statuses)} runs failed (errors above)", err=True)
        raise typer.Exit(1)
