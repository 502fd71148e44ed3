"""``sagerl study``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from sagerl.cli.app import app

if TYPE_CHECKING:
    from sagerl.study.spec import Study


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
    until: str | None = typer.Option(
        None,
        "--until",
        help="Start no run after this time: a clock time today (HH:MM, local) or a duration from now (90m, 2h, "
        "1h30m). Runs under way finish; the rest wait for the next call (a study over several sittings).",
    ),
    finish_by: str | None = typer.Option(
        None,
        "--finish-by",
        help="As --until, but the time the study should be done by: no run starts after it less the longest "
        "run this study has finished (its cell.json), so the last runs end by then (the machine's end).",
    ),
    archive: str | None = typer.Option(
        None,
        "--archive",
        help="Then write the study folder's results without weights (finished runs, reference, aggregate) to "
        "this .tar.gz; `tar xzf FILE -C <folder's parent>` restores them and a rerun skips what they hold.",
    ),
) -> None:
    """Run a study cell by cell (resumable; failed cells reported) and write one table with 95% CIs over seeds."""
    import json
    import time

    from rich.console import Console

    from sagerl.errors import ConfigError
    from sagerl.study import cell_commands, check_finished_cells, reference_commands, run_study, study_folder
    from sagerl.study.archive import archive_study
    from sagerl.study.folders import read_cell_status
    from sagerl.study.spec import load_studies
    from sagerl.study.table import finished_summary, render_terminal, write_study_table

    if until is not None and finish_by is not None:
        raise ConfigError(
            "--until and --finish-by: give one (--until: when runs stop starting; --finish-by: when they end)"
        )
    deadline = None if until is None else deadline_from(until)
    end = None if finish_by is None else deadline_from(finish_by, flag="--finish-by")
    studies = load_studies(study_file, check_models=not dry_run)
    if archive is not None and len(studies) > 1:
        raise ConfigError(
            f"--archive: {study_file} has {len(studies)} settings; archive one study file's folder"
        )
    folders = [study_folder(study, out) for study in studies]
    for study, folder in zip(studies, folders, strict=True):  # every setting is checked before any trains
        check_finished_cells(study, folder, runs_here=not aggregate_only)
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
            if end is not None:
                deadline = start_deadline(study, folder, end, log=typer.echo)
            run_study(study, folder, progress=progress, log=typer.echo, jobs=jobs, until=deadline)
            data = json.loads((folder / "study.json").read_text(encoding="utf-8"))
        console.print(render_terminal(data))  # fits the terminal; table.md has the same, as markdown
        if (folder / "paired.md").is_file():
            typer.echo((folder / "paired.md").read_text(encoding="utf-8"))
        if (folder / "frontier.md").is_file():
            typer.echo((folder / "frontier.md").read_text(encoding="utf-8"))
        typer.echo(f"{finished_summary(study, folder)}; every column: {folder / 'table.md'}")
        if archive is not None:
            written = archive_study(study, folder, archive)
            typer.echo(
                f"archive: {written.path} ({written.finished} finished runs, {written.unfinished} not in it; "
                f"{written.files} files, {written.size / 1e6:.1f} MB)"
            )
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


def start_deadline(study: Study, folder: Path, end: float, log: Callable[[str], object] = print) -> float:
    """``--finish-by``'s last start time for ``study``: ``end`` less the longest run the study has finished in
    ``folder`` (:func:`sagerl.study.runner.longest_run_s`); ``end`` itself when none has finished (nothing to
    go by: said in the log)."""
    import time

    from sagerl.study.runner import longest_run_s

    longest = longest_run_s(study, folder)
    if longest is None:
        log("--finish-by: no finished run to time yet, so runs start until the time given")
        return end
    last = end - longest
    log(
        f"--finish-by {time.strftime('%H:%M', time.localtime(end))}: the longest finished run took {longest:,.0f} s, "
        f"so no run starts after {time.strftime('%H:%M', time.localtime(last))}"
    )
    return last


def deadline_from(text: str, now: float | None = None, flag: str = "--until") -> float:
    """``--until``'s time as seconds since the epoch: ``HH:MM`` is that clock time today (local; tomorrow if it
    has passed), a duration (``90m``, ``2h``, ``1h30m``, ``45s``) counts from ``now`` (default: the present).

    Raises:
        ConfigError: neither form: one line naming ``flag`` with the forms accepted.
    """
    import re
    import time
    from datetime import datetime, timedelta

    from sagerl.errors import ConfigError

    now = time.time() if now is None else now
    text = text.strip()
    clock = re.fullmatch(r"([01]?\d|2[0-3]):([0-5]\d)", text)
    if clock:
        today = datetime.fromtimestamp(now)
        at = today.replace(hour=int(clock[1]), minute=int(clock[2]), second=0, microsecond=0)
        if at.timestamp() <= now:
            at += timedelta(days=1)
        return at.timestamp()
    duration = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", text)
    if text and duration:
        hours, minutes, seconds = (int(g or 0) for g in duration.groups())
        return now + 3600 * hours + 60 * minutes + seconds
    raise ConfigError(
        f"{flag} {text!r}: give a clock time (HH:MM, e.g. 19:30) or a duration (90m, 2h, 1h30m)"
    )
