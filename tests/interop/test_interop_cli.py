"""The command line of :mod:`sagerl.interop`: ``sagerl import sage-eval|lighteval`` and ``sagerl export
lighteval`` run end to end, and a bad file is one error line without a traceback (exit status 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sagerl.cli import main

DATA = Path(__file__).resolve().parent / "data"
SAGE = DATA / "sage_eval" / "evaluation_results.json"
RESULTS = next((DATA / "lighteval" / "out" / "results").rglob("results_*.json"))


def test_import_then_compare_then_export(tmp_path, capsys):
    main(["import", "sage-eval", str(SAGE), "--out", str(tmp_path / "sage"), "--no-plot"])
    out = capsys.readouterr().out
    assert f"{tmp_path / 'sage' / 'grpo-step200'}: written, n=8, AMC23, MATH-500" in out
    assert out.count("not imported: the file holds 0/1 outcomes only") == 1
    main(["import", "sage-eval", str(SAGE), "--out", str(tmp_path / "sage"), "--no-plot"])
    assert "sage-step200: kept (already imported)" in capsys.readouterr().out

    main(["import", "lighteval", str(RESULTS), "--out", str(tmp_path / "le")])
    assert (tmp_path / "le" / "toy-model" / "passk.png").is_file()
    capsys.readouterr()

    main(["compare", str(tmp_path / "sage" / "grpo-step200"), str(tmp_path / "le" / "toy-model"), "--k", "1"])
    table = capsys.readouterr().out
    assert "grpo-step200" in table and "toy-model" in table

    main(["export", "lighteval", str(tmp_path / "sage" / "sage-step200"), "--out", str(tmp_path / "export")])
    written = Path(capsys.readouterr().out.strip().removeprefix("lighteval results: "))
    doc = json.loads(written.read_text())
    assert doc["results"]["MATH-500|0"]["pass@k:k=8&n=8"] == pytest.approx(1.0)
    assert written.parent == tmp_path / "export" / "results" / "sage-step200"


def test_a_bad_file_is_one_error_line(tmp_path, capsys):
    data = json.loads(SAGE.read_text())
    data["per_seed_records"][3]["is_correct"][0][1] = 2
    bad = tmp_path / "evaluation_results.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(SystemExit) as info:
        main(["import", "sage-eval", str(bad), "--out", str(tmp_path / "out")])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(
        f"sagerl: error: {bad}: record (algo_type='sage', step=200, dataset='AMC23', seed=1): "
        "field 'is_correct[0][1]' is 2; pass@k needs 0/1 rewards"
    )
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit):
        main(["import", "lighteval", str(SAGE), "--out", str(tmp_path / "out")])
    assert "use `sagerl import sage-eval`" in capsys.readouterr().err


def test_help_lists_the_commands(capsys):
    try:
        main(["import", "--help"])
    except SystemExit as exc:  # click may exit 0 after printing the help
        assert exc.code in (0, None)
    text = capsys.readouterr().out
    assert "sage-eval" in text and "lighteval" in text
