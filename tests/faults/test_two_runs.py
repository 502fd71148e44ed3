"""Two runs in one folder (issue 9, fault 5): the second fails at once, naming the folder and the first
process; a lock left by a killed process does not block. Real processes throughout."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sagerl.run_lock import LOCK_FILE, RunFolderLockedError, run_lock

from .helpers import SAGERL, subprocess_env

HOLDER = (
    "import sys, time\n"
    "from sagerl.run_lock import run_lock\n"
    "with run_lock(sys.argv[1]):\n"
    "    print('locked', flush=True)\n"
    "    time.sleep(600)\n"
)


def hold_lock(folder: Path) -> subprocess.Popen:
    """A process that holds ``folder``'s lock (as a ``sagerl`` run does) until it is killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True, env=subprocess_env()
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)


def test_lock_names_the_holder_and_a_killed_holder_does_not_block(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    holder = hold_lock(folder)
    try:
        start = time.perf_counter()
        with pytest.raises(RunFolderLockedError) as info, run_lock(folder):
            pass
        assert time.perf_counter() - start < 1.0  # fails at once, does not wait
        message = str(info.value)
        assert "\n" not in message
        for part in (str(folder), f"pid {holder.pid}", socket.gethostname(), "-c", "started 20"):
            assert part in message, part
        info_on_disk = json.loads((folder / LOCK_FILE).read_text())
        assert info_on_disk["pid"] == holder.pid
    finally:
        kill(holder)
    # The dead holder's lock file is still there, but nobody holds it any more.
    assert (folder / LOCK_FILE).exists()
    with run_lock(folder) as path:
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert path.read_text() == ""  # released: the holder's details are cleared
    with run_lock(folder):  # and it can be taken again
        pass


def test_second_sagerl_eval_in_the_same_folder_fails_at_once(
    tmp_path: Path, tiny_model: Path, tiny_jsonl: Path
):
    out = tmp_path / "eval"
    common = [
        "eval",
        "-m",
        str(tiny_model),
        "-d",
        str(tiny_jsonl),
        "--max-new-tokens",
        "48",
        "--out",
        str(out),
    ]
    args = [*common, "-n", "256", "--batch-size", "4", "--no-progress"]
    first = subprocess.Popen([*SAGERL, *args], stdout=subprocess.PIPE, text=True, env=subprocess_env())
    try:
        assert first.stdout is not None
        assert first.stdout.readline().startswith("run folder:")  # printed once the lock is held
        second = subprocess.run(
            [*SAGERL, *args], capture_output=True, text=True, timeout=300, env=subprocess_env()
        )
        assert first.poll() is None, "the first run must still be running"
    finally:
        kill(first)
    assert second.returncode == 2
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in second.stderr
    assert str(out) in lines[0] and f"pid {first.pid}" in lines[0] and "sagerl.cli eval" in lines[0]
    assert "run folder" not in second.stdout
    # the first run was killed: its lock went with it, and a run with the same settings proceeds
    again = subprocess.run(
        [*SAGERL, *common, "-n", "2", "--limit", "1", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=300,
        env=subprocess_env(),
    )
    assert again.returncode == 0, again.stderr
    assert "pass@2" in again.stdout


def test_second_sagerl_train_in_the_same_folder_fails_at_once(
    tmp_path: Path, tiny_model: Path, tiny_jsonl: Path
):
    out = tmp_path / "train"
    holder = hold_lock(out)
    try:
        proc = subprocess.run(
            [
                *SAGERL,
                "train",
                "-m",
                str(tiny_model),
                "-d",
                str(tiny_jsonl),
                "-o",
                str(out),
                "--max-steps",
                "1",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=subprocess_env(),
        )
    finally:
        kill(holder)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("sagerl: error: ") and str(out) in last and f"pid {holder.pid}" in last
    assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]  # nothing written into the held folder
