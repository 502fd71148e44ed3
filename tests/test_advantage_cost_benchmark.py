"""benchmarks/advantage_cost.py runs and times every method of the frontier study (one round, one call)."""

import runpy
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "advantage_cost.py"


def test_every_method_is_timed_and_grpo_bounds_itself_at_one(capsys):
    module = runpy.run_path(str(SCRIPT))
    module["main"](["--rounds", "1", "--repeats", "1", "--groups", "2", "--group-size", "4", "--tokens", "6"])
    rows = [
        line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "---" not in line
    ]
    names = [row.split("|")[1].strip() for row in rows[1:]]
    assert names == list(module["_variants"](4))
    assert "darling (lexical)" in names and "ucb-con" in names
    grpo = rows[1].split("|")
    assert grpo[1].strip() == "grpo" and grpo[3].strip() == "1.0" and grpo[4].strip() == "1.0000"
