"""The real-LM studies: studies/smollm2.yaml (runs on the CPU) and studies/gpu/qwen-math.yaml (for a GPU),
checked on this machine: every command ``--dry-run`` prints parses and passes the checks the run would make
before loading its model."""

from __future__ import annotations

import re
import shlex
import warnings
from pathlib import Path

import pytest

from sagerl.cli import main
from sagerl.study.spec import load_studies

ROOT = Path(__file__).resolve().parents[2]
GPU_STUDY = ROOT / "studies" / "gpu" / "qwen-math.yaml"
CPU_STUDY = ROOT / "studies" / "smollm2.yaml"


@pytest.fixture(autouse=True)
def _outside_the_repository(monkeypatch, tmp_path):
    """The dry runs read the default study folder (``runs/study-<name>``, relative): a study run in the checkout
    (finished cells, another machine's precision) must not change what they print."""
    monkeypatch.chdir(tmp_path)


def dry_run_lines(path: Path, capsys) -> list[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bf16 asked for on a CPU without bf16 units: the GPU study's setting
        main(["study", str(path), "--dry-run", "--out", f"runs/study-{path.stem}"])
    return capsys.readouterr().out.strip().splitlines()


def test_gpu_study_prints_a_train_and_an_eval_command_per_run(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (study,) = load_studies(GPU_STUDY, check_models=False)
    assert study.model == "Qwen/Qwen2.5-Math-1.5B" and study.dataset == "math_lvl3to5"
    assert study.eval.backend == "vllm" and study.eval.n == 256
    assert set(study.eval.datasets) == {"math500", "aime24", "aime25", "amc23"}
    assert len(study.cell_names) >= 5 and len({c.seed for c in study.cells}) >= 3
    lines = dry_run_lines(GPU_STUDY, capsys)
    # the base model's eval, then (train, eval) per run, then the aggregate
    assert len(lines) == 1 + 2 * len(study.cells) + 1
    assert lines[0].startswith("OMP_NUM_THREADS=8 sagerl eval --model Qwen/Qwen2.5-Math-1.5B")
    assert all(line.endswith("--backend vllm") for line in lines[:-1] if " sagerl eval " in f" {line}")


def test_every_printed_command_parses_and_passes_the_checks_before_the_model(capsys, monkeypatch):
    """Each ``sagerl train`` line, with ``--dry-run`` added, resolves its config (TRL's and sagerl's checks,
    the training set from $SAGERL_DATA_DIR); the hub model, absent here, is the one check left out. Each
    ``sagerl eval`` line parses into the arguments of :func:`sagerl.eval.evaluate` (recorded, not run)."""
    import sagerl.eval.runner
    import sagerl.train.run

    lines = dry_run_lines(GPU_STUDY, capsys)
    monkeypatch.setattr(sagerl.train.run, "validate_model", lambda model: None)
    calls = []

    class Recorded(Exception):
        """Raised by the stand-in evaluate once it has the arguments: nothing samples."""

    def record(*args, **kwargs):
        calls.append((args, kwargs))
        raise Recorded

    monkeypatch.setattr(sagerl.eval.runner, "evaluate", record)
    seen_presets = set()
    for line in lines[:-1]:
        words = shlex.split(line)
        assert words[0] == "OMP_NUM_THREADS=8" and words[1] == "sagerl"
        if words[2] == "train":
            preset = words[words.index("--preset") + 1]
            if preset in seen_presets:  # the seeds of a cell differ in --set seed only
                continue
            seen_presets.add(preset)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                main(words[2:] + ["--dry-run"])
            config = capsys.readouterr().out
            assert "use_vllm: true" in config and "max_completion_length: 3072" in config
        else:
            assert words[2] == "eval"
            with pytest.raises(Recorded):
                main(words[2:])
            capsys.readouterr()
    assert len(seen_presets) >= 5
    assert calls and all(kw["backend"] == "vllm" and kw["n"] == 256 for _, kw in calls)


def test_cpu_study_has_the_issues_cells_seeds_and_evaluation_size(capsys, monkeypatch):
    """studies/smollm2.yaml: GRPO, the paper's branch guide, PKPO, Pass@k Training and the frontier's best
    (PKPO, k annealed by a cosine), 3 seeds, >= 64 held-out problems x >= 32 samples on the calibrated task
    (2 worked examples, 64 new tokens); every train line it prints resolves its config."""
    import sagerl.train.run

    (study,) = load_studies(CPU_STUDY, check_models=False)
    assert study.dataset == "arith_l1_train" and study.eval.datasets == ["arith_l1"]
    assert study.eval.limit >= 64 and study.eval.n >= 32 and study.eval.few_shot == 2
    assert study.cell_names == ["grpo", "pkpo-anneal@cosine", "pkpo", "grpo+branch", "passk"]
    assert sorted({c.seed for c in study.cells}) == [0, 1, 2]
    lines = dry_run_lines(CPU_STUDY, capsys)
    assert len(lines) == 1 + 2 * 15 + 1
    monkeypatch.setattr(sagerl.train.run, "validate_model", lambda model: None)
    seen = {}
    for line in lines[1:-1]:
        words = shlex.split(line)
        assert words[0] == "OMP_NUM_THREADS=1" and words[1] == "sagerl"
        if words[2] != "train" or words[words.index("--preset") + 1] in seen:
            continue
        main(words[2:] + ["--dry-run"])
        config = capsys.readouterr().out
        seen[words[words.index("--preset") + 1]] = config
        assert "max_completion_length: 64" in config and "share_generation_prefix: true" in config
        assert "learning_rate: 2.0e-05" in config
    assert len(seen) == 5
    assert "passk_k_schedule: cosine" in seen["pkpo-anneal"]


PAGE = ROOT / "docs" / "real-lm.md"
KS = (1, 2, 4, 8, 16, 32)


def page_table(header: str) -> dict[str, list[list[float]]]:
    """The table of docs/real-lm.md whose header row starts with ``header``: row name (backticks dropped) ->
    the numbers of each cell after the first ("−" read as a minus, bold marks dropped; "—" gives [])."""
    lines = PAGE.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        name, *cells = (c.strip() for c in line.strip().strip("|").split("|"))
        rows[name.strip("`*")] = [numbers(cell) for cell in cells]
    assert rows, header
    return rows


def numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"[+-]?\d+(?:\.\d+)?", text.replace("−", "-").replace(",", " "))]


def pct(x: float) -> float:
    return round(100 * x, 1)


def test_the_shipped_smollm2_results_rebuild_the_numbers_of_docs_real_lm(tmp_path, capsys):
    """studies/results/smollm2.tar.gz (the study's 15 runs and base model, without weights) aggregates, with
    ``--aggregate-only``, into every number of docs/real-lm.md's tables of the study, read from the page (so
    the page and the archive cannot drift apart): the cell table (means and t-intervals), the paired
    differences to GRPO, the gains over the base model by k, and the seed-0 column of the machines' table."""
    import json
    import tarfile

    with tarfile.open(ROOT / "studies" / "results" / "smollm2.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    out = tmp_path / "study-smollm2"
    main(["study", str(CPU_STUDY), "--aggregate-only", "--out", str(out)])
    assert "5 of 5 cells finished (15 of 15 runs: 5 cells x 3 seeds)" in capsys.readouterr().out
    data = json.loads((out / "study.json").read_text())
    ref, cells, paired = data["reference"], data["cells"], data["paired"]["cells"]
    base_ci = json.loads((out / "reference" / "results.json").read_text())["datasets"]["arith_l1"]["ci"]

    def shown(summary: dict, scale=pct, digits: int = 1) -> list[float]:
        """mean [lo, hi] as the page rounds them."""
        return [round(scale(v) if scale else v, digits) for v in (summary["mean"], *summary["ci"])]

    table = page_table("| cell | pass@1 (%) |")
    assert list(table) == ["base model", *cells]
    base = table.pop("base model")
    for column, k in zip(base, (1, 8, 32), strict=False):
        assert column == [pct(ref[f"pass@{k}/arith_l1"]), *map(pct, base_ci[f"pass@{k}"])], k
    assert base[3] == [ref["solved/total"]] and base[4:] == [[]] * 4
    for cell, row in table.items():
        summary = cells[cell]["summary"]
        expected = [shown(summary[f"pass@{k}/arith_l1"]) for k in (1, 8, 32)]
        expected += [shown(summary[key], None) for key in ("solved/total", "expanded/total", "shrunk/total")]
        expected += [shown(summary[key], None, 3) for key in ("kl/reference", "entropy")]
        assert len(row) == len(expected), cell
        for got, want in zip(row, expected, strict=True):  # a mean alone, or a mean and its interval
            assert got == want[: len(got)] and len(got) in (1, 3), (cell, got, want)

    for cell, row in page_table("| cell | pass@1 | pass@8 |").items():
        for got, k in zip(row, (1, 8, 32), strict=True):
            entry = paired[cell][f"pass@{k}/arith_l1"]
            want = [pct(entry["mean"]), *map(pct, entry["ci"]), *map(pct, entry["values"])]
            assert got == want[: len(got)] and len(got) in (3, 6), (cell, k, got, want)

    gains = page_table("| cell | k = 1 |")
    assert list(gains) == list(cells)
    for cell, row in gains.items():
        gain = [
            100 * (cells[cell]["summary"][f"pass@{k}/arith_l1"]["mean"] - ref[f"pass@{k}/arith_l1"])
            for k in KS
        ]
        assert row == [[round(g, 1)] for g in gain] + [[round(max(gain) - gain[-1], 1)]], cell
    # what the page says of them: passk's gain shrinks with k too, but the least of any cell
    falls = {cell: row[-1][0] for cell, row in gains.items()}
    assert min(falls, key=falls.get) == "passk" and falls["passk"] > 0

    seed0 = page_table("| seed 0 | pass@1 / pass@8 / pass@32 (%)")
    for name, row in seed0.items():
        metrics = ref if name == "base model" else cells[name]["per_seed"]["0"]
        want = [pct(metrics[f"pass@{k}/arith_l1"]) for k in (1, 8, 32)]
        if name != "base model":
            want.append(round(metrics["kl/reference"], 3))  # "(KL 0.145)"
        assert row[1] == want[: len(row[1])] and len(row[1]) >= 3, (name, row[1], want)

    # the one crossover: grpo+branch seed 2 solves fewer problems within 32 samples than the base model
    crossing = [
        (c, s) for c, e in cells.items() for s, m in e["per_seed"].items()
        if m["pass@32/arith_l1"] < ref["pass@32/arith_l1"]
    ]  # fmt: skip
    assert crossing == [("grpo+branch", "2")]
    text = " ".join(PAGE.read_text(encoding="utf-8").split())
    said = re.search(
        r"\(pass@32 ([\d.]+) against ([\d.]+); (\d+) problems solved of the base's (\d+); (\d+) shrunk\)",
        text,
    )
    assert said is not None
    run = cells["grpo+branch"]["per_seed"]["2"]
    assert [float(x) for x in said.groups()] == [
        pct(run["pass@32/arith_l1"]), pct(ref["pass@32/arith_l1"]), run["solved/total"], ref["solved/total"],
        run["shrunk/total"],
    ]  # fmt: skip
    assert (out / "gain.png").stat().st_size > 0


def test_the_files_the_page_flags_in_the_shipped_results_are_as_it_says(tmp_path):
    """docs/real-lm.md flags three files of studies/results/smollm2.tar.gz that record a resume rather than the
    run (issue 34 #4): two results.json with dtype "auto" (every other says bfloat16) and passk seed 0's
    cell.json with the resume's times; its training took 534 s by its metrics."""
    import json
    import tarfile

    with tarfile.open(ROOT / "studies" / "results" / "smollm2.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    out = tmp_path / "study-smollm2"
    dtypes = {
        str(path.parent.relative_to(out)): json.loads(path.read_text())["meta"]["dtype"]
        for path in out.glob("**/results.json")
    }
    assert len(dtypes) == 16
    assert {k for k, v in dtypes.items() if v != "bfloat16"} == {"reference", "cells/passk/seed-0/eval"}
    assert set(dtypes.values()) == {"auto", "bfloat16"}
    cell = json.loads((out / "cells" / "passk" / "seed-0" / "cell.json").read_text())
    assert (cell["train_s"], cell["eval_s"], cell["total_s"]) == (2.69, 0.22, 2.91)
    metrics = (out / "cells" / "passk" / "seed-0" / "train" / "metrics.jsonl").read_text().splitlines()
    assert round(json.loads(metrics[-1])["time"]) == 534
    config = (out / "cells" / "passk" / "seed-0" / "train" / "config.yaml").read_text()
    assert "\ndtype: bfloat16\n" in config
    text = " ".join(PAGE.read_text(encoding="utf-8").split())
    for said in ('`"dtype": "auto"`', "train 2.69 s and eval 0.22 s", "training took 534 s", "the other 14"):
        assert said in text, said
