"""The per-step work each exploration method adds to GRPO's, measured side by side, and the step-time ratio it
bounds.

What a method changes in a training step is its advantage computation (sagerl.objective.compute_advantages) and
what the trainer reads for it off the scored completions: DARLING's partition of each group (answer, lexical
n-gram Jaccard, or the planted oracle's strategy label), outcome-based exploration's answer ids and its
(prompt, answer) counts. Everything else (sampling, the policy and reference forwards, the loss) is GRPO's.
This times that added work for every method on one batch of the shape of ``studies/pareto.yaml`` (8 groups of 8
completions) with random 0/1 rewards, against GRPO's own advantages in the same run, rounds alternating the
order, and prints, for a GRPO step of ``--step-s`` seconds, the bound

    step ratio <= (step_s + t_method - t_grpo) / step_s.

The default ``--step-s 0.316`` is a GRPO step of the planted task measured in ``studies/exploration.yaml`` on an
AVX2 machine (its grpo cells' mean train_s / 100 steps, one thread): the smallest step of this project, so
the largest ratio; a SmolLM2 step takes 40-120 s (docs/performance.md).

Usage: ``python benchmarks/advantage_cost.py [--groups 8] [--group-size 8] [--tokens 24] [--rounds 5]``
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from sagerl.objective import OutcomeCounts, compute_advantages, lexical_partition, partition_from_keys


def _batch(groups: int, group_size: int, tokens: int, seed: int) -> dict:
    rng = random.Random(seed)
    n = groups * group_size
    return {
        "rewards": torch.tensor([float(rng.random() < 0.4) for _ in range(n)], dtype=torch.float64),
        # completions as token ids over a small vocabulary (n-grams repeat, as in arithmetic completions)
        "sequences": [[rng.randrange(40) for _ in range(tokens)] for _ in range(n)],
        "answers": [str(rng.randrange(4)) if rng.random() < 0.9 else None for _ in range(n)],
        "strategies": [rng.choice(["head", "tail", "second", "third"]) for _ in range(n)],
        "prompts": [f"p{i // group_size}" for i in range(n)],
    }


def _variants(group_size: int) -> dict:
    """name -> callable(batch, state) doing the method's whole per-step work (objective plus the trainer's
    reading of the completions)."""
    g = group_size

    def simple(name, **kw):
        return lambda b, s: compute_advantages(name, b["rewards"], g, **kw)

    def darling(kind):
        def run(b, s):
            if kind == "lexical":
                clusters = lexical_partition(b["sequences"], g, n=2, threshold=0.5)
            else:
                clusters = partition_from_keys(b["answers" if kind == "answer" else "strategies"], g)
            return compute_advantages("darling", b["rewards"], g, clusters=clusters)

        return run

    def outcome(name):
        def run(b, s):
            answers = partition_from_keys(b["answers"], g)
            counts = s.setdefault("counts", OutcomeCounts()).update(b["prompts"], b["answers"])
            return compute_advantages(name, b["rewards"], g, answers=answers, counts=counts)

        return run

    def outcome_batch(b, s):
        return compute_advantages(
            "outcome_batch", b["rewards"], g, answers=partition_from_keys(b["answers"], g)
        )

    return {
        "grpo": simple("grpo"),
        "pkpo": simple("pkpo", k=4),
        "passk": simple("passk", k=4),
        "rs-grpo": simple("rs_grpo", risk_beta=2.0),
        "passk-mix": simple("passk_mix", k=4),
        "darling (answer)": darling("answer"),
        "darling (lexical)": darling("lexical"),
        "darling (strategy, oracle)": darling("strategy"),
        "ucb-mean": outcome("ucb_mean"),
        "ucb-con": outcome("ucb_con"),
        "outcome-batch": outcome_batch,
    }


def _time(fn, batch, state, repeats: int) -> float:
    fn(batch, state)  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        fn(batch, state)
    return (time.perf_counter() - start) / repeats


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument(
        "--tokens", type=int, default=24, help="completion length (tokens), for the lexical partition"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=50, help="calls per timing")
    parser.add_argument("--step-s", type=float, default=0.316, help="a GRPO training step (seconds)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    batch = _batch(args.groups, args.group_size, args.tokens, seed=0)
    variants = _variants(args.group_size)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(args.rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for name in order:
            times[name].append(_time(variants[name], batch, {}, args.repeats))
    grpo = statistics.median(times["grpo"])
    n = args.groups * args.group_size
    print(
        f"{n} completions ({args.groups} groups of {args.group_size}, {args.tokens} tokens), "
        f"{args.rounds} rounds x {args.repeats} calls, median per step; GRPO step {args.step_s} s"
    )
    print("| method | added work per step (ms) | ÷ GRPO's advantages | step-time ratio bound |")
    print("|---|---|---|---|")
    for name, values in times.items():
        t = statistics.median(values)
        bound = (args.step_s + t - grpo) / args.step_s
        print(f"| {name} | {t * 1e3:.3f} | {t / grpo:.1f} | {bound:.4f} |")


if __name__ == "__main__":
    main()
