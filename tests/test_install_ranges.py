"""pyproject.toml declares ranges and constraints/ holds the tested versions: every lock lies inside the ranges
(the resolution from the package index without the locks is `make ranges`, which needs the network)."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "constraints"))
from resolve import ENVIRONMENTS, lock_outside_ranges, read_lock  # noqa: E402

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


@pytest.mark.parametrize("lock", sorted(ENVIRONMENTS))
def test_each_lock_lies_inside_the_ranges(lock):
    requirements = [Requirement(r) for r in PROJECT["dependencies"]]
    for extra in ENVIRONMENTS[lock].split(","):
        requirements += [Requirement(r) for r in PROJECT["optional-dependencies"][extra]]
    pins = read_lock(ROOT / "constraints" / lock)
    assert lock_outside_ranges(pins, requirements) == []
    assert {"torch", "numpy", "math-verify"} <= set(pins)


def test_a_version_outside_a_range_is_reported():
    pins = {"trl": __import__("packaging.version").version.Version("1.17.0")}
    assert lock_outside_ranges(pins, [Requirement("trl>=1.16,<1.17")]) == ["trl 1.17.0 not in <1.17,>=1.16"]


def test_the_core_and_engine_dependencies_are_ranges_and_the_license_an_spdx_string():
    assert PROJECT["license"] == "Apache-2.0"
    for text in PROJECT["dependencies"] + PROJECT["optional-dependencies"]["trl"]:
        assert "==" not in text, text
