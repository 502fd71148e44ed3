"""vLLM against the HF path, side by side in one run: eval sampling throughput and one training step.

1. Eval: tokens/s of :class:`sagerl.eval.vllm_backend.VLLMSampler` ÷ :class:`sagerl.eval.samplers.HFSampler`,
   same prompts (arithmetic problems, chat template), same n, max_new_tokens and temperature, per-sample
   seeds on both, in float32 and in bfloat16. Tokens = completion tokens generated (end-of-sequence
   included); the engine start and the model load are timed apart and left out of tokens/s.
2. Training: seconds per optimizer step of SAGETrainer (grpo+branch settings) with vLLM colocated rollouts
   ÷ with TRL's HF generation (use_vllm=False), same model, prompts, batch and completion length; the first
   step is left out (warm-up), the mean of the others is reported.

Runs in .venv-vllm. Tiny check (seconds of work, plus engine starts):

    .venv-vllm/bin/python benchmarks/vllm_speed.py --tiny

Full measurement (embedded SmolLM2; run on an otherwise idle machine):

    VLLM_CPU_OMP_THREADS_BIND=0-1 VLLM_CPU_NUM_OF_RESERVED_CPU=0 .venv-vllm/bin/python benchmarks/vllm_speed.py \\
        --prompts 4 -n 16 --max-new-tokens 128 --train-steps 4 --train-completion-length 64
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def eval_prompts(tokenizer, count: int) -> list[str]:
    from sagerl.tasks import load_problems, render_prompt

    return [render_prompt(tokenizer, p, few_shot=0, kind=p.kind) for p in load_problems("arith", limit=count)]


def time_sampler(sampler, prompts, n, max_new_tokens) -> tuple[float, int]:
    start = time.perf_counter()
    rows = sampler.generate(prompts, n, max_new_tokens=max_new_tokens, temperature=1.0, seed=0)
    seconds = time.perf_counter() - start
    return seconds, sum(c.num_tokens for row in rows for c in row)


def bench_eval(model, args) -> list[dict]:
    from sagerl.eval.samplers import HFSampler
    from sagerl.eval.vllm_backend import VLLMSampler

    results = []
    for dtype in args.dtypes:
        t0 = time.perf_counter()
        hf = HFSampler(model, dtype=dtype)
        hf_load = time.perf_counter() - t0
        prompts = eval_prompts(hf.tokenizer, args.prompts)
        hf_s, hf_tok = time_sampler(hf, prompts, args.n, args.max_new_tokens)
        del hf
        t0 = time.perf_counter()
        vl = VLLMSampler(model, dtype=dtype)
        vl_start = time.perf_counter() - t0
        vl_s, vl_tok = time_sampler(vl, prompts, args.n, args.max_new_tokens)
        vl.close()
        row = {
            "dtype": dtype,
            "hf_tok_s": hf_tok / hf_s,
            "vllm_tok_s": vl_tok / vl_s,
            "ratio": (vl_tok / vl_s) / (hf_tok / hf_s),
            "hf_tokens": hf_tok,
            "vllm_tokens": vl_tok,
            "hf_load_s": hf_load,
            "vllm_engine_start_s": vl_start,
        }
        print(
            f"eval {dtype}: vLLM {row['vllm_tok_s']:.0f} tok/s ÷ HF {row['hf_tok_s']:.0f} tok/s = "
            f"{row['ratio']:.2f}  (tokens {vl_tok} / {hf_tok}; vLLM engine start {vl_start:.0f} s, "
            f"HF load {hf_load:.1f} s)",
            flush=True,
        )
        results.append(row)
    return results


def bench_train(model, args) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback

    from sagerl.train import SAGEConfig, SAGETrainer

    data = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": f"What is {i} + {2 * i}?"}]} for i in range(64)]
    )

    def reward(completion_ids, **kwargs):
        return [float(sum(ids) % 3 == 0) for ids in completion_ids]

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times = []

        def on_step_begin(self, *a, **k):
            self.start = time.perf_counter()

        def on_step_end(self, *a, **k):
            self.times.append(time.perf_counter() - self.start)

    seconds = {}
    for use_vllm in (False, True):
        timer = StepTimer()
        config = SAGEConfig(
            output_dir=f"/tmp/sagerl-bench-vllm-{int(use_vllm)}",
            use_vllm=use_vllm,
            vllm_mode="colocate",
            per_device_train_batch_size=args.train_batch,
            num_generations=args.train_batch // 2,
            max_completion_length=args.train_completion_length,
            max_steps=args.train_steps,
            beta=0.05,
            guide="branch",
            report_to="none",
            save_strategy="no",
            use_cpu=True,
            seed=0,
            logging_steps=1,
        )
        trainer = SAGETrainer(
            model=model, reward_funcs=[reward], args=config, train_dataset=data, callbacks=[timer]
        )
        trainer.train()
        steps = timer.times[1:] or timer.times
        seconds["vllm" if use_vllm else "hf"] = sum(steps) / len(steps)
        del trainer
    ratio = seconds["vllm"] / seconds["hf"]
    print(
        f"train step: vLLM rollouts {seconds['vllm']:.2f} s ÷ TRL HF generation {seconds['hf']:.2f} s = {ratio:.2f} "
        f"(mean of steps 2..{args.train_steps}, batch {args.train_batch}, completions <= {args.train_completion_length})",
        flush=True,
    )
    return {"vllm_step_s": seconds["vllm"], "hf_step_s": seconds["hf"], "ratio": ratio}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=None, help="path (default: the embedded SmolLM2-135M)")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("-n", type=int, default=16, help="samples per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--train-steps", type=int, default=4)
    parser.add_argument("--train-batch", type=int, default=8, help="rollouts per step (2 prompts)")
    parser.add_argument("--train-completion-length", type=int, default=64)
    parser.add_argument("--tiny", action="store_true", help="a tiny random model and tiny sizes (a check)")
    parser.add_argument("--json", default=None, help="also write the numbers to this file")
    args = parser.parse_args()
    args.dtypes = [d for d in args.dtypes.split(",") if d]
    model = args.model
    if args.tiny:
        from sagerl.models import save_tiny_random_model

        model = str(
            save_tiny_random_model(
                "/tmp/sagerl-bench-vllm-tiny", initializer_range=1.0, hidden_size=128, num_attention_heads=2
            )
        )
        args.prompts, args.n, args.max_new_tokens = 2, 2, 8
        args.train_steps, args.train_batch, args.train_completion_length = 2, 4, 8
    if model is None:
        from sagerl.models import resolve_model

        model = resolve_model(None)
    out = {"eval": bench_eval(model, args), "train": bench_train(model, args), "settings": vars(args)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
