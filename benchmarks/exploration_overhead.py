"""Step time and peak RSS of each exploration method against GRPO on the embedded model, side by side.

Each variant is ``SAGETrainer`` with the grpo preset's objective plus one method's SAGEConfig fields (the
method presets' keys), trained in its own process (``benchmarks/overhead.py``'s child: forced completion
lengths, learning rate 0, so every step does the same work). Every variant runs with
``steps_per_generation=2`` (each rollout batch serves two optimizer steps, as studies/exploration.yaml), so
that KL-Cov is defined and every variant does the same generation work; the step time is the mean over whole
generation cycles after the first. Rounds alternate the order of the variants. ``unlikely@on-policy`` and
``grpo@on-policy`` measure the unlikeliness reward where TRL computes no π_old (one extra no-grad forward per
rollout batch).

Target: every method's step time and peak RSS / GRPO's <= 1.02 (DARLING with the lexical partition: measured
and stated, not held to it).

Usage: ``python benchmarks/exploration_overhead.py [--steps 5] [--rounds 2] [--tokens 48] [--variants a,b]``
(about 3 minutes per variant and round on 2 idle CPU cores).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

METHODS = {
    "grpo": {},
    "passk": {"advantage_estimator": "passk", "passk_k": 2},
    "pkpo": {"advantage_estimator": "pkpo", "passk_k": 2},
    "w-reinforce": {"advantage_estimator": "w_reinforce"},
    "psr": {"advantage_estimator": "psr"},
    "nsr": {"advantage_estimator": "nsr"},
    "unlikely": {"advantage_estimator": "unlikely"},
    "clip-cov": {"policy_loss": "clip_cov"},
    "kl-cov": {"policy_loss": "kl_cov"},
    "entropy-adv": {"entropy_adv_alpha": 0.4},
    # issue 23's methods (groups of 4: k = 4 -> 1 for the anneal, 2 -> 1 for the two stages)
    "rs-grpo": {"advantage_estimator": "rs_grpo", "risk_beta": 2.0},
    "pkpo-anneal": {
        "advantage_estimator": "pkpo",
        "passk_k": 4,
        "passk_k_schedule": "linear",
        "passk_k_end": 1,
    },
    "passk-two-stage": {
        "advantage_estimator": "passk",
        "passk_k": 2,
        "passk_k_schedule": "step",
        "passk_k_end": 1,
    },
    "passk-mix": {"advantage_estimator": "passk_mix", "passk_k": 2},
    "darling@answer": {"advantage_estimator": "darling", "partition": "answer", "scale_rewards": "none"},
    "darling@lexical": {"advantage_estimator": "darling", "partition": "lexical", "scale_rewards": "none"},
    "ucb-mean": {"advantage_estimator": "ucb_mean"},
    "ucb-con": {"advantage_estimator": "ucb_con"},
    "outcome-batch": {"advantage_estimator": "outcome_batch"},
    "grpo@on-policy": {},
    "unlikely@on-policy": {"advantage_estimator": "unlikely"},
}
"""Variant -> SAGEConfig fields (groups of 4 rollouts here, so k = 2). ``darling@lexical``'s extra cost, the
n(n − 1)/2 n-gram Jaccard comparisons per group, is the one issue 23 asks to measure and state rather than hold
to the target; ``darling@strategy`` (the planted oracle) needs the planted task and is not benchmarked here."""
TARGET = 1.02
EXEMPT = ("darling@lexical",)
"""Variants measured and reported but not held to :data:`TARGET`."""


def _run(variant: str, steps: int, tokens: int, model: str | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, __file__, "--child", variant, "--steps", str(steps), "--tokens", str(tokens)]
        cmd += ["--out", tmp] + (["--model", model] if model else [])
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            sys.exit(f"{variant} failed:\n{proc.stderr[-3000:]}")
        return json.loads(lines[-1][len("RESULT ") :])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument(
        "--steps", type=int, default=5, help="optimizer steps per run (odd: warm-up + cycles)"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--variants", default=",".join(METHODS), help="comma-separated subset")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from overhead import child

        common = {} if args.child.endswith("@on-policy") else {"steps_per_generation": 2}
        result = child("method", args.model, args.steps, args.tokens, args.out, METHODS[args.child], common)
        print("RESULT " + json.dumps(result), flush=True)
        return

    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(METHODS))
    if unknown:
        sys.exit(f"unknown variants {unknown}; known: {', '.join(METHODS)}")
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    for r in range(args.rounds):
        for variant in variants if r % 2 == 0 else list(reversed(variants)):
            result = _run(variant, args.steps, args.tokens, args.model)
            runs[variant].append(result)
            print(
                f"round {r + 1} {variant:18s} steps {[round(t, 2) for t in result['step_times']]} s, "
                f"peak RSS {result['peak_rss_mib']:.0f} MiB",
                flush=True,
            )

    def step(variant: str) -> float:  # mean over the steps after the first (whole generation cycles)
        return statistics.mean(t for run in runs[variant] for t in run["step_times"][1:])

    def peak(variant: str) -> float:
        return max(run["peak_rss_mib"] for run in runs[variant])

    print(f"\n{'variant':18s} {'step (s)':>9s} {'/ grpo':>7s} {'peak RSS (MiB)':>15s} {'/ grpo':>7s}")
    worst = 0.0
    for variant in variants:
        base = "grpo@on-policy" if variant.endswith("@on-policy") else "grpo"
        if base not in runs:
            print(f"{variant:18s} {step(variant):9.3f} {'':>7s} {peak(variant):15.0f}")
            continue
        time_ratio, rss_ratio = step(variant) / step(base), peak(variant) / peak(base)
        if variant != base and variant not in EXEMPT:
            worst = max(worst, time_ratio, rss_ratio)
        print(f"{variant:18s} {step(variant):9.3f} {time_ratio:7.3f} {peak(variant):15.0f} {rss_ratio:7.3f}")
    print(
        f"\nlargest method / grpo ratio {worst:.3f} (target <= {TARGET})  {'ok' if worst <= TARGET else 'OVER TARGET'}"
    )


if __name__ == "__main__":
    main()
