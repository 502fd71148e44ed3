"""``sagerl import lighteval`` and ``sagerl export lighteval`` against the files lighteval 0.13.0 wrote
(tests/interop/data/README.md): the counts recovered from its details, the export reproducing its own
results file key for key, and one-line errors for bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sagerl.errors import DataError
from sagerl.interop import export_lighteval, import_lighteval, read_lighteval
from sagerl.interop.lighteval import lighteval_results, mean_stderr

DATA = Path(__file__).resolve().parent / "data"
OUT = DATA / "lighteval" / "out"
RESULTS = next((OUT / "results" / "toy-model").glob("results_*.json"))
DETAILS = OUT / "details" / "toy-model" / RESULTS.stem.removeprefix("results_")
# what toy_model.py answered: per problem (in id order), how many of its 8 samples were right
TOY = [0, 1, 3, 8, 2, 5]
TOY_B = [0, 2, 6, 4]


def _copy(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of lighteval's output folder: (results file, details folder)."""
    out = tmp_path / "le"
    shutil.copytree(OUT, out)
    return next((out / "results").rglob("results_*.json")), next((out / "details").rglob("details_*")).parent


def test_counts_from_lighteval_details():
    (ev,) = read_lighteval(RESULTS)
    assert ev.name == "toy-model" and ev.model == "toy-model" and ev.n == 8
    # toy: c = 8 x its pass@k:k=1&n=8; toy_b has only pass@k:k=2&n=8, whose inverse gives c
    assert ev.counts() == {"toy": TOY, "toy_b": TOY_B}
    assert ev.problem_ids == {"toy": ["0", "1", "2", "3", "4", "5"], "toy_b": ["0", "1", "2", "3"]}
    assert ev.source["results"] == str(RESULTS.resolve()) and ev.source["tasks"] == ["toy|0", "toy_b|0"]
    # a details folder finds its results file the same way round
    (same,) = read_lighteval(DETAILS)
    assert same.counts() == ev.counts() and same.source["results"] == str(RESULTS.resolve())


def test_the_correct_samples_are_placed_at_random_and_reproducibly():
    (ev,) = read_lighteval(DETAILS)
    rows = ev.outcomes["toy"]
    assert [sum(r) for r in rows] == TOY and all(len(r) == 8 for r in rows)
    assert rows[2] != [1, 1, 1, 0, 0, 0, 0, 0]  # not the first c: a prefix of them is a fair draw
    (again,) = read_lighteval(DETAILS)
    assert again.outcomes == ev.outcomes


def test_import_writes_an_eval_folder_whose_passk_matches_lightevals(tmp_path):
    (done,) = import_lighteval(RESULTS, tmp_path / "imp", plot=False)
    results = done["results"]
    reported = json.loads(RESULTS.read_text())["results"]
    assert results["datasets"]["toy"]["pass@4"] == pytest.approx(
        reported["toy|0"]["pass@k:k=4&n=8"], abs=1e-12
    )
    assert results["datasets"]["toy_b"]["pass@2"] == pytest.approx(
        reported["toy_b|0"]["pass@k:k=2&n=8"], abs=1e-12
    )
    assert results["meta"]["ks"] == [1, 2, 4, 8] and results["meta"]["finished_at"].startswith("2026-")
    assert "not which ones" in results["meta"]["imported"]["missing"]
    records = [json.loads(line) for line in (done["folder"] / "samples.jsonl").read_text().splitlines()]
    assert len(records) == 8 * 10 and "text" not in records[0]


def test_export_reproduces_lightevals_own_results_file(tmp_path):
    (done,) = import_lighteval(RESULTS, tmp_path / "imp", plot=False)
    path = export_lighteval(done["folder"], tmp_path / "export")
    assert path == tmp_path / "export" / "results" / "toy-model" / RESULTS.name  # lighteval's path and date
    ours, theirs = json.loads(path.read_text()), json.loads(RESULTS.read_text())
    assert set(theirs) <= set(ours)  # every top-level key lighteval writes
    assert ours["config_general"]["model_name"] == theirs["config_general"]["model_name"]
    for task in ("toy|0", "toy_b|0"):
        for key, value in theirs["results"][task].items():  # each of lighteval's values, _stderr included
            assert ours["results"][task][key] == pytest.approx(value, rel=1e-12, abs=1e-15), (task, key)
    # ours reports every k up to n, and "all" averages each key over the tasks, as lighteval does
    assert set(ours["results"]["toy|0"]) == {
        *(f"pass@k:k={k}&n=8{s}" for k in (1, 2, 4, 8) for s in ("", "_stderr")),
        "avg@n:n=8",
        "avg@n:n=8_stderr",
    }
    mean = (ours["results"]["toy|0"]["pass@k:k=2&n=8"] + ours["results"]["toy_b|0"]["pass@k:k=2&n=8"]) / 2
    assert ours["results"]["all"]["pass@k:k=2&n=8"] == pytest.approx(mean, abs=1e-15)
    assert ours["config_tasks"]["toy|0"]["effective_num_docs"] == 6


def test_mean_stderr_is_lightevals():
    # lighteval: sqrt(sum((x - mean)^2) / (P - 1)) / sqrt(P); for 0, 1/8, 3/8, 1, 1/4, 5/8 it wrote 0.149362069407791
    assert mean_stderr([c / 8 for c in TOY]) == pytest.approx(0.149362069407791, abs=1e-15)
    with pytest.raises(ValueError, match="at least two problems"):
        mean_stderr([0.5])


def test_export_of_a_sagerl_eval_names_lightevals_tasks(tmp_path):
    from sagerl.eval import evaluate
    from sagerl.eval.samplers import Completion, Sampler

    problems = [{"id": f"q{i}", "problem": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(4)]
    set_file = tmp_path / "tiny.jsonl"
    set_file.write_text("".join(json.dumps(p) + "\n" for p in problems), encoding="utf-8")

    class Plain:
        chat_template = None

    class FirstKRight(Sampler):
        """Problem i: its samples 0..i-1 are right (counts 0, 1, 2, 3 of n = 4)."""

        name = "fake"
        tokenizer = Plain()

        def generate(
            self, prompts, n, *, max_new_tokens, temperature=1.0, top_p=1.0, seed=0, sample_seeds=None
        ):
            out = []
            for prompt, seeds in zip(prompts, sample_seeds, strict=True):
                i = next(j for j, p in enumerate(problems) if p["problem"] in prompt)
                row = [
                    Completion(f"\\boxed{{{i + 1 if j < i else 0}}}", 2, "stop") for j in range(len(seeds))
                ]
                out.append(row)
            return out

    run = tmp_path / "run"
    evaluate("org/some-model", [str(set_file)], n=4, out=run, sampler=FirstKRight(), progress=False)
    doc = lighteval_results(run, task_names=["tiny=my_tiny"])
    entry = doc["results"]["my_tiny|0"]
    assert entry["pass@k:k=1&n=4"] == pytest.approx((0 + 1 + 2 + 3) / 16)
    assert entry["pass@k:k=4&n=4"] == pytest.approx(3 / 4)
    assert entry["pass@k:k=4&n=4_stderr"] == pytest.approx(mean_stderr([0, 1, 1, 1]))
    assert (
        doc["sagerl"]["ci"]["my_tiny|0"]["pass@1"]
        == json.loads((run / "results.json").read_text())["datasets"]["tiny"]["ci"]["pass@1"]
    )
    path = export_lighteval(run, tmp_path / "le")
    assert (
        path.parent == tmp_path / "le" / "results" / "org" / "some-model"
    )  # a hub id nests, as in lighteval
    assert "tiny|0" in json.loads(path.read_text())["results"]
    assert export_lighteval(run, tmp_path / "one.json") == tmp_path / "one.json"


def test_bad_inputs_are_one_line(tmp_path):
    sage = DATA / "sage_eval" / "evaluation_results.json"
    with pytest.raises(DataError, match=r"not a lighteval results file .* use `sagerl import sage-eval`"):
        read_lighteval(sage)
    lonely = tmp_path / "results" / "m" / "results_2026-01-01T00-00-00.json"
    lonely.parent.mkdir(parents=True)
    shutil.copy(RESULTS, lonely)
    with pytest.raises(DataError, match=r"no details folder .*--save-details"):
        read_lighteval(lonely)
    with pytest.raises(DataError, match=r"no details_\*.parquet in it"):
        read_lighteval(tmp_path)


def _edit_details(details: Path, task: str, edit) -> Path:
    file = next(details.glob(f"details_{task}|0_*.parquet"))
    rows = pq.read_table(file).to_pylist()
    edit(rows)
    pq.write_table(pa.Table.from_pylist(rows), file)
    return file


def test_non_binary_scores_name_file_task_problem_and_field(tmp_path):
    results, details = _copy(tmp_path)

    def half(rows):
        rows[1]["metric"]["pass@k:k=1&n=8"] = 0.3  # 2.4 of 8 samples
        rows[1]["metric"]["avg@n:n=8"] = 0.3

    file = _edit_details(details, "toy", half)
    with pytest.raises(DataError) as info:
        import_lighteval(results, tmp_path / "out")
    message = str(info.value)
    assert message.startswith(f"{file}: record (task='toy|0', problem id='1'): field 'metric.")
    assert "not c/8 for a whole number c: pass@k needs 0/1 scores" in message
    assert not (tmp_path / "out").exists()


def test_duplicate_problems_and_disagreeing_files_are_refused(tmp_path):
    results, details = _copy(tmp_path)
    _edit_details(details, "toy_b", lambda rows: rows.append(rows[0]))
    with pytest.raises(
        DataError, match=r"record \(task='toy_b\|0', problem id='\d'\): field 'doc.id' appears twice"
    ):
        read_lighteval(details)
    results, details = _copy(tmp_path / "second")
    data = json.loads(results.read_text())
    data["results"]["toy|0"]["pass@k:k=4&n=8"] = 0.75
    results.write_text(json.dumps(data))
    with pytest.raises(
        DataError, match=r"field 'results.toy\|0.pass@k:k=4&n=8' is 0.75, its details give 0.70"
    ):
        read_lighteval(results)


def test_counts_lighteval_cannot_determine_are_refused(tmp_path):
    results, details = _copy(tmp_path)

    def only_pass_at_8(rows):
        for row in rows:
            row["metric"] = {"pass@k:k=8&n=8": row["metric"]["pass@k:k=8&n=8"]}

    _edit_details(details, "toy", only_pass_at_8)
    with pytest.raises(DataError, match=r"counts 1..8 all give it; the import needs a pass@k:k=1 or avg@n"):
        read_lighteval(details)
