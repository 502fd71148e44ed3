"""SAGETrainer with ``use_vllm=True, vllm_mode="colocate"`` on vLLM's CPU engine (train_colocate.py, its own
process): the embedded SmolLM2 trains for 3 steps, and the policy vLLM samples from is the trained one.

At every rollout (TRL syncs the weights into vLLM right before it) and once after training, the log-probs
vLLM reports for a fixed 17-token completion equal the trainer's policy log-probs within ``TOLERANCE``.
Why that tolerance: both sides compute in float32 (sagerl gives the colocated engine the checkpoint's
dtype); they differ only by summation order (vLLM's oneDNN GEMMs on repacked weights and its own attention
kernel, against torch's), which measured 1.0e-5 to 2.4e-5 nats on this 30-layer model (2026-12-01), 20x
below the tolerance; bfloat16 in either would differ by ~0.1 nats (measured: 0.13 with TRL's default bf16
autocast in the trainer), a stale weight copy by the step-to-step change (0.16 to 0.34 nats measured), which
the test requires to be over 10x the tolerance.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TOLERANCE = 5e-4  # nats, per token


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("vllm-train")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests/integrations/vllm/train_colocate.py"),
            str(out / "r.json"),
            str(out / "run"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads((out / "r.json").read_text())


def test_vllm_samples_from_the_policy_of_the_last_optimizer_step(run):
    records = run["records"]
    steps = [r["step"] for r in records]
    assert steps[:3] == [0, 1, 2] and steps[-1] == 3  # a rollout per step, and once more after the last
    assert run["vllm_dtype"] == "torch.float32"
    # sagerl.train.vllm_rollouts: the CPU engine runs eagerly, with no start-up torch.compile
    assert run["vllm_enforce_eager"] is True
    worst = [max(abs(a - b) for a, b in zip(r["vllm"], r["policy"], strict=True)) for r in records]
    assert max(worst) < TOLERANCE, worst
    moved = [
        max(abs(a - b) for a, b in zip(r0["policy"], r1["policy"], strict=True))
        for r0, r1 in zip(records[:3], records[1:4], strict=True)
    ]
    assert min(moved) > 10 * TOLERANCE, moved  # each step moved the policy by more than the test can blur
    assert len(run["losses"]) == 3
    print("vLLM vs policy, max |Δ log p| per rollout:", worst, "policy change per step:", moved)


def test_importance_sampling_correction_with_the_sage_loss(run):
    # TRL's ratio π_old/π_vLLM (default sequence_mask: one per sequence, (B, 1)), from vllm_importance_sampling_correction
    assert run["ratio_shape"] == [8, 1]
    lo, hi = run["ratio_min_max"]
    assert 0.9 < lo <= hi < 1.1
    # perturbed ratios: SAGE's loss without a guide is TRL's GRPO loss, ratio included, and the ratio matters
    assert run["sage_plain"] == pytest.approx(run["trl_plain"], rel=1e-5, abs=1e-7)
    assert abs(run["sage_plain"] - run["sage_plain_unweighted"]) > 1e-4
    assert run["sage"] != pytest.approx(run["sage_plain"])  # the branch guide is on in training
