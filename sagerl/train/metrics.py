"""``metrics.jsonl``: one JSON line per logged optimizer step of a training run.

Each line holds ``step``, ``epoch``, ``time`` (seconds since the run started) and every metric TRL and the
adapter log at that step, under TRL's names, among them: ``reward`` and ``reward_std`` (mean and std of
the total reward), ``pass_rate`` (share of completions graded correct), ``kl``, ``entropy`` (nats per
token), ``q/mean`` and ``q/frac_above_1`` (the guide), ``clip_ratio/region_mean`` (clip fraction),
``completions/mean_length`` (tokens), ``filtered_groups_share`` (groups dropped by dynamic sampling),
``loss``, ``grad_norm``, ``learning_rate`` and ``step_time``.

On resumption, lines past the checkpoint's step are dropped first (atomically), so the file never holds
two lines for one step.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from transformers import TrainerCallback

from sagerl.atomic_files import atomic_write_text

# What the progress line shows per step (the full set goes to metrics.jsonl).
SUMMARY_KEYS = (
    ("reward", "reward"),
    ("pass_rate", "pass"),
    ("kl", "kl"),
    ("entropy", "H"),
    ("q/mean", "q"),
    ("completions/mean_length", "len"),
    ("step_time", "s"),  # seconds per step
)


class MetricsJSONLCallback(TrainerCallback):
    """Appends each training log to ``path`` as one JSON line (main process only)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._start = time.time()

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero or not self.path.exists():
            return
        kept = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a crash
            if row.get("step", 0) <= state.global_step:
                kept.append(line)
        atomic_write_text(self.path, "".join(line + "\n" for line in kept))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or "train_runtime" in logs:
            return
        if any(key.startswith("eval_") for key in logs):
            return
        row = {"step": state.global_step, "epoch": state.epoch, "time": round(time.time() - self._start, 3)}
        for key, value in logs.items():
            if isinstance(value, float) and not math.isfinite(value):
                value = None
            row[key] = value
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()


class CompactProgressCallback(TrainerCallback):
    """The training stage's one progress display (:func:`sagerl.progress.progress_display`, in steps) and
    one short line per logged step above it (:data:`SUMMARY_KEYS`), instead of the HF Trainer's tqdm bar
    and logged dicts (main process only). ``bar=False`` (``disable_tqdm``) keeps the lines only."""

    def __init__(self, bar: bool = True, console=None) -> None:
        self._bar = bar
        self._console = console
        self._progress = None
        self._task = None

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        from sagerl.progress import progress_display

        self._progress = progress_display("steps", enabled=self._bar, console=self._console)
        self._task = self._progress.add_task("training", total=state.max_steps, completed=state.global_step)
        self._progress.start()

    def on_step_end(self, args, state, control, **kwargs):
        if self._progress is not None:
            self._progress.update(self._task, completed=state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self._progress is None or not logs:
            return
        if "train_runtime" in logs:
            self._progress.console.print(f"done: {logs['train_runtime']:.0f} s", highlight=False)
            return
        self._progress.console.print(summary_line(state.global_step, logs), highlight=False)

    def on_train_end(self, args, state, control, **kwargs):
        if self._progress is not None:
            self._progress.update(self._task, completed=state.global_step)
            self._progress.stop()
            self._progress = None


def summary_line(step: int, logs: dict) -> str:
    """``step 3  reward 0.25  pass 0.25  kl 0.0357  H 2.04  q 1.24  len 8  s 21.4``: what one logged step
    shows on the terminal (every key of :data:`SUMMARY_KEYS` the logs have; ``s``: seconds per step)."""
    parts = [f"step {step}"]
    for key, label in SUMMARY_KEYS:
        value = logs.get(key)
        if isinstance(value, int | float):
            parts.append(f"{label} {value:.3g}")
    return "  ".join(parts)
