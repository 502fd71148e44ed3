"""Arguments are checked before anything is written (issue 9, fault 6)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sagerl.cli import main


def cli(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    captured = capsys.readouterr()
    return int(exc.value.code), captured.out, captured.err


@pytest.fixture
def not_a_model(tmp_path: Path) -> Path:
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    (folder / "notes.txt").write_text("an existing folder that holds no model")
    return folder


def test_eval_with_a_folder_that_is_not_a_model(tmp_path: Path, not_a_model: Path, capsys) -> None:
    data = tmp_path / "one.jsonl"
    data.write_text(json.dumps({"id": "a", "problem": "1 + 1?", "answer": "2"}) + "\n")
    out = tmp_path / "run"
    code, stdout, err = cli(["eval", "--model", str(not_a_model), "-d", str(data), "--out", str(out)], capsys)
    assert code == 2 and stdout == ""  # no "run folder ... rerun to resume" either
    assert err.strip() == (
        f"sagerl: error: model '{not_a_model}': no config.json in {not_a_model} (not a Hugging Face model folder)"
    )
    assert not out.exists()


def test_train_with_a_folder_that_is_not_a_model(tmp_path: Path, not_a_model: Path, capsys) -> None:
    out = tmp_path / "run"
    code, _, err = cli(["train", "--model", str(not_a_model), "-o", str(out)], capsys)
    assert code == 2 and f"no config.json in {not_a_model}" in err.strip().splitlines()[-1]
    assert not out.exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["-n", "0"], "n must be >= 1"),
        (["--few-shot", "99"], "few_shot must be between"),
        (["--top-p", "0"], "top_p"),
        (["--backend", "tpu"], "unknown backend"),
        (["-d", "no-such-set"], "unknown dataset 'no-such-set'"),
    ],
)
def test_eval_option_errors_write_nothing(tmp_path: Path, extra: list[str], message: str, capsys) -> None:
    data = tmp_path / "one.jsonl"
    data.write_text(json.dumps({"id": "a", "problem": "1 + 1?", "answer": "2"}) + "\n")
    out = tmp_path / "run"
    code, _, err = cli(["eval", "-d", str(data), "--out", str(out), *extra], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
