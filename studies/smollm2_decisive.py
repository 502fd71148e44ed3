"""What the decisive SmolLM2 study says so far (issue 36; docs/real-lm.md): its decisive comparisons and the
Yue et al. crossover of every run, read from its archive.

Reads the aggregate (``study.json``) that ``sagerl study studies/smollm2-decisive.yaml`` wrote at the end of
its last sitting into ``studies/results/smollm2-decisive.tar.gz`` (nothing is extracted, no torch; the test
checks that the archive's runs aggregate again to the same numbers) and prints two markdown tables:

1. **The decisive comparisons**, fixed before any run (docs/real-lm.md, "Sizing the decisive study"): each cell
   against GRPO's run of the same seed on pass@1 and pass@32 (the study's paired differences,
   :func:`sagerl.study.statistics.paired_differences`: per-seed differences, their mean and 95% t interval,
   mean ± t_{0.975, n-1}·sd/√n). The rule written down before the runs: a comparison is **resolved** when its
   interval over the study's :data:`SEEDS` seeds excludes zero. Until a cell has them all, its row is
   *interim* and says no more than that (an interval over 2 seeds is no verdict).
2. **The crossover, run by run**: pass@k(run) − pass@k(base model) in points at every k the evaluation reports
   (:func:`sagerl.study.table.run_gains`), and the crossover k of
   :func:`sagerl.analysis.support.crossover_k`: the smallest k of the grid (1, 2, 4, ..., 32) from which the
   run's point estimate stays below the base model's (Yue et al. 2025, "Does RL really incentivize reasoning
   capacity beyond the base model?"), so 32 means a crossing between 16 and 32; "–" where the run is level or
   ahead at the largest k (no crossing), "below at every k" where the base model leads from k = 1. Point
   estimates: the evaluation's own noise (2-3 points of pass@32 a difference, docs/real-lm.md) is not
   accounted for.

Then issue 36's two questions, each answered by the rule (:func:`answers`): does annealed PKPO dominate GRPO
(resolved better on pass@1 and on pass@32), and does Pass@k Training's pass@32 gain resolve?

Usage: ``python studies/smollm2_decisive.py [--archive studies/results/smollm2-decisive.tar.gz]``
"""

from __future__ import annotations

import argparse
import json
import math
import tarfile
from pathlib import Path
from typing import Any

from sagerl.analysis.support import crossover_k
from sagerl.study.table import run_gains

ROOT = Path(__file__).resolve().parents[1]
ARCHIVE = ROOT / "studies" / "results" / "smollm2-decisive.tar.gz"
AGGREGATE = "study-smollm2-decisive/study.json"
DATASET = "arith_l1"
BASELINE = "grpo"
SEEDS = 10
"""The seeds of studies/smollm2-decisive.yaml: a verdict waits for all of them."""
COMPARISONS = (
    ("pkpo-anneal@cosine", 1),
    ("pkpo-anneal@cosine", 32),
    ("passk", 32),
    ("grpo+branch", 1),
    ("grpo+branch", 32),
    ("maxpo-anneal@cosine", 1),
    ("maxpo-anneal@cosine", 32),
)
"""The comparisons with GRPO that the study decides (docs/real-lm.md): the five sized before the runs (annealed
PKPO and the branch guide on pass@1 and pass@32, Pass@k Training on pass@32), and the frontier's new rival
(annealed MaxPO) on the same two axes, read by the same rule but not sized (exploratory)."""
EXPLORATORY = ("maxpo-anneal@cosine",)
"""The cells of :data:`COMPARISONS` not sized before the runs: their rows say so beside the verdict."""


def read_aggregate(path: Path = ARCHIVE) -> dict[str, Any]:
    """The study's ``study.json`` as its last sitting wrote it, read from the archive without extracting it.

    Raises:
        SystemExit: the archive has no ``study.json`` of the study (it names the archive).
    """
    with tarfile.open(path) as archive:
        try:
            member = archive.extractfile(AGGREGATE)
        except KeyError:
            member = None
        if member is None:
            raise SystemExit(f"{path}: no {AGGREGATE} in the archive")
        return json.loads(member.read())


def _signed(x: float) -> str:
    return f"{x:+.1f}".replace("-", "−")


def _entry(data: dict[str, Any], cell: str, k: int) -> dict[str, Any] | None:
    """The paired comparison of ``cell`` with the baseline on pass@k; None before a paired seed."""
    entry = data["paired"]["cells"].get(cell, {}).get(f"pass@{k}/{DATASET}")
    return entry if entry and entry["values"] else None


def verdict(entry: dict[str, Any], seeds: int = SEEDS) -> str:
    """The pre-registered rule on one paired comparison: ``interim (n of N seeds)`` below the study's seeds;
    then ``resolved: better``/``resolved: worse`` when the 95% t interval excludes zero, else ``not
    resolved``."""
    n = len(entry["values"])
    if n < seeds:
        return f"interim ({n} of {seeds} seeds)"
    low, high = entry["ci"]
    if low is None or high is None:
        return "not resolved"
    if low > 0:
        return "resolved: better"
    if high < 0:
        return "resolved: worse"
    return "not resolved"


def comparisons_table(data: dict[str, Any], seeds: int = SEEDS) -> str:
    """Markdown: one row per comparison of :data:`COMPARISONS` with at least one paired seed: the per-seed
    differences, their mean and 95% t interval (points; "n/a" with one seed) and :func:`verdict`, marked
    "exploratory" for the cells of :data:`EXPLORATORY`."""
    lines = [
        f"| comparison (vs `{BASELINE}`) | seeds | per seed | mean [95% t] | verdict |",
        "|---|---|---|---|---|",
    ]
    for cell, k in COMPARISONS:
        entry = _entry(data, cell, k)
        if entry is None:
            continue
        values = ", ".join(_signed(100 * v) for v in entry["values"])
        low, high = entry["ci"]  # null (NaN) with one seed
        interval = "n/a" if low is None or math.isnan(low) else f"{_signed(100 * low)}, {_signed(100 * high)}"
        lines.append(
            f"| `{cell}` pass@{k} | {len(entry['values'])} | {values} | {_signed(100 * entry['mean'])} "
            f"[{interval}] | {verdict(entry, seeds)}{'; exploratory' if cell in EXPLORATORY else ''} |"
        )
    return "\n".join(lines)


DOMINANCE = ("pkpo-anneal@cosine", (1, 32))
"""The planted frontier's winner and the two axes on which issue 36 asks whether it dominates GRPO."""
PASSK = ("passk", 32)
"""Pass@k Training and the axis on which issue 36 asks whether its gain resolves."""


def answers(data: dict[str, Any], seeds: int = SEEDS) -> list[str]:
    """Issue 36's two questions, answered by :func:`verdict` on the decisive comparisons (one line each):

    1. Does the planted frontier's winner (annealed PKPO) **dominate** GRPO, i.e. is it resolved better on
       both pass@1 and pass@32? "yes" only when both are; "no" when either is resolved worse; otherwise
       "not shown" (a comparison that does not resolve is no evidence either way), or "interim" while a
       comparison lacks seeds.
    2. Does Pass@k Training's **pass@32 gain resolve** (its interval over all seeds above zero)?
    """
    cell, ks = DOMINANCE
    entries = {k: _entry(data, cell, k) for k in ks}
    verdicts = {k: verdict(e, seeds) if e else f"interim (0 of {seeds} seeds)" for k, e in entries.items()}
    means = {k: f" {_signed(100 * e['mean'])} points" if e else "" for k, e in entries.items()}
    shown = "; ".join(f"pass@{k}{means[k]}: {verdicts[k]}" for k in ks)
    if any(v.startswith("interim") for v in verdicts.values()):
        dominance = "interim, no answer yet"
    elif all(v == "resolved: better" for v in verdicts.values()):
        dominance = "yes"
    elif any(v == "resolved: worse" for v in verdicts.values()):
        dominance = "no"
    else:
        dominance = "not shown at this size"
    passk_cell, passk_k = PASSK
    entry = _entry(data, passk_cell, passk_k)
    passk = verdict(entry, seeds) if entry else f"interim (0 of {seeds} seeds)"
    passk_mean = f"; {_signed(100 * entry['mean'])} points" if entry else ""
    return [
        f"Does `{cell}` dominate `{BASELINE}` on pass@1 and pass@32? {dominance} ({shown})",
        f"Does `{passk_cell}`'s pass@{passk_k} gain over `{BASELINE}` resolve? {passk}{passk_mean}",
    ]


def crossover_rows(data: dict[str, Any]) -> list[tuple[str, str, dict[int, float], int | None]]:
    """(cell, seed, {k: gain over the base model in points}, crossover k) for every finished run, cells in the
    study's order and seeds ascending."""
    rows = []
    for cell in data["cells"]:
        for seed, gains in run_gains(data, cell, DATASET).items():
            ks = sorted(gains)
            rows.append((cell, seed, gains, crossover_k(ks, [gains[k] for k in ks])))
    return rows


def crossover_table(data: dict[str, Any]) -> str:
    """Markdown: :func:`crossover_rows`, one row a run."""
    rows = crossover_rows(data)
    ks = sorted({k for _, _, gains, _ in rows for k in gains})
    lines = [
        "| run | " + " | ".join(f"k = {k}" for k in ks) + " | crossover k |",
        "|---|" + "---|" * (len(ks) + 1),
    ]
    for cell, seed, gains, cross in rows:
        cells = " | ".join(_signed(gains[k]) if k in gains else "—" for k in ks)
        if cross is None:
            cross = "below at every k" if all(gain < 0 for gain in gains.values()) else "–"
        lines.append(f"| `{cell}` seed {seed} | {cells} | {cross} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archive", type=Path, default=ARCHIVE, help="the decisive study's archive")
    args = parser.parse_args(argv)
    data = read_aggregate(args.archive)
    runs = sum(len(entry["per_seed"]) for entry in data["cells"].values())
    below = [f"`{c}` seed {s}" for c, s, gains, _ in crossover_rows(data) if gains[max(gains)] < 0]
    print(f"{runs} runs of {args.archive.name}; paired differences to `{BASELINE}` in points\n")
    print(comparisons_table(data))
    print()
    base = ", ".join(f"pass@{k} {100 * data['reference'][f'pass@{k}/{DATASET}']:.1f}" for k in (1, 8, 32))
    print(f"gain over the base model ({base}; %) and the crossover k, run by run ({DATASET}):\n")
    print(crossover_table(data))
    print()
    print(f"runs below the base model at the largest k: {', '.join(below) if below else 'none'}")
    print()
    for line in answers(data):
        print(f"- {line}")


if __name__ == "__main__":
    main()
