"""Faults of ``sagerl eval --backend vllm``, with real processes (vLLM's CPU engine, a tiny random model).

An uninterrupted run gives the reference samples. Then, in one run folder: (1) the engine's worker process is
killed while the eval samples, after its first batches are written: the eval stops with one line naming what
happened and the fix, ``samples.jsonl`` holds whole lines only; (2) the rerun resumes and finishes with exactly
the reference's samples and pass@k. Three engine starts, the test's whole cost (about a minute each on 2 cores).

The evals run vLLM's engine in its own processes (``VLLM_ENABLE_V1_MULTIPROCESSING=1``, a user's choice that
sagerl keeps): sagerl's CPU default runs it inside the eval's process, where there is no worker to kill and a
SIGKILL of the eval ends the engine with it.

A SIGKILL of the eval process itself is not repeated here: what it leaves (a torn last line, cut off on resume)
and the resume are the same code for every backend, tested three times over in tests/faults/test_kill.py with the
hf backend. With vLLM's engine in its own processes, those processes outlive a killed eval (they do not watch
their parent): a known limit of vLLM's (docs/vllm.md); sagerl's in-process CPU engine ends with the eval.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from sagerl.eval.vllm_backend import IN_PROCESS_ENV

ROOT = Path(__file__).resolve().parents[3]
TOTAL = 80  # samples: 20 problems x 4, in batches of 4


def env() -> dict[str, str]:
    e = dict(os.environ)
    e.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    e[IN_PROCESS_ENV] = "1"  # vLLM's engine in its own processes, so that its worker can be killed
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), e.get("PYTHONPATH")) if p)
    return e


def eval_args(model: Path, data: Path, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "sagerl.cli",
        "eval",
        "--backend",
        "vllm",
        "-m",
        str(model),
        "-d",
        str(data),
        "-n",
        "4",
        "--max-new-tokens",
        "24",
        "--batch-size",
        "4",
        "--seed",
        "5",
        "--no-progress",
        "--out",
        str(out),
    ]


def samples(out: Path) -> dict[tuple, str]:
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return {(r["problem_id"], r["sample_index"]): r["text"] for r in rows}


def whole_lines(path: Path) -> int:
    data = path.read_bytes()
    assert data.endswith(b"\n")
    return sum(1 for line in data.splitlines() if json.loads(line))


def start(args: list[str], log: Path) -> subprocess.Popen:
    """The eval in its own session (signals to it reach nothing else), its output in ``log`` (vLLM logs a
    lot: a pipe left unread would fill and block it)."""
    with open(log, "w") as f:
        return subprocess.Popen(args, env=env(), stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


def wait_for_lines(proc: subprocess.Popen, path: Path, count: int, timeout: float = 400) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_bytes().count(b"\n") >= count):
        assert proc.poll() is None, "the eval ended before writing its first batches"
        assert time.monotonic() < deadline, "the eval never wrote its first batches"
        time.sleep(0.05)


def engine_worker(proc: subprocess.Popen) -> psutil.Process:
    """The deepest descendant of the eval: vLLM's worker (eval -> EngineCore -> worker)."""
    kids = psutil.Process(proc.pid).children(recursive=True)
    worker = [k for k in kids if "worker" in " ".join(k.cmdline() + [k.name()]).lower()]
    return (worker or kids)[-1]


def test_kill_engine_worker_then_resume(vllm_tiny_model, tmp_path):
    data = tmp_path / "tiny.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"p{i}", "problem": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n"
            for i in range(TOTAL // 4)
        )
    )
    ref = tmp_path / "ref"
    done = subprocess.run(
        eval_args(vllm_tiny_model, data, ref), env=env(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    expected = samples(ref)
    assert len(expected) == TOTAL

    # (1) kill the engine's worker while the eval samples, after its first two batches
    out = tmp_path / "run"
    proc = start(eval_args(vllm_tiny_model, data, out), tmp_path / "worker.log")
    wait_for_lines(proc, out / "samples.jsonl", 8)
    engine_worker(proc).send_signal(signal.SIGKILL)
    proc.wait(timeout=300)
    err = (tmp_path / "worker.log").read_text()
    assert proc.returncode != 0
    said = [line for line in err.splitlines() if "vLLM's engine died" in line]
    assert said and "rerun the same command to resume" in said[-1], err[-3000:]
    assert 8 <= whole_lines(out / "samples.jsonl") < TOTAL

    # (2) the rerun resumes and finishes: the samples and pass@k of the uninterrupted run
    done = subprocess.run(
        eval_args(vllm_tiny_model, data, out), env=env(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert samples(out) == expected
    assert (
        json.loads((out / "results.json").read_text())["datasets"]
        == json.loads((ref / "results.json").read_text())["datasets"]
    )
