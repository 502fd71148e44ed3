"""The published ranking under canonical kernels (issue 37): studies/results/exploration.tar.gz holds the study folder
of studies/exploration.yaml run with ``kernels: canonical`` (its 450 runs' configs, machine records and eval results,
and each setting's aggregate ``study.json``; no weights, no samples). Every number of docs/methods.md's canonical
ranking table is read from the page and must equal the archived aggregates; every run must have used canonical
kernels; and what the page says of the ranking must hold."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_pareto_canonical import assert_canonical_runs
from test_pareto_rivals import page_rows, shown, unpack

ROOT = Path(__file__).resolve().parents[2]
ARCHIVE = ROOT / "studies" / "results" / "exploration.tar.gz"
HEADER = "| cell (canonical kernels, ranking) | rare2: rare solved (of 64) | Δ rare vs GRPO |"
PASSK_OBJECTIVES = ("pkpo", "passk", "pkpo+branch@strong@reward", "pkpo+teacher@strong")


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    return unpack(ARCHIVE, "exploration", tmp_path_factory.mktemp("exploration"))


def expected_row(data: dict[str, dict], cell: str) -> list[str]:
    """A row of the page's table from the aggregates: per setting rare solved and its paired difference to GRPO,
    common pass@1 and its paired difference to GRPO."""
    row = []
    for setting in ("rare2", "rare10"):
        d = data[setting]
        summary = d["cells"][cell]["summary"]
        vs = d["paired"]["cells"][cell] if cell != "grpo" else None
        row += [
            shown(summary["solved/planted_rare"], 1),
            "—" if vs is None else shown(vs["solved/planted_rare"], 1, signed=True),
            shown(summary["pass@1/planted_common"], 100),
            "—" if vs is None else shown(vs["pass@1/planted_common"], 100, signed=True),
        ]
    return row


def test_the_archive_rebuilds_the_canonical_ranking_of_docs_methods(study):
    rows = page_rows(HEADER)
    assert set(rows) == set(study["rare2"]["cells"]) and len(rows) == 15
    for cell, row in rows.items():
        assert row == expected_row(study, cell), cell
    assert_canonical_runs(study, 15)  # 3 builds x 5 seeds


def test_what_the_page_says_of_the_canonical_ranking(study):
    """The pass@k objectives keep the most rare problems in both settings and pay in common pass@1; every other
    method keeps at most 1.5 at 2%, as GRPO; the references' rows are the native run's to every printed digit."""
    anchors = ("grpo+branch@strong@reward", "grpo+teacher@strong", "pkpo@strong")
    for setting, floor in (("rare2", 51.5), ("rare10", 63.4)):
        cells = study[setting]["cells"]
        for cell in PASSK_OBJECTIVES:
            assert cells[cell]["summary"]["solved/planted_rare"]["mean"] > floor, (setting, cell)
        common = study[setting]["paired"]["cells"]["pkpo"]["pass@1/planted_common"]
        assert common["mean"] < 0 < common["ci"][1]  # a cost the builds do not pin down
    others = set(study["rare2"]["cells"]) - set(PASSK_OBJECTIVES) - set(anchors)
    assert len(others) == 8
    for cell in others:
        assert round(study["rare2"]["cells"][cell]["summary"]["solved/planted_rare"]["mean"], 1) <= 1.5, cell
    reference = study["rare2"]["reference_summary"]
    assert shown(reference["solved/planted_rare"], 1) == "46.3 [44.9, 47.8]"
    assert shown(reference["pass@1/planted_common"], 100) == "87.7 [86.3, 89.2]"
