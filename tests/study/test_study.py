"""``sagerl study``: the study file's checks, the table's statistics, and a small study end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from sagerl.cli import main
from sagerl.errors import ConfigError
from sagerl.objective import Range
from sagerl.study import load_study, parse_study, run_study, t_interval
from sagerl.study.spec import NUMERIC_RANGES

BASE = {
    "name": "t",
    "model": "planted-reference",
    "train": {"dataset": "planted_train", "steps": 2, "set": {"learning_rate": 1.0e-3}},
    "eval": {"datasets": ["planted_common", "planted_rare"], "n": 2, "limit": 4, "max_new_tokens": 24},
    "seeds": [0, 1],
}


def study(**changes):
    data = {**BASE, **changes}
    return parse_study(data, "grid.yaml")


def test_cells_expand_over_seeds_and_sweeps():
    s = study(
        cells=[
            {"preset": "grpo"},
            {"preset": "grpo+branch", "set": {"kl-placement": "reward"}, "seeds": [5]},
        ],
        sweeps=[
            {"preset": "grpo+branch", "grid": {"gamma": [0.5, 1], "tau": [1.0]}, "seeds": 3},
            {"preset": "grpo+branch", "name": "r", "set": {"kl_placement": "reward"}, "grid": {"tau": [2]}},
        ],
    )
    assert [(c.name, c.seed) for c in s.cells] == [
        ("grpo", 0),
        ("grpo", 1),
        ("grpo+branch@kl_placement=reward", 5),
        ("grpo+branch@gamma=0.5@tau=1.0", 3),
        ("grpo+branch@gamma=1@tau=1.0", 3),
        ("r@tau=2", 0),
        ("r@tau=2", 1),
    ]
    assert s.cells[-1].overrides == {"kl_placement": "reward", "tau": 2}
    assert s.cells[2].overrides == {"kl_placement": "reward"}  # --set's key normalisation
    assert s.cells[3].overrides == {"gamma": 0.5, "tau": 1.0}
    assert s.cells[0].folder == "cells/grpo/seed-0"
    assert s.cell_names == ["grpo", "grpo+branch@kl_placement=reward", "grpo+branch@gamma=0.5@tau=1.0",
                            "grpo+branch@gamma=1@tau=1.0", "r@tau=2"]  # fmt: skip
    assert s.common == {"learning_rate": 1e-3} and s.steps == 2 and s.eval.n == 2


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            dict(cells=[{"preset": "grpo"}, {"preset": "grpoo"}]),
            r"grid.yaml: cells\[1\] 'grpoo': unknown preset 'grpoo'",
        ),
        (
            dict(cells=[{"preset": "grpo", "set": {"gama": 1}}]),
            r"cells\[0\].set: unknown config key 'gama' \(did you mean gamma",
        ),
        (
            dict(cells=[{"preset": "grpo+branch", "set": {"gamma": "strong"}}]),
            r"cells\[0\] 'grpo\+branch@gamma=strong': config key 'gamma' expects a float",
        ),
        (
            dict(cells=[{"preset": "grpo", "set": {"seed": 3}}]),
            r"cells\[0\] 'grpo@seed=3': key 'seed' is set by the study itself",
        ),
        (dict(cells=[{"preset": "grpo"}, {"preset": "grpo"}]), r"cells\[1\] 'grpo': the name is used twice"),
        (dict(cells=[{"preset": "grpo", "seeds": []}]), r"cells\[0\].seeds: seeds must be"),
        (dict(cells=[{"preset": "grpo", "colour": 1}]), r"cells\[0\]: unknown key 'colour'"),
        (dict(cells=[{"preset": "grpo"}], epochs=3), r"grid.yaml: unknown key 'epochs'"),
        (dict(cells=[]), r"no cells"),
        (dict(cells=[{"preset": "grpo"}], eval={"datasets": ["planted"], "n": 0}), r"eval.n"),
        (
            dict(cells=[{"preset": "grpo"}], eval={"datasets": ["planted"], "n": "many"}),
            r"eval.n='many' must be an integer in \[1, inf\)",
        ),
        (
            dict(cells=[{"preset": "grpo"}], train={"steps": 0}),
            r"grid.yaml: train.steps=0 must be an integer in \[1, inf\)",
        ),
        (
            dict(cells=[{"preset": "grpo"}], train={"dataset": "planted_trian", "steps": 2}),
            r"grid.yaml: train.dataset: unknown dataset 'planted_trian'.*did you mean 'planted_train'",
        ),
        (
            dict(cells=[{"preset": "grpo"}], eval={"datasets": ["planted_common", "planted_rar"], "n": 2}),
            r"eval.datasets: unknown dataset 'planted_rar'.*did you mean 'planted_rare'",
        ),
        (
            dict(cells=[{"preset": "grpo+branch", "set": {"guide": "telepathy"}}]),
            r"cells\[0\] 'grpo\+branch@guide=telepathy': guide='telepathy' is not one of",
        ),
        (
            dict(cells=[{"preset": "grpo"}, {"preset": "grpo+branch", "set": {"q_min": 10.0, "q_max": 0.1}}]),
            r"cells\[1\] .*q_min=10.0 must be a number in \(0, 1\]",
        ),
        (
            dict(
                cells=[{"preset": "grpo"}],
                train={"dataset": "planted_train", "steps": 2, "set": {"per_device_train_batch_size": 3}},
            ),
            r"cells\[0\] 'grpo': invalid trainer config",
        ),
        (
            dict(sweeps=[{"preset": "grpo+branch", "grid": {"gamma": 0.5}}]),
            r"sweeps\[0\]: grid must map each key to a non-empty list",
        ),
        (
            dict(cells=[{"preset": "grpo"}], train={"dataset": "planted_train", "keep": "weights"}),
            r"grid.yaml: train.keep='weights': choose one of checkpoints, model",
        ),
    ],
)
def test_bad_study_files_fail_before_training_naming_cell_and_key(changes, message):
    with pytest.raises(ConfigError, match=message):
        study(**changes)


def test_a_gpu_study_is_checked_on_a_cpu_machine():
    """bf16 (a GPU setting) does not stop the value checks on a CPU login node: the device is neutralised."""
    s = study(cells=[{"preset": "grpo+branch"}], train={"dataset": "planted_train", "steps": 2, "set": {"bf16": True}})  # fmt: skip
    assert s.common["bf16"] is True and len(s.cells) == 2


def test_t_interval_closed_form():
    mean, lo, hi = t_interval([1.0, 2.0, 3.0])
    half = 4.302653 * 1.0 / math.sqrt(3)  # t_{0.975, 2} * sd / sqrt(3); t = 4.303 as printed tables round it
    assert mean == 2.0 and lo == pytest.approx(2 - half) and hi == pytest.approx(2 + half)
    mean, lo, hi = t_interval([0.5])  # one value: the interval is undefined, not zero-width
    assert mean == 0.5 and math.isnan(lo) and math.isnan(hi)
    assert t_interval([0.5, float("nan")])[0] == 0.5 and math.isnan(t_interval([0.5, float("nan")])[1])
    assert t_interval([0.1, 0.9], 0.0, 1.0)[1:] == (0.0, 1.0)  # cut to the metric's range
    assert all(math.isnan(v) for v in t_interval([float("nan")]))


def test_dry_run_prints_every_command(tmp_path, capsys):
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump({**BASE, "cells": [{"preset": "grpo+branch", "set": {"gamma": 0.5}}]}))
    main(["study", str(path), "--dry-run", "--out", str(tmp_path / "out")])
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 + 2 * 2 + 1  # reference, (train, eval) per seed, aggregate
    assert lines[0].startswith(  # with the study's thread count
        "OMP_NUM_THREADS=1 sagerl eval --model planted-reference --dataset planted_common,planted_rare -n 2"
    )
    train_seed1 = lines[3]
    assert train_seed1.startswith("OMP_NUM_THREADS=1 sagerl train --preset grpo+branch --output-dir")
    assert (
        "--set gamma=0.5" in train_seed1 and "--set seed=1" in train_seed1 and "--max-steps 2" in train_seed1
    )
    assert lines[-1].endswith("--aggregate-only")
    assert not (tmp_path / "out").exists()


def test_bad_study_file_is_one_line_error(tmp_path, capsys):
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump({**BASE, "cells": [{"preset": "nope"}]}))
    with pytest.raises(SystemExit) as exit_info:
        main(["study", str(path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cells[0] 'nope': unknown preset 'nope'" in err[0]


def test_two_cell_study_end_to_end(tmp_path, capsys):
    """Two cells train and evaluate, a third fails without stopping them, a rerun skips the finished."""
    spec = {
        **BASE,
        "cells": [
            {"preset": "grpo"},
            {"preset": "grpo+branch", "set": {"kl_placement": "reward"}, "seeds": [0]},
            {"preset": "grpo+branch", "name": "broken", "set": {"guide": "teacher", "teacher_model": str(tmp_path / "none")}, "seeds": [0]},
        ],
        "train": {"dataset": "planted_train", "steps": 2, "set": {"per_device_train_batch_size": 8, "num_generations": 4}},
    }  # fmt: skip
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    logs: list[str] = []
    run_study(load_study(path), out, log=logs.append)
    ran = [line.split(":")[0] for line in logs if line.startswith("[")]
    # seed by seed: every cell's seed 0 first (a study stopped partway holds whole seeds), numbered by file order
    assert ran == [
        "[1/4] grpo seed 0",
        "[3/4] grpo+branch@kl_placement=reward seed 0",
        "[4/4] broken seed 0",
        "[2/4] grpo seed 1",
    ]
    statuses = {
        p.parent.parent.name + "/" + p.parent.name: json.loads(p.read_text())
        for p in out.glob("cells/*/*/cell.json")
    }
    assert {k: v["status"] for k, v in statuses.items()} == {
        "grpo/seed-0": "ok",
        "grpo/seed-1": "ok",
        "grpo+branch@kl_placement=reward/seed-0": "ok",
        "broken/seed-0": "failed",
    }
    assert "does not load" in statuses["broken/seed-0"]["error"]
    data = json.loads((out / "study.json").read_text())
    grpo = data["cells"]["grpo"]
    assert sorted(grpo["per_seed"]) == ["0", "1"] and data["cells"]["broken"]["failed"]["0"]
    for metrics in grpo["per_seed"].values():
        assert metrics["solved/total"] == metrics["preserved/total"] + metrics["expanded/total"]
        assert metrics["solved/total"] == metrics["solved/planted_common"] + metrics["solved/planted_rare"]
        shares = [v for k, v in metrics.items() if k.startswith("strategy/")]
        assert sum(shares) == pytest.approx(1.0)  # one exact strategy label per completion
        assert 0.0 <= metrics["pass@1/planted_rare"] <= metrics["pass@2/planted_rare"] <= 1.0
    summary = grpo["summary"]["pass@1/average"]
    assert summary["mean"] == pytest.approx(sum(summary["values"]) / 2)
    table = (out / "table.md").read_text()
    assert "| reference (before training) |" in table and "| broken (seed 0) | failed |" in table
    assert (out / "passk.png").stat().st_size > 0 and (out / "strategies.png").stat().st_size > 0
    assert (out / "gain.png").stat().st_size > 0

    logs.clear()
    run_study(load_study(path), out, log=logs.append)  # rerun: finished cells are skipped, the failed retried
    assert sum("done before, skipped" in line for line in logs) == 3
    assert any(line.startswith("[4/4] broken seed 0: failed") for line in logs)

    # every run records the machine that ran it; runs from two machines are flagged under the table
    from sagerl.determinism import machine_record
    from sagerl.kernels import canonical_supported
    from sagerl.study.table import write_study_table

    here = machine_record()  # the study's runs ran in a worker under the canonical kernels (a planted model)
    if canonical_supported()[0]:
        here = {**here, "kernels": "AVX2", "kernel_mode": "canonical"}
    assert data["run_machines"] == [
        {"machine": here, "runs": ["reference", "grpo 0", "grpo 1", "grpo+branch@kl_placement=reward 0"]}
    ]
    assert "Note:" not in table
    from sagerl.determinism import code_record

    # and the code that ran it: this checkout's commit (a clone, as CI's) or, installed, none
    assert data["run_code"] == [
        {
            "code": code_record(),
            "runs": ["reference", "grpo 0", "grpo 1", "grpo+branch@kl_placement=reward 0"],
        }
    ]
    moved = out / "cells" / "grpo" / "seed-1" / "cell.json"
    status = json.loads(moved.read_text())
    moved.write_text(json.dumps({**status, "machine": {**here, "cpu": "Other CPU", "isa": ["amx_bf16"]}}))
    data = write_study_table(load_study(path), out)
    assert [len(g["runs"]) for g in data["run_machines"]] == [3, 1]
    note = (out / "table.md").read_text().splitlines()[-1]
    assert note.startswith("Note: runs from 2 machines: 3 on ") and "1 on Other CPU (amx_bf16; " in note
    assert f"; {here['kernels']} kernels; torch" in note


def test_keep_model_deletes_a_finished_runs_checkpoints_only(tmp_path):
    """``train.keep: model``: once a run has been evaluated its checkpoint folders go, its final model stays (and
    with the default, ``checkpoints``, they stay)."""
    train = {"dataset": "planted_train", "steps": 2, "set": {"save_steps": 1, "save_total_limit": 3}}
    for keep, left in (("model", []), ("checkpoints", ["checkpoint-1", "checkpoint-2"])):
        spec = {**BASE, "seeds": [0], "cells": [{"preset": "grpo"}], "train": {**train, "keep": keep}}
        out = tmp_path / keep
        run_study(parse_study(spec, "keep.yaml"), out, log=lambda line: None)
        folder = out / "cells" / "grpo" / "seed-0"
        assert json.loads((folder / "cell.json").read_text())["status"] == "ok"
        assert sorted(p.name for p in (folder / "train").glob("checkpoint-*")) == left
        assert (folder / "train" / "model" / "model.safetensors").is_file()
        assert (folder / "eval" / "results.json").is_file()


def _finish(out, cell, status):
    folder = out / cell.folder
    folder.mkdir(parents=True)
    (folder / "cell.json").write_text(json.dumps({"status": "ok", **status}))


def test_rerun_refuses_finished_cells_whose_settings_changed(tmp_path):
    """A finished cell is only skipped when it ran with the settings the study file now gives; otherwise
    the rerun stops before training anything, naming the cell, seed and keys (old -> new)."""
    from sagerl.study.runner import _recorded_settings, check_finished_cells

    before = study(cells=[{"preset": "dapo"}, {"preset": "grpo"}], seeds=[0])
    out = tmp_path / "out"
    dapo, grpo = before.cells
    _finish(out, dapo, {"preset": "dapo", "overrides": {}, "settings": _recorded_settings(before, dapo)})
    _finish(out, grpo, {"preset": "grpo", "overrides": {}})  # written before settings were recorded
    check_finished_cells(before, out)  # unchanged: nothing to say

    after = study(cells=[{"preset": "dapo", "name": "dapo", "set": {"max_completion_length": 32}}, {"preset": "grpo"}], seeds=[0])  # fmt: skip
    with pytest.raises(ConfigError) as error:
        check_finished_cells(after, out)
    assert str(error.value).startswith(f"{out}: finished cells ran with other settings")
    assert "dapo seed 0: train.max_completion_length (unset -> 32)" in str(error.value)
    assert "grpo seed" not in str(error.value)
    with pytest.raises(ConfigError, match="dapo seed 0"):
        run_study(after, out)  # before the reference evaluation: no model is loaded

    changed_common = study(cells=[{"preset": "dapo"}], seeds=[0], eval={**BASE["eval"], "n": 4})
    with pytest.raises(ConfigError, match=r"eval\.n \(2 -> 4\)"):
        check_finished_cells(changed_common, out)
    old_format = study(cells=[{"preset": "grpo", "name": "grpo", "set": {"beta": 0.1}}], seeds=[0])
    with pytest.raises(ConfigError, match=r"grpo seed 0: beta \(unset -> 0.1\)"):
        check_finished_cells(old_format, out)
    other_preset = study(cells=[{"preset": "bnpo", "name": "dapo"}, {"preset": "grpo+branch", "name": "grpo"}], seeds=[0])  # fmt: skip
    with pytest.raises(ConfigError) as error:
        check_finished_cells(other_preset, out)
    assert 'dapo seed 0: preset ("dapo" -> "bnpo")' in str(error.value)
    assert 'grpo seed 0: preset ("grpo" -> "grpo+branch")' in str(error.value)


def test_a_study_is_not_continued_in_another_precision(tmp_path, monkeypatch):
    """Finished runs record the dtype ``auto`` resolved to on their machine; a rerun where it resolves to another
    (a float32-only CPU after a bfloat16 one) refuses before anything runs, for the cells and for the reference,
    rather than pairing float32 runs with bfloat16 ones. Pinning the dtype in the file then names the change."""
    from sagerl.study.runner import _recorded_settings, check_finished_cells

    monkeypatch.setenv("SAGERL_DTYPE", "bfloat16")  # the machine that ran them: auto -> bfloat16
    before = study(cells=[{"preset": "grpo"}], seeds=[0])
    (grpo,) = before.cells
    out = tmp_path / "out"
    settings = _recorded_settings(before, grpo)
    assert settings["dtypes"] == {"train": "bfloat16", "eval": "bfloat16"}
    _finish(out, grpo, {"preset": "grpo", "overrides": {}, "settings": settings})
    check_finished_cells(before, out)

    monkeypatch.setenv("SAGERL_DTYPE", "float32")  # another machine: auto -> float32
    with pytest.raises(ConfigError) as error:
        check_finished_cells(before, out)
    message = str(error.value)
    assert (
        'grpo seed 0: dtypes.eval ("bfloat16" -> "float32"), dtypes.train ("bfloat16" -> "float32")'
        in message
    )
    assert "set dtype in train.set and eval.dtype" in message
    pinned = study(cells=[{"preset": "grpo"}], seeds=[0], eval={**BASE["eval"], "dtype": "bfloat16"})
    with pytest.raises(ConfigError, match=r"dtypes\.train \(\"bfloat16\" -> \"float32\"\)") as error:
        check_finished_cells(pinned, out)  # the evaluation pinned, the training not yet
    assert "dtypes.eval" not in str(error.value)

    reference = out / "reference"
    reference.mkdir()
    (reference / "eval_config.json").write_text(
        json.dumps({"engine": {"dtype": "bfloat16", "backend": "hf"}})
    )
    (out / grpo.folder / "cell.json").unlink()
    with pytest.raises(
        ConfigError, match=r"the reference evaluation: dtypes\.eval \(\"bfloat16\" -> \"float32\"\)"
    ):
        check_finished_cells(before, out)


def test_aggregating_reads_finished_runs_on_any_machine_but_never_two_precisions(tmp_path, monkeypatch):
    """``--aggregate-only`` runs nothing here, so this machine's precision is not compared (an archive of bfloat16
    runs restored on a float32-only CPU aggregates); the finished runs' and the reference's precisions are
    compared with each other instead, and a mix is refused, naming both precisions and their runs."""
    from sagerl.study.runner import _recorded_settings, check_finished_cells

    monkeypatch.setenv("SAGERL_DTYPE", "bfloat16")  # the machine that ran them
    before = study(cells=[{"preset": "grpo"}, {"preset": "dapo"}], seeds=[0])
    out = tmp_path / "out"
    for cell in before.cells:
        _finish(
            out, cell, {"preset": cell.preset, "overrides": {}, "settings": _recorded_settings(before, cell)}
        )
    reference = out / "reference"
    reference.mkdir()
    (reference / "eval_config.json").write_text(
        json.dumps({"engine": {"dtype": "bfloat16", "backend": "hf"}})
    )

    monkeypatch.setenv("SAGERL_DTYPE", "float32")  # the machine that aggregates them
    with pytest.raises(ConfigError, match="dtypes.train"):
        check_finished_cells(before, out)  # a run would continue here in float32: refused
    check_finished_cells(before, out, runs_here=False)  # reading them is not

    dapo = json.loads((out / before.cells[1].folder / "cell.json").read_text())
    dapo["settings"]["dtypes"] = {"train": "float32", "eval": "float32"}  # as if from a float32 machine
    (out / before.cells[1].folder / "cell.json").write_text(json.dumps(dapo))
    with pytest.raises(ConfigError) as error:
        check_finished_cells(before, out, runs_here=False)
    message = str(error.value)
    assert (
        "dtypes.train: the finished runs ran in bfloat16 (grpo seed 0) and float32 (dapo seed 0)" in message
    )
    assert (
        "dtypes.eval: the finished runs ran in bfloat16 (the reference, grpo seed 0) and float32 (dapo seed 0)"
        in message
    )
    yaml_path = tmp_path / "s.yaml"
    yaml_path.write_text(
        yaml.safe_dump({**BASE, "cells": [{"preset": "grpo"}, {"preset": "dapo"}], "seeds": [0]})
    )
    with pytest.raises(SystemExit):
        main(["study", str(yaml_path), "--out", str(out), "--aggregate-only"])  # the CLI's check is this one


def test_cli_exits_1_when_a_cell_failed_and_dry_run_refuses_changed_cells(tmp_path, capsys):
    spec = {**BASE, "seeds": [0], "cells": [{"preset": "grpo+branch", "name": "broken", "set": {"guide": "teacher", "teacher_model": str(tmp_path / "none")}}]}  # fmt: skip
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        main(["study", str(path), "--out", str(out)])
    assert exit_info.value.code == 1
    assert "sagerl study: 1 of 1 runs failed" in capsys.readouterr().err

    from sagerl.study.runner import _recorded_settings

    finished = study(cells=[{"preset": "grpo"}], seeds=[0])
    _finish(
        out,
        finished.cells[0],
        {"preset": "grpo", "settings": _recorded_settings(finished, finished.cells[0])},
    )
    path.write_text(yaml.safe_dump({**BASE, "seeds": [0], "cells": [{"preset": "grpo", "name": "grpo", "set": {"beta": 0.1}}]}))  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:
        main(["study", str(path), "--out", str(out), "--dry-run"])
    assert exit_info.value.code == 2
    assert "grpo seed 0: train.beta (unset -> 0.1)" in capsys.readouterr().err


def test_aggregate_only_says_how_many_cells_finished(tmp_path, capsys):
    """``--aggregate-only`` on a half-run study: the table of what is there, and 'N of M cells finished'."""
    spec = {**BASE, "cells": [{"preset": "grpo"}, {"preset": "grpo+branch"}]}
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    cells = load_study(path).cells
    failed = cells[-1].folder
    (out / failed).mkdir(parents=True)
    (out / failed / "cell.json").write_text(json.dumps({"status": "failed", "error": "ValueError: boom"}))
    with pytest.raises(SystemExit) as exit_info:
        main(["study", str(path), "--out", str(out), "--aggregate-only"])
    assert exit_info.value.code == 1
    captured = capsys.readouterr()
    assert "0 of 2 cells finished (0 of 4 runs: 2 cells x 2 seeds), 1 run failed" in captured.out
    assert "failed: grpo+branch seed 1: ValueError: boom" in captured.out
    assert (out / "table.md").is_file() and "1 of 4 runs failed" in captured.err


def test_the_study_table_fits_80_columns():
    from sagerl.study.table import render_terminal
    from sagerl.tables import render_text

    def summary(mean):
        keys = [f"pass@{k}/{ds}" for ds in ("planted_common", "planted_rare", "average") for k in (1, 8, 64)]
        keys += ["solved/planted_common", "solved/planted_rare", "expanded/total", "shrunk/total"]
        keys += [f"strategy/{s}" for s in ("head", "none", "second", "tail", "third")]
        keys += ["kl/reference", "entropy"]
        return {k: {"mean": mean, "ci": [mean / 2, mean * 1.5 if mean < 0.5 else 1.0]} for k in keys}

    names = ["grpo", "grpo+branch@strong@reward@ref-entropy", "grpo+teacher@strong"]
    data = {
        "study": "planted-grid",
        "n": 64,
        "datasets": ["planted_common", "planted_rare"],
        "reference": {"pass@1/planted_rare": 0.016, "solved/planted_rare": 42},
        "cells": {
            name: {"per_seed": {"0": {}, "1": {}}, "failed": {}, "summary": summary(0.278)} for name in names
        },
    }
    text = render_text(render_terminal(data), 80)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80, text
    for name in names:  # every row label whole, once per part of the split table
        parts = text.count("planted-grid: mean")
        assert sum(line == name or line.startswith(name + " ") for line in lines) == parts
    assert all(f"[13.9, {hi}]" in text for hi in ("41.7",)) and "27.8" in text and "0.139" in text
    for header in ("planted_common", "pass@64 (%)", "tail share", "KL to ref", "expanded", "shrunk"):
        assert header in text


def _with_setting(key: str, value) -> dict:
    section, _, name = key.rpartition(".")
    if not section:
        return {name: value}
    return {section: {**BASE[section], name: value}}


@pytest.mark.parametrize("key", sorted(NUMERIC_RANGES))
def test_every_numeric_setting_fails_outside_its_range_in_one_line(key):
    allowed = Range(**NUMERIC_RANGES[key])
    for value in (math.nan, math.inf, -math.inf, *allowed.just_outside()):
        with pytest.raises(ConfigError) as info:
            study(cells=[{"preset": "grpo"}], **_with_setting(key, value))
        message = str(info.value)
        assert message.startswith("grid.yaml") and message.endswith(f": {key}={value!r} must be {allowed}")


def test_gain_figure_is_skipped_without_a_reference_or_with_too_many_panels(tmp_path):
    from sagerl.study.table import GAIN_PANELS, plot_gain

    run = {"pass@1/d": 0.5, "pass@2/d": 0.7}
    cells = {f"c{i}": {"per_seed": {"0": run}} for i in range(GAIN_PANELS + 1)}
    assert plot_gain({"datasets": ["d"], "cells": cells, "reference": None}, tmp_path / "a.png") is None
    data = {"datasets": ["d"], "cells": cells, "reference": {"pass@1/d": 0.2, "pass@2/d": 0.4}}
    assert plot_gain(data, tmp_path / "b.png") is None and not (tmp_path / "b.png").exists()
    few = {**data, "cells": dict(list(cells.items())[:2])}
    assert (
        plot_gain(few, tmp_path / "c.png") == tmp_path / "c.png" and (tmp_path / "c.png").stat().st_size > 0
    )


def test_machine_record_names_the_kernels_torch_runs():
    """``kernels`` is what torch dispatches to, so a run with its kernels capped (``ATEN_CPU_CAPABILITY``)
    is told apart from a native one on the same CPU."""
    import os
    import subprocess
    import sys

    code = "from sagerl.determinism import machine_record; print(machine_record()['kernels'])"
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "DEFAULT"


def test_source_revision_names_the_commit_and_whether_the_code_was_modified(tmp_path):
    """The commit of the checkout the package runs from and whether ``sagerl/`` differs from it (a change to
    the docs does not count: it computes nothing); no checkout, no revision."""
    import subprocess

    from sagerl.determinism import code_record, source_revision

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(tmp_path), *args], capture_output=True, text=True, check=True
        ).stdout

    assert source_revision(tmp_path) is None
    (tmp_path / "sagerl").mkdir()
    (tmp_path / "sagerl" / "a.py").write_text("x = 1\n")
    (tmp_path / "README.md").write_text("text\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    head = git("rev-parse", "HEAD").strip()
    assert source_revision(tmp_path) == {"revision": head[:12], "modified": False}
    (tmp_path / "README.md").write_text("other text\n")
    (tmp_path / "sagerl" / "new.py").write_text("untracked\n")
    assert source_revision(tmp_path)["modified"] is False
    (tmp_path / "sagerl" / "a.py").write_text("x = 2\n")
    assert source_revision(tmp_path) == {"revision": head[:12], "modified": True}

    record = code_record()
    assert record["sagerl"] and set(record) == {"sagerl", "revision", "modified"}
    import sagerl

    root = Path(sagerl.__file__).resolve().parents[1]
    if (root / ".git").exists():  # this checkout (a clone: CI's, or a worktree)
        assert record["revision"] == git_head(root)[:12]


def git_head(root: Path) -> str:
    import subprocess

    return subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
