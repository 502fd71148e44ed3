"""The evaluation backends on the demo's evaluation, side by side in one process.

Each variant samples the same problems of the calibrated task (``arith_l1``, 2 worked examples per prompt, as
``make demo`` evaluates it), n samples each, with the same seeds and the same weights (one model loaded once), in
rounds (A B C, then C B A, ...) after one untimed call each (the static loop packs its weights once):

- ``hf``: the hf backend at ``--batch-size`` rows (default 64, its CPU default);
- ``static``: the static backend as ``sagerl eval --backend static`` runs it (256 rows a batch, distinct prompts'
  shared leading tokens prefilled once, the draw in row blocks);
- ``static-plain``: the same loop as before those three (2026-12-07): ``--batch-size`` rows, each prompt
  prefilled whole, the draw over all rows at once.

Prints each round's wall time, completion tokens, how many completions are text for text the first variant's (in
float32 all but near-ties; in bfloat16 the loops round differently, so samples drift apart after the first
differing token), and the median time ratio of each variant to the last one per dtype.

    .venv/bin/python benchmarks/eval_backends.py                       # 16 problems x 8, float32 and bfloat16
    .venv/bin/python benchmarks/eval_backends.py --dtypes float32 --problems 64 --variants static-plain,static
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
        "--batch-size", type=int, default=64, help="rows per generation batch of hf and static-plain"
    )
    parser.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated")
    parser.add_argument("--variants", default="hf,static", help="comma-separated: hf, static, static-plain")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    args = parser.parse_args()

    import contextlib

    import torch

    import sagerl.eval.samplers as samplers
    import sagerl.eval.static_decoder as static_decoder
    from sagerl.determinism import machine_record
    from sagerl.eval.samplers import HFSampler
    from sagerl.eval.static_sampler import StaticSampler
    from sagerl.tasks import default_prompt_format, load_problems, render_prompt

    @contextlib.contextmanager
    def plain():
        """The static loop as it was before the shared prefix and the blocked draw."""
        saved = static_decoder.SHARED_PREFIX_MIN, samplers.DRAW_ROWS
        static_decoder.SHARED_PREFIX_MIN = samplers.DRAW_ROWS = 1 << 30
        try:
            yield
        finally:
            static_decoder.SHARED_PREFIX_MIN, samplers.DRAW_ROWS = saved

    torch.set_num_threads(args.threads)
    info = machine_record()
    print(
        f"CPU: {info['cpu']} ({info['kernels']} kernels), {args.threads} threads, torch {torch.__version__}"
    )
    problems = load_problems("arith_l1")[: args.problems]
    names = args.variants.split(",")
    unknown = set(names) - {"hf", "static", "static-plain"}
    if unknown:
        raise SystemExit(f"unknown variants {sorted(unknown)}: choose from hf, static, static-plain")
    for dtype in args.dtypes.split(","):
        hf = HFSampler(args.model, dtype=dtype, batch_size=args.batch_size)
        shared = {"dtype": dtype, "model_obj": hf.model, "tokenizer": hf.tokenizer}
        built = {
            "hf": (hf, contextlib.nullcontext),
            "static": (StaticSampler(None, **shared), contextlib.nullcontext),
            "static-plain": (StaticSampler(None, batch_size=args.batch_size, **shared), plain),
        }
        variants = {name: built[name] for name in names}
        fmt = default_prompt_format("arith_l1")
        prompts = [
            render_prompt(hf.tokenizer, p, few_shot=2, kind=p.kind, prompt_format=fmt) for p in problems
        ]
        for sampler, setting in variants.values():  # untimed: the static loop packs its weights once
            with setting():
                sampler.generate(prompts[:1], 1, max_new_tokens=2, seed=0)
        times: dict[str, list[float]] = {name: [] for name in variants}
        for rnd in range(args.rounds):
            outs = {}
            order = names if rnd % 2 == 0 else names[::-1]
            for name in order:
                sampler, setting = variants[name]
                with setting():
                    start = time.perf_counter()
                    outs[name] = sampler.generate(prompts, args.n, max_new_tokens=args.max_new_tokens, seed=0)
                    times[name].append(time.perf_counter() - start)
                tokens = sum(c.num_tokens for row in outs[name] for c in row)
                print(
                    f"  {dtype} round {rnd + 1} {name:>12}: {times[name][-1]:7.2f} s, {tokens} completion tokens"
                )
            first = outs[names[0]]
            for name in names[1:]:
                same = sum(
                    a == b
                    for ra, rb in zip(first, outs[name], strict=True)
                    for a, b in zip(ra, rb, strict=True)
                )
                print(
                    f"  {dtype} round {rnd + 1}: {name} {same} of {len(prompts) * args.n} completions {names[0]}'s"
                )
        last = statistics.median(times[names[-1]])
        for name in names[:-1]:
            ratio = statistics.median(times[name]) / last
            print(f"{dtype}: {name} / {names[-1]} = {ratio:.2f} (median of {args.rounds} rounds)")


if __name__ == "__main__":
    main()
