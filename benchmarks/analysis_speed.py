"""Speed and memory of the analyses (issue 7): support + patterns on large runs, batched branching re-scoring.

1. Support + patterns: builds two synthetic eval run folders (base and run) of ``--problems`` x ``--samples``
   completions (default 500 x 256 = 128,000 each) of about ``--words`` words (default 300) in the style of
   math solutions, with realistic cue phrases, answers and correctness; then, in a fresh process, loads both
   runs and runs the support analysis (taxonomy, paired pass@k, answer entropy, distinct strategies,
   distinct-2, figure) and the pattern analysis (lexicon labels of every completion, shares among correct
   and all completions with bootstrap CIs, the paired comparison, figure). Prints the wall time of each
   phase and the peak RSS of that process. Targets: <= 60 s and <= 2 GB on the project's 2-core machine.
2. Branching re-scoring on a tiny random model (2 layers, the embedded tokenizer's 49,152-token
   vocabulary), side by side in one process, alternating rounds: ``rescore`` with ``--batch-size`` against
   one completion at a time, (a) the straightforward loop (one forward pass of prompt + completion per
   completion, logits at every position, entropy at the completion's positions) and (b) ``rescore`` with
   batch_size=1 (the same code without batching or prompt sharing). Target: batched >= 5x faster than (a).

Run on an idle machine (other processes on the 2 cores distort both parts):

    python benchmarks/analysis_speed.py                       # both parts, default sizes
    python benchmarks/analysis_speed.py --skip-branching      # part 1 only
    python benchmarks/analysis_speed.py --problems 50 --samples 32 --branching-rounds 1   # a quick check
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SENTENCES = (
    "Let x be the number of {a} we need to find.",
    "We set up the equation {a}x + {b} = {c}.",
    "Subtracting {b} from both sides gives {a}x = {d}.",
    "Dividing by {a}, we get x = {e}.",
    "First, compute {a} × {b} = {c}.",
    "Then add {d} to get {e}.",
    "So the total is {c} + {d} = {e}.",
    "Consider two cases depending on whether n is even or odd.",
    "Case 1: n is even, so n = 2k for some integer k.",
    "In the second case n = 2k + 1 and the sum is odd.",
    "Substituting y = {a} into the first equation gives x = {b}.",
    "Plugging this back in, we find {c}.",
    "Let's verify: {a} + {b} = {c}, which matches.",
    "We can check the answer by multiplying back: {a} × {b} = {c}.",
    "The remainder when {c} is divided by {a} is {b}.",
    "Working modulo {a}, every term is congruent to {b}.",
    "Suppose, for contradiction, that such a number exists.",
    "This contradicts the assumption that {a} is the smallest.",
    "We list the divisors of {c}: 1, {a}, {b} and {c}.",
    "Trying x = {a} gives {c}, which is too large.",
    "By symmetry we may assume that a ≤ b.",
    "The sum of the numbers never changes, so it stays {c}.",
    "We prove it by induction on n, with base case n = 1.",
    "Place the triangle in the coordinate plane with one vertex at the origin.",
    "The area is half the base times the height, {a} × {b} / 2 = {d}.",
    "Since each term is at most {a}, the sum is bounded by {c}.",
    "This gives approximately {e}, so we round to {d}.",
    "Now we simplify the fraction {a}/{c} to lowest terms.",
    "The probability is therefore {a}/{c}.",
    "Multiplying the two expressions together, we obtain {c}.",
    "Note that {a} + {b} + {d} = {e}.",
    "Hence the number of ways is {e}.",
    "The perimeter of the rectangle is 2({a} + {b}) = {c}.",
    "We factor the quadratic as (x - {a})(x - {b}) = 0.",
    "So the roots are x = {a} and x = {b}.",
    "Combining like terms, the expression becomes {a}x + {d}.",
    "Each of the {a} boxes holds {b} items, for {c} items in all.",
    "After {a} hours the tank holds {c} liters.",
    "The average of these values is {e} / {a} = {d}.",
    "Therefore the final answer is {e}.",
)


def synthetic_text(rng: random.Random, words: int, answer: int) -> str:
    parts, count = [], 0
    while count < words:
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        s = rng.choice(SENTENCES).format(a=a, b=b, c=a * b, d=a + b, e=rng.randint(1, 9999))
        parts.append(s)
        count += len(s.split())
    return " ".join(parts) + f" The answer is \\boxed{{{answer}}}."


def build_run(folder: Path, problems: int, samples: int, words: int, skill: float, seed: int) -> None:
    """Write an eval run folder with ``problems`` x ``samples`` synthetic completions."""
    from sagerl.eval.results import summarize, write_results

    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    settings = {
        "model": f"synthetic-{seed}",
        "temperature": 1.0,
        "top_p": 1.0,
        "max_new_tokens": 1024,
        "seed": 0,
        "few_shot": None,
    }
    (folder / "eval_config.json").write_text(json.dumps({"settings": settings}), encoding="utf-8")
    counts = []
    with open(folder / "samples.jsonl", "w", encoding="utf-8") as f:
        for p in range(problems):
            difficulty = random.Random(p).betavariate(0.6, 0.9)  # shared by both runs
            rate = max(0.0, min(1.0, skill * (1 - difficulty) + rng.uniform(-0.1, 0.1)))
            answer = random.Random(p).randint(1, 999)
            c = 0
            for j in range(samples):
                correct = rng.random() < rate
                given = (
                    answer
                    if correct
                    else rng.choice((answer + 1, answer - 1, answer * 2, rng.randint(1, 999)))
                )
                c += correct
                rec = {
                    "dataset": "synthetic",
                    "problem_id": f"p{p:04d}",
                    "sample_index": j,
                    "text": synthetic_text(rng, words, given),
                    "extracted": str(given),
                    "answer": str(answer),
                    "correct": correct,
                    "num_tokens": int(words * 1.4),
                    "finish_reason": "stop",
                }
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            counts.append(c)
    write_results(
        folder,
        {"meta": {"n": samples, "model": settings["model"]}, **summarize({"synthetic": counts}, samples)},
    )


def child(base: str, run: str, out: str) -> None:
    """Part 1's timed process: load, support, patterns; prints one JSON line."""
    from sagerl.analysis.patterns import analyze_patterns
    from sagerl.analysis.runs import load_eval_run, set_unique_labels
    from sagerl.analysis.support import analyze_support

    times = {}
    t0 = t = time.perf_counter()
    runs = [load_eval_run(base), load_eval_run(run)]
    set_unique_labels(runs)
    times["load"] = time.perf_counter() - t
    t = time.perf_counter()
    analyze_support(runs[0], runs[1:], out)
    times["support"] = time.perf_counter() - t
    t = time.perf_counter()
    analyze_patterns(runs, out)
    times["patterns"] = time.perf_counter() - t
    times["total"] = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    completions = sum(len(ids) * r.n for r in runs for ids in r.problem_ids.values())
    print(json.dumps({"times": times, "peak_rss_gb": peak_kb / 2**20, "completions": completions}))


def part1(args) -> None:
    with tempfile.TemporaryDirectory(prefix="sagerl-analysis-bench-") as tmp:
        t = time.perf_counter()
        base, run = Path(tmp) / "base", Path(tmp) / "run"
        build_run(base, args.problems, args.samples, args.words, skill=0.55, seed=1)
        build_run(run, args.problems, args.samples, args.words, skill=0.65, seed=2)
        size = sum((d / "samples.jsonl").stat().st_size for d in (base, run)) / 2**20
        print(
            f"built 2 runs of {args.problems} x {args.samples} completions (~{args.words} words), "
            f"{size:.0f} MiB of samples.jsonl, in {time.perf_counter() - t:.0f} s"
        )
        proc = subprocess.run(
            [sys.executable, __file__, "--child", str(base), str(run), str(Path(tmp) / "out")],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            sys.exit(f"the timed process failed:\n{proc.stderr[-3000:]}")
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    times = result["times"]
    print(
        f"support + patterns on {result['completions']} completions (both runs): "
        + ", ".join(f"{k} {v:.1f} s" for k, v in times.items())
    )
    print(f"  total {times['total']:.1f} s (target <= 60 s): {'ok' if times['total'] <= 60 else 'OVER'}")
    print(
        f"  peak RSS {result['peak_rss_gb']:.2f} GB (target <= 2 GB): {'ok' if result['peak_rss_gb'] <= 2 else 'OVER'}"
    )


def naive_entropies(model, tokenizer, run, temperature: float, limit: int):
    """One completion at a time, the straightforward way: full logits of prompt + completion."""
    import torch

    from sagerl.tasks import default_few_shot, load_problems, render_prompt

    problems = {p.id: p for p in load_problems("arith", limit=limit)}
    out = []
    with torch.inference_mode():
        for pid in run.problem_ids["arith"][:limit]:
            prompt = tokenizer(render_prompt(tokenizer, problems[pid], few_shot=default_few_shot("arith")))[
                "input_ids"
            ]
            for rec in run.records["arith"][pid]:
                comp = tokenizer(rec["text"], add_special_tokens=False)["input_ids"] + [
                    tokenizer.eos_token_id
                ]
                logits = (
                    model(torch.tensor([prompt + comp])).logits[0, len(prompt) - 1 : -1].float() / temperature
                )
                logp = torch.log_softmax(logits, -1)
                out.append(-(logp.exp() * logp).sum(-1))
    return out


def part2(args) -> None:
    import torch

    from sagerl.analysis.branching import rescore
    from sagerl.analysis.runs import load_eval_run
    from sagerl.eval.results import summarize, write_results
    from sagerl.models import load_model, load_tokenizer, save_tiny_random_model
    from sagerl.tasks import load_problems

    torch.set_num_threads(args.threads)
    rng = random.Random(0)
    with tempfile.TemporaryDirectory(prefix="sagerl-branching-bench-") as tmp:
        model_dir = save_tiny_random_model(Path(tmp) / "tiny", seed=0, initializer_range=1.0)
        model, tokenizer = load_model(str(model_dir)), load_tokenizer(str(model_dir))
        folder = Path(tmp) / "eval"
        folder.mkdir()
        settings = {
            "model": "tiny",
            "temperature": 1.0,
            "top_p": 1.0,
            "max_new_tokens": 96,
            "seed": 0,
            "few_shot": None,
        }
        (folder / "eval_config.json").write_text(json.dumps({"settings": settings}))
        lines, counts = [], []
        problems = load_problems("arith", limit=args.branching_problems)
        for p in problems:
            c = 0
            for j in range(args.branching_samples):
                text = synthetic_text(rng, args.branching_words, p.answer)
                correct = rng.random() < 0.3
                c += correct
                lines.append(
                    json.dumps(
                        {
                            "dataset": "arith",
                            "problem_id": p.id,
                            "sample_index": j,
                            "text": text,
                            "extracted": p.answer,
                            "answer": p.answer,
                            "correct": correct,
                            "num_tokens": 0,
                            "finish_reason": "stop",
                        }
                    )
                )
            counts.append(c)
        (folder / "samples.jsonl").write_text("\n".join(lines) + "\n")
        write_results(
            folder,
            {"meta": {"n": args.branching_samples}, **summarize({"arith": counts}, args.branching_samples)},
        )
        run = load_eval_run(folder)
        guide = {"gamma": 0.3, "tau": 1.2, "q_min": 0.6, "q_max": 1.4}
        contenders = {
            "batched": lambda: rescore(run, model, tokenizer, guide=guide, batch_size=args.batch_size),
            "rescore batch_size=1": lambda: rescore(run, model, tokenizer, guide=guide, batch_size=1),
            "naive one at a time": lambda: naive_entropies(
                model, tokenizer, run, 1.0, args.branching_problems
            ),
        }
        contenders["batched"]()  # warm-up
        best = {name: float("inf") for name in contenders}
        for _ in range(args.branching_rounds):
            for name, fn in contenders.items():
                t = time.perf_counter()
                fn()
                best[name] = min(best[name], time.perf_counter() - t)
        tokens = sum(len(r.token_ids) for r in contenders["batched"]())
    print(
        f"branching re-scoring, tiny model, {len(lines)} completions ({tokens} tokens), "
        f"{args.threads} thread(s), best of {args.branching_rounds} alternating rounds:"
    )
    for name, seconds in best.items():
        print(f"  {name:22s} {seconds:7.2f} s  {tokens / seconds:8.0f} tokens/s")
    naive = best["naive one at a time"] / best["batched"]
    print(f"  batched vs naive one at a time: {naive:.1f}x (target >= 5x): {'ok' if naive >= 5 else 'UNDER'}")
    print(f"  batched vs rescore(batch_size=1): {best['rescore batch_size=1'] / best['batched']:.1f}x")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:5])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=500)
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--words", type=int, default=300)
    parser.add_argument("--skip-support", action="store_true")
    parser.add_argument("--skip-branching", action="store_true")
    parser.add_argument("--branching-problems", type=int, default=16)
    parser.add_argument("--branching-samples", type=int, default=8)
    parser.add_argument("--branching-words", type=int, default=40)
    parser.add_argument("--branching-rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="torch threads in part 2")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if not args.skip_support:
        part1(args)
    if not args.skip_branching:
        part2(args)


if __name__ == "__main__":
    main()
