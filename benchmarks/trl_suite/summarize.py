"""Print the counts of the TRL-suite runs (run.sh) and every test whose outcome differs from the control.

Usage::

    python benchmarks/trl_suite/summarize.py [--commit SHA] WORK_DIR [WORK_DIR ...]

Reads ``WORK_DIR/control.xml`` and ``WORK_DIR/sage.xml`` (pytest's JUnit XML). Several work directories
(for example the default run and a ``--full --k ...`` run of the tool tests) are merged, a later
directory's outcome replacing an earlier one's for the same test. For each test that fails with
SAGETrainer but not with TRL's trainer, prints the first line of the failure (a refusal is a
``sagerl.errors.ConfigError`` whose message names the option and the reason).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import xml.etree.ElementTree as ET
from pathlib import Path


def outcomes(path: Path) -> dict[str, tuple[str, str]]:
    """test id -> (passed | failed | skipped | xfailed..., first line of the message)."""
    result = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}"
        status, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                status, message = "failed", (child.get("message") or "").strip()
            elif child.tag == "skipped":
                kind = child.get("type", "")
                status = "xfailed" if "xfail" in kind else "skipped"
                message = (child.get("message") or "").strip()
        result[name] = (status, message.splitlines()[0] if message else "")
    return result


def counts(results: dict[str, tuple[str, str]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for status, _ in results.values():
        out[status] = out.get(status, 0) + 1
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path, nargs="+")
    parser.add_argument("--commit", default="unknown")
    args = parser.parse_args()
    versions = {p: importlib.metadata.version(p) for p in ("trl", "transformers", "torch", "peft")}
    print(
        f"TRL tests at commit {args.commit}; installed " + ", ".join(f"{k} {v}" for k, v in versions.items())
    )
    runs: dict[str, dict[str, tuple[str, str]]] = {}
    for work in args.work:
        for variant in ("control", "sage"):
            if (work / f"{variant}.xml").exists():
                runs.setdefault(variant, {}).update(outcomes(work / f"{variant}.xml"))
    for variant, results in runs.items():
        c = counts(results)
        line = ", ".join(f"{c.get(k, 0)} {k}" for k in ("passed", "failed", "skipped", "xfailed"))
        print(f"{variant:8s} ({len(results)} tests): {line}")
    if len(runs) == 2:
        control, sage = runs["control"], runs["sage"]
        print("control failures:")
        for name, (status, message) in sorted(control.items()):
            if status == "failed":
                print(f"  {name}: {message[:200]}")
        print("SAGETrainer outcome different from the control:")
        differ = [
            (name, control.get(name, ("absent", "")), sage.get(name, ("absent", "")))
            for name in sorted(set(control) | set(sage))
        ]
        differ = [(name, a, b) for name, a, b in differ if a[0] != b[0]]
        for name, a, b in differ:
            print(f"  {name}: control {a[0]}, SAGETrainer {b[0]}: {b[1][:200]}")
        if not differ:
            print("  none")


if __name__ == "__main__":
    main()
