"""``python -m tests.faults``: run every test of the fault suite (registry.py) and print the fault table.

Run from the repository root; extra arguments go to pytest (``python -m tests.faults -x``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.faults.registry import all_test_ids

ROOT = Path(__file__).resolve().parents[2]

if __name__ == "__main__":
    os.chdir(ROOT)
    os.environ.setdefault("SAGERL_DATA_DIR", str((ROOT.parent / "shared" / "data").resolve()))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(pytest.main(["-q", *all_test_ids(), *sys.argv[1:]]))
