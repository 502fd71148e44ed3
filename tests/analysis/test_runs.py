"""Reading eval run folders: order, n, bad input (missing/empty/truncated/incomplete), alignment."""

from __future__ import annotations

import json

import pytest
from analysis_helpers import flags, record, write_run

from sagerl.analysis import TruncatedLineWarning, align_runs, load_eval_run
from sagerl.analysis.runs import unique_labels
from sagerl.errors import SagerlError


def test_records_in_order_and_counts(tmp_path):
    run_dir = write_run(tmp_path / "r", {"ds": {"b": flags(1, 4), "a": flags(3, 4)}})
    run = load_eval_run(run_dir)
    assert run.n == 4 and run.problem_ids == {"ds": ["b", "a"]} and run.label == "r"
    assert [r["sample_index"] for r in run.records["ds"]["a"]] == [0, 1, 2, 3]
    assert run.correct_counts("ds").tolist() == [1, 3]
    assert run.settings["temperature"] == 1.0


def test_samples_beyond_results_are_ignored(tmp_path):
    """results.json says n=2 and one problem: extra samples (a larger earlier eval) are not used."""
    run_dir = write_run(tmp_path / "r", {"ds": {"a": flags(2, 2)}})
    extra = [record("ds", "a", 2, False), record("ds", "z", 0, True), record("ds", "z", 1, True)]
    with open(run_dir / "samples.jsonl", "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in extra))
    run = load_eval_run(run_dir)
    assert run.n == 2 and run.problem_ids == {"ds": ["a"]} and len(run.records["ds"]["a"]) == 2


def test_not_an_eval_folder(tmp_path):
    with pytest.raises(SagerlError, match="no such run folder"):
        load_eval_run(tmp_path / "nowhere")
    (tmp_path / "x").mkdir()
    with pytest.raises(SagerlError, match="not an eval run folder"):
        load_eval_run(tmp_path / "x")
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(SagerlError, match="is a training run folder"):
        load_eval_run(tmp_path / "train")


def test_missing_and_empty_samples(tmp_path):
    run_dir = write_run(tmp_path / "r", {"ds": {"a": flags(1, 2)}})
    (run_dir / "samples.jsonl").write_text("")
    with pytest.raises(SagerlError, match=r"samples\.jsonl: empty"):
        load_eval_run(run_dir)
    (run_dir / "samples.jsonl").unlink()
    with pytest.raises(SagerlError, match=r"samples\.jsonl: missing"):
        load_eval_run(run_dir)


def test_truncated_last_line_is_skipped_with_a_warning_and_the_file_kept(tmp_path):
    run_dir = write_run(tmp_path / "r", {"ds": {"a": flags(1, 2), "b": flags(0, 2)}}, results=False)
    path = run_dir / "samples.jsonl"
    with open(path, "a") as f:
        f.write(json.dumps(record("ds", "b", 2, True))[:30])  # killed mid-write
    before = path.read_bytes()
    with pytest.warns(TruncatedLineWarning, match="last line is incomplete"):
        run = load_eval_run(run_dir)
    assert path.read_bytes() == before
    assert run.n == 2 and run.correct_counts("ds").tolist() == [1, 0]


def test_problem_with_fewer_than_n_samples(tmp_path):
    run_dir = write_run(tmp_path / "r", {"ds": {"a": flags(1, 3), "b": flags(1, 2)}}, results=False)
    with pytest.raises(SagerlError, match=r"problem ds/b has 2 of n=3 samples"):
        load_eval_run(run_dir)


def test_align_errors_name_runs_and_first_ids(tmp_path):
    a = load_eval_run(write_run(tmp_path / "a", {"ds": {"p1": flags(1, 2), "p2": flags(1, 2)}}))
    b = load_eval_run(write_run(tmp_path / "b", {"ds": {"p1": flags(1, 2), "p3": flags(1, 2)}}))
    c = load_eval_run(write_run(tmp_path / "c", {"ds": {"p1": flags(1, 4), "p2": flags(1, 4)}}))
    with pytest.raises(SagerlError) as info:
        align_runs([a, b])
    msg = str(info.value)
    assert "\n" not in msg and str(a.path) in msg and str(b.path) in msg
    assert "['p2']" in msg and "['p3']" in msg and "--intersect" in msg
    with pytest.raises(SagerlError, match=r"different n \(2 vs 4\)"):
        align_runs([a, c])
    (a2, b2), note = align_runs([a, b], intersect=True)
    assert a2.problem_ids == b2.problem_ids == {"ds": ["p1"]} and note["dropped_problems"] == {"ds": 1}
    (a3, c3), note = align_runs([a, c], intersect=True)
    assert a3.n == c3.n == 2 and note["n_dropped"] and len(c3.records["ds"]["p1"]) == 2


def test_unique_labels(tmp_path):
    assert unique_labels([tmp_path / "x" / "eval", tmp_path / "y" / "eval"]) == ["x/eval", "y/eval"]
    assert unique_labels([tmp_path / "base", tmp_path / "sage"]) == ["base", "sage"]
    assert unique_labels([tmp_path / "a", tmp_path / "a"])[1].endswith("a#2")
