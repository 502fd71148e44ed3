"""Disk full during a write: a clear error naming the path, no corrupted file, and a rerun resumes.

ENOSPC is simulated by making the write of one chosen file fail (``os.write`` or ``os.fsync`` for that
file's descriptor only, found through /proc/self/fd); a real partial write comes from a file-size limit
(``RLIMIT_FSIZE``: the kernel writes up to the limit, then fails with EFBIG) in a subprocess.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_eval_run import PROBLEMS, FakeSampler  # tests/ is on sys.path (pytest rootdir import)

from sagerl.atomic_files import atomic_write_text
from sagerl.cli import main
from sagerl.errors import WriteError
from sagerl.eval import evaluate
from sagerl.eval.samples import SAMPLES_FILE, SampleWriter, load_samples

from .helpers import subprocess_env

if not Path("/proc/self/fd").is_dir():
    pytest.skip("needs /proc/self/fd (Linux)", allow_module_level=True)


def _name(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def no_space() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def fail_fsync_of(monkeypatch, fragment: str) -> None:
    """``os.fsync`` of a file whose path contains ``fragment`` fails with ENOSPC."""
    real = os.fsync

    def fsync(fd: int) -> None:
        if fragment in _name(fd):
            raise no_space()
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    path = tmp_path / "toy.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS), encoding="utf-8")
    return path


def run(toy: Path, out: Path, **kw) -> dict:
    return evaluate(
        "fake-model", [str(toy)], n=8, out=out, sampler=FakeSampler(), progress=False, seed=3, **kw
    )


def test_atomic_write_keeps_the_old_file(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "config.yaml"
    atomic_write_text(target, "old: 1\n")
    fail_fsync_of(monkeypatch, ".config.")
    with pytest.raises(WriteError) as info:
        atomic_write_text(target, "new: 2\n")
    assert str(info.value).startswith(f"cannot write {target}: No space left on device")
    assert target.read_text() == "old: 1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["config.yaml"]  # no temporary file left


def test_disk_full_while_writing_results(toy: Path, tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "run"
    fail_fsync_of(monkeypatch, ".results.")
    with pytest.raises(WriteError, match=rf"cannot write {out / 'results.json'}: No space left on device"):
        run(toy, out)
    assert not (out / "results.json").exists()
    assert not [p for p in out.iterdir() if p.name.startswith(".results.")]
    assert len(load_samples(out / SAMPLES_FILE)) == 24  # every sample drawn is kept
    monkeypatch.undo()
    again = run(toy, out)
    assert again["meta"]["samples_generated_this_call"] == 0
    fresh = run(toy, tmp_path / "fresh")
    assert again["datasets"] == fresh["datasets"]


def test_disk_full_in_the_middle_of_a_samples_batch(toy: Path, tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "run"
    real, batches = os.write, []

    def write(fd: int, data) -> int:
        if _name(fd).endswith(SAMPLES_FILE):
            batches.append(len(data))
            if len(batches) == 2:  # the second batch: half of it reaches the disk, then ENOSPC
                real(fd, bytes(data[: len(data) // 2]))
                raise no_space()
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(WriteError) as info:
        run(toy, out)
    assert str(info.value).startswith(f"cannot write {out / SAMPLES_FILE}: No space left on device")
    text = (out / SAMPLES_FILE).read_text()
    assert text.endswith("\n") and len(text.splitlines()) == 4  # the first batch, whole lines only
    monkeypatch.undo()
    again = run(toy, out)
    assert again["meta"]["samples_generated_this_call"] == 20
    assert again["datasets"] == run(toy, tmp_path / "fresh")["datasets"]


def test_a_real_partial_write_is_cut_back_to_whole_lines(tmp_path: Path) -> None:
    """RLIMIT_FSIZE makes the kernel write part of a batch and then refuse (EFBIG), as a full disk does."""
    path = tmp_path / SAMPLES_FILE
    code = (
        "import resource, signal, sys\n"
        "from sagerl.eval.samples import SampleWriter\n"
        "from sagerl.errors import WriteError\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "rec = lambda i: {'dataset': 'd', 'problem_id': 'p', 'sample_index': i, 'correct': True, 'text': 'x' * 50}\n"
        "with SampleWriter(sys.argv[1]) as w:\n"
        "    w.write([rec(0), rec(1)])\n"
        "    resource.setrlimit(resource.RLIMIT_FSIZE, (300, resource.RLIM_INFINITY))\n"
        "    try:\n"
        "        w.write([rec(i) for i in range(2, 12)])\n"
        "    except WriteError as exc:\n"
        "        print(exc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=subprocess_env(),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"cannot write {path}: File too large")
    assert [json.loads(line)["sample_index"] for line in path.read_text().splitlines()] == [0, 1]


def test_cli_reports_a_full_disk_in_one_line(tmp_path: Path, tiny_model: Path, monkeypatch, capsys) -> None:
    data = tmp_path / "one.jsonl"
    data.write_text(json.dumps({"id": "a", "problem": "1 + 1?", "answer": "2"}) + "\n")
    out = tmp_path / "run"
    fail_fsync_of(monkeypatch, SAMPLES_FILE)
    with pytest.raises(SystemExit) as exc:
        main(
            ["eval", "-m", str(tiny_model), "-d", str(data), "-n", "2", "--max-new-tokens", "4"]
            + ["--out", str(out), "--no-progress"]
        )
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"sagerl: error: cannot write {out / SAMPLES_FILE}: No space left on device " + (
        "(the samples before this batch are kept; rerun to resume)"
    )
    assert (out / SAMPLES_FILE).read_text() == ""


def test_samples_writer_error_names_an_unwritable_folder(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(WriteError, match=f"cannot write {blocker / 'run' / SAMPLES_FILE}"):
        SampleWriter(blocker / "run" / SAMPLES_FILE)
