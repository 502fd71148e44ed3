"""Datasets: the registry of named sets, and loading from a JSONL file, a data folder or the Hugging Face hub.

Named sets (:data:`DATASETS`): evaluation sets ``math500``, ``aime24``, ``aime25``, ``amc23``, ``gsm8k``,
``kk``, ``arith``, ``arith_l1``, ``arith_l2``, ``arith_l3``; training sets ``gsm8k_train``, ``math_train``,
``math_lvl3to5``, ``kk_train``, ``arith_train``, ``arith_l1_train``, ``arith_l2_train``, ``arith_l3_train``. Files follow the data README: one JSON object per line with ``id``, ``problem`` and
``answer`` (other fields go to :attr:`Problem.meta`).

The hub sources recorded here (:class:`HubSource`) follow the public dataset cards and the loaders of the
projects that publish them; they are tested against small fake datasets of those schemas (the machine
this was written on has no access to the hub). A split whose columns differ from its mapping is refused
at load, in one line naming the set, the missing column and the columns it has.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sagerl.errors import DataError, first_line
from sagerl.grading import extract_boxed
from sagerl.tasks.arithmetic import make_arithmetic_problems
from sagerl.tasks.planted import make_planted_problems, read_strategy
from sagerl.tasks.problem import KINDS, Problem

__all__ = [
    "ARITH_EVAL_SEED",
    "ARITH_TRAIN_SEED",
    "DATASETS",
    "DatasetSpec",
    "HubSource",
    "default_few_shot",
    "default_prompt_format",
    "load_problems",
    "parse_names",
    "read_jsonl",
    "strategy_reader",
]

DATA_DIR_ENV = "SAGERL_DATA_DIR"
ARITH_EVAL_SEED = 20_240_601
ARITH_TRAIN_SEED = 7
ARITH_EVAL_SIZE = 500
ARITH_TRAIN_SIZE = 20_000
ARITH_LEVELS = (1, 2)
ARITH_SINGLE_LEVELS = (1, 2, 3)
"""Levels with a set of their own: ``arith_l1`` (held out) and ``arith_l1_train``, and so on."""
PLANTED_EVAL_SEED = 1
PLANTED_EVAL_SIZE = 128
PLANTED_CLASS_SIZE = 64
PLANTED_TRAIN_SEED = 2
PLANTED_TRAIN_SIZE = 20_000


@dataclass(frozen=True)
class HubSource:
    """Where a named set lives on the Hugging Face hub, and how its columns map to a :class:`Problem`.

    Attributes:
        path, config, data_files: arguments of ``datasets.load_dataset``.
        splits: splits to load and concatenate, in order.
        problem, answer, id: column names (``id=None``: ids are ``"<set>-<split>-<row>"``); ``answer`` may be
            a dotted path into a dict column (``"extra_info.answer"``).
        answer_fallback: where to read the answer when ``answer`` is empty in a row (None: nowhere).
        answer_from: "field" (the column as is; a float such as ``27.0`` becomes ``"27"``), "after_hashes"
            (the text after ``####``, thousands commas removed: GSM8K), or "last_boxed" (the final
            ``\\boxed{}`` of a worked solution: MATH).
    """

    path: str
    splits: tuple[str, ...] = ("test",)
    problem: str = "problem"
    answer: str = "answer"
    id: str | None = None
    config: str | None = None
    data_files: str | None = None
    answer_from: str = "field"
    answer_fallback: str | None = None


@dataclass(frozen=True)
class DatasetSpec:
    """A named set: its local file name, hub source, grading kind and purpose.

    Attributes:
        file: the file name looked up in the data folders (None for generated sets).
        generate: for generated sets, a function ``n -> problems`` (the first ``n``).
        size: number of problems of a generated set.
        few_shot: worked examples its prompts use by default (see :func:`default_few_shot`).
        train: True for training sets.
        prompt_format: ``"chat"`` or ``"raw"`` (see :mod:`sagerl.tasks.prompts`).
        strategy: for tasks that know each completion's strategy exactly, the function reading it from a
            completion's text (see :func:`strategy_reader`); None for the others.
    """

    name: str
    file: str | None
    hub: HubSource | None = None
    kind: str = "math"
    train: bool = False
    few_shot: int = 0
    size: int | None = None
    generate: Callable[[int], list[Problem]] | None = field(default=None, compare=False)
    prompt_format: str = "chat"
    strategy: Callable[[str], str] | None = field(default=None, compare=False)


def _arith(
    seed: int, split: str, name: str, levels: tuple[int, ...] = ARITH_LEVELS
) -> Callable[[int], list[Problem]]:
    def generate(n: int) -> list[Problem]:
        problems = make_arithmetic_problems(n, seed=seed, levels=levels, split=split)
        return [replace(p, dataset=name) for p in problems]

    return generate


def _planted(name: str, size: int, seed: int, split: str, rare_share: float = 0.25) -> DatasetSpec:
    """A named planted-strategy set (raw prompts, exact strategies): the first n of its problems."""

    def generate(n: int) -> list[Problem]:
        return make_planted_problems(n, seed=seed, split=split, name=name, rare_share=rare_share)

    return DatasetSpec(
        name,
        None,
        kind="planted",
        train=split == "train",
        size=size,
        generate=generate,
        prompt_format="raw",
        strategy=read_strategy,
    )


_KK_SPLITS = ("3ppl", "4ppl", "5ppl", "6ppl", "7ppl")

DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec("math500", "math500.jsonl", HubSource("HuggingFaceH4/MATH-500", id="unique_id")),
        DatasetSpec(
            "aime24", "aime24.jsonl", HubSource("HuggingFaceH4/aime_2024", splits=("train",), id="id")
        ),
        DatasetSpec(
            "aime25", "aime25.jsonl", HubSource("MathArena/aime_2025", splits=("train",), id="problem_idx")
        ),
        DatasetSpec("amc23", "amc23.jsonl", HubSource("math-ai/amc23", problem="question", id="id")),
        DatasetSpec(
            "gsm8k",
            "gsm8k_test.jsonl",
            HubSource("openai/gsm8k", config="main", problem="question", answer_from="after_hashes"),
        ),
        DatasetSpec(
            "kk",
            "kk_test.jsonl",
            HubSource(
                "K-and-K/knights-and-knaves",
                config="test",
                splits=_KK_SPLITS,
                problem="quiz",
                answer="solution_text",
            ),
            kind="kk",
        ),
        DatasetSpec(
            "arith",
            None,
            few_shot=4,
            size=ARITH_EVAL_SIZE,
            generate=_arith(ARITH_EVAL_SEED, "eval", "arith"),
        ),
        DatasetSpec(
            "gsm8k_train",
            "gsm8k_train.jsonl",
            HubSource(
                "openai/gsm8k",
                config="main",
                splits=("train",),
                problem="question",
                answer_from="after_hashes",
            ),
            train=True,
        ),
        DatasetSpec(
            "math_train",
            "math_train.jsonl",
            HubSource(
                "DigitalLearningGmbH/MATH-lighteval",
                splits=("train",),
                answer="solution",
                answer_from="last_boxed",
            ),
            train=True,
        ),
        DatasetSpec(
            "math_lvl3to5",
            "math_train_lvl3to5.jsonl",
            HubSource(
                "hkust-nlp/SimpleRL-Zoo-Data",
                splits=("train",),
                problem="question",
                answer="gt_answer",  # as SimpleRL-Zoo's own loaders read it; some read extra_info["answer"]
                answer_fallback="extra_info.answer",
                data_files="simplelr_qwen_level3to5/train.parquet",
            ),
            train=True,
        ),
        DatasetSpec(
            "kk_train",
            "kk_train.jsonl",
            HubSource(
                "K-and-K/knights-and-knaves",
                config="train",
                splits=_KK_SPLITS,
                problem="quiz",
                answer="solution_text",
            ),
            kind="kk",
            train=True,
        ),
        DatasetSpec(
            "arith_train",
            None,
            train=True,
            few_shot=4,
            size=ARITH_TRAIN_SIZE,
            generate=_arith(ARITH_TRAIN_SEED, "train", "arith_train"),
        ),
        *(
            DatasetSpec(
                f"arith_l{level}{suffix}",
                None,
                train=split == "train",
                few_shot=4,
                size=size,
                generate=_arith(seed, split, f"arith_l{level}{suffix}", levels=(level,)),
            )
            for level in ARITH_SINGLE_LEVELS
            for suffix, split, seed, size in (
                ("", "eval", ARITH_EVAL_SEED, ARITH_EVAL_SIZE),
                ("_train", "train", ARITH_TRAIN_SEED, ARITH_TRAIN_SIZE),
            )
        ),
        _planted("planted", PLANTED_EVAL_SIZE, PLANTED_EVAL_SEED, "eval"),
        _planted("planted_common", PLANTED_CLASS_SIZE, PLANTED_EVAL_SEED + 100, "eval", rare_share=0.0),
        _planted("planted_rare", PLANTED_CLASS_SIZE, PLANTED_EVAL_SEED + 200, "eval", rare_share=1.0),
        _planted("planted_train", PLANTED_TRAIN_SIZE, PLANTED_TRAIN_SEED, "train"),
    )
}
"""Named sets. ``arith`` (500 problems, levels 1-2, held-out expressions) and ``arith_train`` (20,000,
training expressions only), and the same for one level alone (``arith_l1`` and ``arith_l1_train``, ``arith_l2``,
``arith_l3``: the real-LM study's task, docs/real-lm.md) are generated by :func:`~sagerl.tasks.make_arithmetic_problems` with seeds
:data:`ARITH_EVAL_SEED` and :data:`ARITH_TRAIN_SEED`; ``planted`` (128 held-out problems, a quarter of
rare types), ``planted_common`` and ``planted_rare`` (64 held-out problems of each class, for per-class
pass@k) and ``planted_train`` (20,000, a quarter rare) by :func:`~sagerl.tasks.planted.make_planted_problems`;
the others are files or hub datasets."""


def default_prompt_format(dataset: str) -> str:
    """The prompt format of a named set: ``"raw"`` for the planted sets, ``"chat"`` for the others and paths."""
    spec = DATASETS.get(dataset)
    return spec.prompt_format if spec is not None else "chat"


def strategy_reader(dataset: str) -> Callable[[str], str] | None:
    """For a set whose task knows each completion's strategy exactly (the planted sets), the function that
    reads it from a completion's text; None otherwise."""
    spec = DATASETS.get(dataset)
    return spec.strategy if spec is not None else None


def default_few_shot(dataset: str) -> int:
    """Worked examples a set's prompts use by default: 4 for the arithmetic sets, 0 for others and for paths."""
    spec = DATASETS.get(dataset)
    return spec.few_shot if spec is not None else 0


def parse_names(names: Iterable[str]) -> list[str]:
    """Split comma-separated lists (``["aime24,amc23", "math500"]``) into names, without blanks or repeats."""
    out: list[str] = []
    for item in names:
        for name in item.split(","):
            name = name.strip()
            if name and name not in out:
                out.append(name)
    return out


def _offline_variable() -> str | None:
    """The variable that puts the hub offline ("HF_HUB_OFFLINE" or "HF_DATASETS_OFFLINE"), or None."""
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on"):
            return var
    return None


def _search_dirs(data_dir: str | os.PathLike[str] | None) -> list[Path]:
    dirs: list[Path] = []
    for candidate in (data_dir, os.environ.get(DATA_DIR_ENV) or None):
        if candidate is not None and Path(candidate) not in dirs:
            dirs.append(Path(candidate))
    return dirs


def _scalar_text(value: Any) -> str | None:
    """A JSON string or number as answer text (``27.0`` -> ``"27"``); None for other types."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        return value
    return None


def _field_text(row: dict[str, Any], name: str, where: str) -> str:
    if name not in row:
        raise DataError(f"{where}: field '{name}' is missing")
    text = _scalar_text(row[name])
    if text is None:
        raise DataError(f"{where}: field '{name}' must be a string, got {type(row[name]).__name__}")
    if not text.strip():
        raise DataError(f"{where}: field '{name}' is empty")
    return text


def read_jsonl(
    path: str | os.PathLike[str],
    *,
    dataset: str | None = None,
    kind: str | None = None,
    limit: int | None = None,
    problem_field: str = "problem",
    answer_field: str = "answer",
    id_field: str = "id",
) -> list[Problem]:
    """Problems of one JSON Lines file (UTF-8, one object per line; blank lines are skipped).

    A row without ``id_field`` gets the id ``"<file stem>-<line number>"``. The answer is stripped of
    surrounding white space; a numeric answer becomes its text (``27.0`` -> ``"27"``). A row may set its
    grader with a ``kind`` field ("math" or "kk"); otherwise ``kind``, whose default is "kk" for a file
    whose stem starts with "kk" and "math" for any other. Reading stops after ``limit`` problems.

    Args:
        dataset: the :attr:`Problem.dataset` of every row; default: the file stem.

    Raises:
        DataError: one line, "<file>:<line>: <what is wrong with which field>": text that is not UTF-8 or
            not JSON, a row that is not an object, a problem or answer that is missing, empty or not text,
            an id that is empty or repeats an earlier one, an unknown kind.
    """
    path = Path(path)
    stem = path.stem
    dataset = dataset or stem
    default_kind = kind or ("kk" if stem.startswith("kk") else "math")
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise DataError(f"{path}: cannot open: {exc.strerror or exc}") from exc
    with handle:
        for lineno, raw in enumerate(handle, start=1):
            if limit is not None and len(problems) >= limit:
                break
            where = f"{path}:{lineno}"
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(f"{where}: not UTF-8 text (byte {exc.start + 1})") from exc
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{where}: invalid JSON ({exc.msg}, column {exc.colno})") from exc
            if not isinstance(row, dict):
                raise DataError(f"{where}: the row is a JSON {type(row).__name__}, expected an object")
            text = _field_text(row, problem_field, where)
            answer = _field_text(row, answer_field, where).strip()
            pid = _field_text(row, id_field, where) if id_field in row else f"{stem}-{lineno}"
            if pid in seen:
                raise DataError(f"{where}: field '{id_field}' repeats id {pid!r} of line {seen[pid]}")
            seen[pid] = lineno
            row_kind = row.get("kind", default_kind)
            if row_kind not in KINDS:
                raise DataError(f"{where}: field 'kind' must be one of {KINDS}, got {row_kind!r}")
            meta = {k: v for k, v in row.items() if k not in (problem_field, answer_field, id_field, "kind")}
            problems.append(Problem(pid, text, answer, dataset, row_kind, meta))
    return problems


def _hub_answer(value: Any, how: str) -> str | None:
    text = _scalar_text(value)
    if text is None:
        return None
    if how == "after_hashes":
        _, sep, tail = text.rpartition("####")
        return tail.strip().replace(",", "") if sep else None
    if how == "last_boxed":
        return extract_boxed(text)
    return text.strip()


def _at(row: dict[str, Any], path: str) -> Any:
    """The value at a column or a dotted path into a dict column (``"extra_info.answer"``); None if absent."""
    value: Any = row
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _check_columns(spec: DatasetSpec, split: str, rows: Any) -> None:
    """Refuse, at load, a hub split whose columns are not those the mapping reads.

    Raises:
        DataError: one line naming the set, the missing column(s) and the columns the split has.
    """
    hub = spec.hub
    assert hub is not None
    columns = getattr(rows, "column_names", None)
    if columns is None:  # a plain list of rows
        columns = list(rows[0]) if len(rows) else []
    answers = [p.split(".", 1)[0] for p in (hub.answer, hub.answer_fallback) if p]
    missing = [f"'{c}'" for c in (hub.problem, hub.id) if c and c not in columns]
    if not any(c in columns for c in answers):
        missing.append(" or ".join(f"'{c}'" for c in dict.fromkeys(answers)) + " (the answer)")
    if missing:
        raise DataError(
            f"hub set {spec.name!r} ({hub.path}, split {split}) has no column {', '.join(missing)}; "
            f"its columns are: {', '.join(columns) or 'none'}"
        )


def _load_hub(spec: DatasetSpec, limit: int | None) -> list[Problem]:
    """Load a named set from the hub with ``datasets.load_dataset``, mapped by its :class:`HubSource`.

    Rows without an answer or a problem are dropped, with their count in a warning.

    Raises:
        DataError: a split lacks a column the mapping reads (see :func:`_check_columns`). Anything the hub
            client raises (connection, not found) passes through.
    """
    from datasets import load_dataset

    hub = spec.hub
    assert hub is not None
    problems: list[Problem] = []
    dropped = seen = 0
    for split in hub.splits:
        rows = load_dataset(hub.path, hub.config, split=split, data_files=hub.data_files)
        _check_columns(spec, split, rows)
        for index, row in enumerate(rows):
            if limit is not None and len(problems) >= limit:
                break
            seen += 1
            answer = _hub_answer(_at(row, hub.answer), hub.answer_from)
            if not answer and hub.answer_fallback:
                answer = _hub_answer(_at(row, hub.answer_fallback), hub.answer_from)
            text = _scalar_text(row.get(hub.problem))
            if not answer or not text or not text.strip():
                dropped += 1
                continue
            pid = (
                str(row[hub.id]) if hub.id and row.get(hub.id) is not None else f"{spec.name}-{split}-{index}"
            )
            meta = {k: v for k, v in row.items() if k not in (hub.problem, hub.answer)}
            problems.append(Problem(pid, text, answer.strip(), spec.name, spec.kind, meta))
    if dropped:
        where = hub.answer + (f" or {hub.answer_fallback}" if hub.answer_fallback else "")
        warnings.warn(
            f"{spec.name} ({hub.path}): dropped {dropped} of {seen} rows without an answer ({where}) or a "
            f"problem ({hub.problem})",
            stacklevel=3,
        )
    return problems


def check_dataset_name(name_or_path: str) -> None:
    """Cheap check (no loading, no hub) that ``name_or_path`` is a named set or an existing ``.jsonl`` file,
    as :func:`load_problems` resolves it.

    Raises:
        DataError: one line, with the closest named set when there is one ("did you mean ...?").
    """
    import difflib

    if name_or_path in DATASETS or Path(name_or_path).expanduser().is_file():
        return
    close = difflib.get_close_matches(name_or_path, list(DATASETS), n=1, cutoff=0.75)
    hint = f" (did you mean {close[0]!r}?)" if close else f" ({', '.join(DATASETS)})"
    raise DataError(
        f"unknown dataset {name_or_path!r}: not an existing .jsonl file and not a named set{hint}"
    )


def load_problems(
    name_or_path: str,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    limit: int | None = None,
    problem_field: str = "problem",
    answer_field: str = "answer",
    id_field: str = "id",
) -> list[Problem]:
    """Problems of a named set or a JSONL file, in file order; the first ``limit`` only, if given.

    Resolution, first match wins:

    1. an existing file path ending in ``.jsonl`` (:func:`read_jsonl`; ``dataset`` is the file stem);
    2. a generated set (``arith``, ``arith_train``);
    3. the set's file (:attr:`DatasetSpec.file`) in ``data_dir``, then in ``$SAGERL_DATA_DIR``;
    4. unless ``HF_HUB_OFFLINE`` (or ``HF_DATASETS_OFFLINE``) is 1, the set's :class:`HubSource`
       (tested against fake datasets of the hub schemas; this machine has no hub access).

    The field names apply to JSONL files; hub sets use their recorded column mapping.

    Raises:
        DataError: the name is neither an existing ``.jsonl`` file nor a named set; a named set was found
            neither locally (the message lists the folders searched and how to give one: ``--data-dir`` or
            ``SAGERL_DATA_DIR``) nor on the hub; a row is malformed (see :func:`read_jsonl`); a hub split lacks
            a column its mapping reads (one line: the set, the missing column, the columns it has).
        ValueError: ``limit`` is negative.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    fields = {"problem_field": problem_field, "answer_field": answer_field, "id_field": id_field}
    path = Path(name_or_path).expanduser()
    if path.suffix == ".jsonl" or os.sep in name_or_path or name_or_path not in DATASETS:
        if path.is_file():
            if path.suffix != ".jsonl":
                raise DataError(f"{path}: expected a JSON Lines file ending in .jsonl")
            return read_jsonl(path, limit=limit, **fields)
        if path.suffix == ".jsonl" or os.sep in name_or_path:
            raise DataError(f"{path}: no such file")
        raise DataError(
            f"unknown dataset {name_or_path!r}: not an existing .jsonl file and not a named set "
            f"({', '.join(DATASETS)})"
        )
    spec = DATASETS[name_or_path]
    if spec.generate is not None:
        assert spec.size is not None
        return spec.generate(spec.size if limit is None else min(limit, spec.size))
    dirs = _search_dirs(data_dir)
    assert spec.file is not None
    for folder in dirs:
        candidate = folder / spec.file
        if candidate.is_file():
            return read_jsonl(candidate, dataset=spec.name, kind=spec.kind, limit=limit, **fields)
    searched = ", ".join(str(d) for d in dirs) if dirs else "none given"
    local = (
        f"dataset {spec.name!r} was found neither locally (no {spec.file} in the data folders searched: "
        f"{searched}; give one with --data-dir or {DATA_DIR_ENV})"
    )
    if spec.hub is None:
        raise DataError(f"{local} nor on the hub (no hub source is recorded for it)")
    offline = _offline_variable()
    if offline is not None:
        raise DataError(f"{local} nor on the hub ({offline}=1, so {spec.hub.path} was not tried)")
    try:
        return _load_hub(spec, limit)
    except DataError:
        raise
    except Exception as exc:  # the hub client raises many kinds: connection, not found, auth, schema
        raise DataError(f"{local} nor on the hub ({spec.hub.path}: {first_line(exc)})") from exc
