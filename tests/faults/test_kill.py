"""Crash safety, proved by killing real processes (issue 9).

``sagerl train`` and ``sagerl eval`` are killed with SIGKILL several times in a row, at seeded random
moments and in the middle of writing a file (a checkpoint's ``optimizer.pt``, its ``trainer_state.json``,
a batch of ``samples.jsonl``); then the same command, run once more, must finish with exactly what an
uninterrupted run gives: the same weights, bit for bit, or the same samples and pass@k.

The mid-write kills come from inside the process: a few lines run before ``sagerl``'s own ``main`` wrap
the write of the chosen file so that it writes half of its bytes, syncs them, and sends itself SIGKILL.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from .helpers import SAGERL, subprocess_env

SEED = 90_210

# Runs sagerl's CLI, killing the process half-way through the first write of a file whose path ends with
# sys.argv[1] (torch.save of a checkpoint file, the Trainer's trainer_state.json, a samples.jsonl batch);
# "slow" instead waits 0.25 s before each samples.jsonl batch, so that an eval on a fast machine still
# runs long enough for a kill from outside to land at a random moment of its sampling.
KILL_MID_WRITE = r"""
import io, os, signal, sys, time
target = sys.argv.pop(1)

def die_half_written(path, data):
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
        f.flush()
        os.fsync(f.fileno())
    os.kill(os.getpid(), signal.SIGKILL)

if target == "slow":
    from sagerl.eval import samples

    real_write = samples.SampleWriter.write

    def write(self, records):
        time.sleep(0.25)
        return real_write(self, records)

    samples.SampleWriter.write = write
elif target.endswith(".jsonl"):
    from sagerl.eval import samples

    real_write, calls = samples.SampleWriter.write, []

    def write(self, records):
        calls.append(1)
        if len(calls) < 2:
            return real_write(self, records)
        records = list(records)
        real_write(self, records[: len(records) // 2])
        data = samples.json.dumps(records[-1]).encode()
        os.write(self._fd, data[: len(data) // 2])  # a torn last line
        os.kill(os.getpid(), signal.SIGKILL)

    samples.SampleWriter.write = write
else:
    import torch
    from transformers.trainer_callback import TrainerState

    real_save, real_state = torch.save, TrainerState.save_to_json

    def save(obj, f, *args, **kwargs):
        if isinstance(f, (str, os.PathLike)) and str(f).endswith(target):
            buffer = io.BytesIO()
            real_save(obj, buffer, *args, **kwargs)
            die_half_written(f, buffer.getvalue())
        return real_save(obj, f, *args, **kwargs)

    def save_to_json(self, path):
        if str(path).endswith(target):
            real_state(self, path + ".whole")
            with open(path + ".whole", "rb") as f:
                data = f.read()
            os.remove(path + ".whole")
            die_half_written(path, data)
        return real_state(self, path)

    torch.save, TrainerState.save_to_json = save, save_to_json

from sagerl.cli import main
main()
"""


def start(args: list[str], kill_mid_write: str | None = None) -> subprocess.Popen:
    command = (
        [sys.executable, "-c", KILL_MID_WRITE, kill_mid_write, *args] if kill_mid_write else [*SAGERL, *args]
    )
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env()
    )


def finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def kill_when(proc: subprocess.Popen, ready, delay: float, timeout: float = 300) -> bool:
    """SIGKILL ``proc`` ``delay`` seconds after ``ready()`` first holds; False if it ended before that."""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            return False
        assert time.monotonic() < deadline, "the run never got to the point of the kill"
        time.sleep(0.02)
    time.sleep(delay)
    if proc.poll() is not None:
        return False
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    return True


def lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


# --- sagerl train ------------------------------------------------------------------------------------


def train_args(model: Path, data: Path, out: Path) -> list[str]:
    sets = {
        "max_completion_length": 8,
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 1,
        "num_generations": 4,
        "save_steps": 1,
        "learning_rate": 1e-3,
    }
    args = ["train", "-m", str(model), "-d", str(data), "-o", str(out), "--max-steps", "6"]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    return args


def test_kill_train_repeatedly_then_resume_gives_the_same_weights(tmp_path, tiny_model, tiny_jsonl):
    rng = random.Random(SEED)
    reference = start(train_args(tiny_model, tiny_jsonl, tmp_path / "reference"))  # runs alongside
    out = tmp_path / "killed"
    args = train_args(tiny_model, tiny_jsonl, out)
    metrics = out / "metrics.jsonl"

    # 1. a random moment after the first optimizer step was logged
    proc = start(args)
    assert kill_when(proc, lambda: lines(metrics) >= 1, rng.uniform(0.0, 0.5))
    # 2. half-way through writing the next checkpoint's optimizer state
    code, _, err = finish(start(args, kill_mid_write="optimizer.pt"))
    assert code == -signal.SIGKILL, err
    partial = max(out.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    assert not (partial / "trainer_state.json").exists() and (partial / "optimizer.pt").exists()
    # 3. half-way through writing the next checkpoint's trainer_state.json (the last file of a checkpoint)
    code, _, err = finish(start(args, kill_mid_write="trainer_state.json"))
    assert code == -signal.SIGKILL
    assert f"{partial} is incomplete" in err  # the partial checkpoint of kill 2 was detected and skipped
    # 4. a random moment after one more step
    proc = start(args)
    logged = lines(metrics)
    if not kill_when(proc, lambda: lines(metrics) > logged, rng.uniform(0.0, 0.5)):
        assert proc.returncode == 0  # it finished first: fine, the rerun below then has nothing to do
    # 5. the same command once more finishes the run
    code, out_text, err = finish(start(args))
    assert code == 0, err
    assert "Traceback" not in err and out_text.strip().splitlines()[-1] == f"model: {out / 'model'}"

    code, _, err = finish(reference)
    assert code == 0, err
    a, b = (
        load_file(str(tmp_path / "reference" / "model" / "model.safetensors")),
        load_file(str(out / "model" / "model.safetensors")),
    )
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]  # every step logged once, none lost, none twice
    # 6. rerunning the finished run takes no further step (resumed at max_steps, the Trainer would take one)
    code, _, err = finish(start(args))
    assert code == 0, err
    assert [json.loads(line)["step"] for line in metrics.read_text().splitlines()] == steps
    assert not (out / "checkpoint-7").exists()
    c = load_file(str(out / "model" / "model.safetensors"))
    assert all(torch.equal(a[key], c[key]) for key in a)
    for checkpoint in out.glob("checkpoint-*"):
        assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == int(
            checkpoint.name.split("-")[1]
        )


# --- sagerl eval -------------------------------------------------------------------------------------


def eval_args(model: Path, data: Path, out: Path) -> list[str]:
    return ["eval", "-m", str(model), "-d", str(data), "-n", "8", "--max-new-tokens", "12"] + [
        "--batch-size",
        "8",
        "--out",
        str(out),
        "--no-progress",
    ]


def records(folder: Path) -> dict[tuple, dict]:
    rows = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
    keyed = {(r["dataset"], r["problem_id"], r["sample_index"]): r for r in rows}
    assert len(keyed) == len(rows), "a sample appears twice"
    return keyed


def test_kill_eval_repeatedly_then_resume_gives_the_same_results(tmp_path, tiny_model, tiny_jsonl):
    rng = random.Random(SEED + 1)
    reference = start(eval_args(tiny_model, tiny_jsonl, tmp_path / "reference"))  # runs alongside
    out = tmp_path / "killed"
    args = eval_args(tiny_model, tiny_jsonl, out)
    samples = out / "samples.jsonl"

    # 1. a random moment after the run folder was locked (model loading, or sampling)
    proc = start(args, kill_mid_write="slow")
    assert kill_when(proc, lambda: (out / "eval_config.json").exists(), rng.uniform(0.0, 1.5))
    # 2. half-way through appending a batch: a torn last line
    code, _, err = finish(start(args, kill_mid_write="samples.jsonl"))
    assert code == -signal.SIGKILL, err
    torn = samples.read_bytes()
    assert not torn.endswith(b"\n")
    # 3. a random moment after the next batch
    proc = start(args, kill_mid_write="slow")
    before = lines(samples)
    kill_when(proc, lambda: lines(samples) > before, rng.uniform(0.0, 0.5))
    assert samples.read_bytes().count(b"\n") >= torn.count(b"\n")  # the torn line was cut, whole ones kept
    seen = records(out)
    assert len(seen) >= 8  # kill 2 came on the second batch, after a whole first one
    # 4. the same command finishes the run
    code, out_text, err = finish(start(args))
    assert code == 0, err
    done = records(out)
    assert len(done) == 8 * 8
    for key, rec in seen.items():
        assert done[key] == rec  # no finished sample lost or redone
    generated = int(out_text.split(" samples generated now")[0].split()[-1])
    assert generated == 64 - len(seen)

    code, _, err = finish(reference)
    assert code == 0, err
    expected = records(tmp_path / "reference")
    assert {k: (r["text"], r["correct"]) for k, r in done.items()} == {
        k: (r["text"], r["correct"]) for k, r in expected.items()
    }
    a = json.loads((tmp_path / "reference" / "results.json").read_text())
    b = json.loads((out / "results.json").read_text())
    assert a["datasets"] == b["datasets"] and a["average"] == b["average"]
