"""`sagerl train`: user errors are one line and exit 2; a rerun resumes exactly where the run stopped."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import yaml
from safetensors.torch import load_file

from sagerl.cli import main

FAST = [
    "--set",
    "max_completion_length=8",
    "--set",
    "per_device_train_batch_size=8",
    "--set",
    "gradient_accumulation_steps=1",
    "--set",
    "num_generations=4",
    "--set",
    "save_steps=1",
    "--set",
    "learning_rate=1e-3",
    "--set",
    "limit=16",
]


def run_cli(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    captured = capsys.readouterr()
    return exc.value.code, captured.err


def test_unknown_preset_fails_cleanly_in_a_subprocess():
    proc = subprocess.run(
        [sys.executable, "-m", "sagerl.cli", "train", "--preset", "no-such-preset"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("sagerl: error: unknown preset 'no-such-preset'")
    assert "grpo+branch" in lines[-1]
    assert "Traceback" not in proc.stderr


def test_unknown_config_key(capsys, tmp_path):
    code, err = run_cli(["train", "-o", str(tmp_path), "--set", "betta=0.1"], capsys)
    assert code == 2
    assert "unknown config key 'betta'" in err and "beta" in err


def test_wrong_type(capsys, tmp_path):
    code, err = run_cli(["train", "-o", str(tmp_path), "--set", "num_generations=many"], capsys)
    assert code == 2
    assert "num_generations" in err and "expects a int" in err


def test_dataset_row_without_answer_names_file_and_line(capsys, tmp_path, tiny_model):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "problem": "1+1", "answer": "2"}\n{"id": "b", "problem": "2+2"}\n')
    code, err = run_cli(["train", "-o", str(tmp_path / "run"), "-m", str(tiny_model), "-d", str(bad)], capsys)
    assert code == 2
    assert f"{bad}:2" in err and "answer" in err


def test_model_that_does_not_load(capsys, tmp_path):
    code, err = run_cli(["train", "-o", str(tmp_path / "run"), "-m", str(tmp_path / "nowhere")], capsys)
    assert code == 2
    assert "does not load" in err and "nowhere" in err


def test_inconsistent_options(capsys, tmp_path):
    code, err = run_cli(
        ["train", "-o", str(tmp_path), "--preset", "grpo-nokl", "--set", "guide=branch"], capsys
    )
    assert code == 2
    assert "needs beta > 0" in err


def _weights(folder):
    return load_file(str(folder / "model.safetensors"))


def test_resume_continues_exactly(tmp_path, tiny_model, capsys):
    base = ["train", "--preset", "grpo+branch", "-m", str(tiny_model), *FAST]
    straight = tmp_path / "straight"
    main([*base, "-o", str(straight), "--max-steps", "3"])  # returns normally on success

    split = tmp_path / "split"
    main([*base, "-o", str(split), "--max-steps", "2"])
    assert (split / "checkpoint-2").is_dir()
    # changing the config of an existing run is refused
    code, err = run_cli([*base, "-o", str(split), "--max-steps", "3", "--set", "beta=0.2"], capsys)
    assert code == 2 and "differs in: beta" in err
    main([*base, "-o", str(split), "--max-steps", "3"])  # the same command with more steps resumes

    a, b = _weights(straight / "model"), _weights(split / "model")
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)
    first = _weights(split / "checkpoint-2")
    assert any(not torch.equal(first[k], b[k]) for k in b)  # the third step did change the weights

    config = yaml.safe_load((split / "config.yaml").read_text())
    assert config["preset"] == "grpo+branch" and config["trainer"]["max_steps"] == 3
    assert config["trainer_all_fields"]["guide"] == "branch" and config["trainer_all_fields"]["beta"] == 0.05

    steps = [json.loads(line)["step"] for line in (split / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]
    row = json.loads((split / "metrics.jsonl").read_text().splitlines()[-1])
    for key in (
        "reward",
        "reward_std",
        "pass_rate",
        "kl",
        "kl/reference",
        "entropy",
        "q/mean",
        "q/frac_above_1",
        "clip_ratio/region_mean",
        "completions/mean_length",
        "filtered_groups_share",
    ):
        assert key in row, key
