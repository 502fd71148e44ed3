"""Study files with settings (the same cells on several models) and a paired baseline; presets that changed
under finished cells."""

from __future__ import annotations

import json
import math

import pytest
from test_study import BASE, _finish, study

from sagerl.errors import ConfigError
from sagerl.study import check_finished_cells, study_folder
from sagerl.study.spec import parse_studies
from sagerl.study.table import paired_differences, render_paired


def test_settings_expand_into_one_study_each_with_its_folder(tmp_path):
    data = {
        **BASE,
        "cells": [{"preset": "grpo"}, {"preset": "pkpo"}],
        "paired": {"baseline": "grpo", "metrics": ["solved/planted_rare"]},
        "settings": [
            {"name": "rare2"},
            {
                "name": "rare10",
                "model": "planted-reference-10",
                "train": {"set": {"beta": 0.1}},
                "seeds": [3],
            },
        ],
    }
    rare2, rare10 = parse_studies(data, "x.yaml")
    assert (rare2.name, rare2.setting, rare2.model) == ("t-rare2", "rare2", "planted-reference")
    assert (rare10.model, rare10.common) == ("planted-reference-10", {"learning_rate": 1e-3, "beta": 0.1})
    assert [c.seed for c in rare10.cells] == [3, 3] and rare10.dataset == "planted_train"
    assert rare2.paired == {"baselines": ["grpo"], "metrics": ["solved/planted_rare"]}
    assert study_folder(rare10, tmp_path / "o") == tmp_path / "o" / "rare10"
    assert study_folder(rare2, None).as_posix() == "runs/study-t/rare2"
    assert [s.name for s in parse_studies({**BASE, "cells": [{"preset": "grpo"}]}, "x.yaml")] == ["t"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"settings": [{"model": "planted-reference"}]}, r"settings\[0\]: needs a name"),
        ({"settings": [{"name": "a"}, {"name": "a"}]}, "used twice"),
        ({"settings": [{"name": "a", "cells": []}]}, "unknown key 'cells'"),
        ({"settings": []}, "non-empty list"),
        ({"paired": {"baseline": "nope"}}, "paired.baseline 'nope' is not a cell"),
        ({"paired": {"baseline": ["grpo", "nope"]}}, "paired.baseline 'nope' is not a cell"),
        ({"paired": {"baseline": ["grpo", "grpo"]}}, r"names a cell twice: \['grpo', 'grpo'\]"),
        ({"paired": {"baseline": "grpo", "metrics": []}}, "paired.metrics must be a non-empty list"),
    ],
)
def test_bad_settings_and_paired(changes, message):
    with pytest.raises(ConfigError, match=message):
        parse_studies({**BASE, "cells": [{"preset": "grpo"}], **changes}, "x.yaml")


def test_paired_differences_are_per_seed_with_a_t_interval():
    cells = {
        "grpo": {"per_seed": {"0": {"m": 2.0}, "1": {"m": 4.0}, "2": {"m": 3.0}}, "summary": {}},
        "x": {"per_seed": {"0": {"m": 5.0}, "1": {"m": 6.0}, "3": {"m": 9.0}}, "summary": {}},
    }
    out = paired_differences(cells, {"baseline": "grpo", "metrics": ["m"]})
    row = out["cells"]["x"]["m"]
    assert row["seeds"] == [0, 1] and row["values"] == [3.0, 2.0]  # seed 3 has no baseline run
    half = 12.706205 * math.sqrt(0.5) / math.sqrt(2)  # t(0.975, 1)·sd/√n
    assert row["mean"] == 2.5 and row["ci"] == pytest.approx([2.5 - half, 2.5 + half])
    assert out["cells"]["grpo"]["m"]["values"] == [0.0, 0.0, 0.0]
    data = {"cells": cells, "paired": out, "reference": None}
    for entry in cells.values():
        entry["summary"] = {"m": {"mean": 1.0, "ci": [0.5, 1.5]}}
    table = render_paired(data).splitlines()
    assert table[0] == "| cell | seeds | m | Δ vs grpo |"
    assert table[2].startswith("| grpo | 3 | 1.0 [0.5, 1.5] | — |")
    assert table[3].startswith("| x | 3 | 1.0 [0.5, 1.5] | 2.5 [")


def test_each_further_paired_baseline_gets_its_own_table(tmp_path, monkeypatch):
    """``baseline: [grpo, pkpo]``: paired.md against grpo as before, paired-vs-pkpo.md against pkpo, each
    with the per-seed differences to its own baseline."""
    from sagerl.study import table

    s = parse_studies(
        {**BASE, "cells": [{"preset": "grpo"}, {"preset": "pkpo"}, {"preset": "passk"}],
         "paired": {"baseline": ["grpo", "pkpo"], "metrics": ["m"]}}, "x.yaml")[0]  # fmt: skip
    assert s.paired == {"baselines": ["grpo", "pkpo"], "metrics": ["m"]}
    value = {"grpo": 1.0, "pkpo": 10.0, "passk": 7.0}
    out = tmp_path / "out"
    for cell in s.cells:
        _finish(out, cell, {"preset": cell.preset, "overrides": {}})
    monkeypatch.setattr(table, "eval_metrics", lambda folder, ref: {"m": value[folder.parent.parent.name] + int(folder.parent.name[-1])})  # fmt: skip
    monkeypatch.setattr(table, "plot_passk", lambda *a: None)
    monkeypatch.setattr(table, "plot_strategies", lambda *a: None)
    data = table.write_study_table(s, out)
    assert data["paired"]["cells"]["passk"]["m"]["values"] == [6.0, 6.0]
    assert data["paired_more"][0]["cells"]["passk"]["m"]["values"] == [-3.0, -3.0]
    vs_pkpo = (out / "paired-vs-pkpo.md").read_text().splitlines()
    assert vs_pkpo[0] == "| cell | seeds | m | Δ vs pkpo |"
    assert vs_pkpo[2].startswith("| pkpo | 2 | 10.5 [") and vs_pkpo[2].endswith("| — |")
    assert vs_pkpo[3] == "| passk | 2 | 7.5 [1.1, 13.9] | -3.0 |"  # seeds 0, 1: 7 and 8
    assert (out / "paired.md").read_text().splitlines()[0] == "| cell | seeds | m | Δ vs grpo |"


def test_a_preset_changed_under_a_finished_cell_is_refused(tmp_path, monkeypatch):
    from sagerl.study import runner

    s = study(cells=[{"preset": "dapo"}], seeds=[0])
    out = tmp_path / "out"
    (cell,) = s.cells
    _finish(out, cell, {"preset": "dapo", "overrides": {}, "settings": runner._recorded_settings(s, cell)})
    check_finished_cells(s, out)
    recorded = json.loads((out / cell.folder / "cell.json").read_text())
    recorded["settings"]["preset_keys"]["max_num_gen_batches"] = 1  # as the dapo preset was before refill
    (out / cell.folder / "cell.json").write_text(json.dumps(recorded))
    with pytest.raises(ConfigError, match=r"dapo seed 0: preset_keys.max_num_gen_batches \(1 -> 10\)"):
        check_finished_cells(s, out)
    del recorded["settings"]["preset_keys"]  # written before the preset's keys were recorded: not compared
    (out / cell.folder / "cell.json").write_text(json.dumps(recorded))
    check_finished_cells(s, out)


def test_cli_runs_each_setting_into_its_folder(tmp_path, capsys):
    import yaml

    from sagerl.cli import main

    spec = {**BASE, "seeds": [0], "train": {**BASE["train"], "steps": 1}, "cells": [{"preset": "grpo"}],
            "settings": [{"name": "a"}, {"name": "b", "eval": {"n": 1}}]}  # fmt: skip
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    main(["study", str(path), "--out", str(out), "--dry-run"])
    printed = capsys.readouterr().out
    assert f"--output-dir {out}/a/cells/grpo/seed-0/train" in printed
    assert f"--out {out}/b/reference" in printed and "-n 1 " in printed
    assert f"--out {out} --aggregate-only" in printed
    main(["study", str(path), "--out", str(out)])
    assert (out / "a" / "table.md").is_file() and (out / "b" / "table.md").is_file()
    assert not (out / "a" / "a").exists()
    assert "sagerl study: 2 settings, 2 runs" in capsys.readouterr().out
