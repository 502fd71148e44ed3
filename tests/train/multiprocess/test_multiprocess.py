"""SAGETrainer under 2 processes (torchrun; accelerate MULTI_CPU over gloo, DDP) equals 1 process.

For every preset family (GRPO, BNPO, DAPO with dynamic sampling) and every guide (none, branch, token,
random; the stochastic ones included), 2 optimizer steps on the same global batch (see mp_worker.py): the
loss, the all-reduced parameter gradient, the advantages of each global row (gathered rewards, batch-level
BNPO fit) and the dynamic-sampling keep-mask equal the 1-process run's; so do the logged metrics where
each process holds one micro-batch. And `sagerl train` under torchrun resumes exactly after a stop.

What these tests found (fixed in sagerl/train/trainer.py):

- the stochastic guides drew the same noise on every process (one generator, seeded alike), so the rows of
  process 1 repeated the noise of process 0's rows; noise is now keyed per global row and step;
- the sequence-level loss modes averaged over the sequences of each micro-batch, so rows dropped by dynamic
  sampling gave the other rows of their process more weight (the 2-process loss had the wrong sign here);
  they are now normalised by the global count of sequences, as token-mean is by the global token count.

Float tolerance: gradients per tensor max|Δ| ≤ 2e-4·max|g| (measured ≤ 3e-5; the two faults above gave
> 2e-2), losses 1e-6 + 1e-4·|loss|, metrics 1e-6 + 1e-4·|value|.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mp_worker import ACCUMULATED, CASES, GLOBAL_ROWS
from safetensors.torch import load_file

WORKER = Path(__file__).with_name("mp_worker.py")
METRICS = ("kl", "kl/reference", "entropy", "q/mean", "q/frac_above_1", "clip_ratio/region_mean", "reward")
GUIDED = {name for name, (preset, overrides) in CASES.items() if "+" in preset}


def torchrun(nproc: int, *args: str) -> None:
    """Run ``torchrun --standalone --nproc_per_node nproc ARGS`` on CPU; fail with its output's tail."""
    env = {
        **os.environ,
        "ACCELERATE_USE_CPU": "true",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "TRL_EXPERIMENTAL_SILENCE": "1",
    }
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout[-2000:]}\n{proc.stderr[-6000:]}"


@pytest.fixture(scope="module")
def runs(tiny_model, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("multiprocess")
    for nproc in (1, 2):
        torchrun(nproc, str(WORKER), "--model", str(tiny_model), "--out", str(out / f"{nproc}proc"))
    return out


def load(folder: Path) -> list[dict]:
    return [torch.load(path, weights_only=False) for path in sorted(folder.glob("rank*.pt"))]


def per_step(record: dict, step: int) -> float:
    """The loss of optimizer step ``step`` on one process: the sum of its micro-batch losses."""
    n = len(record["losses"]) // len(record["grads"])
    return sum(record["losses"][step * n : (step + 1) * n])


def close(a: float, b: float, rel: float = 1e-4, abs_: float = 1e-6) -> bool:
    return abs(a - b) <= abs_ + rel * abs(a)


@pytest.mark.parametrize("case", list(CASES))
def test_two_processes_equal_one(case, runs):
    (one,) = load(runs / "1proc" / case)
    two = load(runs / "2proc" / case)
    assert [r["layout"] for r in two] == [(2, 2 if case in ACCUMULATED else 1)] * 2
    assert len(one["grads"]) == len(two[0]["grads"]) == 2

    # advantages and keep-mask of every global row: from the gathered rewards, sliced per process
    rows = [r for rank in two for r in rank["rows"]]
    assert sorted(rows) == sorted(one["rows"]) == sorted([*range(GLOBAL_ROWS)] * 2)
    for step in range(2):
        for key in ("advantages", "keep"):
            ref = one[key][step * GLOBAL_ROWS : (step + 1) * GLOBAL_ROWS]
            half = GLOBAL_ROWS // 2
            got = [v for rank in two for v in rank[key][step * half : (step + 1) * half]]
            torch.testing.assert_close(torch.tensor(got), torch.tensor(ref), rtol=0, atol=1e-6)

    for step in range(2):
        # DDP averages the processes' gradients, so the 2-process loss is the mean of theirs
        loss_two = sum(per_step(rank, step) for rank in two) / len(two)
        assert close(per_step(one, step), loss_two), (step, per_step(one, step), loss_two)
        g1, g2 = one["grads"][step], two[0]["grads"][step]
        assert g1.keys() == g2.keys()
        for name in g1:
            assert torch.equal(g2[name], two[1]["grads"][step][name])  # all-reduced: the same on each
            scale = g1[name].abs().max().item()
            assert (g1[name] - g2[name]).abs().max().item() <= 2e-4 * scale, (step, name)
        assert max(g.abs().max().item() for g in g1.values()) > 0

    last_one, last_two = one["logs"][-1], two[0]["logs"][-1]
    if case in GUIDED:
        assert last_one["q/mean"] != 1.0  # the guide is active
    if "dynamic-sampling" in case or case.startswith("dapo"):
        assert last_one["filtered_groups_share"] == last_two["filtered_groups_share"] == pytest.approx(1 / 3)
    if case not in ACCUMULATED:  # with accumulation TRL averages the metrics over micro-batches
        for key in METRICS:
            if key in last_one:
                assert close(last_one[key], last_two[key]), (key, last_one[key], last_two[key])


FAST = [
    "--set",
    "max_completion_length=8",
    "--set",
    "per_device_train_batch_size=4",
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


def test_resume_with_two_processes(tiny_model, tmp_path):
    """`sagerl train` under torchrun with 2 processes, stopped after step 1's checkpoint and rerun, ends with the
    same weights as the uninterrupted 2-step run (bitwise), with one metrics line per step.

    The stopped run is the uninterrupted run's folder as a kill after step 1 leaves it (checkpoint-1, the
    metrics of step 1, nothing of step 2): two torchrun launches instead of three."""
    base = ["-m", "sagerl.cli", "train", "--preset", "grpo+random", "-m", str(tiny_model), *FAST]
    straight, split = tmp_path / "straight", tmp_path / "split"
    torchrun(2, *base, "-o", str(straight), "--max-steps", "2")
    assert {p.name for p in (straight / "checkpoint-1").glob("rng_state_*.pth")} == {
        "rng_state_0.pth",
        "rng_state_1.pth",
    }
    shutil.copytree(
        straight, split, ignore=shutil.ignore_patterns("checkpoint-2", "model", "train_state.json")
    )
    lines = (split / "metrics.jsonl").read_text().splitlines(keepends=True)
    (split / "metrics.jsonl").write_text("".join(line for line in lines if json.loads(line)["step"] == 1))
    torchrun(2, *base, "-o", str(split), "--max-steps", "2")

    a, b = (
        load_file(str(straight / "model" / "model.safetensors")),
        load_file(str(split / "model" / "model.safetensors")),
    )
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)
    stopped = load_file(str(split / "checkpoint-1" / "model.safetensors"))
    assert any(not torch.equal(stopped[k], b[k]) for k in b)  # the resumed step did change the weights
    steps = [json.loads(line)["step"] for line in (split / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
