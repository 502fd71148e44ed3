"""Every test the fault registry names exists, so a renamed test cannot silently leave its class empty."""

from __future__ import annotations

import re
from pathlib import Path

from .registry import FAULT_CLASSES, all_test_ids, classes_of

ROOT = Path(__file__).resolve().parents[2]


def test_every_registered_test_exists() -> None:
    for test_id in all_test_ids():
        path, _, function = test_id.partition("::")
        source = (ROOT / path).read_text(encoding="utf-8")
        assert not function or re.search(rf"^def {re.escape(function)}\(", source, re.MULTILINE), test_id


def test_every_class_has_tests_and_a_behaviour() -> None:
    names = [c.name for c in FAULT_CLASSES]
    assert len(names) == len(set(names))
    for fault in FAULT_CLASSES:
        assert fault.tests and fault.behaviour and "|" not in fault.name + fault.behaviour


def test_node_ids_map_to_their_classes() -> None:
    [jsonl] = classes_of("tests/test_tasks.py::test_not_utf8")
    assert jsonl.name.startswith("malformed JSONL")
    assert {c.name for c in classes_of("tests/objective/test_losses.py::test_dapo_helpers")} == {
        "NaN or inf in logits or rewards",
        "equal-reward groups",
        "truncated completions",
    }
    assert classes_of("tests/faults/test_disk_full.py::test_atomic_write_keeps_the_old_file")
    assert classes_of("tests/test_grading.py::test_extract_boxed[\\boxed 7.-7]")
    assert not classes_of("tests/test_grading.py::test_extract_boxed_is_linear_on_degenerate_text")
