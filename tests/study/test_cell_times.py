"""A cell's ``cell.json`` times are the sums over every call that ran it (issue 34 #4): a cell resumed after
a failure or a kill reports the time it took, not the resume's (the shipped SmolLM2 study's passk seed 0
recorded train 2.69 s and eval 0.22 s, its resume's)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import sagerl.eval
import sagerl.train.run
from sagerl.study import runner
from sagerl.study.spec import parse_study

SPEC = {
    "name": "t",
    "model": "planted-reference",
    "train": {"dataset": "planted_train", "steps": 2},
    "eval": {"datasets": ["planted_common"], "n": 2, "limit": 2, "max_new_tokens": 8},
    "cells": [{"preset": "grpo"}],
    "seeds": [0],
}


class Clock:
    """A stand-in for the runner's ``time``: fake training and evaluation move it on by what they cost."""

    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def fake_runs(monkeypatch):
    """Replace training and evaluation by stand-ins that take ``costs`` seconds (popped per call) on a fake
    clock and raise what ``raises`` holds for that call."""
    clock = Clock()
    plan = SimpleNamespace(train=[], eval=[], clock=clock)
    monkeypatch.setattr(runner, "time", clock)

    def train(preset, overrides, folder, quiet=True):
        clock.now += plan.train.pop(0)
        return Path(folder) / "model"

    def evaluate(model, datasets, out, progress=False, **kwargs):
        cost, error = plan.eval.pop(0)
        clock.now += cost
        if error is not None:
            raise error

    monkeypatch.setattr(sagerl.train.run, "train", train)
    monkeypatch.setattr(sagerl.eval, "evaluate", evaluate)
    return plan


def cell_json(out: Path, study) -> dict:
    return json.loads((out / study.cells[0].folder / "cell.json").read_text())


def test_a_cell_resumed_after_a_failure_sums_the_times_of_both_calls(tmp_path, fake_runs):
    study = parse_study(SPEC, "t.yaml")
    out = tmp_path / "out"
    fake_runs.train = [500.0, 3.0]  # trains, then the rerun finds it trained
    fake_runs.eval = [(100.0, RuntimeError("engine died")), (50.0, None)]
    first = runner.run_cell(study, out, study.cells[0])
    assert first["status"] == "failed" and (first["train_s"], first["eval_s"]) == (500.0, 100.0)
    error_file = out / study.cells[0].folder / "error.txt"
    assert "engine died" in error_file.read_text()
    second = runner.run_cell(study, out, study.cells[0])
    assert not error_file.exists()  # resolved: a finished cell carries no stale traceback
    recorded = cell_json(out, study)
    assert recorded == second and recorded["status"] == "ok" and "error" not in recorded
    assert (recorded["train_s"], recorded["eval_s"], recorded["total_s"]) == (503.0, 150.0, 653.0)
    assert [(c["status"], c["train_s"], c["eval_s"]) for c in recorded["calls"]] == [
        ("failed", 500.0, 100.0),
        ("ok", 3.0, 50.0),
    ]


def test_a_cell_killed_during_its_evaluation_keeps_the_training_time(tmp_path, fake_runs):
    """A kill (here KeyboardInterrupt, which a cell does not catch) after training leaves ``cell.json``
    with status ``running`` and the training's time; the rerun adds its own."""
    study = parse_study(SPEC, "t.yaml")
    out = tmp_path / "out"
    fake_runs.train = [534.0, 2.69]
    fake_runs.eval = [(400.0, KeyboardInterrupt()), (0.22, None)]
    with pytest.raises(KeyboardInterrupt):
        runner.run_cell(study, out, study.cells[0])
    killed = cell_json(out, study)
    assert killed["status"] == "running" and killed["train_s"] == 534.0 and "eval_s" not in killed
    assert killed["error"] == runner.RUNNING_ERROR  # what the table shows for it meanwhile
    runner.run_cell(study, out, study.cells[0])
    recorded = cell_json(out, study)
    assert recorded["status"] == "ok" and recorded["train_s"] == pytest.approx(536.69)
    assert recorded["eval_s"] == pytest.approx(0.22)  # the killed evaluation's time is not known
    assert [c["status"] for c in recorded["calls"]] == ["interrupted", "ok"]
    assert recorded["calls"][0]["interrupted"] is True


def test_a_cell_json_from_before_calls_were_recorded_counts_as_one_call(tmp_path, fake_runs):
    study = parse_study(SPEC, "t.yaml")
    out = tmp_path / "out"
    folder = out / study.cells[0].folder
    folder.mkdir(parents=True)
    old = {"status": "failed", "error": "RuntimeError: x", "train_s": 480.5, "total_s": 490.0}
    (folder / "cell.json").write_text(json.dumps(old))
    fake_runs.train = [2.0]
    fake_runs.eval = [(300.0, None)]
    runner.run_cell(study, out, study.cells[0])
    recorded = cell_json(out, study)
    assert (recorded["train_s"], recorded["eval_s"], recorded["total_s"]) == (482.5, 300.0, 792.0)


def test_a_cell_another_process_is_running_is_left_to_it(tmp_path, fake_runs, monkeypatch):
    """A study started while an earlier one still runs a cell (its folder locked) reports the cell busy and
    writes neither ``cell.json`` nor ``error.txt``: the running process's records stay its own (2026-12-05: a
    restarted study marked two cells failed, with a traceback, that the earlier run then finished)."""
    from sagerl.run_lock import RunFolderLockedError

    study = parse_study(SPEC, "t.yaml")
    out = tmp_path / "out"
    folder = out / study.cells[0].folder
    folder.mkdir(parents=True)
    theirs = {"status": "running", "error": runner.RUNNING_ERROR, "train_s": 20.0, "total_s": 20.0}
    (folder / "cell.json").write_text(json.dumps(theirs))

    def locked(preset, overrides, folder, quiet=True):
        raise RunFolderLockedError(f"{folder} is in use by another sagerl run (pid 1)")

    monkeypatch.setattr(sagerl.train.run, "train", locked)
    status = runner.run_cell(study, out, study.cells[0])
    assert status["status"] == "busy" and "in use by another sagerl run" in status["error"]
    assert cell_json(out, study) == theirs and not (folder / "error.txt").exists()
