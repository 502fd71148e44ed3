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
