"""How far int8 rollout weights would move the demo's rollouts: KL(float32 ‖ int8) per token on the demo's prompts.

The sampler issue names int8 rollout weights with an importance-sampling correction as a lever: fbgemm's
dynamically quantised linears (``torch.ao.quantization.quantize_dynamic``: int8 weights, 8-bit activations per
call) run 2.5-4x faster than oneDNN's float32 ones at the demo's 8 rows on the AVX2 EPYC
(``benchmarks/linear_kernels.py``, kernel ``int8-dynamic``). The correction only works where the sampler's
distribution is close to the policy's. This script samples completions from SmolLM2-135M in float32 on the demo's
held-out arithmetic prompts (``arith_l1``, 2 worked examples; the static decoder, seeded), then, teacher-forced on
those tokens, compares the next-token distributions of the float32 model and of copies with some linears in int8:

- ``all``: every linear, one scale per output row (per channel); ``all-per-tensor``: one scale per matrix;
- ``attention+gate/up``: q, k, v, o and the MLP's gate and up projections (down and the LM head stay float32);
- ``gate/up``: the MLP's gate and up projections only.

Prints per variant the mean, 99th percentile and largest KL(float32 ‖ int8) in nats per completion token, and the
mean |Δ log p| of the sampled tokens (what an importance ratio per token would correct). For scale: the demo's
whole training moves the policy 0.015-0.17 nats a token from the reference (its ``kl`` column).

    .venv/bin/python benchmarks/int8_rollouts.py              # 16 problems x 2 samples, 2 threads
"""

from __future__ import annotations

import argparse
import copy

VARIANTS = {  # name: (module-name suffixes to quantise, per channel)
    "all": (None, True),
    "all-per-tensor": (None, False),
    "attention+gate/up": (("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj"), True),
    "gate/up": (("gate_proj", "up_proj"), True),
}


def quantised(model, suffixes, per_channel: bool):
    """A copy of ``model`` with the linears named by ``suffixes`` (all when None) dynamically quantised to int8."""
    import torch
    from torch.ao.quantization import default_dynamic_qconfig, per_channel_dynamic_qconfig, quantize_dynamic

    qconfig = per_channel_dynamic_qconfig if per_channel else default_dynamic_qconfig
    spec = {
        name: qconfig
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and (suffixes is None or name.endswith(suffixes))
    }
    return quantize_dynamic(copy.deepcopy(model), spec, dtype=torch.qint8)


def completion_logps(model, prompt: list[int], completion: list[int]):
    """log-softmax (T, V) of the positions that predict ``completion`` (T tokens), teacher-forced."""
    import torch

    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    return logits.log_softmax(-1)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--problems", type=int, default=16)
    parser.add_argument("--samples", type=int, default=2, help="completions per problem")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import warnings

    import torch

    from sagerl.eval.static_decoder import StaticDecoder
    from sagerl.models import load_model, load_tokenizer
    from sagerl.tasks.datasets import load_problems
    from sagerl.tasks.prompts import render_prompt

    warnings.filterwarnings("ignore")  # torch.ao.quantization's deprecation notices
    torch.set_num_threads(args.threads)
    model, tokenizer = load_model(None).eval(), load_tokenizer(None)
    prompts = [
        tokenizer(render_prompt(tokenizer, problem, few_shot=2))["input_ids"]
        for problem in load_problems("arith_l1", limit=args.problems)
        for _ in range(args.samples)
    ]
    completions = StaticDecoder(model, rows=len(prompts)).generate(
        prompts,
        max_new_tokens=64,
        eos_token_ids=[tokenizer.eos_token_id],
        pad_token_id=tokenizer.pad_token_id or 0,
        generator=torch.Generator().manual_seed(0),
    )
    pairs = [(p, c) for p, c in zip(prompts, completions, strict=True) if c]
    reference = [completion_logps(model, p, c) for p, c in pairs]
    tokens = sum(len(c) for _, c in pairs)
    print(
        f"{torch.__version__}, {args.threads} threads, ISA {torch.backends.cpu.get_cpu_capability()}; "
        f"{len(pairs)} completions of the float32 model, {tokens} tokens (arith_l1, 2 worked examples)"
    )
    for name, (suffixes, per_channel) in VARIANTS.items():
        int8 = quantised(model, suffixes, per_channel)
        kl, shift = [], []
        for (prompt, completion), ref in zip(pairs, reference, strict=True):
            low = completion_logps(int8, prompt, completion)
            kl.append((ref.exp() * (ref - low)).sum(-1))
            chosen = torch.tensor(completion)[:, None]
            shift.append((ref.gather(1, chosen) - low.gather(1, chosen))[:, 0].abs())
        kl_all, shift_all = torch.cat(kl), torch.cat(shift)
        print(
            f"{name:18s} KL(float32 || int8) mean {kl_all.mean():.4f}  p99 {kl_all.quantile(0.99):.4f}  "
            f"max {kl_all.max():.3f} nats/token;  mean |d log p| of the sampled tokens {shift_all.mean():.4f}"
        )


if __name__ == "__main__":
    main()
