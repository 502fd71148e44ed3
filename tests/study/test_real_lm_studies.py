"""The real-LM studies: studies/smollm2.yaml (runs on the CPU) and studies/gpu/qwen-math.yaml (for a GPU),
checked on this machine: every command ``--dry-run`` prints parses and passes the checks the run would make
before loading its model."""

from __future__ import annotations

import shlex
import warnings
from pathlib import Path

import pytest

from sagerl.cli import main
from sagerl.study.spec import load_studies

ROOT = Path(__file__).resolve().parents[2]
GPU_STUDY = ROOT / "studies" / "gpu" / "qwen-math.yaml"
CPU_STUDY = ROOT / "studies" / "smollm2.yaml"


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


def test_the_shipped_smollm2_results_rebuild_the_numbers_of_docs_real_lm(tmp_path, capsys):
    """studies/results/smollm2.tar.gz (the study's 15 runs and base model, without weights) aggregates, with
    ``--aggregate-only``, into the table docs/real-lm.md quotes: the values below are that page's."""
    import json
    import tarfile

    with tarfile.open(ROOT / "studies" / "results" / "smollm2.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    out = tmp_path / "study-smollm2"
    main(["study", str(CPU_STUDY), "--aggregate-only", "--out", str(out)])
    assert "5 of 5 cells finished (15 of 15 runs: 5 cells x 3 seeds)" in capsys.readouterr().out
    data = json.loads((out / "study.json").read_text())
    ref, cells, paired = data["reference"], data["cells"], data["paired"]["cells"]

    def mean(cell: str, key: str) -> float:
        return round(100 * cells[cell]["summary"][key]["mean"], 1)

    assert round(100 * ref["pass@1/arith_l1"], 1) == 22.1 and round(100 * ref["pass@32/arith_l1"], 1) == 81.2
    assert ref["solved/total"] == 52
    table = {c: [mean(c, f"pass@{k}/arith_l1") for k in (1, 8, 32)] for c in cells}
    assert table == {
        "grpo": [43.3, 78.4, 89.1],
        "pkpo-anneal@cosine": [49.5, 83.3, 91.1],
        "pkpo": [43.4, 76.4, 87.0],
        "grpo+branch": [39.7, 69.4, 81.2],
        "passk": [42.0, 82.4, 95.8],
    }
    assert cells["passk"]["summary"]["solved/total"]["mean"] == pytest.approx(61 + 1 / 3)
    assert cells["passk"]["summary"]["shrunk/total"]["mean"] == pytest.approx(1.0)
    anneal = paired["pkpo-anneal@cosine"]["pass@1/arith_l1"]
    assert [round(100 * v, 1) for v in anneal["values"]] == [6.0, 6.2, 6.2]
    assert 0 < anneal["ci"][0] < anneal["mean"] < anneal["ci"][1]  # the one interval that excludes zero
    passk = paired["passk"]["pass@32/arith_l1"]
    assert [round(100 * v, 1) for v in passk["values"]] == [4.7, 12.5, 3.1] and passk["ci"][0] < 0
    # the one crossover: grpo+branch seed 2 solves fewer problems within 32 samples than the base model
    crossing = [
        (c, s) for c, e in cells.items() for s, m in e["per_seed"].items()
        if m["pass@32/arith_l1"] < ref["pass@32/arith_l1"]
    ]  # fmt: skip
    assert crossing == [("grpo+branch", "2")]
    assert cells["grpo+branch"]["per_seed"]["2"]["solved/total"] == 47
    assert (out / "gain.png").stat().st_size > 0
