"""The ``static`` evaluation backend against ``hf`` on the demo's evaluation, side by side in one process.

Both backends sample the same problems of the calibrated task (``arith_l1``, 2 worked examples per prompt, as
``make demo`` evaluates it), n samples each, with the same seeds and the same weights (one model loaded once),
in rounds A B A B after one untimed call each (the static loop packs its weights once). Prints each round's wall time, completion tokens, how many completions are text for text the
hf backend's (in float32 all but near-ties; in bfloat16 the two loops round differently, so samples drift apart
after the first differing token), and the median time ratio hf / static per dtype.

    .venv/bin/python benchmarks/eval_backends.py                       # 16 problems x 8, float32 and bfloat16
    .venv/bin/python benchmarks/eval_backends.py --dtypes float32 --problems 4 --rounds 1   # quick

Run it on an idle machine: another torch process on the same cores slows both sides unevenly.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=None, help="path (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--problems", type=int, default=16, help="held-out arith_l1 problems")
    parser.add_argument("-n", type=int, default=8, help="samples per problem")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument(
        "--batch-size", type=int, default=64, help="rows per generation batch (both backends)"
    )
    parser.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    args = parser.parse_args()

    import torch

    from sagerl.determinism import machine_record
    from sagerl.eval.samplers import HFSampler
    from sagerl.eval.static_sampler import StaticSampler
    from sagerl.tasks import default_prompt_format, load_problems, render_prompt

    torch.set_num_threads(args.threads)
    info = machine_record()
    print(
        f"CPU: {info['cpu']} ({info['kernels']} kernels), {args.threads} threads, torch {torch.__version__}"
    )
    problems = load_problems("arith_l1")[: args.problems]
    for dtype in args.dtypes.split(","):
        hf = HFSampler(args.model, dtype=dtype, batch_size=args.batch_size)
        static = StaticSampler(
            None, dtype=dtype, batch_size=args.batch_size, model_obj=hf.model, tokenizer=hf.tokenizer
        )
        fmt = default_prompt_format("arith_l1")
        prompts = [
            render_prompt(hf.tokenizer, p, few_shot=2, kind=p.kind, prompt_format=fmt) for p in problems
        ]
        for sampler in (
            hf,
            static,
        ):  # untimed: the static loop packs its weights and allocates its cache once
            sampler.generate(prompts[:1], 1, max_new_tokens=2, seed=0)
        times: dict[str, list[float]] = {"hf": [], "static": []}
        for rnd in range(args.rounds):
            outs = {}
            for name, sampler in (("hf", hf), ("static", static)):
                start = time.perf_counter()
                outs[name] = sampler.generate(prompts, args.n, max_new_tokens=args.max_new_tokens, seed=0)
                times[name].append(time.perf_counter() - start)
                tokens = sum(c.num_tokens for row in outs[name] for c in row)
                print(
                    f"  {dtype} round {rnd + 1} {name:>6}: {times[name][-1]:7.2f} s, {tokens} completion tokens"
                )
            same = sum(
                a == b
                for ra, rb in zip(outs["hf"], outs["static"], strict=True)
                for a, b in zip(ra, rb, strict=True)
            )
            print(f"  {dtype} round {rnd + 1}: {same} of {len(prompts) * args.n} completions the same")
        ratio = statistics.median(times["hf"]) / statistics.median(times["static"])
        print(f"{dtype}: hf / static = {ratio:.2f} (median of {args.rounds} rounds)")


if __name__ == "__main__":
    main()
