"""``make demo``: SAGE on the embedded default, offline, in minutes on a CPU.

1. pass@k of the embedded SmolLM2-135M-Instruct on held-out arithmetic (``arith``), n samples per problem;
2. ``grpo+branch`` training on the arithmetic training set (``arith_train``) for a few steps;
3. pass@k of the trained model on the same held-out problems;
4. a before/after table (``sagerl compare``) and an overlaid pass@k plot;
5. on the planted-strategy task, GRPO against the best exploration method (2 seeds each): how many of the
   problems only the rare strategy solves each still solves (:mod:`sagerl.demo_planted`, 2-3 minutes).

Everything goes to ``runs/demo`` (``--out``); rerunning resumes every stage where it stopped. The sizes
below are chosen to finish in under 15 minutes on 2 CPU cores; ``--steps``, ``--problems`` and ``-n``
trade time for precision.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.console import Console

PRESET = "grpo+branch"
STEPS = 12
"""Training steps (optimizer steps); ``--steps``."""
PROBLEMS = 32
"""Held-out arithmetic problems evaluated before and after training; ``--problems``."""
SAMPLES = 8
"""Samples per problem (pass@1 ... pass@SAMPLES); ``-n``."""
MAX_NEW_TOKENS = 96
LEARNING_RATE = 1e-5
COMPLETIONS_PER_STEP = 8
"""Completions per optimizer step: one micro-batch, no accumulation. With the preset's 8 rollouts per
prompt (``num_generations``) that is 1 prompt x 8 rollouts; the README states the same (a test checks)."""


def train_overrides(steps: int, max_new_tokens: int, learning_rate: float, progress: bool = True) -> dict:
    """The ``sagerl train`` overrides of the demo's training stage."""
    return {
        "max_steps": steps,
        "per_device_train_batch_size": COMPLETIONS_PER_STEP,
        "gradient_accumulation_steps": 1,
        "learning_rate": learning_rate,
        "max_completion_length": max_new_tokens,
        "save_steps": max(1, steps // 2),
        "disable_tqdm": not progress,
    }


def prompts_and_rollouts_per_step(overrides: dict) -> tuple[int, int]:
    """(prompts, rollouts per prompt) of one optimizer step, from the resolved training config."""
    from sagerl.train.run import resolve_config

    trainer = resolve_config(PRESET, overrides).trainer
    completions = trainer["per_device_train_batch_size"] * trainer["gradient_accumulation_steps"]
    return completions // trainer["num_generations"], trainer["num_generations"]


def run_demo(
    out: Path,
    steps: int,
    problems: int,
    n: int,
    max_new_tokens: int,
    learning_rate: float,
    progress: bool = True,
) -> dict:
    """Run the four stages; returns the comparison dict of :func:`sagerl.eval.compare_runs`."""
    from sagerl.eval import compare_runs, evaluate
    from sagerl.eval.compare import render_table
    from sagerl.models import embedded_model_dir
    from sagerl.train.run import train

    console = Console(stderr=False)
    timings = {}
    start = time.time()
    console.rule(f"[bold]sagerl demo: SAGE ({PRESET}) on SmolLM2-135M-Instruct, built-in arithmetic")
    embedded_model_dir()
    eval_kwargs = dict(
        n=n, limit=problems, max_new_tokens=max_new_tokens, temperature=1.0, seed=0, progress=progress
    )

    console.print(f"[bold]1/4[/] pass@k before training: {problems} held-out problems x {n} samples")
    t = time.time()
    evaluate(None, ["arith"], out=out / "base", **eval_kwargs)
    timings["eval before"] = time.time() - t

    overrides = train_overrides(steps, max_new_tokens, learning_rate, progress)
    prompts, rollouts = prompts_and_rollouts_per_step(overrides)
    console.print(
        f"[bold]2/4[/] training {PRESET} for {steps} steps "
        f"({prompts} prompt{'s' if prompts != 1 else ''} x {rollouts} rollouts per step)"
    )
    t = time.time()
    model = train(PRESET, overrides, output_dir=out / "train")
    timings["training"] = time.time() - t

    console.print("[bold]3/4[/] pass@k after training, same problems and seeds")
    t = time.time()
    evaluate(str(model), ["arith"], out=out / PRESET, **eval_kwargs)
    timings["eval after"] = time.time() - t

    ks = [k for k in (1, 2, 4, 8, 16, 32, 64, 128, 256) if k <= n]
    comparison = compare_runs([out / "base", out / PRESET], out=out / "passk_before_after.png", ks=ks)
    console.print(render_table(comparison))

    from sagerl.demo_planted import BEST, run_planted_comparison

    console.print(
        f"[bold]4/4[/] planted-strategy task: grpo against {BEST}, 2 seeds each (the rare support each keeps)"
    )
    t = time.time()
    run_planted_comparison(out / "planted", log=console.print)
    timings["planted comparison"] = time.time() - t
    console.print(
        "times: "
        + ", ".join(f"{k} {v / 60:.1f} min" for k, v in timings.items())
        + f", total {(time.time() - start) / 60:.1f} min"
    )
    console.print(f"plot: {comparison['plot']}   training metrics: {out / 'train' / 'metrics.jsonl'}")
    return comparison


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="sagerl demo: before/after pass@k of SAGE on the embedded model"
    )
    parser.add_argument("--out", type=Path, default=Path("runs/demo"))
    parser.add_argument("--steps", type=int, default=STEPS, help="training steps")
    parser.add_argument("--problems", type=int, default=PROBLEMS, help="held-out problems to evaluate")
    parser.add_argument("-n", type=int, default=SAMPLES, help="samples per problem")
    parser.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS)
    parser.add_argument("--learning-rate", type=float, default=LEARNING_RATE)
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    from sagerl.cli.warning_filters import silence_harmless_warnings
    from sagerl.errors import SagerlError

    silence_harmless_warnings()

    try:
        run_demo(
            args.out,
            args.steps,
            args.problems,
            args.n,
            args.max_new_tokens,
            args.learning_rate,
            progress=not args.no_progress,
        )
    except SagerlError as exc:
        raise SystemExit(f"sagerl: error: {exc}") from None


if __name__ == "__main__":
    main()
