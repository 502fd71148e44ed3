"""Throughput of the HF sampling backend at n samples per prompt vs naive one-sample-at-a-time generate.

Both sides use the same model, the same prompts (chat template + the standard suffix), the same
max_new_tokens and temperature, and run side by side in one process. Throughput = completion tokens
generated (end-of-sequence token included) per second of wall time. Target: HFSampler >= 5x naive at n = 16.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/eval_throughput.py                 # embedded SmolLM2
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/eval_throughput.py --prompts 2 --max-new-tokens 32  # short
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PROBLEMS = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?",
    "What is the smallest positive integer n such that 3n is a perfect square and 2n is a perfect cube?",
    "A rectangle has perimeter 30 and area 56. What is the length of its diagonal?",
    "Find the remainder when 2^100 is divided by 7.",
    "How many positive divisors does 360 have?",
    "If x + 1/x = 5, what is x^2 + 1/x^2?",
    "The sum of three consecutive odd integers is 99. What is the largest of them?",
    "A bag has 5 red and 3 blue marbles. Two are drawn without replacement. What is the probability both are red?",
]
SUFFIX = "Please reason step by step, and put your final answer within \\boxed{}."


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=None, help="path or hub id (default: the embedded SmolLM2-135M)")
    parser.add_argument("--prompts", type=int, default=4, help=f"number of prompts (1-{len(PROBLEMS)})")
    parser.add_argument("-n", type=int, default=16, help="samples per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument(
        "--batch-size", type=int, default=None, help="HFSampler batch size (default: its own)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)"
    )
    args = parser.parse_args()

    import torch
    from transformers import GenerationConfig

    from sagerl.eval.samplers import HFSampler

    if args.threads:
        torch.set_num_threads(args.threads)
    sampler = HFSampler(args.model, batch_size=args.batch_size)
    model, tok = sampler.model, sampler.tokenizer
    prompts = []
    for p in PROBLEMS[: max(1, min(args.prompts, len(PROBLEMS)))]:
        msg = [{"role": "user", "content": f"{p}\n{SUFFIX}"}]
        prompts.append(
            tok.apply_chat_template(msg, tokenize=False, add_generation_prompt=True)
            if tok.chat_template
            else f"{p}\n{SUFFIX}\n"
        )
    total = len(prompts) * args.n
    print(
        f"model={args.model or 'embedded SmolLM2-135M-Instruct'} device={sampler.device} dtype={sampler.dtype} "
        f"threads={torch.get_num_threads()} prompts={len(prompts)} n={args.n} "
        f"max_new_tokens={args.max_new_tokens} T={args.temperature} batch_size={sampler.batch_size}"
    )

    # Warm-up (first-call allocations, lazy inits) on both paths, not timed.
    sampler.generate(prompts[:1], 2, max_new_tokens=4, temperature=args.temperature)
    eos = sampler.eos_ids
    gen_cfg = GenerationConfig(
        max_new_tokens=args.max_new_tokens,
        do_sample=args.temperature > 0,
        temperature=args.temperature if args.temperature > 0 else None,
        top_p=None,
        top_k=None,
        eos_token_id=eos,
        pad_token_id=tok.pad_token_id,
    )
    enc0 = tok(prompts[0], return_tensors="pt", add_special_tokens=sampler.add_special_tokens).to(
        sampler.device
    )
    with torch.inference_mode():
        model.generate(
            **enc0, generation_config=GenerationConfig(**{**gen_cfg.to_dict(), "max_new_tokens": 4})
        )

    # 1. HFSampler: all prompts x n samples, batched, shared prefill.
    t = time.perf_counter()
    outs = sampler.generate(
        prompts, args.n, max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed
    )
    t_batched = time.perf_counter() - t
    tok_batched = sum(c.num_tokens for row in outs for c in row)

    # 2. Naive: model.generate, one sample at a time.
    torch.manual_seed(args.seed)
    tok_naive = 0
    t = time.perf_counter()
    with torch.inference_mode():
        for prompt in prompts:
            enc = tok(prompt, return_tensors="pt", add_special_tokens=sampler.add_special_tokens).to(
                sampler.device
            )
            plen = enc["input_ids"].shape[1]
            for _ in range(args.n):
                seq = model.generate(**enc, generation_config=gen_cfg)[0, plen:].tolist()
                stop = next((i for i, x in enumerate(seq) if x in eos), None)
                tok_naive += len(seq) if stop is None else stop + 1
    t_naive = time.perf_counter() - t

    rate_b, rate_n = tok_batched / t_batched, tok_naive / t_naive
    print(
        f"HFSampler (batched, n={args.n}): {tok_batched} tokens in {t_batched:.1f} s = {rate_b:.1f} tokens/s"
    )
    print(f"naive one-at-a-time generate: {tok_naive} tokens in {t_naive:.1f} s = {rate_n:.1f} tokens/s")
    print(f"speed-up: {rate_b / rate_n:.1f}x (target >= 5x); {total} samples each")


if __name__ == "__main__":
    main()
