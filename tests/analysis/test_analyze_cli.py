"""`sagerl analyze support|patterns|branching|report` and `sagerl plot` end to end on hand-made run folders."""

from __future__ import annotations

import json

import pytest
from analysis_helpers import flags, record, write_run

from sagerl.cli import main

N = 4


def cli(args, capsys):
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def runs(tmp_path):
    base = write_run(
        tmp_path / "base",
        {"d": {"a": flags(1, N), "b": flags(0, N), "c": flags(2, N)}},
    )
    texts = [
        "Suppose not; then we get a contradiction.",
        "Substitute u = 2.",
        "Case 1: x is even.",
        "1 + 1 = 2",
    ]
    sage = write_run(
        tmp_path / "sage",
        {
            "d": {
                "a": [record("d", "a", j, j < 3, text=texts[j]) for j in range(N)],
                "b": flags(1, N),
                "c": flags(0, N),
            }
        },
    )
    return base, sage


def test_support_patterns_report(runs, tmp_path, capsys):
    base, sage = runs
    out = tmp_path / "out"
    code, stdout, err = cli(["analyze", "support", str(base), str(sage), "--out", str(out)], capsys)
    assert code == 0, err
    data = json.loads((out / "analysis.json").read_text())
    tax = data["support"]["taxonomy"]["sage"]["datasets"]["d"]
    assert tax["problems"] == {"preserved": ["a"], "expanded": ["b"], "shrunk": ["c"], "never_solved": []}
    assert data["support"]["passk"]["sage"]["datasets"]["d"]["difference"]["pass@1"] == pytest.approx(
        (4 - 3) / 12
    )
    assert "preserved" in stdout and (out / "support_passk.png").is_file()

    code, stdout, err = cli(["analyze", "patterns", str(base), str(sage), "--out", str(out)], capsys)
    assert code == 0, err
    data = json.loads((out / "analysis.json").read_text())
    assert set(data) == {"support", "patterns"}  # the support section is kept
    shares = data["patterns"]["shares"]["sage"]["correct"]["shares"]
    # sage's 4 correct completions: contradiction, substitution, case analysis, and one plain box
    assert shares["contradiction"]["share"] == 0.25 and shares["direct_computation"]["share"] == 0.25
    assert data["patterns"]["compare"]["reference"] == "base"
    assert (out / "patterns.png").is_file()

    report = tmp_path / "report"
    code, stdout, err = cli(["analyze", "report", str(base), str(sage), "--out", str(report)], capsys)
    assert code == 0, err
    text = (report / "report.md").read_text()
    assert "## Empirical support" in text and "## Reasoning patterns" in text and "support_passk.png" in text
    assert "| `sage` | 3 | 1 (33.3%) | 1 (33.3%) | 1 (33.3%) | 0 (0.0%) |" in text
    assert set(json.loads((report / "analysis.json").read_text())) == {"support", "patterns"}


def test_mismatched_runs_one_line_error_then_intersect(runs, tmp_path, capsys):
    base, _ = runs
    other = write_run(tmp_path / "other", {"d": {"a": flags(1, N), "zz": flags(1, N)}})
    code, _, err = cli(["analyze", "support", str(base), str(other), "--out", str(tmp_path / "o")], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sagerl: error: runs ") and "['b', 'c']" in lines[0]
    code, _, err = cli(
        ["analyze", "support", str(base), str(other), "--out", str(tmp_path / "o"), "--intersect"], capsys
    )
    assert code == 0, err
    data = json.loads((tmp_path / "o" / "analysis.json").read_text())
    assert data["support"]["dropped_problems"] == {"d": 2}


def test_missing_samples_and_truncated_line(runs, tmp_path, capsys):
    base, sage = runs
    (sage / "samples.jsonl").unlink()
    code, _, err = cli(["analyze", "patterns", str(sage), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "samples.jsonl: missing" in err and "Traceback" not in err
    with open(base / "samples.jsonl", "a") as f:
        f.write('{"dataset": "d", "problem_id": "a", "sample_')
    code, _, err = cli(["analyze", "patterns", str(base), "--out", str(tmp_path / "o")], capsys)
    assert code == 0
    assert "sagerl: warning:" in err and "last line is incomplete" in err


def test_branching_command(tmp_path, tiny_model, capsys):
    import torch

    from sagerl.tasks import load_problems

    torch.set_num_threads(1)
    pid = load_problems("arith", limit=1)[0].id
    run = write_run(
        tmp_path / "e",
        {"arith": {pid: [record("arith", pid, j, j == 0, text="2 + 2 = 4. \\boxed{4}") for j in range(2)]}},
    )
    out = tmp_path / "b"
    code, stdout, err = cli(
        ["analyze", "branching", str(run), "--model", str(tiny_model), "--out", str(out), "--tau", "0.5"],
        capsys,
    )
    assert code == 0, err
    data = json.loads((out / "analysis.json").read_text())["branching"]["e"]
    assert data["guide"]["tau"] == 0.5 and data["tokens"] > 0 and "top branching tokens" in stdout
    assert (out / "branching.html").is_file() and (out / "branching_hist.png").is_file()


def test_plot_command(tmp_path, capsys):
    run = tmp_path / "train"
    run.mkdir()
    rows = [{"step": s, "reward": 0.1 * s, "entropy": 1.0, "kl": 0.01 * s} for s in (1, 2)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, stdout, err = cli(["plot", str(run), "--out", str(tmp_path / "curves")], capsys)
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "curves").glob("*.png")) == [
        "entropy.png",
        "kl.png",
        "reward.png",
    ]
    code, _, err = cli(["plot", str(tmp_path / "nothing"), "--out", str(tmp_path / "c2")], capsys)
    assert code == 2 and "no metrics.jsonl" in err


def test_report_with_model_and_a_judge_model(tmp_path, tiny_model, capsys):
    """report --model adds the branching section; --judge runs a real HF sampler (greedy) on the tiny
    model, whose answers name no label: every completion is counted as unlabeled, none dropped."""
    import torch

    from sagerl.tasks import load_problems

    torch.set_num_threads(1)
    pids = [p.id for p in load_problems("arith", limit=2)]

    def arith_run(name, right):
        problems = {
            "arith": {
                pid: [
                    record("arith", pid, j, j < right, text=f"{j} + {j} = {2 * j}. \\boxed{{{2 * j}}}")
                    for j in range(2)
                ]
                for pid in pids
            }
        }
        return write_run(tmp_path / name, problems)

    base, sage = arith_run("base", 1), arith_run("sage", 2)
    out = tmp_path / "report"
    code, _, err = cli(
        ["analyze", "report", str(base), str(sage), "--out", str(out), "--model", str(tiny_model)], capsys
    )
    assert code == 0, err
    text = (out / "report.md").read_text()
    assert "## Branching tokens" in text and "branching_0_hist.png" in text and "branching_1.html" in text
    assert set(json.loads((out / "analysis.json").read_text())["branching"]) == {"base", "sage"}

    code, stdout, err = cli(
        [
            "analyze",
            "patterns",
            str(sage),
            "--out",
            str(tmp_path / "j"),
            "--judge",
            str(tiny_model),
            "--among",
            "correct",
        ],
        capsys,
    )
    assert code == 0, err
    shares = json.loads((tmp_path / "j" / "analysis.json").read_text())["patterns"]["shares"]["sage"]
    assert shares["classifier"] == "judge" and shares["correct"]["num_completions"] == 4
    counted = sum(e["count"] for e in shares["correct"]["shares"].values())
    assert counted >= 4 and "judge:" in stdout
