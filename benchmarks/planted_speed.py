"""Speed of RL on the planted-strategy task, and the teacher guide's cost, measured side by side in one run.

Runs ``SAGETrainer`` on the planted task's tiny reference model (``planted-reference``; built on first use)
with 8 prompts x 8 rollouts per optimizer step (completions up to 24 tokens), for two guides, each in its
own process (so peak RSS is its own), alternating their order over rounds:

- ``branch``: the ``grpo+branch`` preset;
- ``teacher``: the same with ``guide=teacher, teacher_model=planted-teacher`` (one extra no-grad forward
  pass of the teacher per rollout batch, counted).

Reported: median step time (TRL's ``step_time``, first step excluded) and peak RSS per variant, the
teacher/branch ratios, and the teacher's forward passes per step. Target: one RL step <= 2 s on this
project's 2-core CPU machine. The wall time of the whole planted grid (docs/planted.md) is printed by ``sagerl study``
itself (its last line).

Usage: ``python benchmarks/planted_speed.py [--steps 20] [--rounds 2]`` (about a minute; run it on an idle
machine: two torch processes on 2 cores slow each other about tenfold).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile

VARIANTS = {"branch": {}, "teacher": {"guide": "teacher", "teacher_model": "planted-teacher"}}
STEP_TARGET_S = 2.0


def child(variant: str, steps: int, out: str) -> dict:
    """Train ``steps`` steps of one variant in this process; return step times, peak RSS, teacher passes."""
    from sagerl.models import load_tokenizer, resolve_model
    from sagerl.train import SAGEConfig, SAGETrainer
    from sagerl.train.presets import load_preset
    from sagerl.train.rewards import CorrectnessReward
    from sagerl.train.run import RunSettings, build_dataset

    model = resolve_model("planted-reference")
    resolve_model("planted-teacher")  # built before timing
    args = SAGEConfig(
        **{**load_preset("grpo+branch"), **VARIANTS[variant]},
        output_dir=out,
        max_steps=steps,
        per_device_train_batch_size=64,
        gradient_accumulation_steps=1,
        max_completion_length=24,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        bf16=False,
        seed=0,
        disable_tqdm=True,
    )
    trainer = SAGETrainer(
        model=model,
        reward_funcs=[CorrectnessReward()],
        args=args,
        train_dataset=build_dataset(RunSettings(dataset="planted_train", limit=2048)),
        processing_class=load_tokenizer(model),
    )
    passes = {"teacher": 0}
    if trainer.teacher_model is not None:
        original = trainer._teacher_logps

        def counted(*a, **k):
            passes["teacher"] += 1
            return original(*a, **k)

        trainer._teacher_logps = counted
    trainer.train()
    step_times = [row["step_time"] for row in trainer.state.log_history if "step_time" in row]
    return {
        "step_times": step_times,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "teacher_passes_per_step": passes["teacher"] / steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="steps per run; the first is warm-up")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, alternating the variants' order")
    parser.add_argument("--child", choices=list(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args.steps, args.out)), flush=True)
        return

    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for r in range(args.rounds):
        for variant in list(VARIANTS)[:: 1 if r % 2 == 0 else -1]:
            with tempfile.TemporaryDirectory() as tmp:
                cmd = [sys.executable, __file__, "--child", variant, "--steps", str(args.steps), "--out", tmp]
                proc = subprocess.run(
                    cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}
                )
            lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                sys.exit(f"{variant} failed:\n{proc.stderr[-3000:]}")
            result = json.loads(lines[-1].removeprefix("RESULT "))
            runs[variant].append(result)
            print(
                f"round {r + 1} {variant:7s} median step {statistics.median(result['step_times'][1:]):.3f} s, "
                f"peak RSS {result['peak_rss_mib']:.0f} MiB, teacher passes/step {result['teacher_passes_per_step']}",
                flush=True,
            )

    def step(variant: str) -> float:
        return statistics.median(t for run in runs[variant] for t in run["step_times"][1:])

    def peak(variant: str) -> float:
        return max(run["peak_rss_mib"] for run in runs[variant])

    print()
    for variant in VARIANTS:
        verdict = "ok" if step(variant) <= STEP_TARGET_S else "OVER TARGET"
        print(
            f"{variant:7s} one RL step (8 prompts x 8 rollouts) {step(variant):.3f} s "
            f"(target <= {STEP_TARGET_S:.0f} s: {verdict}), peak RSS {peak(variant):.0f} MiB"
        )
    print(f"teacher/branch step time {step('teacher') / step('branch'):.3f}")
    print(f"teacher/branch peak RSS  {peak('teacher') / peak('branch'):.3f}")
    print(f"teacher forward passes per step: {runs['teacher'][0]['teacher_passes_per_step']:.0f}")


if __name__ == "__main__":
    main()
