"""Training curves: grouped PNGs from hand-made metrics.jsonl files; `sagerl train --set report_to=tensorboard`."""

from __future__ import annotations

import json

import pytest

from sagerl.analysis.curves import GROUPS, plot_curves, read_metrics
from sagerl.errors import SagerlError

FULL = {
    "reward": 0.5,
    "pass_rate": 0.5,
    "entropy": 1.1,
    "kl": 0.01,
    "kl/reference": 0.02,
    "q/mean": 1.05,
    "q/frac_above_1": 0.2,
    "clip_ratio/low_mean": 0.0,
    "clip_ratio/high_mean": 0.01,
    "clip_ratio/region_mean": 0.01,
    "completions/mean_length": 40.0,
    "filtered_groups_share": 0.0,
    "loss": 0.1,
}


def write_metrics(folder, rows, tail: str = ""):
    folder.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in rows) + tail
    (folder / "metrics.jsonl").write_text(text, encoding="utf-8")
    return folder


def test_grouped_pngs_several_runs(tmp_path):
    sage = write_metrics(tmp_path / "sage", [{"step": s, **FULL, "reward": 0.1 * s} for s in range(1, 6)])
    grpo_rows = [
        {k: v for k, v in {"step": s, **FULL}.items() if not k.startswith("q/")} for s in range(1, 4)
    ]
    grpo_rows[1]["kl"] = None  # a non-finite value logged as null: a gap
    grpo = write_metrics(tmp_path / "grpo", grpo_rows)
    written = plot_curves([sage, grpo], tmp_path / "out")
    assert [p.name for p in written] == [f"{g}.png" for g in GROUPS]
    assert all(p.stat().st_size > 0 for p in written)


def test_a_group_nobody_logged_is_left_out(tmp_path):
    rows = [{"step": 1, "reward": 0.0, "entropy": 1.0}, {"step": 2, "reward": 0.5, "entropy": 0.9}]
    written = plot_curves([write_metrics(tmp_path / "r", rows)], tmp_path / "out")
    assert [p.name for p in written] == ["reward.png", "entropy.png"]


def test_truncated_last_line_warns_and_bad_folders_fail(tmp_path):
    run = write_metrics(tmp_path / "r", [{"step": 1, "reward": 0.0}], tail='{"step": 2, "rew')
    with pytest.warns(UserWarning, match="incomplete last line"):
        rows = read_metrics(run)
    assert rows == [{"step": 1, "reward": 0.0}]
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "samples.jsonl").write_text("")
    with pytest.raises(SagerlError, match="is an eval run folder"):
        read_metrics(tmp_path / "eval")
    with pytest.raises(SagerlError, match="no metrics.jsonl"):
        read_metrics(tmp_path)
    bad = write_metrics(tmp_path / "bad", [], tail='not json\n{"step": 1}\n')
    with pytest.raises(SagerlError, match=r"metrics.jsonl:1"):
        read_metrics(bad)


def test_train_reports_to_tensorboard(tmp_path, tiny_model, monkeypatch):
    """TRL's own TensorBoard logging works through `sagerl train --set report_to=tensorboard`."""
    import torch

    from sagerl.cli import main

    torch.set_num_threads(1)
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
    out = tmp_path / "run"
    args = [
        "train",
        "-o",
        str(out),
        "-m",
        str(tiny_model),
        "--max-steps",
        "1",
        "--set",
        "report_to=tensorboard",
    ]
    for pair in (
        "max_completion_length=8",
        "per_device_train_batch_size=4",
        "gradient_accumulation_steps=1",
        "num_generations=4",
        "save_steps=10",
        "limit=4",
    ):
        args += ["--set", pair]
    main(args)
    # transformers writes TensorBoard events under <output_dir>/runs/<time>_<host> (or $TENSORBOARD_LOGGING_DIR)
    events = list((out / "runs").rglob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    assert any(tag.endswith("reward") for tag in acc.Tags()["scalars"])
    assert read_metrics(out)[0]["step"] == 1  # metrics.jsonl is still written beside it
