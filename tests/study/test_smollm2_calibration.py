"""studies/smollm2_calibration.py: its variants' syntax and the numbers it reads off an eval run folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from study_scripts import load_study_script  # tests/ is on sys.path
from test_eval_run import PROBLEMS, FakeSampler, expected_half_count  # tests/ is on sys.path

from sagerl.eval import evaluate, pass_at_k

SCRIPT = Path(__file__).resolve().parents[2] / "studies" / "smollm2_calibration.py"


def load_script():
    return load_study_script(SCRIPT.stem)


def test_variants_parse_and_bad_ones_name_the_entry():
    calibration = load_script()
    assert calibration.parse_variants("arith_l1:4, arith_l2:0") == [("arith_l1", 4), ("arith_l2", 0)]
    assert [v[0] for v in calibration.parse_variants(calibration.DEFAULT_VARIANTS)][:2] == ["arith_l1"] * 2
    for bad in ("arith_l1", "arith_l1:two", ""):
        with pytest.raises(ValueError, match="SET:WORKED_EXAMPLES"):
            calibration.parse_variants(bad)


def test_the_row_of_a_run_with_known_counts(tmp_path):
    """Three problems: always right (8 of 8), never (0 of 8), right on even seeds (c of 8)."""
    calibration = load_script()
    toy = tmp_path / "toy.jsonl"
    toy.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS), encoding="utf-8")
    out = tmp_path / "run"
    evaluate(
        "fake", [str(toy)], out=out, sampler=FakeSampler(), n=8, max_new_tokens=16, seed=3, progress=False
    )
    c = expected_half_count(8, 3)
    assert 0 < c < 8
    row = calibration.variant_row(out, "toy", group=4)
    assert row["accuracy"] == pytest.approx((8 + c) / 24)
    assert row["pass@8"] == pytest.approx(2 / 3)
    # groups of 4: never mixed for the first two; for the third, 1 - P(all 4 right) - P(all 4 wrong)
    mixed = pass_at_k(8, c, 4) + pass_at_k(8, 8 - c, 4) - 1
    assert row["mixed@4"] == pytest.approx(mixed / 3)
    assert row["boxed"] == 1.0 and row["tokens"] == 7 and row["cut off"] == 0
