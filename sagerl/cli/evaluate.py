"""``sagerl eval`` and ``sagerl compare``."""

from __future__ import annotations

import typer

from sagerl.cli.app import app, split_list


@app.command("eval")
def eval_command(
    dataset: str = typer.Option(
        ...,
        "--dataset",
        "-d",
        help="Comma-separated named sets (math500, aime24, aime25, amc23, gsm8k, kk, arith) or JSONL paths.",
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        "-m",
        help="Model path or hub id, or a shipped planted model (planted-reference, planted-teacher-b2; sagerl planted list). Default: the embedded SmolLM2-135M-Instruct.",
    ),
    n: int = typer.Option(
        16, "-n", "--num-samples", help="Samples per problem; pass@k for k = 1, 2, 4, ..., n."
    ),
    limit: int | None = typer.Option(None, "--limit", help="Only the first N problems of each dataset."),
    max_new_tokens: int = typer.Option(512, "--max-new-tokens", help="Completion length limit, in tokens."),
    out: str | None = typer.Option(
        None,
        "--out",
        "-o",
        help="Run folder (default runs/eval-<model>-<time>). Rerun with the same folder to resume.",
    ),
    data_dir: str | None = typer.Option(
        None, "--data-dir", help="Folder of the dataset JSONL files (else $SAGERL_DATA_DIR)."
    ),
    temperature: float = typer.Option(1.0, "--temperature", help="Sampling temperature; 0 = greedy."),
    top_p: float = typer.Option(1.0, "--top-p", help="Nucleus sampling mass in (0, 1]."),
    seed: int = typer.Option(
        0, "--seed", help="Run seed (each sample's seed derives from it and the sample's identity)."
    ),
    backend: str = typer.Option(
        "hf",
        "--backend",
        help="hf (transformers, CPU or GPU), static (hf's samples by sagerl's static decode loop: Llama family, "
        "CPU; 1.2x faster in float32, 1.45x in bfloat16 on the demo's evaluation: docs/evaluate.md) or vllm (its own environment: make setup-vllm; docs/vllm.md).",
    ),
    vllm_arg: list[str] = typer.Option(
        [],
        "--vllm-arg",
        help="KEY=VALUE passed to vllm.LLM (repeatable; VALUE read as YAML), e.g. gpu_memory_utilization=0.8.",
    ),
    batch_size: int | None = typer.Option(
        None,
        "--batch-size",
        help="Sequences per generation batch (default: 64 on a CPU, 256 on a GPU and with --backend static).",
    ),
    few_shot: int | None = typer.Option(
        None, "--few-shot", help="Few-shot examples per prompt (default: per dataset)."
    ),
    dtype: str = typer.Option(
        "auto",
        "--dtype",
        help="auto (bfloat16 where the CPU or GPU has bfloat16 matrix units, else float32), float32, bfloat16, "
        "float16.",
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    kernels: str | None = typer.Option(
        None,
        "--kernels",
        help="CPU kernels: canonical (capped at AVX2, float32 for auto: the same samples on every x86-64 CPU "
        "with AVX2) or native. Default: canonical for a planted model, native otherwise.",
    ),
) -> None:
    """Sample n completions per problem and report unbiased pass@k with 95% bootstrap CIs."""
    from datetime import datetime
    from pathlib import Path

    from sagerl.kernels import apply, default_mode

    apply(kernels or default_mode(model))  # before torch loads (sagerl.kernels)
    from rich.console import Console

    from sagerl.eval.runner import PLOT_FILE, evaluate, model_identity
    from sagerl.eval.samples import SAMPLES_FILE

    console = Console()
    if out is None:
        name = Path(model_identity(model)).name or "model"
        out = str(Path("runs") / f"eval-{name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}")
    results = evaluate(
        model,
        split_list(dataset),
        n=n,
        out=out,
        limit=limit,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
        data_dir=data_dir,
        backend=backend,
        batch_size=batch_size,
        few_shot=few_shot,
        progress=progress,
        dtype=dtype,
        vllm_args=parse_vllm_args(vllm_arg),
        on_start=lambda folder: typer.echo(f"run folder: {folder}  (rerun with --out {folder} to resume)"),
    )
    console.print(_results_table(results))
    meta = results["meta"]
    typer.echo(
        f"{meta['samples_generated_this_call']} samples generated now, {meta['samples_total']} in total, "
        f"{meta['elapsed_s_this_call']:.1f} s"
    )
    for label, fname in (("samples", SAMPLES_FILE), ("results", "results.json"), ("plot", PLOT_FILE)):
        typer.echo(f"{label}: {Path(out) / fname}")


def parse_vllm_args(items: list[str]) -> dict:
    """``--vllm-arg KEY=VALUE`` options as a dict (values parsed as YAML: 0.8, true, null...).

    Raises:
        ConfigError: an item without ``=`` or with an empty key.
    """
    import yaml

    from sagerl.errors import ConfigError

    parsed = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--vllm-arg {item!r}: expected KEY=VALUE, e.g. gpu_memory_utilization=0.8")
        parsed[key.strip()] = yaml.safe_load(value) if value.strip() else None
    return parsed


def _results_table(results: dict):
    """The results of one eval run as a :class:`sagerl.tables.FittedTable` (fits the terminal)."""
    from sagerl.tables import Estimate, FittedTable

    ks = results["meta"]["ks"]
    rows = list(results["datasets"].items())
    if len(rows) > 1:
        rows.append(("average", results["average"]))
    table_rows = []
    for name, entry in rows:
        cells = [str(entry["num_problems"])]
        for k in ks:
            lo, hi = entry["ci"][f"pass@{k}"]
            cells.append(Estimate(100 * entry[f"pass@{k}"], 100 * lo, 100 * hi))
        table_rows.append((name, cells))
    return FittedTable(
        f"pass@k (%) [95% bootstrap CI], n={results['meta']['n']}",
        "dataset",
        ["problems", *(f"pass@{k}" for k in ks)],
        table_rows,
    )


@app.command("compare")
def compare_command(
    run_dirs: list[str] = typer.Argument(..., help="Run folders written by `sagerl eval`."),
    out: str | None = typer.Option(
        None, "--out", "-o", help="Write the overlaid pass@k plot to this PNG file (default: no plot)."
    ),
    k: str | None = typer.Option(
        None, "--k", help="Comma-separated budgets for the table (default: 1 and the largest common k)."
    ),
) -> None:
    """Compare several eval runs: a pass@k table, and with --out an overlaid pass@k plot (reads results.json)."""
    from rich.console import Console

    from sagerl.errors import ConfigError
    from sagerl.eval.compare import compare_runs, render_table

    ks = None
    if k:
        try:
            ks = [int(x) for x in split_list(k)]
        except ValueError as exc:
            raise ConfigError(f"--k must be comma-separated integers, got {k!r}") from exc
    comparison = compare_runs(run_dirs, out=out, ks=ks)
    console = Console()
    console.print(render_table(comparison))
    if comparison["plot"] is not None:
        typer.echo(f"plot: {comparison['plot']}")
    else:
        typer.echo("(--out FILE.png writes the overlaid pass@k plot)")
