"""A study over several sittings (issue 36): ``--until`` starts no run past a time, ``--archive`` carries the
finished runs without their weights to the next machine, and a restored archive is skipped, not rerun."""

from __future__ import annotations

import json
import tarfile
import time
from datetime import datetime

import pytest
import yaml

from sagerl.cli import main
from sagerl.cli.study import deadline_from, start_deadline
from sagerl.errors import ConfigError
from sagerl.study import load_study, run_study
from sagerl.study.archive import archive_study
from sagerl.study.runner import _run_cell_in_worker

SPEC = {
    "name": "sittings",
    "model": "planted-reference",
    "kernels": "native",  # in this process: the same code paths, without worker start-ups
    "train": {
        "dataset": "planted_train",
        "steps": 2,
        "set": {"per_device_train_batch_size": 8, "num_generations": 4, "save_steps": 1},
    },
    "eval": {"datasets": ["planted_common", "planted_rare"], "n": 2, "limit": 4, "max_new_tokens": 24},
    "seeds": [0, 1],
    "cells": [
        {"preset": "grpo"},
        {"preset": "grpo+branch", "name": "broken", "set": {"guide": "teacher", "teacher_model": "/nonexistent"},
         "seeds": [0]},
    ],
}  # fmt: skip


def test_until_reads_a_clock_time_or_a_duration():
    now = datetime(2026, 12, 6, 17, 0, 30).timestamp()
    assert deadline_from("19:30", now) == datetime(2026, 12, 6, 19, 30).timestamp()
    assert deadline_from("16:59", now) == datetime(2026, 12, 7, 16, 59).timestamp()  # passed: tomorrow's
    assert deadline_from("1h30m", now) == now + 5400
    assert deadline_from("90m", now) == now + 5400
    assert deadline_from("45s", now) == now + 45
    assert deadline_from(" 2h ", now) == now + 7200
    for bad in ("", "tomorrow", "25:00", "1.5h", "h", "19:30:00"):
        with pytest.raises(ConfigError, match=r"--until .*: give a clock time \(HH:MM"):
            deadline_from(bad, now)
    with pytest.raises(ConfigError, match=r"^--finish-by 'soon': give a clock time"):
        deadline_from("soon", now, flag="--finish-by")


def test_finish_by_keeps_the_longest_finished_run_free_before_the_end(tmp_path, capsys):
    """``--finish-by T``: no run starts after T less the longest run the study has finished (its cell.json's
    total_s; failed runs do not count), so the last runs end by T; with none finished, T itself (said)."""
    path = tmp_path / "sittings.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    study = load_study(path)
    out = tmp_path / "out"
    logs: list[str] = []
    assert start_deadline(study, out, 10_000.0, log=logs.append) == 10_000.0
    assert logs == ["--finish-by: no finished run to time yet, so runs start until the time given"]
    for cell, status, seconds in zip(study.cells, ("ok", "ok", "failed"), (100.0, 250.5, 900.0), strict=True):
        (out / cell.folder).mkdir(parents=True)
        (out / cell.folder / "cell.json").write_text(json.dumps({"status": status, "total_s": seconds}))
    logs.clear()
    end = datetime(2026, 12, 6, 22, 0).timestamp()
    assert start_deadline(study, out, end, log=logs.append) == end - 250.5
    assert logs == ["--finish-by 22:00: the longest finished run took 250 s, so no run starts after 21:55"]
    with pytest.raises(SystemExit):
        main(["study", str(path), "--out", str(out), "--until", "1h", "--finish-by", "2h"])
    assert "--until and --finish-by: give one" in capsys.readouterr().err


def test_past_until_starts_no_run_but_the_reference(tmp_path):
    path = tmp_path / "sittings.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    out = tmp_path / "out"
    logs: list[str] = []
    run_study(load_study(path), out, log=logs.append, until=time.time() - 1)
    assert (out / "reference" / "results.json").is_file()
    assert not list(out.glob("cells/*/*/cell.json"))  # nothing recorded: not failed, not started
    runs = [line for line in logs if line.startswith("[")]
    assert len(runs) == 3 and all(": not started (past " in line for line in runs)
    assert logs[-1].endswith("; 3 runs not started (past --until): run the study again to go on")
    # a worker of --jobs N checks the time when it takes the run up
    study = load_study(path)
    status = _run_cell_in_worker(study, out, study.cells[0], False, time.time() - 1)
    assert status["status"] == "not started" and not (out / study.cells[0].folder).exists()


def test_an_archive_carries_finished_runs_without_weights_and_a_restore_skips_them(tmp_path, capsys):
    path = tmp_path / "sittings.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    out = tmp_path / "first" / "study-sittings"
    archive = tmp_path / "results" / "sittings.tar.gz"
    with pytest.raises(
        SystemExit
    ) as exited:  # exit status 1: "broken" failed; the archive is written all the same
        main(["study", str(path), "--out", str(out), "--archive", str(archive)])
    assert exited.value.code == 1
    said = capsys.readouterr().out
    assert f"archive: {archive} (2 finished runs, 1 not in it; " in said
    assert (out / "cells" / "grpo" / "seed-0" / "train" / "model" / "model.safetensors").is_file()
    assert (out / "cells" / "grpo" / "seed-0" / "train" / "checkpoint-2").is_dir()
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert all(n.startswith("study-sittings/") for n in names)
    assert not [
        n for n in names if "/model/" in n or "checkpoint-" in n or n.endswith((".safetensors", ".lock"))
    ]
    assert not [n for n in names if "/broken/" in n]  # failed: its retry starts from scratch
    for run in ("grpo/seed-0", "grpo/seed-1"):
        for file in ("cell.json", "train/metrics.jsonl", "train/config.yaml", "eval/samples.jsonl",
                     "eval/results.json", "eval/eval_config.json"):  # fmt: skip
            assert f"study-sittings/cells/{run}/{file}" in names
    assert {"study-sittings/study.yaml", "study-sittings/study.json", "study-sittings/table.md",
            "study-sittings/reference/results.json", "study-sittings/reference/samples.jsonl"} <= set(names)  # fmt: skip

    # the next machine: restore, and the rerun trains nothing it holds and builds the same table
    second = tmp_path / "second"
    second.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(second, filter="data")
    restored = second / "study-sittings"
    logs: list[str] = []
    run_study(load_study(path), restored, log=logs.append, until=time.time() - 1)
    assert sum("done before, skipped" in line for line in logs) == 2
    assert [line.split(": ")[1][:11] for line in logs if line.startswith("[3/3]")] == ["not started"]
    first, again = (json.loads((folder / "study.json").read_text()) for folder in (out, restored))
    assert again["cells"]["grpo"] == first["cells"]["grpo"] and again["reference"] == first["reference"]
    assert (
        first["cells"]["grpo"]["summary"]["pass@1/planted_common"]["mean"] > 0
    )  # compared values, not zeros
    grpo_rows = [
        [r for r in (f / "table.md").read_text().splitlines() if r.startswith("| grpo")]
        for f in (out, restored)
    ]
    assert grpo_rows[0] == grpo_rows[1] and len(grpo_rows[0]) == 1


def test_archive_refuses_a_folder_that_is_not_a_study(tmp_path):
    path = tmp_path / "sittings.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    with pytest.raises(FileNotFoundError, match="not a study folder"):
        archive_study(load_study(path), tmp_path / "nothing", tmp_path / "a.tar.gz")
    assert not (tmp_path / "a.tar.gz").exists()
