"""Training curves: grouped plots of ``metrics.jsonl`` (written by ``sagerl train``), several runs overlaid.

Groups (:data:`GROUPS`), one PNG each, one panel per metric, x = optimizer step:

- ``reward.png``: ``reward``, ``pass_rate``;
- ``entropy.png``: ``entropy`` (nats per token);
- ``kl.png``: ``kl`` and ``kl/reference``;
- ``guide.png``: ``q/mean`` and ``q/frac_above_1`` (the guide);
- ``clip.png``: ``clip_ratio/low_mean``, ``clip_ratio/high_mean``, ``clip_ratio/region_mean``;
- ``length.png``: ``completions/mean_length`` (tokens) and ``filtered_groups_share``.

A metric no run logged is left out (and a group with none, e.g. ``guide.png`` for plain GRPO runs); a
value logged as null (non-finite) is a gap in its line.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sagerl.analysis.runs import unique_labels
from sagerl.errors import SagerlError

METRICS_FILE = "metrics.jsonl"
GROUPS: dict[str, tuple[str, ...]] = {
    "reward": ("reward", "pass_rate"),
    "entropy": ("entropy",),
    "kl": ("kl", "kl/reference"),
    "guide": ("q/mean", "q/frac_above_1"),
    "clip": ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"),
    "length": ("completions/mean_length", "filtered_groups_share"),
}


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of a training run's ``metrics.jsonl`` (one per logged step), in file order.

    A truncated last line (a run killed mid-write) is skipped with a warning; the file is not modified.

    Raises:
        SagerlError: the folder has no ``metrics.jsonl`` (an eval folder is named as such), the file is
            empty, or a line other than the last is not a JSON object with a ``step`` (names the line).
    """
    folder = Path(run_dir)
    path = folder / METRICS_FILE if folder.is_dir() else folder
    if not path.is_file():
        if (folder / "samples.jsonl").is_file():
            raise SagerlError(
                f"{folder} is an eval run folder; plot takes training run folders (`sagerl train`)"
            )
        raise SagerlError(f"{folder}: no {METRICS_FILE} (not a `sagerl train` run folder?)")
    lines = path.read_text(encoding="utf-8").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    rows = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict) or "step" not in row:
                raise ValueError("a metrics line needs a 'step'")
        except ValueError as exc:
            if lineno == len(lines):
                warnings.warn(
                    f"{path}:{lineno}: incomplete last line (a run killed mid-write?); skipped it",
                    stacklevel=2,
                )
                break
            raise SagerlError(f"{path}:{lineno}: not a metrics record ({exc})") from exc
        rows.append(row)
    if not rows:
        raise SagerlError(f"{path}: no logged step yet")
    return rows


def _series(rows: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]] | None:
    if not any(key in r for r in rows):
        return None
    xs, ys = [], []
    for r in rows:
        value = r.get(key)
        xs.append(float(r["step"]))
        ys.append(
            float(value) if isinstance(value, int | float) and not isinstance(value, bool) else float("nan")
        )
    return xs, ys


def plot_curves(
    run_dirs: Sequence[str | Path], out: str | Path, labels: Sequence[str] | None = None
) -> list[Path]:
    """Write one PNG per metric group (:data:`GROUPS`) into ``out``, the runs overlaid.

    Args:
        run_dirs: training run folders (or ``metrics.jsonl`` paths).
        out: output folder.
        labels: legend names (default: the folder names, made unique with their parents if needed).

    Returns:
        the written PNG paths, in :data:`GROUPS` order.

    Raises:
        SagerlError: see :func:`read_metrics`.
    """
    from sagerl.eval.plots import _pyplot, _save

    runs = {}
    names = list(labels) if labels else unique_labels([Path(d) for d in run_dirs])
    for name, d in zip(names, run_dirs, strict=True):
        runs[name] = read_metrics(d)
    plt = _pyplot()
    written = []
    for group, keys in GROUPS.items():
        present = [k for k in keys if any(_series(rows, k) for rows in runs.values())]
        if not present:
            continue
        fig, axes = plt.subplots(1, len(present), figsize=(5.0 * len(present), 3.6), squeeze=False)
        for ax, key in zip(axes[0], present, strict=True):
            for name, rows in runs.items():
                series = _series(rows, key)
                if series:
                    ax.plot(*series, marker="o", markersize=2.5, linewidth=1.2, label=name)
            ax.set_title(key)
            ax.set_xlabel("step")
            ax.xaxis.get_major_locator().set_params(integer=True)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        try:
            written.append(_save(fig, Path(out) / f"{group}.png"))
        finally:
            plt.close(fig)
    return written
