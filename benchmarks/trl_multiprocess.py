"""Step time of SAGETrainer on 2 processes against 1 process, on the same global batch, side by side.

Each layout runs under ``torchrun`` on CPU (accelerate MULTI_CPU over gloo, DDP): ``1x`` holds the whole
global batch in one process; ``2x`` splits it into 2 processes of half the rows. Both train the
``grpo+branch`` preset for the same steps, with every completion forced to the same length
(``min_new_tokens = max_completion_length``) and learning rate 0, so every step does the same work. The
CPU threads are shared out equally (``--threads`` in all: 1 process gets them all, 2 processes half
each), so the ratio shows what data parallelism costs or saves on the same cores: generation and the
forward/backward passes split, plus DDP's gradient all-reduce and the reward gathers. Rounds alternate
the order of the layouts. Reported: median step time (first step excluded) per layout, and 2x/1x.

No target: on a shared 2-core machine this measures overhead, not scaling; on GPUs each process has its
own device.

Usage: ``python benchmarks/trl_multiprocess.py [--model PATH] [--rows 16] [--steps 4] [--rounds 2]
[--tokens 48] [--threads N]`` (default model: the embedded SmolLM2-135M-Instruct).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

LAYOUTS = {"1x": 1, "2x": 2}


def worker(model: str | None, rows: int, steps: int, tokens: int, out: str) -> None:
    """One layout, in each process that torchrun starts; rank 0 writes the step times to ``out``."""
    import torch
    from transformers import TrainerCallback

    from sagerl.models import load_tokenizer, resolve_model
    from sagerl.train.rewards import CorrectnessReward
    from sagerl.train.run import RunSettings, build_dataset, build_trainer_config, resolve_config
    from sagerl.train.trainer import SAGETrainer

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    overrides = {
        "per_device_train_batch_size": rows // world,
        "gradient_accumulation_steps": 1,
        "num_generations": 8,
        "max_steps": steps,
        "max_completion_length": tokens,
        "generation_kwargs": {"min_new_tokens": tokens},
        "learning_rate": 0.0,
        "save_strategy": "no",
        "disable_tqdm": True,
    }
    args = build_trainer_config(resolve_config("grpo+branch", overrides), out)
    step_times: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            step_times.append(time.perf_counter() - self.t0)

    path = resolve_model(model)
    trainer = SAGETrainer(
        model=path,
        reward_funcs=[CorrectnessReward()],
        args=args,
        train_dataset=build_dataset(RunSettings(dataset="arith_train", limit=64)),
        processing_class=load_tokenizer(path),
        callbacks=[Timer()],
    )
    assert trainer.accelerator.num_processes == world
    trainer.train()
    if trainer.accelerator.is_main_process:
        with open(os.path.join(out, "result.json"), "w", encoding="utf-8") as f:
            json.dump({"processes": world, "step_times": step_times}, f)


def run_layout(name: str, args: argparse.Namespace) -> list[float]:
    nproc = LAYOUTS[name]
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
        cmd += [__file__, "--worker", "--out", tmp, "--rows", str(args.rows), "--steps", str(args.steps)]
        cmd += ["--tokens", str(args.tokens)] + (["--model", args.model] if args.model else [])
        env = {
            **os.environ,
            "ACCELERATE_USE_CPU": "true",
            "OMP_NUM_THREADS": str(max(1, args.threads // nproc)),
            "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            sys.exit(f"{name} failed:\n{proc.stderr[-4000:]}")
        with open(os.path.join(tmp, "result.json"), encoding="utf-8") as f:
            return json.load(f)["step_times"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="model path or id (default: embedded SmolLM2)")
    parser.add_argument("--rows", type=int, default=16, help="completions per step, global (8 per prompt)")
    parser.add_argument("--steps", type=int, default=4, help="steps per run; the first is warm-up")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, alternating the layouts' order")
    parser.add_argument("--tokens", type=int, default=48, help="completion length in tokens")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="CPU threads in all")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rows % 16:
        parser.error("--rows must be a multiple of 16 (2 processes x groups of 8)")
    if args.worker:
        worker(args.model, args.rows, args.steps, args.tokens, args.out)
        return

    times: dict[str, list[float]] = {name: [] for name in LAYOUTS}
    for r in range(args.rounds):
        for name in LAYOUTS if r % 2 == 0 else reversed(LAYOUTS):
            steps = run_layout(name, args)
            times[name] += steps[1:]
            print(f"round {r + 1} {name}: step times {[round(t, 2) for t in steps]} s", flush=True)
    median = {name: statistics.median(t) for name, t in times.items()}
    print()
    print(f"{args.rows} completions of {args.tokens} tokens per step, {args.threads} threads in all")
    for name, nproc in LAYOUTS.items():
        print(f"{name} ({nproc} process{'es' if nproc > 1 else ''}): median step {median[name]:.3f} s")
    print(f"2x/1x step time: {median['2x'] / median['1x']:.3f} (no target)")


if __name__ == "__main__":
    main()
