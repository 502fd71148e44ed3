"""sagerl.tasks: JSONL reading and errors, named sets, hub fallback, arithmetic generator, prompts."""

from __future__ import annotations

import ast
import json
import os
import re
from fractions import Fraction
from pathlib import Path

import pytest

from sagerl.errors import DataError
from sagerl.grading import is_correct, kk_is_correct
from sagerl.tasks import (
    ARITHMETIC_EXAMPLES,
    DATASETS,
    KK_EXAMPLES,
    PROMPT_SUFFIX,
    Problem,
    build_messages,
    default_few_shot,
    load_problems,
    make_arithmetic_problems,
    parse_names,
    read_jsonl,
    render_prompt,
)
from sagerl.tasks.arithmetic import in_eval_split

_REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("SAGERL_DATA_DIR") or _REPO.parent / "shared" / "data")
needs_data = pytest.mark.skipif(not (SHARED_DATA / "math500.jsonl").is_file(), reason="no shared data folder")


@pytest.fixture
def no_env_data(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SAGERL_DATA_DIR", raising=False)


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# --- JSONL ------------------------------------------------------------------------------------------


def test_read_jsonl_fields_meta_and_default_ids(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "mine.jsonl",
        [
            json.dumps({"id": "a", "problem": "1+1?", "answer": " 2 ", "level": 1}),
            "",
            json.dumps({"problem": "2+2?", "answer": 4}),
            json.dumps({"problem": "half?", "answer": 27.0, "kind": "math"}),
        ],
    )
    problems = load_problems(str(path))
    assert [p.id for p in problems] == ["a", "mine-3", "mine-4"]
    assert [p.answer for p in problems] == ["2", "4", "27"]
    assert problems[0] == Problem("a", "1+1?", "2", "mine", "math")
    assert problems[0].meta == {"level": 1}
    assert load_problems(str(path), limit=2)[-1].id == "mine-3"


def test_read_jsonl_custom_fields_and_kk_kind(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "kk_small.jsonl", [json.dumps({"key": 7, "quiz": "Who?", "sol": "A is a knight."})]
    )
    (problem,) = read_jsonl(path, problem_field="quiz", answer_field="sol", id_field="key")
    assert (problem.id, problem.problem, problem.answer, problem.kind) == (
        "7",
        "Who?",
        "A is a knight.",
        "kk",
    )


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (['{"id": "a", "problem": "p", "answer": "1"}', '{"id": "b", "problem": "p",'], r":2: invalid JSON"),
        (
            ['{"id": "a", "problem": "p", "answer": "1"}', "[1, 2]"],
            r":2: the row is a JSON list, expected an object",
        ),
        (['{"id": "a", "answer": "1"}'], r":1: field 'problem' is missing"),
        (['{"id": "a", "problem": "p", "answer": "  "}'], r":1: field 'answer' is empty"),
        (
            ['{"id": "a", "problem": "p", "answer": null}'],
            r":1: field 'answer' must be a string, got NoneType",
        ),
        (['{"id": "a", "problem": ["p"], "answer": "1"}'], r":1: field 'problem' must be a string, got list"),
        (
            ['{"id": "a", "problem": "p", "answer": "1"}', "", '{"id": "a", "problem": "q", "answer": "2"}'],
            r":3: field 'id' repeats id 'a' of line 1",
        ),
        (['{"id": "a", "problem": "p", "answer": "1", "kind": "code"}'], r":1: field 'kind' must be one of"),
    ],
)
def test_bad_rows_name_file_line_and_field(tmp_path: Path, rows: list[str], message: str) -> None:
    path = _write(tmp_path / "bad.jsonl", rows)
    with pytest.raises(DataError) as info:
        load_problems(str(path))
    text = str(info.value)
    assert text.startswith(f"{path}:")
    assert re.search(message, text)
    assert "\n" not in text


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b'{"problem": "caf\xe9", "answer": "1"}\n')
    with pytest.raises(DataError, match=r"latin\.jsonl:1: not UTF-8"):
        load_problems(str(path))


def test_unknown_names_and_missing_paths(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="unknown dataset 'nope'.*math500"):
        load_problems("nope")
    with pytest.raises(DataError, match="no such file"):
        load_problems(str(tmp_path / "absent.jsonl"))
    other = tmp_path / "data.csv"
    other.write_text("a,b\n")
    with pytest.raises(DataError, match="expected a JSON Lines file"):
        load_problems(str(other))
    with pytest.raises(ValueError, match="limit"):
        load_problems("arith", limit=-1)


# --- named sets -------------------------------------------------------------------------------------

EXPECTED_ROWS = {"math500": 500, "aime24": 30, "aime25": 30, "amc23": 40, "gsm8k": 1319, "kk": 500}


@needs_data
@pytest.mark.parametrize(("name", "rows"), sorted(EXPECTED_ROWS.items()))
def test_named_sets_from_env_folder(monkeypatch: pytest.MonkeyPatch, name: str, rows: int) -> None:
    monkeypatch.setenv("SAGERL_DATA_DIR", str(SHARED_DATA))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    problems = load_problems(name)
    assert len(problems) == rows
    assert len({p.id for p in problems}) == rows
    assert all(p.dataset == name and p.problem and p.answer for p in problems)
    assert {p.kind for p in problems} == {"kk" if name == "kk" else "math"}


@needs_data
def test_named_set_contents_and_data_dir_argument(no_env_data: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    first = load_problems("math500", data_dir=SHARED_DATA, limit=1)[0]
    assert first.id == "test/precalculus/807.json"
    assert first.answer == r"\left( 3, \frac{\pi}{2} \right)"
    assert first.meta["level"] == 2
    assert is_correct(r"\boxed{(3, \frac{\pi}{2})}", first.answer)
    kk = load_problems("kk", data_dir=SHARED_DATA, limit=3)
    assert len(kk) == 3 and kk[0].kind == "kk"
    assert kk_is_correct(r"\boxed{" + kk[0].meta["answer_formatted"] + "}", kk[0].answer)
    assert load_problems("gsm8k", data_dir=SHARED_DATA, limit=1)[0].answer == "18"


@needs_data
def test_training_sets_are_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAGERL_DATA_DIR", str(SHARED_DATA))
    for name in ("gsm8k_train", "math_train", "math_lvl3to5", "kk_train"):
        assert DATASETS[name].train
        assert len(load_problems(name, limit=5)) == 5
    assert load_problems("math_lvl3to5", limit=1)[0].dataset == "math_lvl3to5"


def test_offline_without_local_file_gives_clear_error(
    no_env_data: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError) as info:
        load_problems("aime24", data_dir=tmp_path)
    text = str(info.value)
    assert "\n" not in text
    for part in (
        "'aime24'",
        "neither locally",
        str(tmp_path),
        "aime24.jsonl",
        "--data-dir",
        "SAGERL_DATA_DIR",
    ):
        assert part in text
    assert "HF_HUB_OFFLINE=1" in text and "HuggingFaceH4/aime_2024" in text
    with pytest.raises(DataError, match="none given"):
        load_problems("aime24")


def test_hub_fallback_maps_columns(no_env_data: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hub path, with ``datasets.load_dataset`` replaced by a fake (this machine has no hub)."""
    import datasets

    calls: list[tuple] = []

    def fake_load_dataset(path, name=None, *, split, data_files=None):  # noqa: ANN001, ANN202
        calls.append((path, name, split, data_files))
        return [{"question": "Janet has 3 ducks...", "answer": "3 + 1,197 = 1,200\n#### 1,200"}]

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    (problem,) = load_problems("gsm8k")
    assert calls == [("openai/gsm8k", "main", "test", None)]
    assert (problem.id, problem.answer, problem.dataset) == ("gsm8k-test-0", "1200", "gsm8k")

    def failing(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise ConnectionError("no route to host\nmore detail")

    monkeypatch.setattr(datasets, "load_dataset", failing)
    with pytest.raises(DataError, match=r"nor on the hub \(openai/gsm8k: no route to host\)$"):
        load_problems("gsm8k")


def test_parse_names_and_default_few_shot() -> None:
    assert parse_names(["aime24,amc23", " math500 ", "aime24", ""]) == ["aime24", "amc23", "math500"]
    assert default_few_shot("arith") == default_few_shot("arith_train") == 4
    assert default_few_shot("math500") == 0 and default_few_shot("some_file") == 0


# --- arithmetic -------------------------------------------------------------------------------------


def _evaluate(node: ast.AST) -> Fraction:
    """Exact value of an expression made of integers, + - * / and parentheses (a tree walk, no eval)."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return Fraction(node.value)
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left), _evaluate(node.right)
        ops = {ast.Add: left + right, ast.Sub: left - right, ast.Mult: left * right}
        if isinstance(node.op, ast.Div):
            return left / right
        return ops[type(node.op)]
    raise AssertionError(f"unexpected node {ast.dump(node)}")


def test_arithmetic_answers_are_right() -> None:
    problems = make_arithmetic_problems(600, seed=11, levels=(1, 2, 3))
    for p in problems:
        value = _evaluate(ast.parse(p.meta["expression"], mode="eval"))
        assert value.denominator == 1 and value >= 0, p
        assert p.answer == str(value.numerator), p
        numbers = re.findall(r"\d+", p.meta["expression"])
        assert all(re.search(rf"\b{n}\b", p.problem) for n in numbers), p  # the text states every number
        operations = len(re.findall(r"[-+*/]", p.meta["expression"]))
        assert operations == 1 if p.meta["level"] == 1 else operations in (2, 3), p
    assert {p.meta["level"] for p in problems} == {1, 2, 3}


def test_arithmetic_is_deterministic_and_prefix_stable() -> None:
    a = make_arithmetic_problems(200, seed=3)
    assert a == make_arithmetic_problems(200, seed=3)
    assert [p.meta for p in a] == [p.meta for p in make_arithmetic_problems(200, seed=3)]
    assert make_arithmetic_problems(50, seed=3) == a[:50]
    assert a != make_arithmetic_problems(200, seed=4)
    assert [p.id for p in a[:2]] == ["arith-3-0", "arith-3-1"]
    assert [p.meta["level"] for p in a[:4]] == [1, 2, 1, 2]
    assert len({p.problem for p in a}) == 200


def test_arithmetic_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="levels"):
        make_arithmetic_problems(3, seed=0, levels=(4,))
    with pytest.raises(ValueError, match="split"):
        make_arithmetic_problems(3, seed=0, split="test")
    with pytest.raises(ValueError, match="n must be"):
        make_arithmetic_problems(-1, seed=0)


@pytest.mark.parametrize("level", [1, 2, 3])
def test_each_level_has_a_held_out_set_and_a_disjoint_training_set(level) -> None:
    held_out = load_problems(f"arith_l{level}")
    train = load_problems(f"arith_l{level}_train", limit=2000)
    assert len(held_out) == 500 and len(train) == 2000
    assert {p.meta["level"] for p in held_out + train} == {level}
    assert {p.dataset for p in held_out} == {f"arith_l{level}"}
    assert {p.meta["split"] for p in held_out} == {"eval"} and {p.meta["split"] for p in train} == {"train"}
    assert not {p.meta["expression"] for p in held_out} & {p.meta["expression"] for p in train}
    assert default_few_shot(f"arith_l{level}") == default_few_shot(f"arith_l{level}_train") == 4
    assert DATASETS[f"arith_l{level}_train"].train and not DATASETS[f"arith_l{level}"].train


def test_arith_and_arith_train_are_disjoint() -> None:
    held_out = load_problems("arith")
    train = load_problems("arith_train", limit=5000)
    assert len(held_out) == DATASETS["arith"].size == 500 and len(train) == 5000
    assert {p.dataset for p in held_out} == {"arith"} and {p.dataset for p in train} == {"arith_train"}
    assert not {p.problem for p in held_out} & {p.problem for p in train}
    assert not {p.meta["expression"] for p in held_out} & {p.meta["expression"] for p in train}
    assert all(p.meta["split"] == "eval" for p in held_out)
    assert {p.meta["level"] for p in held_out} == {1, 2}
    texts = {p.problem for p in held_out}
    assert not any(question in texts for question, _ in ARITHMETIC_EXAMPLES)
    # the computations of the worked examples are training-side, so never held-out problems
    assert not any(in_eval_split(e) for e in ("7 + 5", "9 - 3", "4 * 6", "3 * 5 + 2", "20 - 8 + 5", "28 / 4"))


# --- prompts ----------------------------------------------------------------------------------------


def test_build_messages() -> None:
    problem = Problem("x", "What is 2 + 2?", "4", "arith")
    (message,) = build_messages(problem)
    assert message == {"role": "user", "content": "What is 2 + 2?\n" + PROMPT_SUFFIX}
    messages = build_messages("What is 2 + 2?", few_shot=4)
    assert [m["role"] for m in messages] == ["user", "assistant"] * 4 + ["user"]
    for m in messages[1:-1:2]:
        assert re.search(r"\\boxed\{\d+\}\.?$", m["content"])
    for _question, worked in ARITHMETIC_EXAMPLES:  # every worked example is right by our own grader
        value = re.search(r"\\boxed\{(\d+)\}", worked).group(1)
        assert is_correct(worked, value)
    with pytest.raises(ValueError, match="few_shot"):
        build_messages(problem, few_shot=len(ARITHMETIC_EXAMPLES) + 1)
    with pytest.raises(ValueError, match="unknown kind"):
        build_messages(problem, kind="code")


def test_kk_prompt_matches_the_checker() -> None:
    puzzle = Problem("k", "Who is who?", "Zoe is a knight, and Liam is a knave.", "kk", kind="kk")
    messages = build_messages(puzzle, few_shot=2)
    assert r"\boxed{(1)" in messages[-1]["content"]
    assert kk_is_correct(messages[-1]["content"].split("like ", 1)[1], puzzle.answer)  # the format example
    for question, worked in KK_EXAMPLES:
        names = re.findall(r"You meet 2 inhabitants: (\w+) and (\w+)", question)[0]
        roles = dict(re.findall(r"\((?:1|2)\) (\w+) is a (\w+)", worked))
        assert set(roles) == set(names)
        assert kk_is_correct(worked, ", ".join(f"{n} is a {r}" for n, r in roles.items()))


class _PlainTokenizer:
    chat_template = None


class _ChatTokenizer:
    chat_template = "{{ messages }}"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):  # noqa: ANN001, ANN201
        assert tokenize is False and add_generation_prompt is True
        return "|".join(m["content"] for m in messages) + "|<assistant>"


def test_render_prompt_with_and_without_chat_template() -> None:
    plain = render_prompt(_PlainTokenizer(), "What is 2 + 2?", few_shot=1)
    assert plain == (
        f"Question: {ARITHMETIC_EXAMPLES[0][0]}\n{PROMPT_SUFFIX}\nAnswer: {ARITHMETIC_EXAMPLES[0][1]}\n\n"
        f"Question: What is 2 + 2?\n{PROMPT_SUFFIX}\nAnswer:"
    )
    chat = render_prompt(_ChatTokenizer(), "What is 2 + 2?")
    assert chat == f"What is 2 + 2?\n{PROMPT_SUFFIX}|<assistant>"
