"""Suite-wide fixtures and hooks.

Fixtures: every test runs offline with the shared data sets (``SAGERL_DATA_DIR``, default
``../shared/data``), and ``tiny_model`` is a 2-layer random Llama saved once per session.

Hooks: after any run that includes fault-suite tests, the fault table. The table has one row per fault
class of tests/faults/registry.py: the class, the behaviour sagerl guarantees, how many of its tests
passed, and pass/FAIL. ``make test`` prints it after the whole suite; ``python -m tests.faults`` runs only
those tests.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from faults.registry import FAULT_CLASSES, classes_of  # tests/ is on sys.path (pytest rootdir import)

from sagerl.allocator import keep_freed_memory

DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data"
# dtype auto is float32 in the tests (and the processes they start), whatever the CPU: their numbers must not
# depend on whether the machine has bfloat16 matrix units (sagerl.precision). Tests of bf16 ask for it.
os.environ["SAGERL_DTYPE"] = "float32"
# ``make test`` runs the suite on both cores (pytest-xdist, ``-n 2``): each worker keeps to one thread, since two
# processes of two threads each on 2 cores slow each other about tenfold (spinning OpenMP threads). Set before
# any test imports torch; the processes the tests start inherit it.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
    if "torch" in sys.modules:  # a plugin imported it first
        sys.modules["torch"].set_num_threads(1)
# glibc's malloc as the sagerl command, make demo and study workers set it (sagerl.allocator): the tests run the
# code in the allocator it runs in
keep_freed_memory()


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("SAGERL_DATA_DIR", os.environ.get("SAGERL_DATA_DIR", str(DATA_DIR)))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A 2-layer random Llama with the embedded model's tokenizer, saved once per session."""
    from sagerl.models import save_tiny_random_model

    return save_tiny_random_model(tmp_path_factory.mktemp("tiny") / "model", seed=0, initializer_range=1.0)


_outcomes: dict[str, str] = {}  # node id -> "passed", "failed" or "skipped"


def pytest_runtest_logreport(report) -> None:
    if not classes_of(report.nodeid):
        return
    if report.failed:
        _outcomes[report.nodeid] = "failed"
    elif report.skipped:
        _outcomes.setdefault(report.nodeid, "skipped")
    elif report.when == "call":
        _outcomes.setdefault(report.nodeid, "passed")


def fault_table() -> list[str]:
    """The fault table as Markdown lines (docs/faults.md shows the same table)."""
    lines = ["| fault class | behaviour | tests passed | result |", "|---|---|---|---|"]
    for fault in FAULT_CLASSES:
        ran = [_outcomes[n] for n in _outcomes if fault in classes_of(n)]
        passed, failed, skipped = (ran.count(o) for o in ("passed", "failed", "skipped"))
        result = "FAIL" if failed else ("pass" if passed else "not run")
        count = f"{passed}/{len(ran)}" + (f" ({skipped} skipped)" if skipped else "")
        lines.append(f"| {fault.name} | {fault.behaviour} | {count} | {result} |")
    return lines


def pytest_terminal_summary(terminalreporter) -> None:
    if not _outcomes:
        return
    terminalreporter.write_sep("=", "fault suite (python -m tests.faults)")
    for line in fault_table():
        terminalreporter.write_line(line)
    results = [line.rsplit("|", 2)[1].strip() for line in fault_table()[2:]]
    tests = len(_outcomes)
    terminalreporter.write_line(
        f"{len(results)} fault classes: {results.count('pass')} pass, {results.count('FAIL')} fail, "
        f"{results.count('not run')} not run; {tests} tests"
    )
