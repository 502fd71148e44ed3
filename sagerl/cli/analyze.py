"""``sagerl analyze support|patterns|branching|report`` and ``sagerl plot``."""

from __future__ import annotations

import warnings
from pathlib import Path

import typer

from sagerl.cli.app import app, split_list

analyze_app = typer.Typer(
    no_args_is_help=True,
    help="Analyse eval runs: empirical support, reasoning patterns, branching tokens, a report.",
)
app.add_typer(analyze_app, name="analyze")

OUT_HELP = "Output folder: analysis.json (every number), figures, report.md."
CLASSIFIER_HELP = (
    "Pattern labels: auto (recorded strategies if every sample has one, else lexicon), lexicon, recorded."
)
INTERSECT_HELP = (
    "Compare only the problems every run has (and the smallest n) instead of failing on a mismatch."
)


def _load_runs(paths: list[str]):
    """Load eval runs; warnings (a truncated last line) are printed as 'sagerl: warning: ...'."""
    from sagerl.analysis.runs import load_eval_run, set_unique_labels

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runs = [load_eval_run(p) for p in paths]
    for w in caught:
        typer.echo(f"sagerl: warning: {w.message}", err=True)
    set_unique_labels(runs)
    return runs


def _judge(model: str | None, backend: str):
    if model is None:
        return None
    from sagerl.analysis.judge import Judge

    return Judge.from_model(model, backend=backend)


def _classifier(classifier: str, judge) -> str:
    return "judge" if judge is not None else classifier


def _dataset_files(pairs: list[str]) -> dict[str, str]:
    from sagerl.errors import ConfigError

    out = {}
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ConfigError(f"--dataset-file {pair!r}: expected NAME=PATH")
        out[name.strip()] = path.strip()
    return out


def _pct(value, ci=None, signed=False) -> str:
    from sagerl.analysis.report import _pct as pct

    return pct(value, ci, signed)


def _print_support(support: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    from sagerl.analysis.support import CATEGORIES

    console = Console()
    dropped = {ds: k for ds, k in support["dropped_problems"].items() if k}
    if dropped:
        typer.echo(f"--intersect: compared the common problems; dropped {dropped} (per dataset)")
    table = Table(title=f"empirical support vs {support['base']} (n={support['n']})")
    for col in ("run", "problems", *(c.replace("_", " ") for c in CATEGORIES)):
        table.add_column(col, justify="right" if col != "run" else "left")
    for run, tax in support["taxonomy"].items():
        t = tax["total"]
        table.add_row(run, str(t["num_problems"]), *(str(t["counts"][c]) for c in CATEGORIES))
    console.print(table)
    for run, p in support["passk"].items():
        ks = p["ks"]
        table = Table(title=f"pass@k({run}) − pass@k({support['base']}), points, paired 95% CI")
        for k in ks:
            table.add_column(f"pass@{k}", justify="right")
        table.add_column("crossover k", justify="right")
        avg = p["average"]
        table.add_row(
            *(_pct(avg["difference"][f"pass@{k}"], avg["ci"][f"pass@{k}"], True) for k in ks),
            str(avg["crossover_k"] or "–"),
        )
        console.print(table)


def _print_patterns(patterns: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    from sagerl.analysis.patterns import shown_labels

    shares = patterns["shares"]
    first = next(iter(shares.values()))
    population = "correct" if "correct" in first else "all"
    table = Table(title=f"reasoning patterns: share of {population} completions (%), {first['classifier']}")
    table.add_column("pattern")
    for run in shares:
        table.add_column(run, justify="right")
    for lab in shown_labels(shares, population):
        cells = []
        for s in shares.values():
            e = s[population]["shares"].get(lab)
            cells.append(_pct(e["share"], e["ci"]) if e else "0.0")
        table.add_row(lab.replace("_", " "), *cells)
    Console().print(table)


def _done(out: str, names: list[str]) -> None:
    for name in names:
        typer.echo(f"{name}: {Path(out) / name}")


@analyze_app.command("support")
def support_command(
    base: str = typer.Argument(..., help="Eval run folder of the base model (the reference)."),
    runs: list[str] = typer.Argument(..., help="Eval run folders to compare with the base."),
    out: str = typer.Option(..., "--out", "-o", help=OUT_HELP),
    intersect: bool = typer.Option(False, "--intersect", help=INTERSECT_HELP),
    classifier: str = typer.Option("auto", "--classifier", help=CLASSIFIER_HELP),
    ngram: int = typer.Option(2, "--ngram", help="n of distinct-n (word n-grams of correct completions)."),
) -> None:
    """Empirical support vs BASE: solved-problem taxonomy, paired pass@k differences, solution diversity."""
    from sagerl.analysis.output import update_analysis_json
    from sagerl.analysis.support import analyze_support

    loaded = _load_runs([base, *runs])
    support = analyze_support(
        loaded[0], loaded[1:], out, intersect=intersect, classifier=classifier, ngram=ngram
    )
    update_analysis_json(out, "support", support)
    _print_support(support)
    _done(out, ["analysis.json", support["figure"]])


@analyze_app.command("patterns")
def patterns_command(
    runs: list[str] = typer.Argument(
        ..., help="Eval run folders (the first is the reference of the differences)."
    ),
    out: str = typer.Option(..., "--out", "-o", help=OUT_HELP),
    classifier: str = typer.Option("auto", "--classifier", help=CLASSIFIER_HELP),
    judge: str | None = typer.Option(
        None,
        "--judge",
        help="Label with this LLM (path or hub id) and a fixed rubric instead of the lexicon.",
    ),
    judge_backend: str = typer.Option("hf", "--judge-backend", help="Sampler of the judge: hf or vllm."),
    among: str = typer.Option(
        "correct,all",
        "--among",
        help="Populations: correct and/or all completions (a judge labels only these).",
    ),
    intersect: bool = typer.Option(False, "--intersect", help=INTERSECT_HELP),
) -> None:
    """Reasoning patterns: share of correct (and all) completions using each pattern, with CIs, per run."""
    from sagerl.analysis.output import update_analysis_json
    from sagerl.analysis.patterns import analyze_patterns

    loaded = _load_runs(runs)
    labeller = _judge(judge, judge_backend)
    patterns = analyze_patterns(
        loaded,
        out,
        classifier=_classifier(classifier, labeller),
        judge=labeller,
        among=split_list(among),
        intersect=intersect,
    )
    update_analysis_json(out, "patterns", patterns)
    _print_patterns(patterns)
    if "judge" in patterns:
        typer.echo(
            f"judge: {patterns['judge']['failures']} failed items, {patterns['judge']['unparsed']} unparsed answers (unlabeled)"
        )
    _done(out, ["analysis.json", patterns["figure"]])


def _branching_options(preset, gamma, tau, q_min, q_max, batch_size, limit, data_dir, dataset_file) -> dict:
    return dict(
        preset=preset,
        gamma=gamma,
        tau=tau,
        q_min=q_min,
        q_max=q_max,
        batch_size=batch_size,
        limit=limit,
        data_dir=data_dir,
        dataset_files=_dataset_files(dataset_file),
    )


PRESET_HELP = "Preset (or a training run folder, read from its config.yaml) giving γ, τ, q_min, q_max."


@analyze_app.command("branching")
def branching_command(
    run: str = typer.Argument(..., help="Eval run folder whose completions are re-scored."),
    model: str = typer.Option(
        ..., "--model", "-m", help="Model to re-score under (path, hub id or 'embedded')."
    ),
    out: str = typer.Option(..., "--out", "-o", help=OUT_HELP),
    preset: str = typer.Option("grpo+branch", "--preset", help=PRESET_HELP),
    gamma: float | None = typer.Option(None, "--gamma", help="Override γ."),
    tau: float | None = typer.Option(None, "--tau", help="Override τ (nats)."),
    q_min: float | None = typer.Option(None, "--q-min", help="Override q_min."),
    q_max: float | None = typer.Option(None, "--q-max", help="Override q_max."),
    batch_size: int = typer.Option(8, "--batch-size", help="Completions per forward pass."),
    limit: int | None = typer.Option(None, "--limit", help="Only the first N problems of each dataset."),
    data_dir: str | None = typer.Option(
        None, "--data-dir", help="Folder of the named sets (else $SAGERL_DATA_DIR)."
    ),
    dataset_file: list[str] = typer.Option(
        [], "--dataset-file", help="NAME=PATH: the JSONL a dataset of the run came from (repeatable)."
    ),
) -> None:
    """Branching tokens: re-score a run under a model; per-token entropy H_t and the branch guide's q."""
    from sagerl.analysis.branching import analyze_branching
    from sagerl.analysis.output import update_analysis_json

    (loaded,) = _load_runs([run])
    result = analyze_branching(
        loaded,
        model,
        out,
        **_branching_options(preset, gamma, tau, q_min, q_max, batch_size, limit, data_dir, dataset_file),
    )
    update_analysis_json(out, "branching", {loaded.label: result})
    c, i = result["correct"], result["incorrect"]
    typer.echo(
        f"{result['tokens']} tokens, {100 * result['share_above_tau']:.1f}% with H_t > τ = {result['guide']['tau']:g}; "
        f"mean H_t correct {c['mean_entropy'] if c['mean_entropy'] is None else round(c['mean_entropy'], 3)}, "
        f"incorrect {i['mean_entropy'] if i['mean_entropy'] is None else round(i['mean_entropy'], 3)}"
    )
    top = ", ".join(repr(t["token"]) for t in result["top_branching_tokens"][:10])
    typer.echo(f"top branching tokens: {top}")
    _done(out, ["analysis.json", result["files"]["histogram"], result["files"]["html"]])


@analyze_app.command("report")
def report_command(
    base: str = typer.Argument(..., help="Eval run folder of the base model (the reference)."),
    runs: list[str] = typer.Argument(..., help="Eval run folders to compare with the base."),
    out: str = typer.Option(..., "--out", "-o", help=OUT_HELP),
    model: str | None = typer.Option(
        None, "--model", "-m", help="Also re-score every run under this model (branching analysis)."
    ),
    classifier: str = typer.Option("auto", "--classifier", help=CLASSIFIER_HELP),
    judge: str | None = typer.Option(
        None, "--judge", help="Label patterns with this LLM instead of the lexicon."
    ),
    judge_backend: str = typer.Option("hf", "--judge-backend", help="Sampler of the judge: hf or vllm."),
    intersect: bool = typer.Option(False, "--intersect", help=INTERSECT_HELP),
    ngram: int = typer.Option(2, "--ngram", help="n of distinct-n."),
    preset: str = typer.Option("grpo+branch", "--preset", help=PRESET_HELP),
    gamma: float | None = typer.Option(None, "--gamma", help="Override γ."),
    tau: float | None = typer.Option(None, "--tau", help="Override τ (nats)."),
    q_min: float | None = typer.Option(None, "--q-min", help="Override q_min."),
    q_max: float | None = typer.Option(None, "--q-max", help="Override q_max."),
    batch_size: int = typer.Option(8, "--batch-size", help="Completions per forward pass (branching)."),
    limit: int | None = typer.Option(
        None, "--limit", help="Branching: only the first N problems of each dataset."
    ),
    data_dir: str | None = typer.Option(
        None, "--data-dir", help="Folder of the named sets (else $SAGERL_DATA_DIR)."
    ),
    dataset_file: list[str] = typer.Option(
        [], "--dataset-file", help="NAME=PATH of a dataset's JSONL (branching)."
    ),
) -> None:
    """Support + patterns (+ branching with --model) of BASE and RUNs: analysis.json, figures, report.md."""
    from sagerl.analysis.report import analyze_report

    loaded = _load_runs([base, *runs])
    labeller = _judge(judge, judge_backend)
    result = analyze_report(
        loaded[0],
        loaded[1:],
        out,
        model=model,
        classifier=_classifier(classifier, labeller),
        judge=labeller,
        intersect=intersect,
        ngram=ngram,
        branching_options=_branching_options(
            preset, gamma, tau, q_min, q_max, batch_size, limit, data_dir, dataset_file
        ),
    )
    _print_support(result["support"])
    _print_patterns(result["patterns"])
    _done(out, ["analysis.json", "report.md"])


@app.command("plot")
def plot_command(
    runs: list[str] = typer.Argument(..., help="Training run folders (sagerl train --output-dir)."),
    out: str = typer.Option(..., "--out", "-o", help="Output folder of the PNGs."),
) -> None:
    """Training curves from metrics.jsonl (reward, entropy, KL, q, clipping, length), runs overlaid."""
    from sagerl.analysis.curves import plot_curves

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        written = plot_curves(runs, out)
    for w in caught:
        typer.echo(f"sagerl: warning: {w.message}", err=True)
    for path in written:
        typer.echo(str(path))
