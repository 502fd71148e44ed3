"""``compare``: a table and an overlaid pass@k plot of several runs, from their ``results.json`` only."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sagerl.errors import SagerlError
from sagerl.eval.plots import dataset_panels, plot_compare
from sagerl.eval.results import read_results


def _labels(run_dirs: Sequence[Path]) -> list[str]:
    """Short unique run labels: folder names, or more path parts where names repeat."""
    parts = [p.resolve().parts for p in run_dirs]
    for depth in range(1, max(len(p) for p in parts) + 1):
        labels = ["/".join(p[-depth:]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
    return [str(p) for p in run_dirs]


def default_ks(runs: dict[str, dict[str, Any]]) -> list[int]:
    """Budgets shown by default: 1, and the largest k that every run reports (if larger)."""
    common = None
    for res in runs.values():
        ks = {int(k.split("@")[1]) for k in res["average"] if k.startswith("pass@")}
        common = ks if common is None else common & ks
    top = max(common) if common else 1
    return [1] if top == 1 else [1, top]


def compare_runs(
    run_dirs: Sequence[str | Path], *, out: str | Path | None = None, ks: Sequence[int] | None = None
) -> dict[str, Any]:
    """Load several runs' results and draw their overlaid pass@k curves.

    Args:
        run_dirs: folders written by ``sagerl eval`` (each with a ``results.json``).
        out: path of the plot (PNG); None (the default) to skip the plot.
        ks: budgets for the table (default :func:`default_ks`).

    Returns:
        ``{"runs": {label: results}, "ks": [...], "columns": [(dataset, k)], "rows": {label: [value|None]},
        "cis": {label: [(low, high)|None]},
        "plot": path or None}``; a value is None where a run lacks that dataset or k.

    Raises:
        SagerlError: no run given, or a folder without a readable ``results.json`` (names the folder).
    """
    if not run_dirs:
        raise SagerlError("compare needs at least one run folder")
    paths = [Path(d) for d in run_dirs]
    runs = {label: read_results(p) for label, p in zip(_labels(paths), paths, strict=True)}
    ks = sorted({int(k) for k in ks}) if ks else default_ks(runs)
    if any(k < 1 for k in ks):
        raise SagerlError(f"k must be >= 1, got {ks}")
    columns = [(name, k) for name in dataset_panels(runs) for k in ks]
    rows, cis = {}, {}
    for label, res in runs.items():
        row, ci_row = [], []
        for name, k in columns:
            entry = res["average"] if name == "average" else res["datasets"].get(name)
            value = None if entry is None else entry.get(f"pass@{k}")
            ci = None if entry is None else entry.get("ci", {}).get(f"pass@{k}")
            row.append(None if value is None else float(value))
            ci_row.append(None if ci is None else (float(ci[0]), float(ci[1])))
        rows[label] = row
        cis[label] = ci_row
    plot = plot_compare(runs, out) if out is not None else None
    return {"runs": runs, "ks": ks, "columns": columns, "rows": rows, "cis": cis, "plot": plot}


def render_table(comparison: dict[str, Any]):
    """The table of a :func:`compare_runs` result, as a :class:`sagerl.tables.FittedTable` (rows: runs;
    columns: pass@k in % per data set, with 95% bootstrap CIs); it fits the terminal it is printed on.

    With one data set the columns are ``pass@k`` and the title names the set; with several, each column
    header names its set and a set's columns stay together where they fit.
    """
    from sagerl.tables import Estimate, FittedTable

    names = list(dict.fromkeys(name for name, _ in comparison["columns"]))
    single = len(names) == 1
    headers = [f"pass@{k}" if single else f"{name}\npass@{k}" for name, k in comparison["columns"]]
    cis = comparison.get("cis", {})
    rows = []
    for label, row in comparison["rows"].items():
        cells = []
        for i, v in enumerate(row):
            ci = cis.get(label, [None] * len(row))[i]
            if v is None:
                cells.append(None)
            elif ci is None:
                cells.append(Estimate(100 * v))
            else:
                cells.append(Estimate(100 * v, 100 * ci[0], 100 * ci[1]))
        rows.append((label, cells))
    groups = [sum(1 for name, _ in comparison["columns"] if name == n) for n in names]
    title = f"pass@k (%) on {names[0]} [95% bootstrap CI]" if single else "pass@k (%) [95% bootstrap CI]"
    return FittedTable(title, "run", headers, rows, groups=groups or None)
