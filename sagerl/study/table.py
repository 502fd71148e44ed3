"""The study's one table: every cell's metrics as mean and 95% CI over seeds, with plots.

Per (cell, seed), from the files the runs wrote (:mod:`sagerl.analysis` reads them):

- ``pass@k/<dataset>`` for k = 1, 2, 4, ..., n and every eval dataset, and ``pass@k/average`` (the
  unweighted mean over datasets), from ``results.json``;
- empirical support against the reference (the model before training), at the sample budget n:
  ``solved`` (problems solved at least once), ``preserved``, ``expanded``, ``shrunk``, per dataset and
  ``/total`` (:func:`sagerl.analysis.support.support_taxonomy`);
- ``strategy/<label>``: the share of all completions that use each strategy, and
  ``strategy_correct/<label>`` among correct ones (:func:`sagerl.analysis.patterns.pattern_shares`, the
  exact recorded strategy where the task records one, the lexicon otherwise);
- ``kl/reference`` (nats per token, the plain k3 estimate of KL(π‖π_ref)) and ``entropy`` (nats per token)
  of the policy, each the mean of the last :data:`LAST_STEPS` logged training steps.

The CI over seeds is Student's t interval, mean ± t_{0.975, s−1}·sd/√s over the s seeds, cut to the
metric's range (t from :func:`scipy.stats.t.ppf`, exact at every s; with one seed the interval is undefined and
written ``n/a``). ``study.json`` holds every value of every seed; ``table.md`` a selection; plots:
``passk.png`` (mean pass@k curves with CI bands per dataset, the reference dashed) and ``strategies.png``.

**A study on several reference builds** (``builds:``, :mod:`sagerl.study.spec`) has two sources of spread:
the RL seed, and the reference model the run starts from (another build of the same recipe). Its cells are
pooled over builds × seeds as a two-level (one-way random-effects) design: each build's mean over its seeds,
then the cell's mean is the mean of the build means and its CI Student's t interval over the B build means,
mean ± t_{0.975, B−1}·sd(build means)/√B. A build mean carries its seeds' noise, so the interval covers both
sources (with the balanced design every study here has, this is the standard interval for clustered
data; it is wide with 3 builds, t = 4.30, which is what 3 builds can tell). The support metrics of a run are
taken against its own build's reference. Paired differences pair runs on (build, seed) and pool the same
way. ``table-by-build.md`` and ``paired-by-build.md`` hold the per-build rows (CIs over seeds). A cell whose
runs have finished on one build only (a study still running, or the other builds' runs failed) has its
interval over that build's seeds instead, narrower than its neighbours' over builds: every table marks such
an estimate with † and says so under it (:func:`sagerl.study.statistics.pooled_over`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sagerl.atomic_files import atomic_write_text
from sagerl.study.folders import read_cell_status, reference_folder
from sagerl.study.frontier import pareto_frontier, plot_pareto, render_frontier
from sagerl.study.spec import Study, safe_name
from sagerl.study.statistics import (
    ONE_BUILD_MARK,
    ONE_BUILD_NOTE,
    PROBABILITIES,
    build_of,
    paired_differences,
    pooled_interval,
    pooled_over,
    t_interval,  # noqa: F401  (here since the table's first version; sagerl.study.statistics owns it)
)
from sagerl.study.statistics import format_estimate as _fmt
from sagerl.study.statistics import metric_format as _metric_format
from sagerl.study.statistics import run_order as _run_order

LAST_STEPS = 5


def _training_tail(train_dir: Path) -> dict[str, float]:
    path = train_dir / "metrics.jsonl"
    if not path.is_file():
        return {}
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    out = {}
    for key in ("kl/reference", "entropy", "reward"):
        values = [r[key] for r in rows if isinstance(r.get(key), int | float)][-LAST_STEPS:]
        if values:
            out[key] = float(np.mean(values))
    return out


def eval_metrics(eval_dir: Path, reference: Any | None) -> dict[str, float]:
    """Flat metrics of one eval run folder (see the module docstring); support needs ``reference``
    (an :class:`sagerl.analysis.EvalRun`)."""
    from sagerl.analysis import load_eval_run
    from sagerl.analysis.patterns import pattern_shares
    from sagerl.analysis.support import support_taxonomy
    from sagerl.eval.results import read_results

    results = read_results(eval_dir)
    metrics: dict[str, float] = {}
    entries = dict(results["datasets"])
    if len(entries) > 1:
        entries["average"] = results["average"]
    for name, entry in entries.items():
        for key, value in entry.items():
            if key.startswith("pass@"):
                metrics[f"{key}/{name}"] = float(value)
    run = load_eval_run(eval_dir)
    if reference is not None:
        support = support_taxonomy(reference, run)
        for name, entry in [*support["datasets"].items(), ("total", support["total"])]:
            counts = entry["counts"]
            metrics[f"_problems/{name}"] = entry["num_problems"]  # the upper end of the count metrics' range
            metrics[f"solved/{name}"] = counts["preserved"] + counts["expanded"]
            for category in ("preserved", "expanded", "shrunk"):
                metrics[f"{category}/{name}"] = counts[category]
    shares = pattern_shares(run, "auto", among=("all", "correct"))
    for population, prefix in (("all", "strategy"), ("correct", "strategy_correct")):
        for label, value in shares[population]["shares"].items():
            metrics[f"{prefix}/{label}"] = value["share"]
    metrics["_classifier"] = shares["classifier"]  # type: ignore[assignment]
    return metrics


COUNTS = ("solved/", "preserved/", "expanded/", "shrunk/")
"""Metrics that count problems of a dataset (their intervals are cut to [0, the dataset's problems])."""


def _count_bound(key: str, per_run: Mapping[str, Mapping[str, Any]]) -> float:
    """The upper end of a metric's range: the number of problems for a count of ``COUNTS`` (``_problems/<name>``
    of the runs, ``/total`` included), infinity otherwise (or when the runs do not record it)."""
    if not key.startswith(COUNTS):
        return math.inf
    name = key.split("/", 1)[1]
    sizes = [s for m in per_run.values() if (s := m.get(f"_problems/{name}"))]
    return float(max(sizes)) if sizes else math.inf


def _summary(per_run: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Per metric key: mean and 95% CI pooled over the runs (:func:`pooled_interval`), the values, and how they
    were pooled (``pooled``: :func:`pooled_over`)."""
    keys = sorted({k for m in per_run.values() for k in m if not k.startswith("_")})
    summary = {}
    for key in keys:
        missing = 0.0 if key.startswith(("strategy/", "strategy_correct/")) else math.nan  # unseen: share 0
        values = {run: m.get(key, missing) for run, m in per_run.items()}
        bounds = (0.0, 1.0) if key.startswith(PROBABILITIES) else (0.0, _count_bound(key, per_run))
        mean, lo, hi = pooled_interval(values, *bounds)
        summary[key] = {
            "mean": mean,
            "ci": [lo, hi],
            "values": list(values.values()),
            "pooled": pooled_over(values),
        }
    return summary


def _by_build(per_run: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The runs of each build, keyed as without builds (by seed)."""
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(per_run, key=_run_order):
        out.setdefault(str(build_of(key)), {})[key.rpartition("/")[2]] = per_run[key]
    return out


def _eval_record(folder: Path, key: str) -> dict[str, Any] | None:
    """``key`` (``machine`` or ``code``) of the evaluation in ``folder``, as its ``eval_config.json`` recorded it
    when the evaluation began; None when absent."""
    from sagerl.eval.samples import CONFIG_FILE

    try:
        return json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8")).get(key)
    except (OSError, ValueError):
        return None


def _runs_by(study: Study, out: Path, key: str) -> list[dict[str, Any]]:
    """The finished runs (and references) grouped by their record ``key``: ``[{key: record or None, "runs":
    [...]}]`` in first-seen order; a cell's record is its ``cell.json``'s (the call that finished it), else its
    evaluation's, a reference's its evaluation's."""
    groups: list[dict[str, Any]] = []

    def add(record: dict[str, Any] | None, run: str) -> None:
        for group in groups:
            if group[key] == record:
                group["runs"].append(run)
                return
        groups.append({key: record, "runs": [run]})

    for build in study.builds or [None]:
        folder = out / reference_folder(build)
        if (folder / "results.json").is_file():
            add(_eval_record(folder, key), "reference" if build is None else f"reference {build}")
    for cell in study.cells:
        status = read_cell_status(out, cell)
        if status is not None and status.get("status") == "ok":
            record = status[key] if key in status else _eval_record(out / cell.folder / "eval", key)
            add(record, f"{cell.name} {cell.run_key}")
    return groups


def run_machines(study: Study, out: Path) -> list[dict[str, Any]]:
    """The machines the study's finished runs ran on: ``[{"machine": record or None, "runs": [...]}]``, one
    entry per distinct :func:`sagerl.determinism.machine_record` (``None``: a run written before sagerl
    recorded it). A cell's machine is the one that finished it (``cell.json``), the reference's the one that
    began its evaluation (``eval_config.json``). Float results differ between CPUs of other vector extensions
    (another kernel, another reduction order), so runs from two machines are not one experiment."""
    return _runs_by(study, out, "machine")


def run_code(study: Study, out: Path) -> list[dict[str, Any]]:
    """The sagerl code the study's finished runs ran: ``[{"code": record or None, "runs": [...]}]``, one entry
    per distinct :func:`sagerl.determinism.code_record` (version, commit, whether ``sagerl/`` was modified;
    ``None``: a run written before sagerl recorded it). A study resumed over sittings may run at several
    commits; this says which run ran which, so a change of the code between sittings can be checked."""
    return _runs_by(study, out, "code")


def machines_note(data: Mapping[str, Any]) -> str | None:
    """A warning when the runs of ``study.json`` come from more than one machine (or some from an unrecorded
    one), naming each machine and how many runs it holds; ``None`` when they all share one recorded machine."""
    groups = data.get("run_machines") or []
    if len(groups) <= 1 and all(g["machine"] is not None for g in groups):
        return None

    def name(machine: Mapping[str, Any] | None) -> str:
        if machine is None:
            return "unrecorded (run before sagerl recorded machines)"
        isa = [f for f in machine.get("isa", []) if f.startswith(("amx", "avx512_bf16", "avx2", "avx512f"))]
        kernels = f"; {machine['kernels']} kernels" if machine.get("kernels") else ""
        return f"{machine.get('cpu')} ({', '.join(isa) or 'no AVX2'}{kernels}; torch {machine.get('torch')})"

    if len(groups) == 1:
        return (
            "no run records its machine (written before sagerl recorded it); study.json's machine is the "
            "one that aggregated them, not necessarily the one that ran them"
        )
    shown = "; ".join(f"{len(g['runs'])} on {name(g['machine'])}" for g in groups)
    return (
        f"runs from {len(groups)} machines: {shown}. Float results differ between CPUs of other "
        "vector extensions; compare runs of one machine (study.json: run_machines)"
    )


def collect(study: Study, out: Path) -> dict[str, Any]:
    """Every metric of every finished (cell, build, seed), the reference's (per build), and the cells'
    summaries (pooled over builds × seeds; per build in ``by_build``)."""
    from sagerl.analysis import load_eval_run
    from sagerl.determinism import machine_record

    data: dict[str, Any] = {"study": study.name, "n": study.eval.n, "datasets": study.eval.datasets}
    data.update(builds=study.builds, threads=study.threads, machine=machine_record())
    references, reference_metrics = {}, {}
    for build in study.builds or [None]:
        ref_dir = out / reference_folder(build)
        references[build] = load_eval_run(ref_dir) if (ref_dir / "results.json").is_file() else None
        if references[build] is not None:
            reference_metrics[build] = eval_metrics(ref_dir, references[build])
    if study.builds is None:
        data["reference"] = reference_metrics.get(None)
    elif reference_metrics:
        data["reference_builds"] = reference_metrics
        keys = {k for m in reference_metrics.values() for k, v in m.items() if isinstance(v, int | float)}
        data["reference"] = {
            k: float(np.mean([m[k] for m in reference_metrics.values() if k in m])) for k in sorted(keys)
        }
        data["reference_summary"] = _summary({f"{b}/0": m for b, m in reference_metrics.items()})
    else:
        data["reference"] = None
    cells: dict[str, Any] = {}
    for cell in study.cells:
        entry = cells.setdefault(
            cell.name, {"preset": cell.preset, "overrides": cell.overrides, "per_seed": {}, "failed": {}}
        )
        status = read_cell_status(out, cell)
        if status is None:
            continue
        if status.get("status") != "ok":
            entry["failed"][cell.run_key] = status.get("error", "unknown error")
            continue
        folder = out / cell.folder
        metrics = eval_metrics(folder / "eval", references[cell.build])
        metrics.update(_training_tail(folder / "train"))
        metrics.update({k: status[k] for k in ("train_s", "eval_s", "total_s") if k in status})
        entry["per_seed"][cell.run_key] = metrics
    for entry in cells.values():
        entry["summary"] = _summary(entry["per_seed"])
        if study.builds is not None:
            entry["by_build"] = {b: _summary(runs) for b, runs in _by_build(entry["per_seed"]).items()}
    data["cells"] = cells
    if study.paired is not None:
        first, *more = study.paired["baselines"]
        metrics = study.paired["metrics"]
        data["paired"] = paired_differences(cells, {"baseline": first, "metrics": metrics})
        if more:  # each further baseline: its own table (paired-vs-NAME.md)
            data["paired_more"] = [
                paired_differences(cells, {"baseline": name, "metrics": metrics}) for name in more
            ]
    data["run_machines"] = run_machines(study, out)
    data["run_code"] = run_code(study, out)
    data["total_time_s"] = round(
        sum(m.get("total_s", 0.0) for e in cells.values() for m in e["per_seed"].values()), 1
    )
    return data


def render_paired(data: Mapping[str, Any], paired: Mapping[str, Any] | None = None) -> str:
    """``paired.md``: per cell, each paired metric's mean [95% CI] and its difference Δ to the baseline
    [95% CI of the per-seed differences]; rows sorted by the first metric's Δ, the baseline first.
    ``paired``: one of :func:`paired_differences`' results (default ``data["paired"]``, the first baseline)."""
    paired = data["paired"] if paired is None else paired
    metrics, base = paired["metrics"], paired["baseline"]
    header = ["cell", "runs" if data.get("builds") else "seeds"]
    for metric in metrics:
        percent, _ = _metric_format(metric)
        unit = " (%)" if percent else ""
        header += [f"{metric}{unit}", f"Δ vs {base}"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    if data.get("reference"):
        ref = _reference_summary(data)
        row = ["reference (before training)", "—"]
        for metric in metrics:
            row += [_fmt(ref, metric, *_metric_format(metric)), "—"]
        lines.append("| " + " | ".join(row) + " |")

    def order(name: str) -> tuple[int, float]:
        delta = paired["cells"][name][metrics[0]]["mean"]
        return (0 if name == base else 1, -(delta if not math.isnan(delta) else -math.inf))

    for name in sorted(data["cells"], key=order):
        entry = data["cells"][name]
        row = [name, _runs_label(entry["per_seed"])]
        for metric in metrics:
            percent, digits = _metric_format(metric)
            row.append(_fmt(entry.get("summary"), metric, percent, digits))
            row.append("—" if name == base else _fmt(paired["cells"][name], metric, percent, digits))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(_with_one_build_note(lines)) + "\n"


def _with_one_build_note(lines: list[str]) -> list[str]:
    """``lines`` of a markdown table, with :data:`ONE_BUILD_NOTE` under it when a cell holds the mark."""
    return lines + ["", ONE_BUILD_NOTE] if any(ONE_BUILD_MARK in line for line in lines) else lines


def _reference_summary(data: Mapping[str, Any]) -> dict[str, Any]:
    """The reference row's summary: mean [CI over builds] on several builds, else the values."""
    if data.get("reference_summary"):
        return data["reference_summary"]
    return {k: {"mean": v, "ci": [v, v]} for k, v in data["reference"].items() if isinstance(v, int | float)}


def _runs_label(per_run: Mapping[str, Any]) -> str:
    """The runs column: ``"10"`` seeds, or ``"3×5"`` builds × seeds (``"3×4-5"`` when uneven)."""
    builds: dict[str | None, int] = {}
    for key in per_run:
        builds[build_of(key)] = builds.get(build_of(key), 0) + 1
    if len(builds) <= 1 and None in builds or not builds:
        return str(len(per_run))
    low, high = min(builds.values()), max(builds.values())
    return f"{len(builds)}×{low}" if low == high else f"{len(builds)}×{low}-{high}"


def _strategy_labels(data: Mapping[str, Any]) -> list[str]:
    """Every strategy label any cell's summary has, sorted."""
    return sorted(
        {
            k.split("/", 1)[1]
            for e in data["cells"].values()
            for k in e.get("summary", {})
            if k.startswith("strategy/")
        }
    )


def _columns(data: Mapping[str, Any]) -> list[tuple[str, str, bool, int]]:
    """(header, metric key, as percent, digits) of the markdown table."""
    n = data["n"]
    datasets = list(data["datasets"]) + (["average"] if len(data["datasets"]) > 1 else [])
    cols = []
    for ds in datasets:
        for k in sorted({1, min(8, n), n}):
            cols.append((f"{ds} pass@{k} (%)", f"pass@{k}/{ds}", True, 1))
    for ds in data["datasets"]:
        cols.append((f"{ds} solved", f"solved/{ds}", False, 1))
    cols += [("expanded", "expanded/total", False, 1), ("shrunk", "shrunk/total", False, 1)]
    labels = _strategy_labels(data)
    cols += [(f"{label} share (%)", f"strategy/{label}", True, 1) for label in labels]
    cols += [
        ("KL to ref (nats/token)", "kl/reference", False, 3),
        ("entropy (nats/token)", "entropy", False, 3),
    ]
    return cols


def render_markdown(data: Mapping[str, Any]) -> str:
    """``table.md``: one row per cell (mean [95% CI] over seeds, or pooled over builds × seeds), the
    reference first."""
    cols = _columns(data)
    header = ["cell", "runs" if data.get("builds") else "seeds", *[c[0] for c in cols]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    if data.get("reference"):
        ref = _reference_summary(data)
        lines.append(
            "| reference (before training) | — | "
            + " | ".join(_fmt(ref, c[1], c[2], c[3]) for c in cols)
            + " |"
        )
    for name, entry in data["cells"].items():
        seeds = _runs_label(entry["per_seed"])
        cells = [_fmt(entry.get("summary"), c[1], c[2], c[3]) for c in cols]
        lines.append(f"| {name} | {seeds} | " + " | ".join(cells) + " |")
        for seed, error in entry["failed"].items():
            lines.append(f"| {name} (seed {seed}) | failed | {error} |" + " |" * (len(cols) - 1))
    lines = _with_one_build_note(lines)
    note = machines_note(data)
    if note:
        lines += ["", f"Note: {note}."]
    return "\n".join(lines) + "\n"


def _column_groups(cols: Sequence[tuple[str, str, bool, int]]) -> list[int]:
    """Sizes of consecutive columns of one family (a data set's pass@k, support, strategies, training)."""

    def family(key: str) -> str:
        if key.startswith("pass@"):
            return key.split("/", 1)[1]
        if key.startswith(("solved/", "expanded/", "shrunk/")):
            return "support"
        return key.split("/", 1)[0]

    groups: list[int] = []
    last = None
    for _, key, _, _ in cols:
        if family(key) == last:
            groups[-1] += 1
        else:
            groups.append(1)
            last = family(key)
    return groups


def render_terminal(data: Mapping[str, Any]):
    """The table of ``table.md`` for a terminal: a :class:`sagerl.tables.FittedTable` that fits its width
    (mean over seeds with the 95% CI under it; columns of one family together), failed runs listed
    under it."""
    from sagerl.tables import Estimate, FittedTable

    cols = _columns(data)
    marks: set[str] = set()

    def cell(summary: Mapping[str, Any] | None, key: str, percent: bool, digits: int):
        if summary is None or key not in summary:
            return None
        scale = 100.0 if percent else 1.0
        mean, (lo, hi) = summary[key]["mean"], summary[key]["ci"]  # None: NaN in study.json
        if mean is None:
            return None
        mark = ONE_BUILD_MARK if summary[key].get("pooled") == "one build" else ""
        marks.add(mark)
        if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):  # one run: undefined, "n/a"
            return Estimate(mean * scale, digits=digits, undefined=True, mark=mark)
        return Estimate(mean * scale, lo * scale, hi * scale, digits, mark=mark)

    rows = []
    if data.get("reference"):
        ref = _reference_summary(data)
        rows.append(("reference", ["—", *(cell(ref, c[1], c[2], c[3]) for c in cols)]))
    failures = []
    for name, entry in data["cells"].items():
        summary = entry.get("summary")
        rows.append(
            (name, [_runs_label(entry["per_seed"]), *(cell(summary, c[1], c[2], c[3]) for c in cols)])
        )
        failures += [f"failed: {name} seed {seed}: {error}" for seed, error in entry["failed"].items()]
    headers = ["runs" if data.get("builds") else "seeds", *(c[0] for c in cols)]
    note = machines_note(data)
    notes = ([ONE_BUILD_NOTE] if ONE_BUILD_MARK in marks else []) + ([f"note: {note}"] if note else [])
    caption = "\n".join(failures + notes) or None
    over = "builds × seeds" if data.get("builds") else "seeds"
    title = f"{data['study']}: mean [95% CI over {over}]"
    return FittedTable(title, "cell", headers, rows, groups=[1, *_column_groups(cols)], caption=caption)


def finished_summary(study: Study, out: Path) -> str:
    """``"12 of 18 cells finished (30 of 36 runs: 18 cells x 2 seeds), 1 run failed"``: what the study
    folder holds. A cell is finished when every seed of it has run without error."""
    by_cell: dict[str, list[str | None]] = {}
    for cell in study.cells:
        status = read_cell_status(out, cell)
        by_cell.setdefault(cell.name, []).append(None if status is None else status.get("status"))
    runs = sum(len(v) for v in by_cell.values())
    ok_runs = sum(s == "ok" for v in by_cell.values() for s in v)
    failed = sum(s is not None and s != "ok" for v in by_cell.values() for s in v)
    ok_cells = sum(all(s == "ok" for s in v) for v in by_cell.values())
    seeds = {len(v) for v in by_cell.values()}
    shape = f"{len(by_cell)} cells x {seeds.pop()} seeds" if len(seeds) == 1 else f"{len(by_cell)} cells"
    text = f"{ok_cells} of {len(by_cell)} cells finished ({ok_runs} of {runs} runs: {shape})"
    if failed:
        text += f", {failed} run{'s' if failed != 1 else ''} failed"
    return text


def _ks(keys, dataset: str) -> list[int]:
    """The k of every ``pass@k/<dataset>`` key, sorted."""
    return sorted(
        int(k[len("pass@") :].split("/")[0])
        for k in keys
        if k.startswith("pass@") and k.endswith(f"/{dataset}")
    )


def plot_passk(data: Mapping[str, Any], path: Path) -> Path:
    """Mean pass@k over seeds per cell (t-interval bands), one panel per dataset; the reference dashed."""
    from sagerl.eval.plots import _pyplot, _save, _style_axis

    plt = _pyplot()
    datasets = list(data["datasets"])
    # The legend goes under the panels, in columns, at the axis labels' size: it stays readable when the
    # figure is shown at a page's column width (about 900 px; the docs) with 25 and more cells.
    entries = len(data["cells"]) + bool(data.get("reference"))
    ncol = max(1, min(3, len(datasets) + 1))
    rows = -(-entries // ncol)
    fig, axes = plt.subplots(
        1, len(datasets), figsize=(4.6 * len(datasets), 3.6 + 0.21 * rows), squeeze=False
    )
    colors = plt.get_cmap("tab20").colors
    for ax, ds in zip(axes.flat, datasets, strict=True):
        ref = data.get("reference") or {}
        ks_all = set(_ks(ref, ds))
        if ks_all:
            ks = sorted(ks_all)
            ax.plot(ks, [ref[f"pass@{k}/{ds}"] for k in ks], "k--", label="reference", linewidth=1.5)
        for i, (name, entry) in enumerate(data["cells"].items()):
            summary = entry.get("summary", {})
            ks = _ks(summary, ds)
            if not ks:
                continue
            style = dict(color=colors[i % len(colors)], linestyle=("-", "--", ":")[(i // len(colors)) % 3])
            mean = [summary[f"pass@{k}/{ds}"]["mean"] for k in ks]
            ax.plot(ks, mean, marker="o", markersize=2.5, label=name, linewidth=1.2, **style)
            lo = [summary[f"pass@{k}/{ds}"]["ci"][0] for k in ks]
            hi = [summary[f"pass@{k}/{ds}"]["ci"][1] for k in ks]
            ax.fill_between(ks, lo, hi, color=style["color"], alpha=0.08, linewidth=0)
            ks_all.update(ks)
        _style_axis(ax, ds, sorted(ks_all))
    handles, labels = axes.flat[-1].get_legend_handles_labels()
    legend = fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=9, frameon=False)
    fig.canvas.draw()
    fig.tight_layout(rect=(0, legend.get_window_extent().height / fig.bbox.height + 0.01, 1, 1))
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


GAIN_PANELS = 24  # most (cell, dataset) panels of gain.png; a larger study has its numbers in study.json only


def _reference_of(data: Mapping[str, Any], run_key: str) -> Mapping[str, Any]:
    """The reference metrics a run is compared with: its build's, or the study's one reference."""
    if data.get("reference_builds"):
        return data["reference_builds"].get(str(build_of(run_key)), {})
    return data.get("reference") or {}


def run_gains(data: Mapping[str, Any], cell: str, dataset: str) -> dict[str, dict[int, float]]:
    """pass@k(run) − pass@k(reference) in points, for every finished run of ``cell`` on ``dataset``:
    ``{run key: {k: gain}}``, each run against its own build's reference; a run without a reference
    pass@k of that k is left out at that k."""
    gains: dict[str, dict[int, float]] = {}
    for key, metrics in sorted(data["cells"][cell]["per_seed"].items(), key=lambda kv: _run_order(kv[0])):
        ref = _reference_of(data, key)
        row = {
            k: 100 * (metrics[f"pass@{k}/{dataset}"] - ref[f"pass@{k}/{dataset}"])
            for k in _ks(metrics, dataset)
            if f"pass@{k}/{dataset}" in ref
        }
        if row:
            gains[key] = row
    return gains


def plot_gain(data: Mapping[str, Any], path: Path) -> Path | None:
    """``gain.png``: pass@k(run) − pass@k(reference) in points against k, one panel per (dataset, cell): a
    thin line per run (seed, or build × seed), the mean over them thick, zero dashed. A run under zero at
    large k solves fewer problems within k samples than the model it started from (the crossover of Yue et
    al., 2025, "Does RL really incentivize reasoning capacity beyond the base model?"). ``None`` (nothing
    written) without a reference, without finished runs, or with more than :data:`GAIN_PANELS` panels."""
    from sagerl.eval.plots import _pyplot, _save

    cells = {name: e for name, e in data["cells"].items() if e["per_seed"]}
    datasets = list(data["datasets"])
    if not cells or not (data.get("reference") or data.get("reference_builds")):
        return None
    if len(cells) * len(datasets) > GAIN_PANELS:
        return None
    plt = _pyplot()
    ncol = min(len(cells), 5)
    rows_per_ds = -(-len(cells) // ncol)
    fig, axes = plt.subplots(
        rows_per_ds * len(datasets),
        ncol,
        figsize=(2.6 * ncol, 2.4 * rows_per_ds * len(datasets)),
        squeeze=False,
        sharex=True,
        sharey=True,
    )
    for d, ds in enumerate(datasets):
        for i, name in enumerate(cells):
            ax = axes[d * rows_per_ds + i // ncol][i % ncol]
            curves = list(run_gains(data, name, ds).values())
            for row in curves:
                ax.plot(list(row), list(row.values()), color="tab:blue", alpha=0.35, linewidth=0.9)
            common = sorted(set.intersection(*(set(row) for row in curves))) if curves else []
            if common:
                mean = [float(np.mean([row[k] for row in curves])) for k in common]
                ax.plot(common, mean, color="tab:blue", marker="o", markersize=2.5, linewidth=2)
                ax.set_xscale("log", base=2)
                ax.set_xticks(common)
                ax.set_xticklabels([str(k) for k in common], fontsize=7)
            ax.axhline(0.0, color="black", linestyle="--", linewidth=1)
            ax.set_title(name if len(datasets) == 1 else f"{name} ({ds})", fontsize=9)
            ax.grid(True, alpha=0.3)
        for j in range(len(cells), rows_per_ds * ncol):
            axes[d * rows_per_ds + j // ncol][j % ncol].axis("off")
    for row in axes:
        row[0].set_ylabel("gain (points)", fontsize=8)
    fig.supxlabel("k (samples per problem)", fontsize=9)
    fig.tight_layout()
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


def plot_strategies(data: Mapping[str, Any], path: Path) -> Path:
    """Share of each strategy among all completions, per cell (mean over seeds, t-interval error bars)."""
    from sagerl.eval.plots import _pyplot, _save

    plt = _pyplot()
    names = list(data["cells"])
    labels = _strategy_labels(data)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.34 * len(names) + 1.6), 4.6))
    width = 0.8 / max(1, len(labels))
    x = np.arange(len(names))
    for j, label in enumerate(labels):
        means, errs = [], [[], []]
        for name in names:
            s = data["cells"][name].get("summary", {}).get(f"strategy/{label}")
            mean = s["mean"] if s else 0.0
            means.append(mean)
            errs[0].append(max(0.0, mean - s["ci"][0]) if s else 0.0)
            errs[1].append(max(0.0, s["ci"][1] - mean) if s else 0.0)
        ax.bar(x + j * width - 0.4 + width / 2, means, width, yerr=errs, label=label, capsize=2)
    ref = data.get("reference") or {}
    for j, label in enumerate(labels):
        value = ref.get(f"strategy/{label}")
        if value is not None:
            ax.axhline(value, color=f"C{j}", linestyle=":", linewidth=1)
    ax.set_xticks(x)
    ax.set_xticklabels(names, rotation=40, ha="right", fontsize=9)
    ax.set_ylabel("share of completions")
    ax.set_yscale("symlog", linthresh=0.01)
    ax.set_ylim(0, 1.05)
    ax.set_title("strategy shares (dotted: reference)")
    ax.legend(fontsize=9, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


def build_view(data: Mapping[str, Any], build: str) -> dict[str, Any]:
    """The collected data of one build: its reference, and each cell's runs on it (keyed by seed) with their
    summary over seeds; renders as a study without builds."""
    cells = {}
    for name, entry in data["cells"].items():
        runs = {k.rpartition("/")[2]: m for k, m in entry["per_seed"].items() if build_of(k) == build}
        failed = {k.rpartition("/")[2]: e for k, e in entry["failed"].items() if build_of(k) == build}
        cells[name] = {**entry, "per_seed": runs, "failed": failed, "summary": _summary(runs)}
        cells[name].pop("by_build", None)
    view = {
        k: v for k, v in data.items() if k not in ("reference_builds", "reference_summary", "paired_more")
    }
    view.update(builds=None, cells=cells, reference=(data.get("reference_builds") or {}).get(build))
    if "paired" in data:
        view["paired"] = paired_differences(cells, data["paired"])
    return view


def render_by_build(data: Mapping[str, Any], render) -> str:
    """One section per build (``## b1``), each ``render`` of :func:`build_view`: the per-build rows."""
    return "\n".join(f"## {build}\n\n" + render(build_view(data, build)) for build in data["builds"])


def write_study_table(study: Study, out: Path) -> dict[str, Any]:
    """Collect, then write ``study.json``, ``table.md`` (and ``paired.md``, ``paired-vs-NAME.md``, with builds
    ``table-by-build.md`` and ``paired-by-build.md``, with ``pareto`` ``frontier.md`` and ``pareto.png``),
    ``passk.png``, ``gain.png`` (:func:`plot_gain`) and ``strategies.png``; returns the data."""
    from sagerl.analysis.output import jsonable

    data = collect(study, out)
    if study.pareto is not None:
        data["pareto"] = pareto_frontier(data["cells"], study.pareto["x"], study.pareto["y"])
    atomic_write_text(out / "study.json", json.dumps(jsonable(data), indent=2) + "\n")
    atomic_write_text(out / "table.md", render_markdown(data))
    if "paired" in data:
        atomic_write_text(out / "paired.md", render_paired(data))
    for paired in data.get("paired_more", []):
        atomic_write_text(out / f"paired-vs-{safe_name(paired['baseline'])}.md", render_paired(data, paired))
    if data.get("builds"):
        atomic_write_text(out / "table-by-build.md", render_by_build(data, render_markdown))
        if "paired" in data:
            atomic_write_text(out / "paired-by-build.md", render_by_build(data, render_paired))
    if study.pareto is not None:
        atomic_write_text(out / "frontier.md", render_frontier(data["pareto"]))
        if data["pareto"]["cells"]:
            plot_pareto(data["pareto"], out / "pareto.png", data.get("reference"))
    if any(e["per_seed"] for e in data["cells"].values()):
        plot_passk(data, out / "passk.png")
        if plot_gain(data, out / "gain.png") is None:
            (out / "gain.png").unlink(missing_ok=True)  # not one from an earlier, smaller aggregate
        plot_strategies(data, out / "strategies.png")
    return data
