"""``make demo``: SAGE on the embedded default, offline, in minutes on a CPU, with a gain larger than its noise.

1. pass@k of the embedded SmolLM2-135M-Instruct on held-out one-step arithmetic (``arith_l1``, 2 worked examples
   in each prompt), n samples per problem;
2. ``grpo+branch`` training on that level's training expressions (``arith_l1_train``) for a few steps;
3. pass@k of the trained model on the same held-out problems with the same seeds, then a before/after table
   (``sagerl compare``) with the paired difference per k (:func:`sagerl.analysis.support.paired_passk`: a
   bootstrap over problems, one draw for both runs) and an overlaid pass@k plot;
4. on the planted-strategy task, GRPO against the planted frontier's winner, PKPO with k annealed 8 -> 1 by a
   cosine (2 seeds each): how many of the problems only the rare strategy solves each still solves, and at what
   common pass@1 (:mod:`sagerl.demo_planted`).

The task is the real-LM study's (docs/real-lm.md): the base model solves about a quarter of its samples, so most
groups of 8 rollouts are mixed and every training step has a gradient; the learning rate and the step count are
the pilot's (lr 2e-5, 24 steps of 1 prompt x 8 rollouts: in the study every method's mean pass@1 over 3 seeds
went from 22% to 40-50%). Rollouts prefill each prompt once for its 8 rows (``share_generation_prefix``) and are
decoded by sagerl's static loop (``rollout_decoder: static``); both evaluations sample with the ``static`` backend
(:class:`sagerl.eval.static_sampler.StaticSampler`: the hf backend's draws by the same loop). Where the loop does
not apply (a GPU, another model family) training says why once and uses transformers' ``generate``.

Everything goes to ``runs/demo`` (``--out``); rerunning resumes every stage where it stopped. ``--steps``,
``--problems`` and ``-n`` trade time for precision.

The demo is a list of :class:`Stage` objects (:data:`STAGES`): each prints one heading line, runs with
one progress display of its own (third-party bars are off, :mod:`sagerl.cli.quiet`), and may print tables
when it is done (:class:`sagerl.tables.FittedTable`, which fits an 80-column terminal). A new stage is a
function that runs it, a function that returns its tables, and one more entry in :data:`STAGES`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

PRESET = "grpo+branch"
EVAL_DATASET = "arith_l1"
"""Held-out one-step arithmetic (the real-LM study's evaluation set)."""
TRAIN_DATASET = "arith_l1_train"
"""The same level's training expressions."""
FEW_SHOT = 2
"""Worked examples in each prompt, in training and in evaluation (the calibration's choice: 24% of the base
model's samples right, 64% of its groups of 8 mixed; docs/real-lm.md)."""
STEPS = 24
"""Training steps (optimizer steps); ``--steps``."""
PROBLEMS = 64
"""Held-out arithmetic problems evaluated before and after training; ``--problems``."""
SAMPLES = 8
"""Samples per problem (pass@1 ... pass@SAMPLES); ``-n``."""
MAX_NEW_TOKENS = 64
LEARNING_RATE = 2e-5
COMPLETIONS_PER_STEP = 8
"""Completions per optimizer step: one micro-batch, no accumulation. With the preset's 8 rollouts per
prompt (``num_generations``) that is 1 prompt x 8 rollouts; the README states the same (a test checks)."""


def eval_backend() -> str:
    """The evaluations' sampler: ``static`` on a CPU (:mod:`sagerl.eval.static_sampler`: in float32 the hf
    backend's samples up to float rounding; 1.2x faster in float32, 1.45x in bfloat16 on the demo's evaluation,
    docs/evaluate.md), ``hf`` where torch sees a GPU (the static loop runs on the CPU only)."""
    import torch

    return "hf" if torch.cuda.is_available() else "static"


def train_overrides(steps: int, max_new_tokens: int, learning_rate: float, progress: bool = True) -> dict:
    """The ``sagerl train`` overrides of the demo's training stage."""
    return {
        "dataset": TRAIN_DATASET,
        "few_shot": FEW_SHOT,
        "share_generation_prefix": True,
        "rollout_decoder": "static",
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


@dataclass(frozen=True)
class DemoSettings:
    """The demo's command-line settings (``python -m sagerl.demo --help``)."""

    out: Path = Path("runs/demo")
    steps: int = STEPS
    problems: int = PROBLEMS
    n: int = SAMPLES
    max_new_tokens: int = MAX_NEW_TOKENS
    learning_rate: float = LEARNING_RATE
    progress: bool = True

    @property
    def ks(self) -> list[int]:
        """The budgets the before/after table shows: 1, 2, 4, ... up to n."""
        return [k for k in (1, 2, 4, 8, 16, 32, 64, 128, 256) if k <= self.n]

    def eval_kwargs(self) -> dict[str, Any]:
        return dict(
            n=self.n,
            limit=self.problems,
            few_shot=FEW_SHOT,
            max_new_tokens=self.max_new_tokens,
            temperature=1.0,
            seed=0,
            backend=eval_backend(),
            progress=self.progress,
        )


@dataclass
class Demo:
    """What the stages share: the settings, the console, each stage's result (by stage key), timings."""

    settings: DemoSettings
    console: Console
    results: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Stage:
    """One stage of the demo.

    Attributes:
        key: the stage's name in :attr:`Demo.results` and in the timings line.
        heading: the line printed before the stage runs (from the settings).
        run: runs the stage (its one progress display included) and returns its result.
        tables: what to print once it has run (renderables; default none).
    """

    key: str
    heading: Callable[[DemoSettings], str]
    run: Callable[[Demo], Any]
    tables: Callable[[Demo], list] = lambda demo: []


def _eval_before(demo: Demo) -> Path:
    from sagerl.eval import evaluate
    from sagerl.models import embedded_model_dir

    embedded_model_dir()  # converted once into the cache (about 15 s), before the stage's progress bar
    folder = demo.settings.out / "base"
    evaluate(None, [EVAL_DATASET], out=folder, **demo.settings.eval_kwargs())
    return folder


def _train(demo: Demo) -> Path:
    from sagerl.train.run import train

    s = demo.settings
    overrides = train_overrides(s.steps, s.max_new_tokens, s.learning_rate, s.progress)
    return train(PRESET, overrides, output_dir=s.out / "train")


def _eval_after(demo: Demo) -> Path:
    from sagerl.eval import evaluate

    folder = demo.settings.out / PRESET
    evaluate(str(demo.results["training"]), [EVAL_DATASET], out=folder, **demo.settings.eval_kwargs())
    return folder


def _training_heading(s: DemoSettings) -> str:
    prompts, rollouts = prompts_and_rollouts_per_step(
        train_overrides(s.steps, s.max_new_tokens, s.learning_rate, s.progress)
    )
    plural = "s" if prompts != 1 else ""
    return f"training {PRESET} for {s.steps} steps ({prompts} prompt{plural} x {rollouts} rollouts per step)"


def before_after_tables(demo: Demo) -> list:
    """The before/after pass@k table (:func:`sagerl.eval.compare.render_table`) of the two eval runs in
    ``demo.settings.out`` with a last row of their paired difference (:func:`paired_gain`), and the plot
    ``passk_before_after.png`` beside them."""
    from sagerl.eval import compare_runs
    from sagerl.eval.compare import render_table

    out = demo.settings.out
    comparison = compare_runs(
        [out / "base", out / PRESET], out=out / "passk_before_after.png", ks=demo.settings.ks
    )
    demo.results["comparison"] = comparison
    gain = paired_gain(out / "base", out / PRESET, demo.settings.ks)
    demo.results["gain"] = gain
    table = render_table(comparison)
    table.rows.append(("gain, paired", gain["cells"]))
    return [table, gain_line(gain)]


def paired_gain(base: Path, run: Path, ks: list[int]) -> dict[str, Any]:
    """pass@k(after) − pass@k(before) in points per k, with the paired bootstrap 95% CI over the problems
    (:func:`sagerl.analysis.support.paired_passk` on the evaluation's one data set): ``{"ks", "difference",
    "ci", "num_problems", "cells"}`` (``cells``: :class:`sagerl.tables.Estimate` per k, for the table)."""
    from sagerl.analysis.runs import load_eval_run
    from sagerl.analysis.support import paired_passk
    from sagerl.tables import Estimate

    paired = paired_passk(load_eval_run(base), load_eval_run(run), ks)
    entry = paired["average"]
    difference = [100 * entry["difference"][f"pass@{k}"] for k in ks]
    ci = [tuple(100 * v for v in entry["ci"][f"pass@{k}"]) for k in ks]
    cells = [Estimate(d, lo, hi) for d, (lo, hi) in zip(difference, ci, strict=True)]
    return {
        "ks": ks,
        "difference": difference,
        "ci": ci,
        "num_problems": entry["num_problems"],
        "cells": cells,
    }


def gain_line(gain: dict[str, Any]):
    """One line under the table: whether the pass@1 gain's paired CI excludes 0."""
    from rich.text import Text

    d, (lo, hi) = gain["difference"][0], gain["ci"][0]
    verdict = "excludes 0" if lo > 0 or hi < 0 else "includes 0: not resolved at this size"
    return Text(
        f"pass@1 {d:+.1f} points, paired 95% CI [{lo:+.1f}, {hi:+.1f}] over {gain['num_problems']} "
        f"problems: {verdict}"
    )


def _planted(demo: Demo) -> dict:
    from sagerl.demo_planted import run_planted_comparison

    return run_planted_comparison(
        demo.settings.out / "planted",
        log=None,
        progress=lambda line: demo.console.print(line, highlight=False),
    )


def planted_tables(demo: Demo) -> list:
    """The rare support each method of the planted stage keeps (:func:`sagerl.demo_planted.rare_support_lines`)."""
    from rich.text import Text

    from sagerl.demo_planted import rare_support_lines

    return [Text("\n".join(rare_support_lines(demo.results["planted"])))]


def _planted_heading(s: DemoSettings) -> str:
    from sagerl.demo_planted import BEST, SEEDS

    return f"planted task: grpo vs {BEST}, {len(SEEDS)} seeds each (rare support kept)"


STAGES: list[Stage] = [
    Stage(
        "eval before",
        lambda s: f"pass@k before training: {s.problems} held-out problems x {s.n} samples",
        _eval_before,
    ),
    Stage("training", _training_heading, _train),
    Stage(
        "eval after",
        lambda s: "pass@k after training, same problems and seeds",
        _eval_after,
        before_after_tables,
    ),
    Stage("planted", _planted_heading, _planted, planted_tables),
]
"""The demo's stages, in order; each prints ``i/N heading``, runs, then prints its tables."""


def print_stage_tables(demo: Demo, stage: Stage) -> None:
    """Print the tables of a finished stage (each fits the console's width)."""
    for table in stage.tables(demo):
        demo.console.print(table)


def run_demo(
    settings: DemoSettings, console: Console | None = None, stages: list[Stage] | None = None
) -> Demo:
    """Run every stage in order; returns the :class:`Demo` with each stage's result."""
    stages = STAGES if stages is None else stages
    demo = Demo(settings, console or Console())
    start = time.time()
    demo.console.rule(f"[bold]sagerl demo: SAGE ({PRESET}) on SmolLM2-135M, one-step arithmetic")
    for i, stage in enumerate(stages, start=1):
        demo.console.print(f"[bold]{i}/{len(stages)}[/] {stage.heading(settings)}", highlight=False)
        t = time.time()
        demo.results[stage.key] = stage.run(demo)
        demo.timings[stage.key] = time.time() - t
        print_stage_tables(demo, stage)
    print_summary(demo, time.time() - start)
    return demo


def print_summary(demo: Demo, total_s: float) -> None:
    """The closing lines: time per stage, and where the plot and the training metrics are."""
    times = ", ".join(f"{k} {v / 60:.1f}" for k, v in demo.timings.items())
    demo.console.print(f"total {total_s / 60:.1f} min: {times}", highlight=False)
    out = demo.settings.out
    comparison = demo.results.get("comparison")
    if comparison is not None and comparison.get("plot"):
        demo.console.print(f"plot: {comparison['plot']}", highlight=False)
    demo.console.print(f"training metrics: {out / 'train' / 'metrics.jsonl'}", highlight=False)


def build_parser() -> argparse.ArgumentParser:
    """The demo's command line (``python -m sagerl.demo --help``)."""
    parser = argparse.ArgumentParser(
        prog="python -m sagerl.demo",
        description="sagerl demo: before/after pass@k of SAGE on the embedded model",
    )
    parser.add_argument("--out", type=Path, default=DemoSettings.out, help="run folder (default runs/demo)")
    parser.add_argument("--steps", type=int, default=STEPS, help="training steps")
    parser.add_argument("--problems", type=int, default=PROBLEMS, help="held-out problems to evaluate")
    parser.add_argument("-n", type=int, default=SAMPLES, help="samples per problem")
    parser.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS)
    parser.add_argument("--learning-rate", type=float, default=LEARNING_RATE)
    parser.add_argument("--no-progress", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    from sagerl.allocator import keep_freed_memory
    from sagerl.cli.quiet import quiet_third_party_progress
    from sagerl.cli.warning_filters import silence_harmless_warnings
    from sagerl.errors import SagerlError

    keep_freed_memory()
    silence_harmless_warnings()
    quiet_third_party_progress()
    settings = DemoSettings(
        out=args.out,
        steps=args.steps,
        problems=args.problems,
        n=args.n,
        max_new_tokens=args.max_new_tokens,
        learning_rate=args.learning_rate,
        progress=not args.no_progress,
    )
    try:
        run_demo(settings)
    except SagerlError as exc:
        raise SystemExit(f"sagerl: error: {exc}") from None


if __name__ == "__main__":
    main()
