"""pass@k plots (matplotlib, headless Agg backend): one run (``passk.png``) and several runs (compare)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sagerl.atomic_files import atomic_path
from sagerl.eval.results import pass_at_k_points


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | Path) -> Path:
    """Save a figure atomically (see :mod:`sagerl.atomic_files`)."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, bbox_inches="tight")
    return Path(path)


def _curve(ax, entry: Mapping[str, Any], label: str, **style) -> None:
    ks, vals, lo, hi = pass_at_k_points(entry)
    (line,) = ax.plot(ks, vals, marker="o", markersize=3, label=label, **style)
    ax.fill_between(ks, lo, hi, color=line.get_color(), alpha=0.15, linewidth=0)


def _style_axis(ax, title: str, ks: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    if ks:
        ax.set_xticks(list(ks))
        ax.set_xticklabels([str(k) for k in ks])
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)


def plot_run(results: Mapping[str, Any], path: str | Path) -> Path:
    """``passk.png`` of one run: pass@k vs k (log2 axis), a line per dataset plus the average, 95% CI bands."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for name, entry in results["datasets"].items():
        _curve(ax, entry, name)
    if len(results["datasets"]) > 1:
        _curve(ax, results["average"], "average", color="black", linestyle="--", linewidth=2)
    meta = results.get("meta", {})
    title = f"{meta.get('model', '')}  n={meta.get('n', '')}  T={meta.get('temperature', '')}".strip()
    _style_axis(ax, title, pass_at_k_points(results["average"])[0])
    ax.legend(fontsize=8)
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


def dataset_panels(runs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Dataset names over all runs (first-seen order), then ``"average"`` when there is more than one."""
    panels: list[str] = []
    for res in runs.values():
        for name in res["datasets"]:
            if name not in panels:
                panels.append(name)
    return [*panels, "average"] if len(panels) > 1 else panels


def plot_compare(runs: Mapping[str, Mapping[str, Any]], path: str | Path) -> Path:
    """Overlaid pass@k curves of several runs: one panel per dataset (union over runs), plus the average
    when there are several datasets."""
    plt = _pyplot()
    panels = dataset_panels(runs)
    cols = min(3, len(panels))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.0 * cols, 3.8 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels, strict=False):
        all_ks: set[int] = set()
        for label, res in runs.items():
            entry = res["average"] if panel == "average" else res["datasets"].get(panel)
            if entry is None:
                continue
            _curve(ax, entry, label)
            all_ks.update(pass_at_k_points(entry)[0])
        _style_axis(ax, panel, sorted(all_ks))
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.tight_layout()
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)
