"""The demo's training stage in float32 and in bfloat16, side by side: the same learning, and the time it takes.

Trains the demo's configuration (``grpo+branch`` on the embedded SmolLM2-135M-Instruct, 1 prompt x 8 rollouts
of at most 96 tokens per step, ``sagerl.demo``) for its 12 steps once per dtype, each in its own process, with
the same seed (so the same prompts in the same order), and prints per step: the reward (share of correct
rollouts), the KL to the reference (nats/token) and the step time; then each dtype's mean reward, last-5
mean KL and median step time, the bf16/fp32 ratios, and a figure of the reward and KL curves.

bf16 changes the numbers, not the method: the rollouts differ token by token once a logit differs in
rounding, so the two curves are two samples of the same training, not one curve twice; what must agree is
their level (the mean reward and the KL within their step-to-step spread). The per-batch loss and gradient
tolerance is a test (tests/train/test_precision.py).

Usage: ``python benchmarks/bf16_learning.py [--steps 12] [--plot docs/performance/bf16_curves.png]``, on an idle
machine (about 4 min in bf16 and 10 in fp32 on this project's 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def child(dtype: str, steps: int, out: str) -> None:
    from sagerl.demo import LEARNING_RATE, MAX_NEW_TOKENS, PRESET, train_overrides
    from sagerl.train.run import train

    overrides = {**train_overrides(steps, MAX_NEW_TOKENS, LEARNING_RATE, progress=False), "dtype": dtype}
    overrides["save_steps"] = steps
    train(PRESET, overrides, out, quiet=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--plot", default=None, help="write the curves here (PNG)")
    parser.add_argument("--child", nargs=2, metavar=("DTYPE", "OUT"))
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.steps, args.child[1])
        return
    curves: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for dtype in ("float32", "bfloat16"):
            out = Path(scratch) / dtype
            cmd = [sys.executable, __file__, "--steps", str(args.steps), "--child", dtype, str(out)]
            subprocess.run(cmd, check=True)
            rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
            curves[dtype] = [r for r in rows if "reward" in r]
    print("| step | reward fp32 | reward bf16 | KL fp32 | KL bf16 | step s fp32 | step s bf16 |")
    print("|---|---|---|---|---|---|---|")
    for i, (a, b) in enumerate(zip(curves["float32"], curves["bfloat16"], strict=False), start=1):
        print(
            f"| {i} | {a['reward']:.3f} | {b['reward']:.3f} | {a.get('kl/reference', 0):.4f} | "
            f"{b.get('kl/reference', 0):.4f} | {a.get('step_time', 0):.1f} | {b.get('step_time', 0):.1f} |"
        )
    summary = {}
    for dtype, rows in curves.items():
        summary[dtype] = {
            "mean reward": statistics.mean(r["reward"] for r in rows),
            "reward sd": statistics.pstdev(r["reward"] for r in rows),
            "KL last 5": statistics.mean(r.get("kl/reference", 0.0) for r in rows[-5:]),
            "median step s": statistics.median(r.get("step_time", 0.0) for r in rows[1:]),
        }
        print(f"{dtype}: " + ", ".join(f"{k} {v:.4g}" for k, v in summary[dtype].items()))
    fp32, bf16 = summary["float32"], summary["bfloat16"]
    print(f"step time fp32 / bf16: {fp32['median step s'] / bf16['median step s']:.2f}x")
    if args.plot:
        from sagerl.eval.plots import _pyplot, _save

        plt = _pyplot()
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
        for dtype, rows in curves.items():
            steps = range(1, len(rows) + 1)
            axes[0].plot(steps, [r["reward"] for r in rows], marker="o", label=dtype)
            axes[1].plot(steps, [r.get("kl/reference", 0.0) for r in rows], marker="o", label=dtype)
        axes[0].set(xlabel="step", ylabel="reward (share correct)", title="reward")
        axes[1].set(xlabel="step", ylabel="nats/token", title="KL to the reference")
        axes[0].legend()
        fig.tight_layout()
        _save(fig, Path(args.plot))
        print(f"figure: {args.plot}")


if __name__ == "__main__":
    main()
