"""What `sagerl train` prints: sagerl's one progress display and one line per logged step, no HF tqdm bars
("Loading weights", "Writing model shards", the Trainer's own bar) and no logged dicts."""

from __future__ import annotations

import re

import pytest

from sagerl.cli import main


@pytest.fixture
def restore_hf_progress(monkeypatch):
    from transformers.utils import logging as hf_logging

    for name in ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
        monkeypatch.delenv(name, raising=False)
    was = hf_logging.is_progress_bar_enabled()
    hf_logging.enable_progress_bar()
    yield
    (hf_logging.enable_progress_bar if was else hf_logging.disable_progress_bar)()


def test_train_prints_one_line_per_step_and_no_third_party_bars(
    tmp_path, tiny_model, capfd, restore_hf_progress
):
    args = ["train", "-m", str(tiny_model), "-o", str(tmp_path / "run"), "--max-steps", "2"]
    for setting in ("max_completion_length=4", "per_device_train_batch_size=4", "num_generations=4",
                    "gradient_accumulation_steps=1", "save_steps=1", "limit=8"):  # fmt: skip
        args += ["--set", setting]
    main(args)
    captured = capfd.readouterr()
    text = captured.out + captured.err
    for banned in ("Loading weights", "Writing model shards", "it/s]", "s/it]", "{'loss'", "'grad_norm'"):
        assert banned not in text, f"{banned!r} printed:\n{text}"
    steps = re.findall(r"^step (\d+)  reward ", text, re.M)
    assert steps == ["1", "2"], text
    assert re.search(r"^training .* 2/2 steps", captured.err, re.M), captured.err  # sagerl's bar, at its end
    assert text.count("done: ") == 1 and "model: " in captured.out


def test_a_demo_step_line_fits_80_columns():
    """The widest line the demo printed (step 12 of 12; before, ``s/step`` made it 82 columns and the
    terminal wrapped it)."""
    from sagerl.train.metrics import summary_line

    logs = {"reward": 0.125, "pass_rate": 0.125, "kl": 0.00216, "entropy": 0.357, "q/mean": 1.01,
            "completions/mean_length": 32.2, "step_time": 45.93, "loss": 0.1}  # fmt: skip
    line = summary_line(12, logs)
    assert line == "step 12  reward 0.125  pass 0.125  kl 0.00216  H 0.357  q 1.01  len 32.2  s 45.9"
    assert len(line) <= 80
