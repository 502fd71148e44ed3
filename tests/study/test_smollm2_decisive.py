"""The decisive SmolLM2 study (issue 36): studies/smollm2_sizing.py's numbers on the shipped archive of the
15-run study, checked against docs/real-lm.md, and studies/smollm2-decisive.yaml parsed and dry-run."""

from __future__ import annotations

import math
import re
import shlex
import statistics
from pathlib import Path

import pytest
from scipy.stats import t as scipy_t
from study_scripts import load_study_script  # tests/ is on sys.path

from sagerl.cli import main
from sagerl.precision import CPU_BF16_FLAGS
from sagerl.study.spec import load_studies
from sagerl.study.statistics import t_interval, t_quantile

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


def load_script(path: Path = SCRIPT):
    """One of studies/'s scripts as a module."""
    return load_study_script(path.stem)


def printed_tables(script, capsys) -> tuple[str, list[str]]:
    """What ``script.main([])`` prints, and its markdown tables, each checked to be on docs/real-lm.md."""
    script.main([])
    out = capsys.readouterr().out
    text = PAGE.read_text(encoding="utf-8")
    tables = [block.strip() for block in out.split("\n\n") if block.startswith("|")]
    assert len(tables) == 2
    for table in tables:
        assert table in text
    return out, tables


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
    printed_tables(sizing, capsys)
    text = PAGE.read_text(encoding="utf-8")
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


ARCHIVE = ROOT / "studies" / "results" / "smollm2-decisive.tar.gz"
REPORT = ROOT / "studies" / "smollm2_decisive.py"


def test_the_archive_of_the_sittings_restores_whole_runs_of_one_precision(tmp_path, capsys):
    """studies/results/smollm2-decisive.tar.gz, the finished runs of the sittings so far (issue 36): restored,
    it aggregates with ``--aggregate-only`` to the count of runs docs/real-lm.md states; every run and the base
    model's evaluation ran in bfloat16 (train and eval), natively, one thread, on a CPU with bf16 units (the
    pairs compare one precision: a sitting on another kind of CPU must not mix in float32); each trained its
    96 steps; and the finished runs are the first of the seed-by-seed order (whole seeds, then a prefix of
    the next), so every paired difference has its GRPO run."""
    import json
    import tarfile

    with tarfile.open(ARCHIVE) as archive:
        archive.extractall(tmp_path, filter="data")
    out = tmp_path / "study-smollm2-decisive"
    main(["study", str(STUDY), "--aggregate-only", "--out", str(out)])
    said = re.search(r"(\d+) of 50 runs: 5 cells x 10 seeds", capsys.readouterr().out)
    assert said is not None
    finished = int(said.group(1))
    text = " ".join(PAGE.read_text(encoding="utf-8").split()).replace("**", "").lower()
    assert f"the archive holds {finished} of the 50 runs" in text

    with tarfile.open(ARCHIVE) as archive:  # what the sitting wrote, which the report reads
        archived = json.load(archive.extractfile("study-smollm2-decisive/study.json"))
    again = json.loads((out / "study.json").read_text())
    assert again["paired"] == archived["paired"] and again["reference"] == archived["reference"]
    assert {c: e["per_seed"] for c, e in again["cells"].items()} == {
        c: e["per_seed"] for c, e in archived["cells"].items()
    }

    (study,) = load_studies(STUDY, check_models=False)
    order = sorted(study.cells, key=lambda c: (c.seed, study.cell_names.index(c.name)))
    done = [c for c in order if (out / c.folder / "cell.json").exists()]
    assert done == order[:finished], "the finished runs are not the seed-by-seed order's first"
    reference = json.loads((out / "reference" / "results.json").read_text())["meta"]
    assert (reference["dtype"], reference["kernel_mode"], reference["limit"]) == ("bfloat16", "native", 128)
    for cell in done:
        folder = out / cell.folder
        record = json.loads((folder / "cell.json").read_text())
        assert record["status"] == "ok" and record["settings"]["dtypes"] == {
            "train": "bfloat16",
            "eval": "bfloat16",
        }
        assert record["settings"]["threads"] == 1 and record["settings"]["kernels"] == "native"
        for call in record["calls"]:
            isa = set(call["machine"]["isa"])
            assert isa & set(CPU_BF16_FLAGS), (cell.folder, call["machine"]["cpu"])
        meta = json.loads((folder / "eval" / "results.json").read_text())["meta"]
        assert meta["dtype"] == "bfloat16" and meta["samples_total"] == 128 * 32
        last = json.loads((folder / "train" / "metrics.jsonl").read_text().splitlines()[-1])
        assert last["step"] == 96, cell.folder
        assert not (folder / "train" / "model").exists()  # no weights in the repository


def test_the_reports_verdicts_follow_the_rule_written_before_the_runs():
    """A comparison is resolved when its 95% t interval over the 10 seeds excludes 0; fewer seeds: interim."""
    report = load_script(REPORT)
    ten = [0.01 * (i + 1) for i in range(10)]  # mean 0.055, sd 0.0303: t_{0.975,9} 2.262 -> [0.033, 0.077]
    mean, low, high = t_interval(ten)
    assert (round(low, 4), round(high, 4)) == (0.0333, 0.0767)
    entry = {"values": ten, "ci": [low, high], "mean": mean}
    assert report.verdict(entry) == "resolved: better"
    assert report.verdict({**entry, "ci": [-high, -low]}) == "resolved: worse"
    assert report.verdict({**entry, "ci": [-0.01, 0.1]}) == "not resolved"
    assert report.verdict({**entry, "values": ten[:9]}) == "interim (9 of 10 seeds)"
    assert report.verdict({"values": [0.1], "ci": [None, None], "mean": 0.1}) == "interim (1 of 10 seeds)"


def test_the_answers_to_the_issues_two_questions_follow_the_verdicts():
    """Dominance is "yes" only when annealed PKPO is resolved better on pass@1 and pass@32, "no" when either is
    resolved worse, "not shown" when neither rule decides, interim while any comparison lacks seeds; Pass@k
    Training's answer is its pass@32 verdict."""
    report = load_script(REPORT)
    ten = [0.01 * (i + 1) for i in range(10)]  # [+3.3, +7.7] points: resolved better
    better = {"values": ten, "ci": list(t_interval(ten)[1:]), "mean": 0.055}
    worse = {**better, "values": [-v for v in ten], "ci": [-0.0767, -0.0333], "mean": -0.055}
    open_ = {**better, "ci": [-0.01, 0.12]}

    def data(pass1, pass32, passk):
        return {
            "paired": {
                "cells": {
                    "pkpo-anneal@cosine": {"pass@1/arith_l1": pass1, "pass@32/arith_l1": pass32},
                    "passk": {"pass@32/arith_l1": passk},
                }
            }
        }

    def first_answer(*entries):
        return report.answers(data(*entries))[0].split("? ")[1].split(" (")[0]

    assert first_answer(better, better, better) == "yes"
    assert first_answer(better, worse, better) == "no"
    assert first_answer(better, open_, better) == "not shown at this size"
    assert first_answer({**better, "values": ten[:9]}, better, better) == "interim, no answer yet"
    lines = report.answers(data(better, open_, open_))
    assert lines[0].endswith("(pass@1 +5.5 points: resolved: better; pass@32 +5.5 points: not resolved)")
    assert lines[1] == "Does `passk`'s pass@32 gain over `grpo` resolve? not resolved; +5.5 points"
    assert report.answers(data(better, better, None))[1].endswith("interim (0 of 10 seeds)")


def test_the_crossover_column_tells_no_crossing_from_behind_at_every_k():
    """Three synthetic runs against a base of 0.5 at k = 1, 2, 4: ahead at every k ("–", nothing crosses),
    behind from k = 4 on (crossover 4), behind at every k (the base model leads from k = 1: not "–")."""
    report = load_script(REPORT)

    def run(*passk):
        return {f"pass@{k}/arith_l1": p for k, p in zip((1, 2, 4), passk, strict=True)}

    data = {
        "reference": run(0.5, 0.5, 0.5),
        "cells": {
            "grpo": {"per_seed": {"0": run(0.6, 0.6, 0.6), "1": run(0.6, 0.5, 0.4), "2": run(0.4, 0.4, 0.4)}}
        },
    }
    rows = [line.strip("|").split("|") for line in report.crossover_table(data).splitlines()[2:]]
    assert [(r[0].strip(), r[-1].strip()) for r in rows] == [
        ("`grpo` seed 0", "–"),
        ("`grpo` seed 1", "4"),
        ("`grpo` seed 2", "below at every k"),
    ]
    assert [r[1:4] for r in rows][1] == [" +10.0 ", " +0.0 ", " −10.0 "]


def test_the_pages_decisive_tables_are_the_reports_on_the_shipped_archive(capsys):
    """docs/real-lm.md shows the report of studies/smollm2_decisive.py on the archive verbatim (both tables
    and the runs below the base model, the answers to the issue's two questions), and every row's mean and
    interval are the per-seed differences' own (recomputed here with the exact t), and every crossover k is
    where the row's gains turn negative for good."""
    report = load_script(REPORT)
    out, tables = printed_tables(report, capsys)
    data = report.read_aggregate()
    page = PAGE.read_text(encoding="utf-8")
    below = next(line for line in out.splitlines() if line.startswith("runs below the base model"))
    assert below in page
    for answer in report.answers(data):
        assert f"- {answer}" in out and answer in page, answer

    def numbers(text: str) -> list[float]:
        return [float(x) for x in re.findall(r"[+-]?\d+\.\d", text.replace("−", "-"))]

    for line in tables[0].splitlines()[2:]:
        name, seeds, values, shown, said = (c.strip() for c in line.strip("|").split("|"))
        cell, k = re.fullmatch(r"`(.+)` pass@(\d+)", name).groups()
        assert said.endswith("; exploratory") == (cell == "maxpo-anneal@cosine"), line  # not sized: marked
        diffs = data["paired"]["cells"][cell][f"pass@{k}/arith_l1"]["values"]
        assert numbers(values) == [round(100 * d, 1) for d in diffs] and len(diffs) == int(seeds), line
        want = [statistics.fmean(diffs)]
        if len(diffs) > 1:
            half = scipy_t.ppf(0.975, len(diffs) - 1) * statistics.stdev(diffs) / math.sqrt(len(diffs))
            want += [want[0] - half, want[0] + half]
        assert numbers(shown) == [round(100 * w, 1) for w in want], line
    reference = data["reference"]
    for line in tables[1].splitlines()[2:]:
        cell, seed = re.fullmatch(r"`(.+)` seed (\d+)", line.strip("|").split("|")[0].strip()).groups()
        run = data["cells"][cell]["per_seed"][seed]
        gains = [run[f"pass@{2**i}/arith_l1"] - reference[f"pass@{2**i}/arith_l1"] for i in range(6)]
        assert numbers(line)[:6] == [round(100 * g, 1) for g in gains], line
        below = [g < 0 for g in gains]
        expected = "below at every k" if all(below) else "–"
        if below[-1] and not all(below):
            expected = str(
                2 ** (len(below) - below[::-1].index(False))
            )  # the first k of the last run below 0
        assert line.strip("|").split("|")[-1].strip() == expected, line
