"""What the canonical kernels cost: a planted study run's time under ``kernels: canonical`` and ``native``, side by side.

Runs one run of ``studies/exploration.yaml`` (its ``rare2`` setting: ``planted-reference``, 100 steps of 8 prompts
x 8 rollouts, then 64 common + 64 rare problems x 64 samples) on build ``b1``, seed 0, once per mode and round,
alternating the order, each in a fresh study folder through :func:`sagerl.study.run_study` (a canonical study runs
its runs in a worker started under the cap; a native one in this process). Reported per mode: the run's training,
evaluation and total wall time from its ``cell.json`` (the worker's start-up is not in them), the kernels torch
ran (``AVX2`` under the cap), the CPU kind, and whether the two modes gave the same numbers (they do only where
the CPU's native kernels are AVX2's).

Usage: ``python benchmarks/kernels_cost.py [--cell grpo] [--rounds 1] [--steps 100]`` (a few minutes; run it on
an idle machine, 1 torch thread per run as the study has).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "studies" / "exploration.yaml"


def one_run(mode: str, cell: str, steps: int, out: Path) -> dict:
    """One run of ``cell`` (build b1, seed 0, the rare2 setting) with ``mode``'s kernels; its cell.json."""
    from sagerl.study import parse_study, run_study

    data = yaml.safe_load(STUDY.read_text())
    data.pop("settings")
    data.update(name=f"kernels-{mode}", builds=["b1"], seeds=[0], kernels=mode, paired=None)
    data["cells"] = [c for c in data["cells"] if c.get("name", c["preset"]) == cell]
    data["train"]["steps"] = steps
    study = parse_study(data, str(STUDY))
    run_study(study, out, log=lambda line: None)
    status = json.loads(next(out.glob("cells/*/b1/seed-0/cell.json")).read_text())
    result = json.loads(next(out.glob("cells/*/b1/seed-0/eval/results.json")).read_text())
    status["pass@1"] = {k: v["pass@1"] for k, v in result["datasets"].items()}
    return status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", default="grpo", help="a cell of studies/exploration.yaml")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    from sagerl.kernels import cpu_kind

    runs: dict[str, list[dict]] = {"canonical": [], "native": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for mode in ("canonical", "native") if r % 2 == 0 else ("native", "canonical"):
                runs[mode].append(one_run(mode, args.cell, args.steps, Path(tmp) / f"{mode}-{r}"))
    kind = cpu_kind(runs["native"][0]["machine"])
    print(f"{args.cell}, build b1, seed 0, {args.steps} steps + 2 x 64 x 64 eval, 1 thread; CPU: {kind}")
    print("| mode | kernels | train (s) | eval (s) | total (s) | pass@1 common / rare |")
    print("|---|---|---|---|---|---|")
    for mode, done in runs.items():
        med = {k: statistics.median(d[k] for d in done) for k in ("train_s", "eval_s", "total_s")}
        p = done[0]["pass@1"]
        print(
            f"| {mode} | {done[0]['machine']['kernels']} | {med['train_s']:.1f} | {med['eval_s']:.1f} | "
            f"{med['total_s']:.1f} | {p['planted_common']:.4f} / {p['planted_rare']:.4f} |"
        )
    ratio = statistics.median(d["total_s"] for d in runs["canonical"]) / statistics.median(
        d["total_s"] for d in runs["native"]
    )
    same = runs["canonical"][0]["pass@1"] == runs["native"][0]["pass@1"]
    print(f"canonical / native total time: {ratio:.2f}x; the same pass@1: {'yes' if same else 'no'}")


if __name__ == "__main__":
    main()
