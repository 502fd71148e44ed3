"""``sagerl planted``: the planted task's shipped models (list, verify) and building one (for a changed task)."""

from __future__ import annotations

import typer

from sagerl.cli.app import app

planted_app = typer.Typer(
    no_args_is_help=True,
    help="The planted task's shipped reference and teacher models: list and verify them, or build one.",
)
app.add_typer(planted_app, name="planted")


@planted_app.command("list")
def list_command() -> None:
    """The shipped planted models: name, role, build seed, SHA-256 of the weights, measured strategy shares."""
    import json

    from sagerl.tasks.planted_model import REPORT_FILE, SHIPPED_DIR, read_manifest

    manifest = read_manifest()
    machine = manifest["built_with"]
    typer.echo(
        f"{len(manifest['models'])} models in {SHIPPED_DIR} (default build {manifest['default_build']}); "
        f"built with torch {machine['torch']}, {machine['threads']} thread, on {machine['cpu']}"
    )
    for name, entry in manifest["models"].items():
        report = json.loads((SHIPPED_DIR / name / REPORT_FILE).read_text(encoding="utf-8"))
        shares = report["measured"]["all"]
        typer.echo(
            f"{name:24s} seed {entry['build_seed']}  weights {entry['files']['model.safetensors'][:12]}  "
            f"head {shares.get('head', 0):.3f} tail {shares.get('tail', 0):.3f}"
        )


@planted_app.command("verify")
def verify_command() -> None:
    """Check every shipped file against its SHA-256 in the manifest (exit status 2 and the file on a mismatch)."""
    from sagerl.tasks.planted_model import read_manifest, shipped_planted_model

    names = list(read_manifest()["models"])
    for name in names:
        shipped_planted_model(name)
    typer.echo(f"{len(names)} shipped planted models: every file matches its SHA-256")


@planted_app.command("build")
def build_command(
    role: str = typer.Argument(..., help="reference, reference-10 or teacher."),
    out: str = typer.Option(..., "--out", "-o", help="New model folder (a Hugging Face model folder)."),
    build_seed: int = typer.Option(1, "--build-seed", help="The build seed (the shipped builds b1-b3: 1-3)."),
    check: bool = typer.Option(
        False,
        "--check",
        help="Compare the new files with the shipped build of the same role and seed (native kernels), or "
        "with the canonical build recorded in sagerl.kernels (canonical kernels).",
    ),
    kernels: str = typer.Option(
        "canonical",
        "--kernels",
        help="CPU kernels: canonical (capped at AVX2: the same bytes on every x86-64 CPU with AVX2) or native "
        "(the shipped builds were made natively on an AMD EPYC with AVX-512 BF16).",
    ),
) -> None:
    """Build one planted model deterministically (1 torch thread, canonical kernels by default), about 2-5
    min; with --check, say whether it equals the recorded build (exit status 1 if not)."""
    from pathlib import Path

    from sagerl.errors import ConfigError
    from sagerl.kernels import CANONICAL, CANONICAL_BUILDS, apply, check_mode
    from sagerl.tasks.planted_model import MIXES

    check_mode(kernels)
    if role not in MIXES:
        raise ConfigError(f"unknown planted model role {role!r}; expected one of {sorted(MIXES)}")
    if Path(out).exists():
        raise ConfigError(f"{out} exists: sagerl planted build writes a new folder (--out)")
    mode = apply(kernels)  # before torch loads (sagerl.kernels)
    from sagerl.tasks.planted_model import build_planted_model, file_sha256, read_manifest

    try:
        folder = build_planted_model(role, out, build_seed=build_seed)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    typer.echo(
        f"built {folder} ({mode} kernels): model.safetensors {file_sha256(Path(folder) / 'model.safetensors')}"
    )
    if not check:
        return
    if mode == CANONICAL:
        recorded = CANONICAL_BUILDS.get(f"{role}/{build_seed}")
        if recorded is None:
            typer.echo(
                f"no canonical build of {role} with build seed {build_seed} is recorded to compare with"
            )
            return
        differ = [f for f, h in recorded["files"].items() if file_sha256(Path(folder) / f) != h]
        if differ:
            typer.echo(
                f"differs from the recorded canonical build in {', '.join(differ)} (recorded on "
                f"{recorded['cpu']}): this CPU's canonical kernels round otherwise; please report it"
            )
            raise typer.Exit(1)
        typer.echo(f"identical to the recorded canonical build (recorded on {recorded['cpu']})")
        return
    manifest = read_manifest()
    shipped = [
        (name, e)
        for name, e in manifest["models"].items()
        if e["role"] == role and e["build_seed"] == build_seed
    ]
    if not shipped:
        typer.echo(f"no shipped build of {role} with build seed {build_seed} to compare with")
        return
    name, entry = shipped[0]
    differ = [f for f, h in entry["files"].items() if file_sha256(Path(folder) / f) != h]
    if differ:
        typer.echo(
            f"differs from the shipped {name} in {', '.join(differ)} (built on {manifest['built_with']['cpu']}; "
            "a build reproduces on the same kind of CPU and torch only)"
        )
        raise typer.Exit(1)
    typer.echo(f"identical to the shipped {name} (every file's SHA-256)")
