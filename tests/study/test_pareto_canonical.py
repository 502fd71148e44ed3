"""The published frontier under canonical kernels (issue 37): studies/results/pareto.tar.gz holds the study folder of
studies/pareto.yaml run with ``kernels: canonical`` (its 204 runs' configs, machine records and eval results, and
each setting's aggregate ``study.json``; no weights, no samples), and studies/results/pareto-confirm.tar.gz that of
studies/pareto-confirm.yaml (seeds 2-4). Every number of docs/methods.md's canonical tables is read from the page
and must equal the archived aggregates; every run must have used canonical kernels; and what the page says of them
must hold (the cosine anneal dominates GRPO at 10%, not at 2%)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_pareto_rivals import page_rows, shown, unpack

from sagerl.study.table import _summary

ROOT = Path(__file__).resolve().parents[2]
ARCHIVE = ROOT / "studies" / "results" / "pareto.tar.gz"
CONFIRM = ROOT / "studies" / "results" / "pareto-confirm.tar.gz"
HEADER = "| cell (canonical kernels) | rare2: rare solved (of 64) |"
CONFIRM_HEADER = "| cell (canonical kernels, seeds 2–4) | rare2: rare solved (of 64) |"
WINNER = "pkpo-anneal@cosine"


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    return unpack(ARCHIVE, "pareto", tmp_path_factory.mktemp("pareto"))


@pytest.fixture(scope="module")
def confirm(tmp_path_factory):
    return unpack(CONFIRM, "pareto-confirm", tmp_path_factory.mktemp("confirm"))


def expected_row(data: dict[str, dict], cell: str) -> list[str]:
    """A row of the page's tables from the aggregates: per setting rare solved, common pass@1, the paired
    difference to GRPO on common pass@1, and whether the cell is on the frontier."""
    row = []
    for setting in ("rare2", "rare10"):
        d = data[setting]
        summary = d["cells"][cell]["summary"]
        vs = d["paired"]["cells"][cell] if cell != "grpo" else None
        row += [
            shown(summary["solved/planted_rare"], 1),
            shown(summary["pass@1/planted_common"], 100),
            "—" if vs is None else shown(vs["pass@1/planted_common"], 100, signed=True),
            "yes" if d["pareto"]["cells"][cell]["on_frontier"] else "—",
        ]
    return row


def assert_canonical_runs(data: dict[str, dict], runs: int) -> None:
    """Every setting of an archived planted study is paired against GRPO, ran under canonical kernels, and holds
    ``runs`` finished runs per cell whose pooled means (the study's own pooling, redone from the per-run values)
    are its summaries."""
    for setting, d in data.items():
        assert d["paired"]["baseline"] == "grpo"
        assert [m["machine"]["kernel_mode"] for m in d["run_machines"]] == ["canonical"], setting
        for cell, entry in d["cells"].items():
            assert len(entry["per_seed"]) == runs and not entry["failed"], (setting, cell)
            redone = _summary(entry["per_seed"])  # the study's own pooling, from the per-run values
            for key in ("solved/planted_rare", "pass@1/planted_common"):
                assert redone[key]["mean"] == pytest.approx(entry["summary"][key]["mean"], abs=1e-12)


@pytest.mark.parametrize(
    "which, header, cells, runs", [("study", HEADER, 17, 6), ("confirm", CONFIRM_HEADER, 3, 9)]
)
def test_the_archives_rebuild_the_canonical_tables_of_docs_methods(which, header, cells, runs, request):
    data = request.getfixturevalue(which)
    rows = page_rows(header)
    assert set(rows) == set(data["rare2"]["cells"]) and len(rows) == cells
    for cell, row in rows.items():
        assert row == expected_row(data, cell), cell
    assert_canonical_runs(data, runs)


def test_what_the_page_says_of_the_cosine_anneal(study):
    """At 10% it dominates GRPO (GRPO is off the frontier, dominated by it); at 2% it does not: GRPO stays on the
    frontier and the anneal's common pass@1 is below GRPO's on average, with a CI across 0."""
    rare10, rare2 = study["rare10"], study["rare2"]
    assert WINNER in rare10["pareto"]["cells"]["grpo"]["dominated_by"]
    assert rare2["pareto"]["cells"]["grpo"]["on_frontier"]
    assert WINNER not in rare2["pareto"]["cells"]["grpo"]["dominated_by"]
    common = rare2["paired"]["cells"][WINNER]["pass@1/planted_common"]
    assert common["mean"] < 0 < common["ci"][1]
    for d in (rare2, rare10):
        assert d["pareto"]["cells"][WINNER]["on_frontier"]
        assert d["cells"][WINNER]["summary"]["solved/planted_rare"]["mean"] > 36
        assert d["cells"]["grpo"]["summary"]["solved/planted_rare"]["mean"] < 1
