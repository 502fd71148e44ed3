"""Overhead of SAGE over GRPO, and of sagerl's GRPO over TRL's, measured side by side in one run.

Runs three trainers with the same config, data and seed, each in its own process (so peak RSS is its own):

- ``trl``: a vanilla ``trl.GRPOTrainer`` (GRPOConfig, loss_type "grpo", β = 0.05);
- ``grpo``: ``SAGETrainer`` with the ``grpo`` preset's objective (no guide);
- ``sage``: ``SAGETrainer`` with the ``grpo+branch`` preset's objective (branch guide).

Every completion is forced to the same length (``min_new_tokens = max_completion_length``) and the
learning rate is 0, so every step does the same work and step times compare the loss code, not sampling
luck. Rounds alternate the order of the variants. Reported: median step time (first step excluded),
peak RSS, forward passes per step outside generation (counted by a hook on each model's backbone), and
the time of ``compute_loss`` alone (policy forward, guide, objective), the only code that differs.

Targets: SAGE/GRPO step time <= 1.03, SAGE/GRPO peak RSS <= 1.02, no extra forward pass,
sagerl GRPO / TRL GRPO step time <= 1.05.

Usage: ``python benchmarks/overhead.py [--model PATH] [--steps 4] [--rounds 2] [--tokens 64]``
(default model: the embedded SmolLM2-135M-Instruct; about 10 minutes on 2 CPU cores).
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
import time

VARIANTS = ("trl", "grpo", "sage")
TARGETS = {"sage/grpo step time": 1.03, "sage/grpo peak RSS": 1.02, "grpo/trl step time": 1.05}


def child(
    variant: str,
    model: str | None,
    steps: int,
    tokens: int,
    out: str,
    fields: dict | None = None,
    common_overrides: dict | None = None,
) -> dict:
    """Train ``steps`` steps of one variant in this process; return timings, RSS and forward counts.

    ``fields`` are the SAGEConfig fields of a variant outside :data:`VARIANTS` (benchmarks/exploration_overhead.py);
    ``common_overrides`` change the shared config of every variant."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from sagerl.models import load_tokenizer, resolve_model
    from sagerl.train import SAGEConfig, SAGETrainer
    from sagerl.train.rewards import CorrectnessReward
    from sagerl.train.run import RunSettings, build_dataset

    torch.manual_seed(0)
    path = resolve_model(model)
    tokenizer = load_tokenizer(path)
    dataset: Dataset = build_dataset(RunSettings(dataset="arith_train", limit=64))
    common = dict(
        output_dir=out,
        max_steps=steps,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=1,
        num_generations=4,
        max_completion_length=tokens,
        generation_kwargs={"min_new_tokens": tokens},
        learning_rate=0.0,
        beta=0.05,
        loss_type="grpo",
        temperature=1.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        bf16=False,
        seed=0,
        disable_tqdm=True,
    )
    common.update(common_overrides or {})
    if variant == "trl":
        trainer_cls, args = GRPOTrainer, GRPOConfig(**common)
    else:
        guide = (
            fields
            if fields is not None
            else {"grpo": {"guide": "none"}, "sage": {"guide": "branch"}}[variant]
        )
        trainer_cls, args = SAGETrainer, SAGEConfig(**common, **guide)

    step_times: list[float] = []
    loss_times: list[float] = []
    pending = {"loss": 0.0}

    class Timer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()
            pending["loss"] = 0.0

        def on_step_end(self, *a, **k):
            step_times.append(time.perf_counter() - self.t0)
            loss_times.append(pending["loss"])

    trainer = trainer_cls(
        model=path,
        reward_funcs=[CorrectnessReward()],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[Timer()],
    )
    counts = {"policy": 0, "reference": 0}
    generating = {"on": False}
    original_generate = trainer._generate

    def generate(*a, **k):
        generating["on"] = True
        try:
            return original_generate(*a, **k)
        finally:
            generating["on"] = False

    trainer._generate = generate
    original_compute_loss = trainer.compute_loss

    def compute_loss(*a, **k):  # the policy forward, the guide and the objective (not backward)
        t0 = time.perf_counter()
        try:
            return original_compute_loss(*a, **k)
        finally:
            pending["loss"] += time.perf_counter() - t0

    trainer.compute_loss = compute_loss

    def counter(name):
        def hook(module, args, kwargs):
            if not generating["on"]:
                counts[name] += 1

        return hook

    trainer.model.model.register_forward_pre_hook(counter("policy"), with_kwargs=True)
    if trainer.ref_model is not None:
        trainer.ref_model.model.register_forward_pre_hook(counter("reference"), with_kwargs=True)
    trainer.train()
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "variant": variant,
        "step_times": step_times,
        "loss_times": loss_times,
        "peak_rss_mib": peak_kib / 1024,
        "forwards_per_step": {k: v / steps for k, v in counts.items()},
    }


def objective_only(batch: int = 8, length: int = 1024, reps: int = 200) -> tuple[float, float]:
    """Seconds per forward+backward of the objective alone on (batch, length) tensors: (GRPO, GRPO+Branch).

    The two are timed alternately in one process, so the ratio isolates the guide's own cost.
    """
    import torch

    from sagerl.objective import branch_guide, sage_loss

    g = torch.Generator().manual_seed(0)
    mask = torch.ones(batch, length)
    ref = -torch.rand(batch, length, generator=g) * 3
    entropy = torch.rand(batch, length, generator=g) * 3
    advantages = torch.randn(batch, generator=g)
    times = {"grpo": [], "sage": []}
    for _ in range(reps):
        for name in ("grpo", "sage"):
            logp = (-torch.rand(batch, length, generator=g) * 3).requires_grad_(True)
            t0 = time.perf_counter()
            log_q = branch_guide(entropy, mask).log() if name == "sage" else None
            out = sage_loss(logp, None, ref, advantages, mask, log_q=log_q, beta=0.05)
            out.loss.backward()
            times[name].append(time.perf_counter() - t0)
    return statistics.median(times["grpo"]), statistics.median(times["sage"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="model path or id (default: embedded SmolLM2)")
    parser.add_argument("--steps", type=int, default=4, help="steps per run; the first is warm-up")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, alternating the variants' order")
    parser.add_argument("--tokens", type=int, default=64, help="completion length in tokens")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        result = child(args.child, args.model, args.steps, args.tokens, args.out)
        print("RESULT " + json.dumps(result), flush=True)
        return

    grpo_s, sage_s = objective_only()
    print(
        f"objective alone, (8, 1024) tokens, forward+backward: grpo {grpo_s * 1e3:.3f} ms, "
        f"grpo+branch {sage_s * 1e3:.3f} ms (ratio {sage_s / grpo_s:.3f})",
        flush=True,
    )
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for r in range(args.rounds):
        order = VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS))
        for variant in order:
            with tempfile.TemporaryDirectory() as tmp:
                cmd = [
                    sys.executable,
                    __file__,
                    "--child",
                    variant,
                    "--steps",
                    str(args.steps),
                    "--tokens",
                    str(args.tokens),
                    "--out",
                    tmp,
                ]
                if args.model:
                    cmd += ["--model", args.model]
                proc = subprocess.run(
                    cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}
                )
                lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
                if proc.returncode != 0 or not lines:
                    sys.exit(f"{variant} failed:\n{proc.stderr[-3000:]}")
                result = json.loads(lines[-1][len("RESULT ") :])
                runs[variant].append(result)
                print(
                    f"round {r + 1} {variant:5s} step times {[round(t, 2) for t in result['step_times']]} s "
                    f"(loss {[round(t, 2) for t in result['loss_times']]} s), "
                    f"peak RSS {result['peak_rss_mib']:.0f} MiB, forwards/step {result['forwards_per_step']}",
                    flush=True,
                )

    def median_step(variant, key="step_times"):
        return statistics.median(t for run in runs[variant] for t in run[key][1:])

    def peak(variant):
        return max(run["peak_rss_mib"] for run in runs[variant])

    print()
    print(
        f"{'variant':8s} {'median step (s)':>16s} {'of which loss (s)':>18s} {'peak RSS (MiB)':>15s}  "
        "forwards per step outside generation"
    )
    for v in VARIANTS:
        print(
            f"{v:8s} {median_step(v):16.3f} {median_step(v, 'loss_times'):18.3f} {peak(v):15.0f}  "
            f"{runs[v][0]['forwards_per_step']}"
        )
    ratios = {
        "sage/grpo step time": median_step("sage") / median_step("grpo"),
        "sage/grpo peak RSS": peak("sage") / peak("grpo"),
        "grpo/trl step time": median_step("grpo") / median_step("trl"),
    }
    print()
    print(
        f"loss computation alone (policy forward + guide + objective): sage/grpo "
        f"{median_step('sage', 'loss_times') / median_step('grpo', 'loss_times'):.3f}, grpo/trl "
        f"{median_step('grpo', 'loss_times') / median_step('trl', 'loss_times'):.3f}"
    )
    for name, value in ratios.items():
        verdict = "ok" if value <= TARGETS[name] else "OVER TARGET"
        print(f"{name:22s} {value:6.3f}  (target <= {TARGETS[name]:.2f})  {verdict}")
    same = runs["sage"][0]["forwards_per_step"] == runs["grpo"][0]["forwards_per_step"]
    print(
        f"{'extra forward passes':22s} {'none' if same else 'YES'}  (sage {runs['sage'][0]['forwards_per_step']}, "
        f"grpo {runs['grpo'][0]['forwards_per_step']})"
    )


if __name__ == "__main__":
    main()
