"""Reference builds as a factor of a study: cells × builds × seeds, each run on its build's models, the table
pooled over builds × seeds (a t-interval over the build means) and paired on (build, seed); a run's numbers
do not depend on ``--jobs`` or the parent's threads."""

from __future__ import annotations

import json
import math

import pytest
from test_study import BASE

from sagerl.errors import ConfigError
from sagerl.study import run_study
from sagerl.study.runner import cell_commands, reference_commands
from sagerl.study.spec import parse_studies, parse_study
from sagerl.study.table import paired_differences, pooled_interval, t_interval

TINY_TRAIN = {
    "dataset": "planted_train",
    "steps": 1,
    "set": {"per_device_train_batch_size": 8, "num_generations": 4},
}


def test_cells_expand_over_builds_and_seeds_on_each_builds_models(tmp_path):
    s = parse_study(
        {
            **BASE,
            "builds": ["b1", "b3"],
            "cells": [
                {"preset": "grpo"},
                {
                    "preset": "grpo+branch",
                    "name": "t",
                    "set": {"guide": "teacher", "teacher_model": "planted-teacher"},
                },
            ],
        },
        "x.yaml",
    )
    assert [(c.name, c.build, c.seed) for c in s.cells] == [
        ("grpo", "b1", 0), ("grpo", "b1", 1), ("grpo", "b3", 0), ("grpo", "b3", 1),
        ("t", "b1", 0), ("t", "b1", 1), ("t", "b3", 0), ("t", "b3", 1),
    ]  # fmt: skip
    teacher_b3 = s.cells[-1]
    assert teacher_b3.folder == "cells/t/b3/seed-1" and teacher_b3.run_key == "b3/1"
    assert s.model_of("b3") == "planted-reference-b3" and s.model_of(None) == "planted-reference"
    assert s.run_overrides(teacher_b3)["teacher_model"] == "planted-teacher-b3"
    train, evaluate = cell_commands(s, tmp_path, teacher_b3)
    assert "--model planted-reference-b3" in train and "--set teacher_model=planted-teacher-b3" in train
    assert train.startswith("OMP_NUM_THREADS=1 ") and evaluate.startswith("OMP_NUM_THREADS=1 ")
    refs = reference_commands(s, tmp_path)
    assert (
        len(refs) == 2
        and "--model planted-reference-b3 " in refs[1]
        and f"{tmp_path}/reference/b3" in refs[1]
    )
    rare10 = parse_studies({**BASE, "cells": [{"preset": "grpo"}], "builds": ["b2"],
                            "settings": [{"name": "r10", "model": "planted-reference-10", "builds": ["b1", "b2"]}]},
                           "x.yaml")[0]  # fmt: skip
    assert rare10.builds == ["b1", "b2"] and rare10.model_of("b2") == "planted-reference-10-b2"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"builds": ["b1", "b7"]},
            r"x.yaml: builds: unknown build 'b7' of planted-reference; shipped builds: b1, b2, b3",
        ),
        ({"builds": ["b1", "b1"]}, "names a build twice"),
        ({"builds": "b1"}, "expected a non-empty list of build names"),
        ({"builds": []}, "expected a non-empty list of build names"),
        (
            {"builds": ["b1"], "model": "smollm2-135m-instruct"},
            "'smollm2-135m-instruct' has no reference builds",
        ),
        ({"threads": 0}, r"threads=0 must be an integer in \[1"),
        ({"threads": 1.5}, r"threads=1.5 must be an integer"),
    ],
)
def test_bad_builds_and_threads_are_refused_before_anything_runs(changes, message):
    with pytest.raises(ConfigError, match=message):
        parse_study({**BASE, "cells": [{"preset": "grpo"}], **changes}, "x.yaml")


def test_pooled_interval_is_a_t_interval_over_the_build_means():
    values = {"b1/0": 1.0, "b1/1": 3.0, "b2/0": 5.0, "b2/1": 7.0, "b3/0": 2.0, "b3/1": 4.0, "b3/2": math.nan}
    mean, lo, hi = pooled_interval(values)
    means = [2.0, 6.0, 3.0]  # per build (NaN left out)
    sd = math.sqrt(sum((m - 11 / 3) ** 2 for m in means) / 2)
    assert mean == pytest.approx(11 / 3)
    t = 4.302653  # t_{0.975, 2} (4.303 rounded)
    assert (lo, hi) == pytest.approx((11 / 3 - t * sd / math.sqrt(3), 11 / 3 + t * sd / math.sqrt(3)))
    assert pooled_interval({"0": 1.0, "1": 3.0}) == t_interval([1.0, 3.0])  # no builds: over the seeds
    assert pooled_interval({"b2/0": 1.0, "b2/1": 3.0}) == t_interval([1.0, 3.0])  # one build: the same
    assert pooled_interval(values, 0.0, 4.0)[2] == 4.0  # cut to the metric's range


def test_paired_differences_pair_runs_on_build_and_seed():
    cells = {
        "grpo": {
            "per_seed": {"b1/0": {"m": 1.0}, "b1/1": {"m": 2.0}, "b2/0": {"m": 10.0}, "b2/1": {"m": 10.0}}
        },
        "x": {"per_seed": {"b1/0": {"m": 2.0}, "b1/1": {"m": 4.0}, "b2/0": {"m": 15.0}, "b2/2": {"m": 0.0}}},
    }
    row = paired_differences(cells, {"baseline": "grpo", "metrics": ["m"]})["cells"]["x"]["m"]
    assert row["seeds"] == ["b1/0", "b1/1", "b2/0"] and row["values"] == [1.0, 2.0, 5.0]
    assert row["mean"] == pytest.approx((1.5 + 5.0) / 2)  # the mean of the build means of the differences


def test_a_study_on_two_builds_end_to_end(tmp_path):
    spec = {**BASE, "train": TINY_TRAIN, "seeds": [0], "builds": ["b1", "b2"],
            "cells": [{"preset": "grpo"}, {"preset": "pkpo", "name": "pkpo", "set": {"passk_k": 2}}],
            "paired": {"baseline": "grpo", "metrics": ["solved/planted_rare"]}}  # fmt: skip
    out = tmp_path / "out"
    logs: list[str] = []
    run_study(parse_study(spec, "x.yaml"), out, log=logs.append)
    for build in ("b1", "b2"):
        reference = json.loads((out / "reference" / build / "results.json").read_text())
        assert reference["meta"]["model"] == f"planted-reference-{build}"
        config = (out / "cells" / "grpo" / build / "seed-0" / "train" / "config.yaml").read_text()
        assert f"model: planted-reference-{build}" in config
        recorded = json.loads((out / "cells" / "grpo" / build / "seed-0" / "cell.json").read_text())
        assert recorded["build"] == build and recorded["settings"]["threads"] == 1
    assert any(line.startswith("[3/4] pkpo b1 seed 0: ok") for line in logs), logs
    data = json.loads((out / "study.json").read_text())
    assert data["builds"] == ["b1", "b2"] and data["threads"] == 1 and data["machine"]["cpu"]
    assert sorted(data["cells"]["grpo"]["per_seed"]) == ["b1/0", "b2/0"]
    assert sorted(data["reference_builds"]) == ["b1", "b2"]
    solved = [data["reference_builds"][b]["solved/planted_rare"] for b in ("b1", "b2")]
    assert data["reference"]["solved/planted_rare"] == pytest.approx(sum(solved) / 2)
    table = (out / "table.md").read_text().splitlines()
    assert table[0].startswith("| cell | runs |") and table[3].startswith("| grpo | 2×1 |")
    by_build = (out / "table-by-build.md").read_text()
    assert by_build.startswith("## b1\n") and "\n## b2\n" in by_build and "| grpo | 1 |" in by_build
    assert (out / "paired-by-build.md").read_text().count("| pkpo | 1 |") == 2
    # gain.png's values: each run against its own build's reference
    from sagerl.study.table import run_gains

    gains = run_gains(data, "pkpo", "planted_rare")
    assert sorted(gains) == ["b1/0", "b2/0"]
    for key in gains:
        run, ref = data["cells"]["pkpo"]["per_seed"][key], data["reference_builds"][key.split("/")[0]]
        assert gains[key][2] == pytest.approx(100 * (run["pass@2/planted_rare"] - ref["pass@2/planted_rare"]))
    assert (out / "gain.png").stat().st_size > 0


def test_jobs_and_the_parents_threads_do_not_change_a_run(tmp_path):
    """The same study with --jobs 1 under a parent at 2 threads and with --jobs 2: every run has the study's
    one thread, so weights, samples and the whole table.md are equal."""
    import torch
    from safetensors.torch import load_file

    s = parse_study({**BASE, "train": {**TINY_TRAIN, "steps": 2}, "seeds": [0],
                     "cells": [{"preset": "grpo"}, {"preset": "pkpo", "set": {"passk_k": 2}}]}, "x.yaml")  # fmt: skip
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        run_study(s, serial, log=lambda line: None)
        assert torch.get_num_threads() == 2  # restored after each run
    finally:
        torch.set_num_threads(before)
    run_study(s, parallel, log=lambda line: None, jobs=2)
    for cell in s.cells:
        a = load_file(str(serial / cell.folder / "train" / "model" / "model.safetensors"))
        b = load_file(str(parallel / cell.folder / "train" / "model" / "model.safetensors"))
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert (serial / "table.md").read_text() == (parallel / "table.md").read_text()
    with pytest.raises(ConfigError, match="jobs=0: give a positive number"):
        run_study(s, parallel, jobs=0)


def test_a_count_of_problems_has_its_interval_cut_to_the_dataset_size():
    """Rare solved of 64 problems on 3 builds at 64, 64 and 22 (the pareto study's rs-grpo@4 had an upper end
    of 97.6 of 64): the t interval over the build means, cut to [0, 64]; the total to its 128."""
    from sagerl.study.table import _summary

    def run(solved):
        return {
            "solved/rare": solved,
            "_problems/rare": 64,
            "solved/common": 64,
            "_problems/common": 64,
            "solved/total": solved + 64,
            "_problems/total": 128,  # as eval_metrics records it: the total's size beside the sets'
            "pass@1/rare": 0.5,
        }

    per_run = {"b1/0": run(64), "b2/0": run(64), "b3/0": run(22)}
    summary = _summary(per_run)
    mean, lo, hi = t_interval([64.0, 64.0, 22.0])
    assert (
        hi > 64
        and summary["solved/rare"]["ci"] == [max(lo, 0.0), 64.0]
        and summary["solved/rare"]["mean"] == mean
    )
    assert summary["solved/total"]["ci"][1] == 128.0
    assert "_problems/rare" not in summary  # the sizes are not metrics
    # runs that do not record their sizes (older study folders) keep the interval uncut above
    old = {k: {m: v for m, v in r.items() if not m.startswith("_")} for k, r in per_run.items()}
    assert _summary(old)["solved/rare"]["ci"][1] == hi
