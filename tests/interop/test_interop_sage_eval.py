"""``sagerl import sage-eval`` on the file the SAGE authors' script wrote (tests/interop/data/README.md):
pooled counts, pass@k in closed form, the folder layout that compare and analyze support read, resume,
atomicity, and one-line errors for each kind of bad input."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest

from sagerl.errors import DataError, SagerlError
from sagerl.eval.results import summarize
from sagerl.interop import import_sage_eval, read_sage_eval

DATA = Path(__file__).resolve().parent / "data"
FILE = DATA / "sage_eval" / "evaluation_results.json"

# The outcomes make_file.py gave the authors' script, pooled over seeds 0 and 1 (k = 4, so n = 8), by hand.
POOLED = {
    "grpo": {"MATH-500": [7, 1, 0, 4, 0], "AMC23": [0, 3, 7]},
    "sage": {"MATH-500": [7, 2, 1, 5, 1], "AMC23": [1, 4, 7]},
}


def _write(tmp_path: Path, data: dict, name: str = "evaluation_results.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _data() -> dict:
    return json.loads(FILE.read_text(encoding="utf-8"))


def test_pools_the_seeds_of_each_checkpoint():
    evals = read_sage_eval(FILE)
    assert [ev.name for ev in evals] == ["grpo-step200", "sage-step200"]
    for ev in evals:
        algo = ev.source["algo_type"]
        assert ev.n == 8 and ev.source["seeds"] == [0, 1] and ev.source["pooled_seeds"]
        assert ev.counts() == {"AMC23": POOLED[algo]["AMC23"], "MATH-500": POOLED[algo]["MATH-500"]}
        assert ev.problem_ids["MATH-500"] == ["0", "1", "2", "3", "4"]
    # sample s*k + j is sample j of the s-th seed: problem 3 of sage on MATH-500 (seed 0: 1010, seed 1: 1101)
    assert evals[1].outcomes["MATH-500"][3] == [1, 0, 1, 0, 1, 1, 0, 1]


def test_separate_seeds_give_one_folder_per_seed():
    evals = read_sage_eval(FILE, seeds="separate")
    assert [ev.name for ev in evals] == [
        "grpo-step200-seed0",
        "grpo-step200-seed1",
        "sage-step200-seed0",
        "sage-step200-seed1",
    ]
    assert evals[0].n == 4 and evals[0].counts()["MATH-500"] == [4, 1, 0, 2, 0]
    assert evals[3].counts()["AMC23"] == [0, 2, 3] and evals[3].settings["seed"] == 1


def test_folder_has_the_eval_layout_and_closed_form_passk(tmp_path):
    done = import_sage_eval(FILE, tmp_path / "imp")
    folder = tmp_path / "imp" / "grpo-step200"
    assert [d["folder"] for d in done] == [folder, tmp_path / "imp" / "sage-step200"]
    assert sorted(p.name for p in folder.iterdir()) == [
        "eval_config.json",
        "passk.png",
        "results.json",
        "samples.jsonl",
    ]
    results = json.loads((folder / "results.json").read_text())
    math500 = results["datasets"]["MATH-500"]
    # counts [7, 1, 0, 4, 0] of n = 8: pass@1 = 12/40; pass@2 = (1 + (1 - 21/28) + 0 + (1 - 6/28) + 0) / 5;
    # pass@8 = 3/5 (the problems solved at least once)
    assert math500["pass@1"] == pytest.approx(12 / 40, abs=1e-12)
    assert math500["pass@2"] == pytest.approx((1 + 7 / 28 + 22 / 28) / 5, abs=1e-12)
    assert math500["pass@8"] == pytest.approx(3 / 5, abs=1e-12)
    assert results["meta"]["ks"] == [1, 2, 4, 8] and results["meta"]["n"] == 8
    # the CIs and every value are sagerl.eval's own summary of the counts
    expected = summarize(POOLED["grpo"], 8)
    for ds in ("AMC23", "MATH-500"):
        assert results["datasets"][ds]["ci"] == expected["datasets"][ds]["ci"]
    assert results["average"]["pass@4"] == pytest.approx(expected["average"]["pass@4"], abs=1e-15)
    # the authors' own numbers are kept, not used: their pass_at_1 here is 1.33 (a share above 1)
    imported = results["meta"]["imported"]
    assert imported["reported"]["AMC23"]["0"]["pass_at_1"] == pytest.approx(4 / 3)
    assert "no completion texts" in imported["missing"]
    lines = (folder / "samples.jsonl").read_text().splitlines()
    assert len(lines) == 8 * (5 + 3)
    first = json.loads(lines[0])
    assert set(first) == {"dataset", "problem_id", "sample_index", "correct"}  # no text is made up


def test_compare_and_support_read_the_imported_folders(tmp_path):
    from sagerl.analysis.runs import load_eval_run
    from sagerl.analysis.support import analyze_support
    from sagerl.eval.compare import compare_runs

    import_sage_eval(FILE, tmp_path / "imp", plot=False)
    grpo, sage = tmp_path / "imp" / "grpo-step200", tmp_path / "imp" / "sage-step200"
    table = compare_runs([grpo, sage], ks=[1, 8])
    assert table["rows"]["sage-step200"][table["columns"].index(("MATH-500", 8))] == pytest.approx(1.0)
    base, run = load_eval_run(grpo), load_eval_run(sage)
    assert base.n == 8 and list(base.correct_counts("MATH-500")) == POOLED["grpo"]["MATH-500"]
    support = analyze_support(base, [run], tmp_path / "support")
    counts = support["taxonomy"]["sage-step200"]["total"]["counts"]
    # sage solves MATH-500 problems 2 and 4 and AMC23 problem 0, which grpo never does
    assert counts["expanded"] == 3 and counts["preserved"] == 5 and counts["shrunk"] == 0
    diversity = support["diversity"]["sage-step200"]["all"]
    assert math.isnan(diversity["distinct_n"]["mean"]) and diversity["distinct_n"]["num_problems"] == 0


def test_compare_shows_an_import_beside_a_sagerl_eval(tmp_path):
    """--dataset-as maps MATH-500 onto a sagerl set (by position): compare lines the two up in one column."""
    from sagerl.eval import evaluate
    from sagerl.eval.compare import compare_runs
    from sagerl.eval.samplers import Completion, Sampler

    problems = [{"id": f"p{i}", "problem": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(5)]
    set_file = tmp_path / "five.jsonl"
    set_file.write_text("".join(json.dumps(p) + "\n" for p in problems), encoding="utf-8")

    class Plain:
        chat_template = None

    class RightOnEvenSeeds(Sampler):
        name = "fake"
        tokenizer = Plain()

        def generate(
            self, prompts, n, *, max_new_tokens, temperature=1.0, top_p=1.0, seed=0, sample_seeds=None
        ):
            out = []
            for prompt, seeds in zip(prompts, sample_seeds, strict=True):
                answer = next(p["answer"] for p in problems if p["problem"] in prompt)
                out.append(
                    [Completion(f"\\boxed{{{answer if s % 2 == 0 else -1}}}", 3, "stop") for s in seeds]
                )
            return out

    evaluate(
        "fake-model", [str(set_file)], n=8, out=tmp_path / "ours", sampler=RightOnEvenSeeds(), progress=False
    )
    done = import_sage_eval(FILE, tmp_path / "imp", dataset_as=[f"MATH-500={set_file}"], plot=False)
    imported = done[1]["folder"]
    assert json.loads((imported / "eval_config.json").read_text())["imported"]["dataset_as"] == {
        "MATH-500": str(set_file)
    }
    table = compare_runs([tmp_path / "ours", imported], ks=[1, 8])
    assert ("five", 8) in table["columns"] and ("MATH-500", 8) not in table["columns"]
    row = table["rows"]["sage-step200"]
    assert row[table["columns"].index(("five", 1))] == pytest.approx(16 / 40)  # counts 7, 2, 1, 5, 1
    assert row[table["columns"].index(("AMC23", 1))] == pytest.approx(12 / 24)
    assert table["rows"]["ours"][table["columns"].index(("AMC23", 1))] is None  # not in the sagerl run
    # the problems carry the set's ids, so analyze support pairs them with the sagerl run's
    from sagerl.analysis.runs import load_eval_run

    assert load_eval_run(imported).problem_ids["five"] == [f"p{i}" for i in range(5)]


def test_dataset_as_needs_the_same_number_of_problems(tmp_path):
    set_file = tmp_path / "three.jsonl"
    set_file.write_text(
        "".join(json.dumps({"id": i, "problem": "q", "answer": "1"}) + "\n" for i in range(3))
    )
    with pytest.raises(DataError, match=r"'MATH-500' has 5 problems, sagerl's .*three.jsonl' has 3"):
        read_sage_eval(FILE, dataset_as={"MATH-500": str(set_file)})


def test_rerun_keeps_what_is_there_and_refuses_other_contents(tmp_path):
    out = tmp_path / "imp"
    import_sage_eval(FILE, out, plot=False)
    before = (out / "sage-step200" / "results.json").read_bytes()
    again = import_sage_eval(FILE, out, plot=False)
    assert [d["written"] for d in again] == [False, False]
    assert (out / "sage-step200" / "results.json").read_bytes() == before
    data = _data()
    data["per_seed_records"][0]["is_correct"][0][0] = 1  # another evaluation, same folder names
    with pytest.raises(SagerlError, match=r"grpo-step200 already holds another import; use another --out"):
        import_sage_eval(_write(tmp_path, data), out, plot=False)


def test_an_interrupted_import_leaves_whole_folders_and_resumes(tmp_path, monkeypatch):
    import sagerl.eval.results as results_module

    out = tmp_path / "imp"
    real = results_module.write_results
    calls = []

    def fail_second(folder, results):
        calls.append(folder)
        if len(calls) == 2:
            raise KeyboardInterrupt("simulated crash")
        return real(folder, results)

    monkeypatch.setattr(results_module, "write_results", fail_second)
    with pytest.raises(KeyboardInterrupt):
        import_sage_eval(FILE, out, plot=False)
    assert sorted(p.name for p in out.iterdir()) == ["grpo-step200"]  # no half-written sage folder, no temp
    monkeypatch.setattr(results_module, "write_results", real)
    done = import_sage_eval(FILE, out, plot=False)
    assert [d["written"] for d in done] == [False, True]
    assert (out / "sage-step200" / "results.json").is_file()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda d: d["per_seed_records"][5]["is_correct"][2].pop(),
            r"record \(algo_type='grpo', step=200, dataset='MATH-500', seed=1\): field 'is_correct\[2\]' has 3 "
            r"outcomes, the file's k is 4",
        ),
        (
            lambda d: d["per_seed_records"][7]["is_correct"][1].__setitem__(3, 0.5),
            r"record \(algo_type='sage', step=200, dataset='MATH-500', seed=1\): field 'is_correct\[1\]\[3\]' is "
            r"0.5; pass@k needs 0/1 rewards",
        ),
        (
            lambda d: d["per_seed_records"].append(copy.deepcopy(d["per_seed_records"][2])),
            r"record \(algo_type='sage', step=200, dataset='AMC23', seed=0\): per_seed_records\[8\] repeats "
            r"per_seed_records\[2\]",
        ),
        (
            lambda d: d["per_seed_records"][0].pop("is_correct"),
            r"record \(algo_type='grpo', step=200, dataset='AMC23', seed=0\): per_seed_records\[0\] lacks the "
            r"field 'is_correct'",
        ),
        (
            lambda d: d["per_seed_records"].pop(1),
            r"record \(algo_type='grpo', step=200, dataset='MATH-500', seed=0\): field 'seed': dataset 'MATH-500' "
            r"has seeds \[0, 1\], 'AMC23' has \[0\]; .*--seeds separate",
        ),
        (
            lambda d: d["per_seed_records"][1]["is_correct"].pop(),
            r"record \(algo_type='grpo', step=200, dataset='AMC23', seed=1\): field 'is_correct' has 2 problems, "
            r"seed 0 has 3",
        ),
    ],
    ids=["row-length", "non-binary", "duplicate", "missing-field", "seeds-differ", "problems-differ"],
)
def test_bad_records_are_one_line_naming_file_record_and_field(tmp_path, edit, message):
    data = _data()
    edit(data)
    path = _write(tmp_path, data)
    with pytest.raises(DataError, match=message) as info:
        import_sage_eval(path, tmp_path / "out")
    assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)
    assert not (tmp_path / "out").exists()  # nothing written


def test_a_file_of_neither_layout_is_named(tmp_path):
    lighteval = next((DATA / "lighteval" / "out" / "results").rglob("results_*.json"))
    with pytest.raises(DataError, match=r"not the SAGE authors' .* use `sagerl import lighteval`"):
        read_sage_eval(lighteval)
    with pytest.raises(DataError, match=r"not the SAGE authors' evaluation_results.json layout"):
        read_sage_eval(_write(tmp_path, {"something": 1}))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad.json: not valid JSON"):
        read_sage_eval(bad)


def test_identical_seeds_are_reported(tmp_path):
    data = _data()
    records = data["per_seed_records"]
    records[5]["is_correct"] = copy.deepcopy(records[4]["is_correct"])  # grpo MATH-500 seed 1 := seed 0
    evals = read_sage_eval(_write(tmp_path, data))
    assert any("seeds 0 and 1 have identical outcomes" in note for note in evals[0].notes)
    assert evals[1].notes == []


def test_counts_are_integers_in_range():
    for ev in read_sage_eval(FILE):
        for counts in ev.counts().values():
            assert all(0 <= c <= ev.n for c in counts) and np.asarray(counts).dtype.kind == "i"
