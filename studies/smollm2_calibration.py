"""Calibrate the real-LM study's task: how often the embedded SmolLM2-135M-Instruct solves each arithmetic set.

RL with group advantages learns only from *mixed* groups (some rollouts right, some wrong): a task the base
model never or always solves gives GRPO nothing. For each variant (a set: one level, or levels 1-2; worked
examples in the prompt: 0, 2 or 4; always the model's chat template) this samples ``-n`` completions for the
first ``--problems`` held-out problems and prints a markdown table, a row per variant:

- sample accuracy (mean pass@1), pass@n (the share of problems solved at least once),
- the share of mixed groups of ``--group`` rollouts (:func:`sagerl.eval.passk.mixed_group_share`),
- the share of completions with a boxed answer, their mean length (tokens) and the share cut off.

Each variant is an ordinary ``sagerl eval`` run folder under ``--out`` (rerunning resumes). The numbers and
the choice they led to are in docs/real-lm.md.

Usage: ``python studies/smollm2_calibration.py [--variants arith_l1:4,arith_l2:4] [--problems 64] [-n 8]``
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

DEFAULT_VARIANTS = "arith_l1:0,arith_l1:2,arith_l1:4,arith_l2:2,arith_l3:2"


def parse_variants(text: str) -> list[tuple[str, int]]:
    """``"arith_l1:4,arith_l2:0"`` -> ``[("arith_l1", 4), ("arith_l2", 0)]``.

    Raises:
        ValueError: an entry that is not ``SET:WORKED_EXAMPLES`` with a non-negative integer count.
    """
    variants = []
    for entry in (e.strip() for e in text.split(",") if e.strip()):
        name, sep, shots = entry.partition(":")
        if not sep or not shots.isdigit():
            raise ValueError(f"--variants entry {entry!r}: expected SET:WORKED_EXAMPLES, e.g. arith_l1:4")
        variants.append((name, int(shots)))
    if not variants:
        raise ValueError("--variants: give at least one SET:WORKED_EXAMPLES")
    return variants


def variant_row(run_dir: Path, dataset: str, group: int) -> dict[str, float]:
    """The calibration numbers of one finished eval run folder (one data set)."""
    from sagerl.analysis.runs import load_eval_run
    from sagerl.eval.passk import mixed_group_share, pass_at_k_matrix

    run = load_eval_run(run_dir)
    counts = run.correct_counts(dataset)
    records = [r for pid in run.problem_ids[dataset] for r in run.records[dataset][pid]]
    return {
        "accuracy": float(counts.mean() / run.n),
        f"pass@{run.n}": float(pass_at_k_matrix(run.n, counts, [run.n]).mean()),
        f"mixed@{group}": mixed_group_share(run.n, counts, group),
        "boxed": sum(r.get("extracted") is not None for r in records) / len(records),
        "tokens": sum(r["num_tokens"] for r in records) / len(records),
        "cut off": sum(r.get("finish_reason") == "length" for r in records) / len(records),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=DEFAULT_VARIANTS, help="SET:WORKED_EXAMPLES, comma-separated")
    parser.add_argument("--problems", type=int, default=64)
    parser.add_argument("-n", type=int, default=8, help="samples per problem")
    parser.add_argument("--group", type=int, default=8, help="group size of the mixed-group share")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--out", type=Path, default=Path("runs/smollm2-calibration"))
    args = parser.parse_args(argv)
    from sagerl.eval import evaluate

    rows = []
    for dataset, shots in parse_variants(args.variants):
        folder = args.out / f"{dataset}-{shots}shot"
        start = time.perf_counter()
        evaluate(
            None,
            [dataset],
            n=args.n,
            out=folder,
            limit=args.problems,
            max_new_tokens=args.max_new_tokens,
            few_shot=shots,
            dtype=args.dtype,
            progress=False,
        )
        row = {"set": dataset, "worked examples": shots, **variant_row(folder, dataset, args.group)}
        row["time (s)"] = time.perf_counter() - start
        rows.append(row)
        print(
            f"{dataset} {shots}-shot: " + ", ".join(f"{k} {v:.3g}" for k, v in list(row.items())[2:]),
            flush=True,
        )
    keys = list(rows[0])
    print("\n| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for row in rows:
        cells = [
            v if isinstance(v, str | int) else f"{v:.3f}" if v < 10 else f"{v:.0f}" for v in row.values()
        ]
        print("| " + " | ".join(str(c) for c in cells) + " |")


if __name__ == "__main__":
    main()
