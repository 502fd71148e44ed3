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
    jobs: int = typer.Option(
        1,
        "--jobs",
        "-j",
        min=1,
        help="Cells run at once, each in its own process with the study's torch threads (threads: 1 by "
        "default; the same results whatever --jobs; 2 on a 2-core machine halves the time of tiny-model studies).",
    ),
) -> None:
    """Run a study cell by cell (resumable; failed cells reported) and write one table with 95% CIs over seeds."""
    import json
    import time

    from rich.console import Console

    from sagerl.study import cell_commands, check_finished_cells, reference_commands, run_study, study_folder
    from sagerl.study.folders import read_cell_status
    from sagerl.study.spec import load_studies
    from sagerl.study.table import finished_summary, render_terminal, write_study_table

    studies = load_studies(study_file, check_models=not dry_run)
    folders = [study_folder(study, out) for study in studies]
    for study, folder in zip(studies, folders, strict=True):  # every setting is checked before any trains
        check_finished_cells(study, folder)
    if dry_run:
        for study, folder in zip(studies, folders, strict=True):
            for command in reference_commands(study, folder):
                typer.echo(command)
            for cell in study.cells:
                for command in cell_commands(study, folder, cell):
                    typer.echo(command)
        base = folders[0] if studies[0].setting is None else folders[0].parent
        typer.echo(f"sagerl study {study_file} --out {base} --aggregate-only")
        return
    console = Console()
    started = time.perf_counter()
    failed = total = 0
    for study, folder in zip(studies, folders, strict=True):
        if study.setting is not None:
            typer.echo(f"== setting {study.setting} ({study.model or 'embedded model'}): {folder}")
        if aggregate_only:
            data = write_study_table(study, folder)
        else:
            run_study(study, folder, progress=progress, log=typer.echo, jobs=jobs)
            data = json.loads((folder / "study.json").read_text(encoding="utf-8"))
        console.print(render_terminal(data))  # fits the terminal; table.md has the same, as markdown
        if (folder / "paired.md").is_file():
            typer.echo((folder / "paired.md").read_text(encoding="utf-8"))
        if (folder / "frontier.md").is_file():
            typer.echo((folder / "frontier.md").read_text(encoding="utf-8"))
        typer.echo(f"{finished_summary(study, folder)}; every column: {folder / 'table.md'}")
        statuses = [read_cell_status(folder, cell) for cell in study.cells]
        failed += sum(1 for status in statuses if status is not None and status.get("status") != "ok")
        total += len(statuses)
    if len(studies) > 1 and not aggregate_only:
        typer.echo(
            f"sagerl study: {len(studies)} settings, {total} runs, {time.perf_counter() - started:.0f} s"
        )
    if failed:  # exit status 1, so that scripts and schedulers notice
        typer.echo(f"sagerl study: {failed} of {total} runs failed (errors above)", err=True)
        raise typer.Exit(1)
