"""A study's ``kernels`` setting: canonical by default on a planted model, native otherwise, one error line for an
unknown mode, printed with ``--dry-run``, compared on a rerun; a canonical study's runs run in a worker started
under the cap (their machine record says so)."""

from __future__ import annotations

import json

import pytest

from sagerl.errors import ConfigError
from sagerl.study import parse_study, run_study
from sagerl.study.runner import _recorded_settings, cell_commands, check_finished_cells, reference_commands

BASE = {
    "name": "t",
    "model": "planted-reference",
    "train": {"dataset": "planted_train", "steps": 1, "set": {"per_device_train_batch_size": 8, "num_generations": 4}},
    "eval": {"datasets": ["planted_rare"], "n": 2, "limit": 2, "max_new_tokens": 24, "dtype": "float32"},
    "seeds": [0],
    "cells": [{"preset": "grpo"}],
}  # fmt: skip


def test_planted_studies_default_to_canonical_and_others_to_native():
    assert parse_study(BASE, "x.yaml").kernels == "canonical"
    assert parse_study({**BASE, "kernels": "native"}, "x.yaml").kernels == "native"
    real = {**BASE, "model": None, "train": {**BASE["train"], "dataset": "arith_train"}}
    real["eval"] = {**BASE["eval"], "datasets": ["arith"]}
    assert parse_study(real, "x.yaml").kernels == "native"
    assert parse_study({**real, "kernels": "canonical"}, "x.yaml").kernels == "canonical"


def test_an_unknown_kernel_mode_is_one_error_naming_the_key_and_the_modes():
    with pytest.raises(ConfigError) as error:
        parse_study({**BASE, "kernels": "avx512"}, "x.yaml")
    assert str(error.value) == "x.yaml: kernels 'avx512': choose one of canonical, native"


def test_dry_run_commands_pass_the_kernel_mode(tmp_path):
    s = parse_study(BASE, "x.yaml")
    (reference,) = reference_commands(s, tmp_path)
    train, evaluate = cell_commands(s, tmp_path, s.cells[0])
    for line in (reference, train, evaluate):
        assert line.startswith("OMP_NUM_THREADS=1 sagerl ") and " --kernels canonical" in line
    native = parse_study({**BASE, "kernels": "native"}, "x.yaml")
    assert " --kernels native" in cell_commands(native, tmp_path, native.cells[0])[0]


def test_a_rerun_with_another_kernel_mode_refuses_the_finished_cells(tmp_path):
    before = parse_study(BASE, "x.yaml")
    cell = before.cells[0]
    folder = tmp_path / cell.folder
    folder.mkdir(parents=True)
    status = {"status": "ok", "preset": "grpo", "overrides": {}, "settings": _recorded_settings(before, cell)}
    (folder / "cell.json").write_text(json.dumps(status))
    check_finished_cells(before, tmp_path)
    with pytest.raises(ConfigError, match=r"grpo seed 0: kernels \(\"canonical\" -> \"native\"\)"):
        check_finished_cells(parse_study({**BASE, "kernels": "native"}, "x.yaml"), tmp_path)
    old = {**status, "settings": {k: v for k, v in status["settings"].items() if k != "kernels"}}
    (folder / "cell.json").write_text(json.dumps(old))  # recorded before the setting existed: not compared
    check_finished_cells(parse_study({**BASE, "kernels": "native"}, "x.yaml"), tmp_path)


def test_a_canonical_study_runs_its_runs_under_the_cap_in_a_worker(tmp_path):
    """This process runs native kernels; the study's reference and cell ran in a worker started under the
    canonical environment, as their records say, and the study leaves this process's environment as it was."""
    import os

    from sagerl.kernels import CANONICAL_ENV, canonical_supported

    if not canonical_supported()[0]:
        pytest.skip(f"canonical kernels cannot run here: {canonical_supported()[1]}")
    environ = dict(os.environ)
    out = tmp_path / "out"
    run_study(parse_study(BASE, "x.yaml"), out, log=lambda line: None)
    assert dict(os.environ) == environ and not all(os.environ.get(k) == v for k, v in CANONICAL_ENV.items())
    cell = json.loads((out / "cells" / "grpo" / "seed-0" / "cell.json").read_text())
    assert cell["status"] == "ok" and cell["settings"]["kernels"] == "canonical"
    assert (cell["machine"]["kernel_mode"], cell["machine"]["kernels"]) == ("canonical", "AVX2")
    config = json.loads((out / "reference" / "eval_config.json").read_text())
    assert config["engine"]["kernel_mode"] == "canonical" and config["engine"]["kernels"] == "AVX2"
    assert config["machine"]["kernel_mode"] == "canonical"
