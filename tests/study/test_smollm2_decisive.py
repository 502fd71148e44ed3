"""The decisive SmolLM2 study (issue 36): studies/smollm2_sizing.py's numbers on the shipped archive of the
15-run study, checked against docs/real-lm.md, and studies/smollm2-decisive.yaml parsed and dry-run."""

from __future__ import annotations

import importlib.util
import math
import re
import shlex
import sys
from pathlib import Path

import pytest

from sagerl.cli import main
from sagerl.study.spec import load_studies
from sagerl.study.statistics import t_quantile

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "studies" / "smollm2_sizing.py"
STUDY = ROOT / "studies" / "smollm2-decisive.yaml"
PAGE = ROOT / "docs" / "real-lm.md"
CELLS = ["grpo", "pkpo-anneal@cosine", "passk", "grpo+branch", "maxpo-anneal@cosine"]


@pytest.fixture(autouse=True)
def _outside_the_repository(monkeypatch, tmp_path):
    """The dry runs read the default study folder (``runs/study-<name>``, relative): a study run in the checkout
    (finished cells, another machine's precision) must not change what they print."""
    monkeypatch.chdir(tmp_path)


def load_script():
    spec = importlib.util.spec_from_file_location("smollm2_sizing", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["smollm2_sizing"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sizing():
    return load_script()


@pytest.fixture(scope="module")
def runs(sizing):
    return sizing.read_runs()


def page_rows(header: str) -> dict[str, list[list[float]]]:
    """docs/real-lm.md's table whose header row starts with ``header``: row name -> numbers of each cell."""
    lines = PAGE.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        name, *cells = (c.strip() for c in line.strip().strip("|").split("|"))
        rows[name.strip("`*")] = [
            [float(x) for x in re.findall(r"[+-]?\d+(?:\.\d+)?", c.replace("−", "-"))] for c in cells
        ]
    return rows


def test_the_archive_gives_the_pages_paired_differences(sizing, runs):
    """The sizing's per-seed differences, means and intervals are the page's table of the 15-run study (its
    paired differences to GRPO, read from the page): the same runs, paired the same way."""
    assert len(runs) == 15 and {c for c, _ in runs} == {"grpo", *sizing.CELLS}
    rows = {(r.cell, r.k): r for r in sizing.sizing(runs)}
    assert len(rows) == 12
    for cell, cells in page_rows("| cell | pass@1 | pass@8 |").items():
        for k, shown in zip((1, 8, 32), cells, strict=True):
            row = rows[(cell, k)]
            want = [round(row.mean, 1), *(round(x, 1) for x in row.ci), *(round(v, 1) for v in row.values)]
            assert shown == want[: len(shown)], (cell, k, shown, want)


def test_the_decisive_seed_counts(sizing, runs):
    """The numbers the design rests on, and the rule behind each: the smallest n whose interval excludes 0."""
    rows = {(r.cell, r.k): r for r in sizing.sizing(runs)}
    passk = rows[("passk", 32)]
    assert round(passk.mean, 1) == 6.8 and round(passk.sd, 1) == 5.0
    assert (passk.n_interval, passk.n_power) == (5, 7)
    cosine1, cosine32 = rows[("pkpo-anneal@cosine", 1)], rows[("pkpo-anneal@cosine", 32)]
    assert cosine1.n_interval == 2
    assert cosine1.sd < cosine1.eval_sd  # below what the evaluation's own noise allows
    assert (cosine32.n_interval, cosine32.n_power, cosine32.n_interval_128) == (12, 22, 10)
    assert (rows[("grpo+branch", 32)].n_interval, rows[("grpo+branch", 1)].n_interval) == (9, 56)
    assert rows[("pkpo", 1)].n_interval is None  # +0.1 with an sd of 14.7
    for row in rows.values():
        n = row.n_interval
        if n is None:
            continue
        assert t_quantile(n - 1) * row.sd / math.sqrt(n) < abs(row.mean)
        assert n == 2 or t_quantile(n - 2) * row.sd / math.sqrt(n - 1) >= abs(row.mean)
        assert row.n_power >= n and row.n_interval_sd_upper >= n


def test_power_and_the_evaluations_noise_against_known_values(sizing):
    # a paired t test with effect size 1: 80.3% power at 10 pairs (G*Power's table), 74.8% at 9
    assert sizing.power(1.0, 1.0, 10) == pytest.approx(0.8031, abs=1e-4)
    assert sizing.seeds_for_power(2.0, 2.0) == 10 and sizing.seeds_for_power(0.5, 1.0) == 34
    # with 2 degrees of freedom chi2's 20% quantile is -2 ln 0.8: the bound is 1/sqrt(-ln 0.8) = 2.117 sd
    assert sizing.sd_upper(1.0, 2) == pytest.approx(1 / math.sqrt(-math.log(0.8)))
    # pass@1's estimate is a binomial mean; pass@32 of 32 samples is whether any is right
    p = 8 / 32
    assert sizing.estimate_variance(8, 32, 1) == pytest.approx(p * (1 - p) / 32)
    assert sizing.estimate_variance(8, 32, 32) == pytest.approx((1 - (1 - p) ** 32) * (1 - p) ** 32)
    assert sizing.estimate_variance(0, 32, 8) == 0.0 and sizing.estimate_variance(32, 32, 8) == 0.0
    assert sizing.projected_sd(5.0, 9.0, 2.0) == pytest.approx(math.sqrt(16 + 4.5))


def test_the_page_holds_the_scripts_tables(sizing, runs, capsys):
    """docs/real-lm.md's sizing section is the script's output: both tables verbatim and the time it states."""
    sizing.main([])
    out = capsys.readouterr().out
    text = PAGE.read_text(encoding="utf-8")
    tables = [block for block in out.split("\n\n") if block.startswith("|")]
    assert len(tables) == 2
    for table in tables:
        assert table.strip() in text
    cost = sizing.cost_line(runs, 50)
    assert "median 2,422 s" in cost and "16.8 h at the median (13.7–24.1)" in cost
    assert cost in text
    assert "16.8 h" not in sizing.cost_line(runs, 35) and "11.8 h" in sizing.cost_line(runs, 35)
    with pytest.raises(SystemExit):
        sizing.main(["--seeds", "1"])


def test_the_decisive_study_has_the_issues_cells_seeds_steps_and_evaluation(sizing):
    (study,) = load_studies(STUDY, check_models=False)
    assert study.dataset == "arith_l1_train" and study.eval.datasets == ["arith_l1"]
    ev = study.eval
    assert (ev.limit, ev.n, ev.few_shot, ev.max_new_tokens) == (128, 32, 2, 64)
    assert study.steps == sizing.LONG_STEPS == 96  # 4x the 15-run study's 24 prompts, one a step
    assert study.common["per_device_train_batch_size"] == 8 and study.common["learning_rate"] == 2.0e-5
    assert study.cell_names == CELLS
    assert sorted({c.seed for c in study.cells}) == list(range(10))
    assert study.paired["baselines"] == ["grpo"]
    text = " ".join(PAGE.read_text(encoding="utf-8").split())
    for said in ("seeds 0–9; 96 steps of 1 prompt × 8 rollouts", "128 held-out `arith_l1` problems × 32"):
        assert said in text, said
    assert "2,422 s" in STUDY.read_text(encoding="utf-8")


def test_the_decisive_study_dry_run_lists_every_run_and_each_resolves(capsys, monkeypatch):
    """``sagerl study studies/smollm2-decisive.yaml --dry-run``: the base model's eval, a train and an eval per
    run (5 cells x 10 seeds), the aggregate; every preset's train line passes the checks before the model."""
    import sagerl.train.run

    main(["study", str(STUDY), "--dry-run"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 + 2 * 50 + 1
    base = "OMP_NUM_THREADS=1 sagerl eval --model smollm2-135m-instruct --dataset arith_l1"
    assert lines[0].startswith(base)
    assert "--limit 128" in lines[0] and lines[-1].endswith("--aggregate-only")
    monkeypatch.setattr(sagerl.train.run, "validate_model", lambda model: None)
    seen = {}
    for line in lines[1:-1]:
        words = shlex.split(line)
        assert words[:2] == ["OMP_NUM_THREADS=1", "sagerl"]
        if words[2] != "train":
            assert "--limit 128" in line and "-n 32" in line
            continue
        assert words[words.index("--max-steps") + 1] == "96"
        preset = words[words.index("--preset") + 1]
        if preset in seen:
            continue
        main(words[2:] + ["--dry-run"])
        seen[preset] = config = capsys.readouterr().out
        assert "per_device_train_batch_size: 8" in config and "share_generation_prefix: true" in config
        assert "learning_rate: 2.0e-05" in config and "max_completion_length: 64" in config
    assert sorted(seen) == ["grpo", "grpo+branch", "maxpo-anneal", "passk", "pkpo-anneal"]
    for preset in ("pkpo-anneal", "maxpo-anneal"):
        assert "passk_k_schedule: cosine" in seen[preset]
    assert "advantage_estimator: maxpo" in seen["maxpo-anneal"] and "passk_k: 7" in seen["maxpo-anneal"]
