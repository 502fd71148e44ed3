"""The rivals' frontier (issue 38): studies/results/pareto-rivals.tar.gz holds the study folder of
studies/pareto-rivals.yaml (its 156 runs' configs, machine records and eval results, and the aggregate
``study.json`` of each setting; no weights, no samples: those are 300 MB). Every number of docs/methods.md's
rivals table is read from the page and must equal the archived aggregate; the aggregate's summaries must follow
from its per-run values by the study's own pooling; and what the page says of it must hold (nothing dominates
annealed PKPO; SimKO, FlowRL and APO keep no more rare problems than GRPO). The confirmation on seeds 2-4
(studies/results/pareto-rivals-confirm.tar.gz) is checked the same way against its own table."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest

from sagerl.study.table import _summary

ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / "studies" / "pareto-rivals.yaml"
ARCHIVE = ROOT / "studies" / "results" / "pareto-rivals.tar.gz"
CONFIRM = ROOT / "studies" / "results" / "pareto-rivals-confirm.tar.gz"
HEADER = "| cell | rare2: rare solved (of 64) |"
CONFIRM_HEADER = "| cell (seeds 2–4) | rare2: rare solved (of 64) |"
ALIASES = {"simko": "simko@steps_per_generation=1", "apo": "apo@steps_per_generation=1"}
WINNER = "pkpo-anneal@cosine"


def page_rows(header: str = HEADER) -> dict[str, list[str]]:
    """A rivals table of docs/methods.md (the one under ``header``): cell name -> its 8 cells of text."""
    lines = (ROOT / "docs" / "methods.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        name = re.sub(r"\s*\(.*\)$", "", cells[0]).strip("*`")
        rows[ALIASES.get(name, name)] = [c.replace("−", "-") for c in cells[1:]]
    return rows


def shown(entry: dict | None, scale: float, signed: bool = False) -> str:
    """A mean and its interval as the study's tables print them."""
    if entry is None:
        return "—"
    fmt = "{:+.1f}" if signed else "{:.1f}"
    mean, ci = entry["mean"] * scale, entry.get("ci")
    if ci is None or ci[0] == ci[1]:
        return fmt.format(mean)
    return f"{fmt.format(mean)} [{fmt.format(ci[0] * scale)}, {fmt.format(ci[1] * scale)}]"


def unpack(archive_path: Path, name: str, tmp: Path) -> dict[str, dict]:
    """Each setting's aggregate ``study.json`` of the archived study folder ``study-<name>``."""
    with tarfile.open(archive_path) as archive:
        archive.extractall(tmp, filter="data")
    out = tmp / f"study-{name}"
    assert (out / "rare2" / "study.yaml").read_text().startswith(f"name: {name}-rare2\n")
    return {s: json.loads((out / s / "study.json").read_text()) for s in ("rare2", "rare10")}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    return unpack(ARCHIVE, "pareto-rivals", tmp_path_factory.mktemp("rivals"))


@pytest.fixture(scope="module")
def confirm(tmp_path_factory):
    return unpack(CONFIRM, "pareto-rivals-confirm", tmp_path_factory.mktemp("confirm"))


def test_the_archive_rebuilds_the_rivals_table_of_docs_methods(study):
    rows = page_rows()
    assert set(rows) == set(study["rare2"]["cells"]) and len(rows) == 13
    for cell, row in rows.items():
        want = []
        for setting in ("rare2", "rare10"):
            data = study[setting]
            summary = data["cells"][cell]["summary"]
            vs = (
                {}
                if cell == WINNER
                else next(p for p in data["paired_more"] if p["baseline"] == WINNER)["cells"][cell]
            )
            want += [
                shown(summary["solved/planted_rare"], 1),
                shown(vs.get("solved/planted_rare"), 1, signed=True),
                shown(summary["pass@1/planted_common"], 100),
                shown(vs.get("pass@1/planted_common"), 100, signed=True),
            ]
        assert row == want, cell


def test_nothing_dominates_annealed_pkpo_and_three_rivals_keep_no_more_than_grpo(study):
    for setting, data in study.items():
        cells = data["pareto"]["cells"]
        assert cells[WINNER]["on_frontier"] and not cells[WINNER]["dominated_by"], setting
        rare = {c: v["summary"]["solved/planted_rare"]["mean"] for c, v in data["cells"].items()}
        for rival in ("simko@steps_per_generation=1", "simko@mix=0.1", "flowrl", "flowrl@beta=5"):
            assert rare[rival] <= 1.5, (setting, rival)
        for rival in ("apo@steps_per_generation=1", "apo@beta=0.5"):
            assert rare[rival] <= 1.5, (setting, rival)
        assert rare[WINNER] > 30


def test_the_summaries_follow_from_the_per_run_values(study):
    """Each cell's mean and interval of the table's two metrics, recomputed from its per-run metrics (the study's
    pooling over build means), and each paired difference's mean from the per-run differences."""
    for setting, data in study.items():
        for cell, entry in data["cells"].items():
            assert len(entry["per_seed"]) == 6 and not entry["failed"], (setting, cell)
            redone = _summary(entry["per_seed"])
            for key in ("solved/planted_rare", "pass@1/planted_common"):
                assert redone[key]["mean"] == pytest.approx(entry["summary"][key]["mean"], abs=1e-12)
                if entry["summary"][key].get("ci") is not None:
                    assert redone[key]["ci"] == pytest.approx(entry["summary"][key]["ci"], abs=1e-9)
        vs = next(p for p in data["paired_more"] if p["baseline"] == WINNER)["cells"]
        for cell, metrics in vs.items():
            if cell == WINNER:
                continue
            diff = metrics["solved/planted_rare"]
            runs = data["cells"][cell]["per_seed"]
            base = data["cells"][WINNER]["per_seed"]
            want = [runs[r]["solved/planted_rare"] - base[r]["solved/planted_rare"] for r in diff["seeds"]]
            assert diff["values"] == pytest.approx(want) and diff["mean"] == pytest.approx(
                sum(want) / len(want)
            )


def test_the_confirmation_archive_rebuilds_its_table_and_every_run_used_canonical_kernels(confirm):
    rows = page_rows(CONFIRM_HEADER)
    assert set(rows) == set(confirm["rare2"]["cells"]) and len(rows) == 3
    for cell, row in rows.items():
        want = []
        for setting in ("rare2", "rare10"):
            data = confirm[setting]
            summary, vs = data["cells"][cell]["summary"], data["paired"]["cells"][cell]
            assert data["paired"]["baseline"] == WINNER
            for key, scale in (("solved/planted_rare", 1), ("pass@1/planted_common", 100)):
                want += [
                    shown(summary[key], scale),
                    "—" if cell == WINNER else shown(vs[key], scale, signed=True),
                ]
        assert row == want, cell
    for setting, data in confirm.items():
        assert [m["machine"]["kernel_mode"] for m in data["run_machines"]] == ["canonical"], setting
        for cell, entry in data["cells"].items():
            assert len(entry["per_seed"]) == 9 and not entry["failed"], (setting, cell)
            assert {s.split("/")[1] for s in entry["per_seed"]} == {"2", "3", "4"}
        # What the page says: all three on the frontier, none dominated; each anchor pays common pass@1 (CI < 0).
        for cell, point in data["pareto"]["cells"].items():
            assert point["on_frontier"] and not point["dominated_by"], (setting, cell)
            if cell != WINNER:
                assert data["paired"]["cells"][cell]["pass@1/planted_common"]["ci"][1] < 0, (setting, cell)
