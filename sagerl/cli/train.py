"""``sagerl train``."""

from __future__ import annotations

import typer

from sagerl.cli.app import app


@app.command("train")
def train_command(
    preset: str = typer.Option("grpo+branch", "--preset", "-p", help="Paper variant; see --list-presets."),
    output_dir: str | None = typer.Option(
        None,
        "--output-dir",
        "-o",
        help="Run folder (default runs/<preset>). Rerun the same command to resume.",
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        "-m",
        help="HF path or id, or a shipped planted model (planted-reference, planted-teacher-b2; sagerl planted list); default: embedded SmolLM2.",
    ),
    dataset: str | None = typer.Option(
        None, "--dataset", "-d", help="Named set or JSONL (default: arith_train)."
    ),
    data_dir: str | None = typer.Option(
        None, "--data-dir", help="Folder of the named sets (else $SAGERL_DATA_DIR)."
    ),
    max_steps: int | None = typer.Option(None, "--max-steps", help="Optimizer steps."),
    dtype: str | None = typer.Option(
        None,
        "--dtype",
        help="auto (default: bfloat16 autocast where the CPU or GPU has bfloat16 matrix units, else float32), "
        "float32, bfloat16.",
    ),
    config_files: list[str] = typer.Option(
        [],
        "--config",
        "-c",
        help="YAML file of config keys (as --set takes), applied after the preset and before --set "
        "(repeatable; e.g. recipes/trl/paper.yaml).",
    ),
    overrides: list[str] = typer.Option(
        [],
        "--set",
        "-s",
        help="Override any config key: --set beta=0.02 --set learning_rate=1e-6 (repeatable).",
    ),
    resume: bool | None = typer.Option(
        None, "--resume/--no-resume", help="Resume from the last checkpoint (default: when one exists)."
    ),
    list_presets_: bool = typer.Option(False, "--list-presets", help="List the presets and exit."),
    kernels: str | None = typer.Option(
        None,
        "--kernels",
        help="CPU kernels: canonical (capped at AVX2, float32 for auto: the same run on every x86-64 CPU with "
        "AVX2) or native. Default: canonical for a planted model, native otherwise.",
    ),
    dry_run_: bool = typer.Option(
        False,
        "--dry-run",
        help="Check everything (config, model config and tokenizer, dataset), print the config.yaml "
        "it would write, and exit without training.",
    ),
) -> None:
    """Train a model with SAGE (or a baseline) on TRL; writes config.yaml, metrics.jsonl, checkpoints, model/."""
    if not list_presets_:
        from sagerl.kernels import apply, default_mode

        apply(kernels or default_mode(_requested_model(model, config_files, overrides)))  # before torch loads
    from sagerl.train.presets import GUIDE_SUFFIXES, list_presets
    from sagerl.train.run import dry_run, parse_overrides, read_config_file, train

    if list_presets_:
        for name, description in list_presets().items():
            typer.echo(f"{name:14s} {description}")
        typer.echo(
            f"METHOD+GUIDE   a preset without a guide, plus a guide ({', '.join(GUIDE_SUFFIXES)}): "
            "e.g. w-reinforce+branch"
        )
        return
    values: dict = {}
    for path in config_files:
        values.update(read_config_file(path))
    values.update(parse_overrides(overrides))
    for key, value in (
        ("model", model),
        ("dataset", dataset),
        ("data_dir", data_dir),
        ("max_steps", max_steps),
        ("dtype", dtype),
    ):
        if value is not None:
            values[key] = value
    if dry_run_:
        typer.echo(dry_run(preset, values, output_dir), nl=False)
        return
    final = train(preset, values, output_dir, resume=resume)
    typer.echo(f"model: {final}")


def _requested_model(model: str | None, config_files: list[str], overrides: list[str]) -> str | None:
    """The model a train command names (``--model``, else the last ``--set model=``, else a ``--config``
    file's ``model``), read without importing torch, for the default kernel mode; None when none names it
    (the presets' embedded SmolLM2). A value that does not read is left to the full parse's error."""
    import yaml

    if model is not None:
        return model
    found = None
    for path in config_files:
        try:
            data = yaml.safe_load(open(path, encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(data, dict) and data.get("model") is not None:
            found = str(data["model"])
    for item in overrides:
        key, sep, value = item.partition("=")
        if sep and key.strip() == "model":
            found = value.strip()
    return found
