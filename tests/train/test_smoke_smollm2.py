"""One real training step of the embedded SmolLM2-135M-Instruct on the built-in arithmetic task."""

import json

import pytest

from sagerl.cli import main


@pytest.mark.slow
def test_one_grpo_branch_step_on_smollm2(tmp_path, capsys):
    out = tmp_path / "run"
    main(
        [
            "train",
            "--preset",
            "grpo+branch",
            "-o",
            str(out),
            "--max-steps",
            "1",
            "--set",
            "per_device_train_batch_size=4",
            "--set",
            "gradient_accumulation_steps=1",
            "--set",
            "num_generations=4",
            "--set",
            "max_completion_length=32",
            "--set",
            "save_steps=1",
        ]
    )
    row = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert row["step"] == 1
    assert 0.0 <= row["pass_rate"] <= 1.0
    assert 0.0 < row["entropy"] < 11.0  # nats; a real model is far from uniform over 49k tokens
    assert row["q/mean"] >= 1.0 and row["kl"] >= 0.0
    assert (out / "model" / "model.safetensors").is_file()
    assert (out / "checkpoint-1" / "optimizer.pt").is_file()
    assert not (out / "checkpoint-1" / "sage_guide_rng.pt").exists()  # guide noise is keyed by row and step
    assert "model:" in capsys.readouterr().out


def test_list_presets(capsys):
    main(["train", "--list-presets"])
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert names == [
        "grpo",
        "grpo-nokl",
        "grpo-fkl",
        "grpo+random",
        "grpo+token",
        "grpo+branch",
        "grpo+branch_token",
        "bnpo",
        "bnpo+branch",
        "dapo",
        "dapo+branch",
        "passk",
        "pkpo",
        "w-reinforce",
        "psr",
        "nsr",
        "unlikely",
        "clip-cov",
        "kl-cov",
        "entropy-adv",
        "rs-grpo",
        "pkpo-anneal",
        "passk-two-stage",
        "passk-mix",
        "darling",
        "ucb-mean",
        "ucb-con",
        "outcome-batch",
        "maxpo",
        "maxpo-anneal",
        "simko",
        "flowrl",
        "apo",
        "METHOD+GUIDE",
    ]
