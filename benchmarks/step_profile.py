"""Where the time of one demo training step goes, in float32 and in bfloat16, with the FLOPs of each part.

Trains the demo's configuration (``grpo+branch`` on the embedded SmolLM2-135M-Instruct, arithmetic, 1 prompt x
8 rollouts of at most 96 tokens per optimizer step, ``sagerl.demo``) for a few steps in a child process per
dtype, and times the parts of each step by wrapping the trainer's methods:

- ``sampling``: TRL's generation (``_generate``), rollouts of the policy;
- ``reference forward``: the no-grad forward pass of the reference model (log-probs for the KL);
- ``other no-grad forwards``: π_old or teacher log-probs when the configuration needs them;
- ``policy forward + loss``: ``compute_loss`` (the policy's forward pass, the guide, the SAGE loss);
- ``backward``: ``accelerator.backward``;
- ``optimizer``: the optimizer step (and the scheduler).

FLOPs: counted from the token positions each part's forward passes ran (a wrapper on the policy's and the
reference's forward): 2·N·T for T positions through the N non-embedding parameters, plus 2·d·V for every
position whose logits are computed (TRL's fused LM head computes them at every position on a CPU; sampling
at the last one); attention's T·T_ctx terms are left out (a few % at these lengths); backward twice the policy
forward. Each part's FLOP rate is reported against the machine's measured bf16 and fp32 matmul peaks
(``torch.matmul`` of 4096×576 @ 576×1536, this model's shapes), so a part far below the peak is overhead-
bound, not compute-bound.

Sampling is also set against the memory-bandwidth bound: a decode step reads every weight once, so a rollout of
D decode steps cannot take less than D x (weight bytes) / (copy bandwidth); the copy bandwidth is measured in the
child (a 512 MiB tensor copied, read + write counted), the decode steps counted (forward calls of one token per
row during sampling).

Usage: ``python benchmarks/step_profile.py [--steps 3] [--dtypes float32-noshare,float32-nogen,float32]
[--rounds 2]`` (``-noshare``: TRL's forward passes, neither prefix shared; ``-nogen``: the log-prob passes
shared, the rollouts' prefill not; ``-static``: ``rollout_decoder='static'``, sagerl's lean decode loop
(``sagerl.eval.static_decoder``) instead of transformers' ``generate``, the demo's own setting since 2026-12-05, so a
dtype alone is the same; ``-generate``: ``rollout_decoder='transformers'``, as ``-nogen`` and ``-noshare``; ``-nologshare``: the log-prob passes per row, the rollouts as the
demo's; a ``+sysmalloc`` suffix: glibc's malloc as it comes (every variant else keeps freed memory as the
``sagerl`` command does, ``sagerl.allocator``); ``-spgN``: TRL's ``steps_per_generation = N``, one rollout batch of N prompts
x 8 rollouts serving N optimizer steps, so each decode step runs 8N rows); the first step of each child is a
warm-up and is left out (with ``-spgN`` the first N); a variant's step time is the median step, or with
``-spgN`` the mean over its steps (only one step in N samples); ``@PRESET`` trains that preset instead of the demo's
``grpo+branch`` with the demo's other settings (``bfloat16@grpo,bfloat16@simko,bfloat16@apo``: each method's step
against GRPO's on a real vocabulary); the ratios are to the first variant. Run on an idle machine (two torch processes on 2 cores slow each other about tenfold).
Prints a markdown table per variant and the step-time ratios.
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
from collections import defaultdict

PARTS = (
    "sampling",
    "reference forward",
    "other no-grad forwards",
    "policy forward + loss",
    "backward",
    "optimizer",
)


def matmul_peak(dtype: str, seconds: float = 1.0) -> float:
    """Measured GFLOP/s of a 4096×576 @ 576×1536 matmul in ``dtype`` with the process's threads."""
    import torch

    dt = getattr(torch, dtype)
    a, b = torch.randn(4096, 576, dtype=dt), torch.randn(576, 1536, dtype=dt)
    for _ in range(3):
        a @ b
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        n += 1
    return 2 * 4096 * 576 * 1536 * n / (time.perf_counter() - start) / 1e9


def copy_bandwidth(seconds: float = 1.0) -> float:
    """Measured GB/s of copying a 512 MiB float32 tensor (bytes read + bytes written) with the process's threads."""
    import torch

    a = torch.ones(128 * 1024 * 1024)
    b = torch.empty_like(a)
    b.copy_(a)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        b.copy_(a)
        n += 1
    return 2 * a.numel() * 4 * n / (time.perf_counter() - start) / 1e9


def read_bandwidth(seconds: float = 1.0) -> float:
    """Measured GB/s of reading a 512 MiB float32 tensor (its sum) with the process's threads: what a decode
    step does with the weights (the copy figure counts a write too, which a decode step does not do)."""
    import torch

    a = torch.ones(128 * 1024 * 1024)
    a.sum()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a.sum()
        n += 1
    return a.numel() * 4 * n / (time.perf_counter() - start) / 1e9


def child(variant: str, steps: int, out: str) -> dict:
    """Train ``steps`` demo steps of ``variant`` in this process; return per-step part times and token counts.
    ``variant``: a dtype, alone (the demo's configuration with ``share_prompt_prefix`` and ``share_generation_prefix``
    on), with ``-nogen`` (the log-prob passes shared, the rollouts' prefill not) or ``-noshare`` (neither:
    TRL's forward passes)."""
    import torch

    from sagerl.demo import LEARNING_RATE, MAX_NEW_TOKENS, PRESET, train_overrides
    from sagerl.models import load_tokenizer, resolve_model
    from sagerl.train.rewards import CorrectnessReward
    from sagerl.train.run import build_dataset, build_trainer_config, resolve_config
    from sagerl.train.trainer import SAGETrainer

    variant, _, preset = variant.partition("@")
    variant, _, malloc = variant.partition("+")
    if malloc not in ("", "sysmalloc"):
        raise SystemExit(f"unknown variant suffix +{malloc}: only +sysmalloc")
    dtype, _, option = variant.partition("-")
    overrides = {**train_overrides(steps, MAX_NEW_TOKENS, LEARNING_RATE, progress=False), "dtype": dtype}
    spg = int(option[3:]) if option.startswith("spg") and option[3:].isdigit() else 1
    if (
        option not in ("", "nogen", "noshare", "nologshare", "static", "generate")
        and spg == 1
        and option != "spg1"
    ):
        raise SystemExit(
            f"unknown variant {variant!r}: a dtype, with -nogen, -noshare, -nologshare, -static, -generate or -spgN"
        )
    if not malloc:  # as the sagerl command and make demo run (sagerl.allocator)
        from sagerl.allocator import keep_freed_memory

        keep_freed_memory()
    overrides["share_prompt_prefix"] = option not in ("noshare", "nologshare")
    overrides["share_generation_prefix"] = option not in ("nogen", "noshare")
    overrides["steps_per_generation"] = spg
    if option == "static":
        overrides["rollout_decoder"] = "static"
    elif option in ("generate", "nogen", "noshare"):  # transformers' generate (the demo's default is static)
        overrides["rollout_decoder"] = "transformers"
    overrides.update(save_strategy="no", report_to="none")
    resolved = resolve_config(preset or PRESET, overrides)
    args = build_trainer_config(resolved, out)
    model = resolve_model(None)
    trainer = SAGETrainer(
        model=model,
        reward_funcs=[CorrectnessReward()],
        args=args,
        train_dataset=build_dataset(resolved.settings),
        processing_class=load_tokenizer(model),
    )
    times: list[dict[str, float]] = []
    tokens: list[dict[str, int]] = []
    current: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    part = ["other"]  # the part running now (innermost wins)

    def timed(name_of, method):
        def wrapper(*a, **k):
            name = name_of(*a, **k)
            outer, part[0] = part[0], name
            start = time.perf_counter()
            try:
                return method(*a, **k)
            finally:
                current[name] += time.perf_counter() - start
                part[0] = outer

        return wrapper

    def counted(model):
        """Count the token positions each forward pass of ``model`` runs, and those it computes logits for,
        under the part running then."""
        forward = model.forward

        def wrapper(*a, **k):
            ids = k.get("input_ids")
            if ids is not None:
                counts[f"{part[0]} tokens"] += int(ids.numel())
                if ids.dim() == 2 and ids.shape[1] == 1:
                    counts[f"{part[0]} decode steps"] += 1
                fused = k.get("fused_lm_head", False)  # TRL's fused head: logits at every position on a CPU
                keep = k.get("logits_to_keep", 0)
                positions = ids.shape[-1] if fused or not keep else min(int(keep), ids.shape[-1])
                counts[f"{part[0]} logit positions"] += int(ids.numel() // ids.shape[-1] * positions)
            return forward(*a, **k)

        model.forward = wrapper

    counted(trainer.model)
    from sagerl.eval.static_decoder import StaticDecoder

    static_step = StaticDecoder.step

    def counted_step(self, *a, **k):  # the static decoder's steps do not go through the model's forward
        counts[f"{part[0]} decode steps"] += 1
        return static_step(self, *a, **k)

    StaticDecoder.step = counted_step
    if trainer.ref_model is not None:
        counted(trainer.ref_model)
    trainer._generate = timed(lambda *a, **k: "sampling", trainer._generate)
    policy = trainer.model
    original_logps = trainer._get_per_token_logps_and_entropies

    def logps(model, input_ids, *a, **k):
        if model is policy and torch.is_grad_enabled():  # inside compute_loss: its part
            return original_logps(model, input_ids, *a, **k)
        name = "reference forward" if model is trainer.ref_model else "other no-grad forwards"
        return timed(lambda *a, **k: name, original_logps)(model, input_ids, *a, **k)

    trainer._get_per_token_logps_and_entropies = logps
    trainer.compute_loss = timed(lambda *a, **k: "policy forward + loss", trainer.compute_loss)
    trainer.accelerator.backward = timed(lambda *a, **k: "backward", trainer.accelerator.backward)

    from transformers import TrainerCallback

    class Steps(TrainerCallback):
        def on_step_begin(self, *a, **k):
            current.clear()
            counts.clear()
            self.start = time.perf_counter()

        def on_pre_optimizer_step(self, *a, **k):
            self.opt = time.perf_counter()

        def on_step_end(self, *a, **k):
            current["optimizer"] += time.perf_counter() - self.opt
            current["total"] = time.perf_counter() - self.start
            times.append(dict(current))
            tokens.append(dict(counts))

    trainer.add_callback(Steps())
    trainer.train()
    # the bytes a decode step reads: the weights in the dtype the rollout computes in (bf16 autocast reads its cast
    # copies, cached for the whole rollout)
    weight_bytes = sum(p.numel() for p in trainer.model.parameters()) * (2 if dtype == "bfloat16" else 4)
    return {
        "times": times,
        "tokens": tokens,
        "spg": spg,
        "weight_bytes": weight_bytes,
        "bandwidth": copy_bandwidth(),
        "read_bandwidth": read_bandwidth(),
        "peak_bf16": matmul_peak("bfloat16"),
        "peak_fp32": matmul_peak("float32"),
    }


def flops(counts: dict[str, int], config) -> dict[str, float]:
    """GFLOP of each part from the token positions its forward passes ran (see the module docstring)."""
    d, layers, vocab = config.hidden_size, config.num_hidden_layers, config.vocab_size
    inter = config.intermediate_size
    kv = config.num_key_value_heads * (d // config.num_attention_heads)
    per_token = layers * (2 * d * d + 2 * d * kv + 3 * d * inter)  # q, o, k, v, MLP
    out = {}
    for part in PARTS:
        tokens, logits = counts.get(f"{part} tokens", 0), counts.get(f"{part} logit positions", 0)
        if tokens:
            out[part] = 2 * (per_token * tokens + d * vocab * logits) / 1e9
    if "policy forward + loss" in out:
        out["backward"] = 2 * out["policy forward + loss"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--dtypes",
        default="float32,bfloat16",
        help="variants: a dtype (the demo's settings), with -nogen (share_generation_prefix off), -nologshare "
        "(share_prompt_prefix off), -noshare "
        "(share_prompt_prefix off too: TRL's forward passes), -static (rollout_decoder='static'), -generate (transformers'), "
        "or -spgN, +sysmalloc (glibc's malloc as it comes); "
        "@PRESET trains that preset (default grpo+branch)",
    )
    parser.add_argument("--child", nargs=2, metavar=("DTYPE", "OUT"))
    args = parser.parse_args()
    if args.child:
        result = child(args.child[0], args.steps, args.child[1])
        with open(os.path.join(args.child[1], "profile.json"), "w") as f:
            json.dump(result, f)
        return
    dtypes = args.dtypes.split(",")
    runs: dict[str, list[dict]] = {d: [] for d in dtypes}
    for round_index in range(args.rounds):
        order = dtypes if round_index % 2 == 0 else dtypes[::-1]
        for dtype in order:
            with tempfile.TemporaryDirectory() as out:
                subprocess.run(
                    [sys.executable, __file__, "--steps", str(args.steps), "--child", dtype, out], check=True
                )
                with open(os.path.join(out, "profile.json")) as f:
                    runs[dtype].append(json.load(f))
    from transformers import AutoConfig

    from sagerl.models import resolve_model

    config = AutoConfig.from_pretrained(resolve_model(None))
    medians, samplings = {}, {}
    for dtype, results in runs.items():
        spg = results[0].get("spg", 1)
        steps = [
            s for r in results for s in r["times"][spg:]
        ]  # the first rollout batch of each child: warm-up
        toks = [t for r in results for t in r["tokens"][spg:]]
        peak = statistics.median(
            r["peak_bf16" if dtype.startswith("bfloat16") else "peak_fp32"] for r in results
        )
        average = statistics.median if spg == 1 else statistics.fmean
        medians[dtype] = average([s["total"] for s in steps])
        # FLOPs per step: a step's own counts, the sampling ones spread over the spg steps one rollout serves
        summed: dict[str, float] = defaultdict(float)
        for t in toks:
            for key, value in t.items():
                summed[key] += value / len(toks)
        work = flops(summed, config)
        bandwidth = statistics.median(r["bandwidth"] for r in results)
        weight_gb = results[0]["weight_bytes"] / 1e9
        label = "median" if spg == 1 else f"mean (one rollout per {spg} steps)"
        print(
            f"\n### {dtype}: {len(steps)} steps, {label} step {medians[dtype]:.2f} s; matmul peak {peak:.0f} "
            f"GFLOP/s; copy bandwidth {bandwidth:.1f} GB/s, weights {weight_gb * 1e3:.0f} MB"
        )
        print("| part | s per step | share | GFLOP | GFLOP/s | of peak |")
        print("|---|---|---|---|---|---|")
        for part in PARTS:
            seconds = average([s.get(part, 0.0) for s in steps])
            g = work.get(part)
            rate = g / seconds if g and seconds else None
            print(
                f"| {part} | {seconds:.2f} | {seconds / medians[dtype]:.0%} | {'—' if g is None else round(g, 1)} | "
                f"{'—' if rate is None else round(rate)} | {'—' if rate is None else f'{rate / peak:.0%}'} |"
            )
        decode = summed.get("sampling decode steps", 0.0)
        sampling = average([s.get("sampling", 0.0) for s in steps])
        if decode and sampling:
            bound = decode * weight_gb / bandwidth
            print(
                f"sampling: {decode:.0f} decode steps per step ({decode / sampling:.1f}/s); the bandwidth bound "
                f"{bound:.2f} s ({bandwidth / weight_gb:.0f} decode steps/s): sampling at {bound / sampling:.0%} of it"
            )
            if "read_bandwidth" in results[0]:
                read = statistics.median(r["read_bandwidth"] for r in results)
                bound = decode * weight_gb / read
                print(
                    f"  against the read bandwidth ({read:.1f} GB/s, a sum over 512 MiB): bound {bound:.2f} s "
                    f"({read / weight_gb:.0f} decode steps/s): sampling at {bound / sampling:.0%} of it"
                )
        samplings[dtype] = sampling
        print(f"token positions per step (mean over the measured steps): {dict(summed)}")
    base = dtypes[0]
    for variant in dtypes[1:]:
        print(f"step time {base} / {variant}: {medians[base] / medians[variant]:.2f}x")
        if samplings.get(variant):
            print(f"sampling time {base} / {variant}: {samplings[base] / samplings[variant]:.2f}x")


if __name__ == "__main__":
    main()
