"""Hub mappings of the named sets, against small fake hub datasets of the published schemas (issue 9, #10).

``datasets.load_dataset`` is replaced by a function that returns a ``datasets.Dataset`` built with
``Dataset.from_dict`` in the columns each dataset card (and the loaders of the projects that use the set)
documents; the machine these tests run on has no hub access.
"""

from __future__ import annotations

import warnings

import datasets
import pytest
from datasets import Dataset

from sagerl.errors import DataError
from sagerl.tasks import load_problems

KK_SOLUTION = "Harper is a knight, and Evelyn is a knave."

# (path, config, data_files) -> columns of every split, as the dataset cards document them.
SCHEMAS = {
    ("HuggingFaceH4/MATH-500", None, None): {
        "problem": ["What is $1+1$?"],
        "solution": ["$1+1=\\boxed{2}$."],
        "answer": ["2"],
        "subject": ["Prealgebra"],
        "level": [1],
        "unique_id": ["test/prealgebra/1.json"],
    },
    ("HuggingFaceH4/aime_2024", None, None): {
        "id": [60],
        "problem": ["Find the remainder."],
        "solution": ["..."],
        "answer": ["204"],
        "url": ["https://artofproblemsolving.com"],
        "year": ["2024"],
    },
    ("MathArena/aime_2025", None, None): {
        "problem_idx": [1],
        "problem": ["Find the sum of all integer bases."],
        "answer": [70],  # an integer column
        "problem_type": [["Number Theory"]],
    },
    ("math-ai/amc23", None, None): {
        "id": [0],
        "question": ["Cities A and B are 45 miles apart."],
        "answer": [27.0],  # a float column
        "url": ["https://artofproblemsolving.com"],
    },
    ("openai/gsm8k", "main", None): {
        "question": ["Janet has ducks.", "A big sum.", "A debt.", "A row without the final line."],
        "answer": [
            "16 - 3 - 4 = 9\n#### 18",
            "1,000 + 234,567 = 235,567\n#### 1,235,567",  # thousands commas, as verl strips them
            "#### -1,200",
            "no hashes here",
        ],
    },
    ("K-and-K/knights-and-knaves", "test", None): {
        "quiz": ["Harper says ..."],
        "names": [["Harper", "Evelyn"]],
        "knight_knave": [{"knight": "knight", "knave": "knave"}],
        "solution": [[True, False]],
        "solution_text": [KK_SOLUTION],
        "statements": ["..."],
        "index": [0],
    },
    ("DigitalLearningGmbH/MATH-lighteval", None, None): {
        "problem": ["Compute $\\dbinom{4}{2}$.", "No box in this solution."],
        "level": ["Level 2", "Level 1"],
        "solution": ["So it is $\\boxed{6}$.", "The answer is six."],
        "type": ["Counting & Probability", "Algebra"],
    },
    ("hkust-nlp/SimpleRL-Zoo-Data", None, "simplelr_qwen_level3to5/train.parquet"): {
        "question": ["Find $x$.", "A row without an answer.", "Answer only in extra_info.", "Compute."],
        "gt_answer": ["3", None, "", "\\frac{1}{2}"],
        "subject": ["Algebra"] * 4,
        "level": [3, 4, 5, 3],
        "extra_info": [
            {"answer": "3", "index": 0},
            {"answer": None, "index": 1},
            {"answer": "7", "index": 2},
            {"answer": "\\frac{1}{2}", "index": 3},
        ],
    },
}


@pytest.fixture
def fake_hub(monkeypatch):
    """Put the hub online and serve SCHEMAS (or the schemas a test puts in the returned dict)."""
    schemas = dict(SCHEMAS)
    calls: list[tuple] = []

    def load_dataset(path, name=None, *, split, data_files=None):
        calls.append((path, name, split, data_files))
        return Dataset.from_dict(schemas[(path, name, data_files)])

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("SAGERL_DATA_DIR", raising=False)
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return schemas, calls


@pytest.mark.parametrize(
    ("name", "first"),
    [
        ("math500", ("test/prealgebra/1.json", "What is $1+1$?", "2")),
        ("aime24", ("60", "Find the remainder.", "204")),
        ("aime25", ("1", "Find the sum of all integer bases.", "70")),
        ("amc23", ("0", "Cities A and B are 45 miles apart.", "27")),
        ("gsm8k", ("gsm8k-test-0", "Janet has ducks.", "18")),
        ("kk", ("kk-3ppl-0", "Harper says ...", KK_SOLUTION)),
        ("math_train", ("math_train-train-0", "Compute $\\dbinom{4}{2}$.", "6")),
        ("math_lvl3to5", ("math_lvl3to5-train-0", "Find $x$.", "3")),
    ],
)
def test_every_hub_mapping_reads_its_documented_schema(fake_hub, name, first, tmp_path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # rows without an answer: tested below
        problems = load_problems(name, data_dir=tmp_path)  # an empty data folder: the hub is used
    assert (problems[0].id, problems[0].problem, problems[0].answer) == first
    assert all(p.dataset == name for p in problems)


def test_simplerl_zoo_reads_gt_answer_and_drops_rows_without_one(fake_hub, tmp_path) -> None:
    _, calls = fake_hub
    with pytest.warns(UserWarning, match=r"math_lvl3to5 .*: dropped 1 of 4 rows without an answer"):
        problems = load_problems("math_lvl3to5", data_dir=tmp_path)
    assert calls == [("hkust-nlp/SimpleRL-Zoo-Data", None, "train", "simplelr_qwen_level3to5/train.parquet")]
    assert [(p.problem, p.answer) for p in problems] == [
        ("Find $x$.", "3"),
        ("Answer only in extra_info.", "7"),  # gt_answer empty: extra_info["answer"]
        ("Compute.", "\\frac{1}{2}"),
    ]
    assert problems[0].meta["level"] == 3 and "gt_answer" not in problems[0].meta


def test_gsm8k_strips_thousands_commas_and_drops_rows_without_a_final_line(fake_hub, tmp_path) -> None:
    with pytest.warns(UserWarning, match=r"gsm8k .*: dropped 1 of 4 rows"):
        problems = load_problems("gsm8k", data_dir=tmp_path)
    assert [p.answer for p in problems] == ["18", "1235567", "-1200"]


def test_math_solution_without_a_box_is_dropped(fake_hub, tmp_path) -> None:
    with pytest.warns(UserWarning, match=r"math_train .*: dropped 1 of 2 rows"):
        assert [p.answer for p in load_problems("math_train", data_dir=tmp_path)] == ["6"]


def test_a_schema_that_differs_fails_at_load_in_one_line(fake_hub, tmp_path) -> None:
    schemas, _ = fake_hub
    # the verl-preprocessed layout of the same set: the answer is in reward_model, the problem in prompt
    schemas[("hkust-nlp/SimpleRL-Zoo-Data", None, "simplelr_qwen_level3to5/train.parquet")] = {
        "data_source": ["simplelr"],
        "prompt": [[{"role": "user", "content": "Find $x$."}]],
        "reward_model": [{"ground_truth": "3", "style": "rule"}],
    }
    with pytest.raises(DataError) as info:
        load_problems("math_lvl3to5", data_dir=tmp_path)
    message = str(info.value)
    assert "\n" not in message
    assert message == (
        "hub set 'math_lvl3to5' (hkust-nlp/SimpleRL-Zoo-Data, split train) has no column 'question', "
        "'gt_answer' or 'extra_info' (the answer); its columns are: data_source, prompt, reward_model"
    )
    # an id column that is gone is named too
    schemas[("HuggingFaceH4/aime_2024", None, None)] = {"problem": ["p"], "answer": ["1"]}
    with pytest.raises(DataError, match=r"'aime24' .* has no column 'id'; its columns are: problem, answer$"):
        load_problems("aime24", data_dir=tmp_path)


def test_limit_stops_reading_early(fake_hub, tmp_path) -> None:
    assert [p.answer for p in load_problems("gsm8k", data_dir=tmp_path, limit=2)] == ["18", "1235567"]
