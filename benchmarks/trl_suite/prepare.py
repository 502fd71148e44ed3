"""Copy TRL's GRPOTrainer tests into two runnable trees: the control (TRL's classes) and SAGETrainer.

Usage (run by run.sh)::

    python benchmarks/trl_suite/prepare.py TRL_ROOT ASSETS_DIR OUT_DIR

Writes ``OUT_DIR/control`` and ``OUT_DIR/sage``, each ``tests/`` with TRL's ``test_grpo_trainer.py``,
``testing_utils.py``, ``testing_constants.py``, ``conftest.py`` and ``__init__.py``, and an empty
``pytest.ini`` that makes the tree its own pytest root. The edits, the same in both trees except the first:

- ``sage`` only: ``from trl import GRPOConfig, GRPOTrainer`` imports ``sagerl.train.SAGEConfig`` and
  ``SAGETrainer`` under those names, so every test builds the adapter.
- every hub id ``"trl-internal-testing/..."`` becomes the local copy under ASSETS_DIR (build_assets.py);
- ``testing_utils.py``: names that the installed TRL's ``trl.import_utils`` lacks (the checkout may be older
  or newer than the installed TRL) are defined locally from ``importlib.util.find_spec``.

Nothing else in TRL's tests is changed. Prints the edits it made.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

FILES = ["__init__.py", "conftest.py", "testing_constants.py", "testing_utils.py", "test_grpo_trainer.py"]
TRL_IMPORT = "from trl import GRPOConfig, GRPOTrainer\n"
SAGE_IMPORT = "from sagerl.train import SAGEConfig as GRPOConfig, SAGETrainer as GRPOTrainer\n"


def _patch_import_utils(text: str) -> tuple[str, list[str]]:
    """Define locally the ``is_*_available`` names ``trl.import_utils`` does not have."""
    import importlib

    import_utils = importlib.import_module("trl.import_utils")

    block = re.search(r"from trl\.import_utils import \(\n(.*?)\)\n", text, re.S)
    if block is None:
        return text, []
    names = [n.strip().rstrip(",") for n in block.group(1).splitlines() if n.strip()]
    missing = [n for n in names if not hasattr(import_utils, n)]
    if not missing:
        return text, []
    kept = "".join(f"    {n},\n" for n in names if n not in missing)
    defs = "".join(
        f"\n\ndef {n}():\n    import importlib.util\n\n"
        f"    return importlib.util.find_spec({n[3:-10]!r}) is not None\n"
        for n in missing
    )
    text = text.replace(block.group(0), f"from trl.import_utils import (\n{kept})\n{defs}\n")
    return text, missing


def prepare(trl_root: Path, assets: Path, out: Path) -> None:
    for variant in ("control", "sage"):
        tests = out / variant / "tests"
        if tests.exists():
            shutil.rmtree(tests)
        tests.mkdir(parents=True)
        (out / variant / "pytest.ini").write_text("[pytest]\n")
        for name in FILES:
            text = (trl_root / "tests" / name).read_text()
            edits = []
            if name == "test_grpo_trainer.py":
                hub_ids = text.count('"trl-internal-testing/')
                text = text.replace('"trl-internal-testing/', f'"{assets}/trl-internal-testing/')
                edits.append(f"{hub_ids} hub ids -> {assets}")
                if variant == "sage":
                    if TRL_IMPORT not in text:
                        raise SystemExit(f"{name}: {TRL_IMPORT.strip()!r} not found; adapt prepare.py")
                    text = text.replace(TRL_IMPORT, SAGE_IMPORT)
                    edits.append("GRPOTrainer/GRPOConfig -> SAGETrainer/SAGEConfig")
            if name == "testing_utils.py":
                text, missing = _patch_import_utils(text)
                if missing:
                    edits.append(f"defined locally: {', '.join(missing)}")
            (tests / name).write_text(text)
            for edit in edits:
                print(f"[prepare] {variant}/tests/{name}: {edit}")


def main() -> None:
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    trl_root, assets, out = (Path(a).resolve() for a in sys.argv[1:])
    prepare(trl_root, assets, out)


if __name__ == "__main__":
    main()
