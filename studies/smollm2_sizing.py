"""Size the decisive SmolLM2 study from the variance of studies/smollm2.yaml's 15 runs (issue 36; docs/real-lm.md).

Reads the 15 runs of ``studies/results/smollm2.tar.gz`` straight from the archive (nothing is extracted, no
torch) and prints two markdown tables and the decisive study's estimated time:

1. **Seeds.** For every cell and metric of the study's paired comparison (each cell against GRPO's run of the
   same seed, :func:`sagerl.study.statistics.paired_differences`): the mean paired difference, the standard
   deviation of the per-seed differences (n - 1), and the number of seeds at which a 95% t interval, mean ±
   t_{0.975, n-1}·sd/√n with the exact t of :func:`sagerl.study.statistics.t_quantile`, excludes zero if the
   mean and sd stay as observed (:func:`seeds_for_interval`); the seeds at which a two-sided paired t test at
   5% has 80% power against the observed mean (:func:`seeds_for_power`, noncentral t); and the interval's
   seeds again with the sd at its one-sided 80% upper confidence bound (sd·√(2/χ²_{0.2, 2}) = 2.12·sd with
   2 degrees of freedom), since an sd from 3 seeds is itself uncertain; and the smallest |mean| that a 95%
   interval over ``--seeds`` seeds (10: the decisive study's) excludes zero at, t_{0.975, n-1}·sd/√n. These
   two take the sd as at least the evaluation's own noise (2. below): no two runs' difference can vary less.
2. **The evaluation's own noise.** The part of each paired difference's variance that is sampling noise of the
   evaluation (each problem's 32 samples; the 64 problems are the same in every run):
   :func:`eval_noise_variance`, per run Σ_p Var(pass@k estimate | p̂_p) / P², with the estimate's variance exact
   for c ~ Binomial(32, p̂_p), p̂_p = c_p/32 (a plug-in: a problem never solved gets variance 0). With 128
   problems that part halves; :func:`projected_sd` takes it off, the rest (training's spread, and the
   problem-by-model part of it) left as it is.
3. **Training.** The training reward and the share of steps whose one group of 8 is all right or all wrong
   (no GRPO advantage), by thirds of the 24 steps, per cell (mean over seeds); the measured time of every run
   (training: the last step's ``time`` in ``train/metrics.jsonl``; evaluation: ``cell.json``, leaving out the
   run whose ``cell.json`` records a resume, as docs/real-lm.md says); and each run's training extended to
   :data:`LONG_STEPS` steps at the mean step time of its last 8 steps (:func:`extended_train_time`), with
   its evaluation on twice the problems (2 × its time): what one run of the decisive study would take on the
   15-run study's machine.

Usage: ``python studies/smollm2_sizing.py [--archive studies/results/smollm2.tar.gz]``
"""

from __future__ import annotations

import argparse
import json
import math
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sagerl.eval.passk import pass_at_k
from sagerl.study.statistics import paired_differences, t_interval, t_quantile

ROOT = Path(__file__).resolve().parents[1]
ARCHIVE = ROOT / "studies" / "results" / "smollm2.tar.gz"
DATASET = "arith_l1"
BASELINE = "grpo"
CELLS = ("pkpo-anneal@cosine", "pkpo", "passk", "grpo+branch")
KS = (1, 8, 32)
DECISIVE = {
    ("pkpo-anneal@cosine", 1),
    ("pkpo-anneal@cosine", 32),
    ("passk", 32),
    ("grpo+branch", 1),
    ("grpo+branch", 32),
}
"""The comparisons issue 36 names: annealed PKPO vs GRPO on pass@1 and pass@32, passk vs GRPO on pass@32, the
branch guide vs GRPO (pass@1 and pass@32)."""
POWER = 0.8
SD_UPPER_QUANTILE = 0.2
"""The sd's one-sided 80% upper confidence bound: sd·√(df/χ²_{0.2, df})."""
MAX_SEEDS = 10_000
LONG_STEPS = 96
"""The decisive study's training steps (studies/smollm2-decisive.yaml)."""
SKIPPED_TIMES = {("passk", 0)}
"""Runs whose ``cell.json`` records a resume's times, not the run's (docs/real-lm.md)."""


@dataclass
class Run:
    """One run of the archive: its pass@k, per-problem correct counts, training metrics and times."""

    cell: str
    seed: int
    passk: dict[int, float]
    counts: list[int]
    n: int
    rewards: list[float]
    zero_std: list[float]
    step_times: list[float]
    train_s: float
    eval_s: float


def _json(archive: tarfile.TarFile, name: str):
    return json.loads(archive.extractfile(name).read())


def _lines(archive: tarfile.TarFile, name: str) -> list[dict]:
    text = archive.extractfile(name).read().decode("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def read_runs(path: Path = ARCHIVE) -> dict[tuple[str, int], Run]:
    """Every run of the archive, keyed by (cell, seed), read from the archive without extracting it."""
    runs = {}
    with tarfile.open(path) as archive:
        names = set(archive.getnames())
        for name in sorted(names):
            parts = name.split("/")
            if len(parts) != 6 or parts[1] != "cells" or parts[4:] != ["eval", "results.json"]:
                continue
            base = "/".join(parts[:4])
            cell, seed = parts[2], int(parts[3].removeprefix("seed-"))
            data = _json(archive, name)["datasets"][DATASET]
            counts: dict[str, int] = {}
            for row in _lines(archive, f"{base}/eval/samples.jsonl"):
                if row["dataset"] == DATASET:
                    counts[row["problem_id"]] = counts.get(row["problem_id"], 0) + bool(row["correct"])
            metrics = [m for m in _lines(archive, f"{base}/train/metrics.jsonl") if "reward" in m]
            timing = _json(archive, f"{base}/cell.json")
            runs[(cell, seed)] = Run(
                cell=cell,
                seed=seed,
                passk={k: float(data[f"pass@{k}"]) for k in KS},
                counts=list(counts.values()),
                n=int(data["n"]),
                rewards=[float(m["reward"]) for m in metrics],
                zero_std=[float(m["frac_reward_zero_std"]) for m in metrics],
                step_times=[float(m["step_time"]) for m in metrics],
                train_s=float(metrics[-1]["time"]),
                eval_s=float(timing["eval_s"]),
            )
    if not runs:
        raise ValueError(f"{path}: no cells/<cell>/seed-<s>/eval/results.json in the archive")
    return runs


def seeds_for_interval(mean: float, sd: float, level: float = 0.95) -> int | None:
    """The smallest n >= 2 with t_{(1+level)/2, n-1}·sd/√n < |mean| (the interval excludes zero if mean and sd
    stay as observed); None when the mean is 0 or no n up to :data:`MAX_SEEDS` does."""
    if mean == 0 or not math.isfinite(mean) or not math.isfinite(sd):
        return None
    for n in range(2, MAX_SEEDS + 1):
        if t_quantile(n - 1, level) * sd / math.sqrt(n) < abs(mean):
            return n
    return None


def power(mean: float, sd: float, n: int, alpha: float = 0.05) -> float:
    """The power of a two-sided paired t test at level ``alpha`` with n pairs, when the true mean difference is
    ``mean`` and its per-pair sd is ``sd``: P(|T| > t_{1-alpha/2, n-1}), T noncentral t with n - 1 degrees of
    freedom and noncentrality |mean|/sd·√n."""
    from scipy import stats

    crit = t_quantile(n - 1, 1 - alpha)
    nc = abs(mean) / sd * math.sqrt(n) if sd > 0 else math.inf
    if math.isinf(nc):
        return 1.0
    return float(stats.nct.sf(crit, n - 1, nc) + stats.nct.cdf(-crit, n - 1, nc))


def seeds_for_power(mean: float, sd: float, target: float = POWER) -> int | None:
    """The smallest n >= 2 at which :func:`power` reaches ``target``; None as :func:`seeds_for_interval`."""
    if mean == 0 or not math.isfinite(mean) or not math.isfinite(sd):
        return None
    for n in range(2, MAX_SEEDS + 1):
        if power(mean, sd, n) >= target:
            return n
    return None


def sd_upper(sd: float, df: int, quantile: float = SD_UPPER_QUANTILE) -> float:
    """The one-sided upper confidence bound of a normal sd from ``df`` degrees of freedom: sd·√(df/χ²_q)."""
    from scipy import stats

    return sd * math.sqrt(df / stats.chi2.ppf(quantile, df))


def estimate_variance(count: int, n: int, k: int) -> float:
    """Var of the unbiased pass@k estimate of one problem, 1 - C(n-c, k)/C(n, k), when c ~ Binomial(n, p) with
    p = count/n (a plug-in)."""
    p = count / n
    c = np.arange(n + 1)
    weights = np.array([math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in c])
    values = np.array([pass_at_k(n, int(i), k) for i in c])
    mean = float(weights @ values)
    return max(0.0, float(weights @ values**2) - mean**2)


def eval_noise_variance(run: Run, k: int) -> float:
    """The sampling variance of a run's pass@k (a fraction), Σ_p Var_p / P² over its problems."""
    return sum(estimate_variance(c, run.n, k) for c in run.counts) / len(run.counts) ** 2


def projected_sd(sd: float, eval_var: float, problems_factor: float) -> float:
    """The sd of a paired difference with ``problems_factor`` times the problems: the evaluation's sampling
    variance divided by the factor, the rest kept (never below the evaluation's own part)."""
    rest = max(0.0, sd**2 - eval_var)
    return math.sqrt(rest + eval_var / problems_factor)


@dataclass
class Row:
    cell: str
    k: int
    values: list[float]
    mean: float
    ci: tuple[float, float]
    sd: float
    eval_sd: float
    eval_share: float
    n_interval: int | None
    n_power: int | None
    n_interval_sd_upper: int | None
    n_interval_128: int | None
    resolved_at: float

    @property
    def decisive(self) -> bool:
        return (self.cell, self.k) in DECISIVE


def sizing(runs: dict[tuple[str, int], Run], seeds: int = 10) -> list[Row]:
    """One :class:`Row` per cell of :data:`CELLS` and k of :data:`KS`, in points (percent); ``seeds``: the
    study's size for :attr:`Row.resolved_at`."""
    per_seed: dict[str, dict[str, dict[str, float]]] = {}
    for (cell, seed), run in runs.items():
        per_seed.setdefault(cell, {})[str(seed)] = {f"pass@{k}/{DATASET}": run.passk[k] for k in KS}
    paired = paired_differences(
        {cell: {"per_seed": seeds} for cell, seeds in per_seed.items()},
        {"baseline": BASELINE, "metrics": [f"pass@{k}/{DATASET}" for k in KS]},
    )["cells"]
    rows = []
    for cell in CELLS:
        for k in KS:
            entry = paired[cell][f"pass@{k}/{DATASET}"]
            values = [100 * v for v in entry["values"]]
            mean, lo, hi = t_interval(values)
            sd = float(np.std(values, ddof=1))
            noise = [
                eval_noise_variance(runs[(cell, s)], k) + eval_noise_variance(runs[(BASELINE, s)], k)
                for s in entry["seeds"]
            ]
            eval_var = float(np.mean(noise)) * 100**2  # in points²
            floored = max(sd, math.sqrt(eval_var))
            rows.append(
                Row(
                    cell=cell,
                    k=k,
                    values=values,
                    mean=mean,
                    ci=(lo, hi),
                    sd=sd,
                    eval_sd=math.sqrt(eval_var),
                    eval_share=min(1.0, eval_var / sd**2) if sd > 0 else math.nan,
                    n_interval=seeds_for_interval(mean, sd),
                    n_power=seeds_for_power(mean, sd),
                    n_interval_sd_upper=seeds_for_interval(mean, sd_upper(floored, len(values) - 1)),
                    n_interval_128=seeds_for_interval(mean, projected_sd(sd, eval_var, 2.0)),
                    resolved_at=t_quantile(seeds - 1) * floored / math.sqrt(seeds),
                )
            )
    return rows


def _n(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


def _share(x: float) -> str:
    return "> sd" if x >= 1.0 else f"{100 * x:.0f}%"


def _signed(x: float) -> str:
    return f"{x:+.1f}".replace("-", "−")


def seeds_table(rows: Iterable[Row], seeds: int = 10) -> str:
    lines = [
        "| comparison (vs `grpo`) | per seed | mean [95% t] | sd | seeds: 95% CI excludes 0 | seeds: 80% power "
        "| seeds: CI, sd at its 80% upper bound | eval noise sd (share of var) | seeds: CI, 128 problems "
        f"| {seeds} seeds resolve a mean of |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        name = f"`{r.cell}` pass@{r.k}"
        if r.decisive:
            name = f"**{name}**"
        lines.append(
            f"| {name} | {', '.join(_signed(v) for v in r.values)} | {_signed(r.mean)} [{_signed(r.ci[0])}, "
            f"{_signed(r.ci[1])}] | {r.sd:.1f} | {_n(r.n_interval)} | {_n(r.n_power)} | "
            f"{_n(r.n_interval_sd_upper)} | {r.eval_sd:.1f} ({_share(r.eval_share)}) | {_n(r.n_interval_128)} | "
            f"{r.resolved_at:.1f} |"
        )
    return "\n".join(lines)


def extended_train_time(run: Run, steps: int = LONG_STEPS, tail: int = 8) -> float:
    """The run's training time (s) had it gone on to ``steps`` steps at the mean time of its last ``tail``
    steps (the steps after the entropy and the completions' length have fallen)."""
    extra = steps - len(run.step_times)
    return run.train_s + max(0, extra) * float(np.mean(run.step_times[-tail:]))


def thirds(values: list[float]) -> list[float]:
    third = len(values) // 3
    return [float(np.mean(values[i * third : (i + 1) * third])) for i in range(3)]


def training_table(runs: dict[tuple[str, int], Run]) -> str:
    cells = [BASELINE, *CELLS]
    lines = [
        "| cell | reward, steps 1–8 / 9–16 / 17–24 | groups with no advantage, same thirds | train (s) | eval (s) "
        f"| one run: {LONG_STEPS} steps + eval × 2 (s) |",
        "|---|---|---|---|---|---|",
    ]
    for cell in [*cells, "all"]:
        chosen = [r for (c, _), r in sorted(runs.items()) if cell in ("all", c)]
        reward = np.mean([thirds(r.rewards) for r in chosen], axis=0)
        zero = np.mean([thirds(r.zero_std) for r in chosen], axis=0)
        timed = [r for r in chosen if (r.cell, r.seed) not in SKIPPED_TIMES]
        train = f"{min(r.train_s for r in chosen):,.0f}–{max(r.train_s for r in chosen):,.0f}"
        ev = f"{min(r.eval_s for r in timed):,.0f}–{max(r.eval_s for r in timed):,.0f}"
        whole = [extended_train_time(r) + 2 * r.eval_s for r in timed]
        name = "all 15 runs" if cell == "all" else f"`{cell}`"
        lines.append(
            f"| {name} | {' / '.join(f'{x:.3f}' for x in reward)} | "
            f"{' / '.join(f'{100 * x:.0f}%' for x in zero)} | {train} | {ev} | "
            f"{min(whole):,.0f}–{max(whole):,.0f} |"
        )
    return "\n".join(lines)


def run_times(runs: dict[tuple[str, int], Run]) -> list[float]:
    """One decisive-study run's estimated time (s) from each timed 15-run-study run: its training extended to
    :data:`LONG_STEPS` steps plus twice its evaluation."""
    return sorted(
        extended_train_time(r) + 2 * r.eval_s for key, r in runs.items() if key not in SKIPPED_TIMES
    )


def cost_line(runs: dict[tuple[str, int], Run], count: int, jobs: int = 2) -> str:
    times = run_times(runs)
    median = float(np.median(times))
    return (
        f"one run of {LONG_STEPS} steps with twice the evaluation: median {median:,.0f} s "
        f"({times[0]:,.0f}–{times[-1]:,.0f} over {len(times)} runs); {count} runs with --jobs {jobs}: "
        f"{count * median / jobs / 3600:.1f} h at the median ({count * times[0] / jobs / 3600:.1f}–"
        f"{count * times[-1] / jobs / 3600:.1f}), before the base model's evaluation"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archive", type=Path, default=ARCHIVE, help="the SmolLM2 study's archive")
    parser.add_argument("--seeds", type=int, default=10, help="the decisive study's seeds")
    parser.add_argument("--cells", type=int, default=5, help="the decisive study's cells (for its time)")
    args = parser.parse_args(argv)
    if args.seeds < 2:
        parser.error(f"--seeds: an interval needs at least 2 seeds, got {args.seeds}")
    runs = read_runs(args.archive)
    print(
        f"{len(runs)} runs of {args.archive.name}; paired differences to `{BASELINE}` in points, bold: decisive\n"
    )
    print(seeds_table(sizing(runs, args.seeds), args.seeds))
    print()
    print(training_table(runs))
    print()
    print(cost_line(runs, args.cells * args.seeds))


if __name__ == "__main__":
    main()
