"""``sagerl import sage-eval|lighteval`` and ``sagerl export lighteval`` (:mod:`sagerl.interop`)."""

from __future__ import annotations

import typer

from sagerl.cli.app import app

import_app = typer.Typer(
    no_args_is_help=True,
    help="Turn other tools' evaluation files into sagerl evaluation folders (for compare and analyze support).",
)
export_app = typer.Typer(no_args_is_help=True, help="Write a sagerl evaluation in another tool's layout.")
app.add_typer(import_app, name="import")
app.add_typer(export_app, name="export")

DATASET_AS_HELP = (
    "SOURCE=SET: rename the source's dataset to a sagerl set and take that set's problem ids by position "
    "(repeatable), e.g. MATH-500=math500, so the folder lines up with a `sagerl eval` of the set."
)
DATA_DIR_HELP = "Folder of the sagerl sets' JSONL files for --dataset-as (else $SAGERL_DATA_DIR)."
NO_PLOT_HELP = "Draw passk.png in each folder, as sagerl eval does."


def _report(done: list[dict]) -> None:
    """One line per folder, the notes, and the one line on what the source cannot give."""
    from rich.console import Console

    from sagerl.cli.evaluate import _results_table

    console = Console()
    missing = set()
    for item in done:
        state = "written" if item["written"] else "kept (already imported)"
        results = item["results"]
        typer.echo(f"{item['folder']}: {state}, n={results['meta']['n']}, {', '.join(results['datasets'])}")
        for note in item["eval"].notes:
            typer.echo(f"sagerl: warning: {note}", err=True)
        missing.add(item["eval"].missing)
        if item["written"]:
            console.print(_results_table(results))
    for line in sorted(missing):
        typer.echo(f"not imported: {line}")


@import_app.command("sage-eval")
def import_sage_eval_command(
    file: str = typer.Argument(..., help="The SAGE authors' evaluation_results.json."),
    out: str = typer.Option(
        ..., "--out", "-o", help="Parent folder: one evaluation folder per checkpoint in it."
    ),
    seeds: str = typer.Option(
        "pool",
        "--seeds",
        help="pool: the seeds of a checkpoint are samples of one evaluation (n = seeds x k); separate: a folder "
        "per seed (n = k).",
    ),
    dataset_as: list[str] = typer.Option([], "--dataset-as", help=DATASET_AS_HELP),
    data_dir: str | None = typer.Option(None, "--data-dir", help=DATA_DIR_HELP),
    plot: bool = typer.Option(True, "--plot/--no-plot", help=NO_PLOT_HELP),
) -> None:
    """Import evaluation_results.json: unbiased pass@k for every k <= n with bootstrap CIs, per checkpoint."""
    from sagerl.interop.sage_eval import import_sage_eval

    _report(import_sage_eval(file, out, seeds=seeds, dataset_as=dataset_as, data_dir=data_dir, plot=plot))


@import_app.command("lighteval")
def import_lighteval_command(
    path: str = typer.Argument(
        ...,
        help="A lighteval results file (results/<model>/results_<date>.json, with its details written by "
        "--save-details) or a details folder (details/<model>/<date>/).",
    ),
    out: str = typer.Option(..., "--out", "-o", help="Parent folder: the evaluation folder goes in it."),
    dataset_as: list[str] = typer.Option([], "--dataset-as", help=DATASET_AS_HELP),
    data_dir: str | None = typer.Option(None, "--data-dir", help=DATA_DIR_HELP),
    plot: bool = typer.Option(True, "--plot/--no-plot", help=NO_PLOT_HELP),
) -> None:
    """Import a lighteval evaluation: per-problem counts from its details, unbiased pass@k with bootstrap CIs."""
    from sagerl.interop.lighteval import import_lighteval

    _report(import_lighteval(path, out, dataset_as=dataset_as, data_dir=data_dir, plot=plot))


@export_app.command("lighteval")
def export_lighteval_command(
    run_dir: str = typer.Argument(..., help="An evaluation folder (sagerl eval --out, or an import)."),
    out: str = typer.Option(
        ...,
        "--out",
        "-o",
        help="lighteval's --output-dir (the file goes to results/<model>/results_<date>.json in it), or a .json "
        "file path.",
    ),
    task: list[str] = typer.Option(
        [],
        "--task",
        help="DATASET=TASK: the lighteval task name of a dataset (repeatable; math500 is math_500).",
    ),
) -> None:
    """Write an evaluation as lighteval's results file (pass@k:k=K&n=N keys, _stderr as lighteval computes it)."""
    from sagerl.interop.lighteval import export_lighteval

    typer.echo(f"lighteval results: {export_lighteval(run_dir, out, task_names=task)}")
