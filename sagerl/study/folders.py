"""The study folder: where every run and status file of a study lives, and reading a cell's status.

Folder layout under the study folder ``OUT``::

    OUT/study.yaml                      the study as run (resolved cells)
    OUT/reference/                      sagerl eval of the model before any training
    OUT/reference/<build>/              the same, per reference build (a study with builds)
    OUT/cells/<cell>/seed-<s>/train/    sagerl train run folder (config.yaml, metrics.jsonl, model/)
    OUT/cells/<cell>/seed-<s>/eval/     sagerl eval run folder of train/model
    OUT/cells/<cell>/seed-<s>/cell.json status ("ok" | "failed" | "running"), error, times (all calls')
    OUT/cells/<cell>/<build>/seed-<s>/  the same, per reference build (a study with builds)
    OUT/study.json, OUT/table.md, OUT/*.png   the aggregate (:mod:`sagerl.study.table`)

:mod:`sagerl.study.runner` writes these folders and :mod:`sagerl.study.table` reads them; both take the
names from here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sagerl.study.spec import Cell, Study

CELL_FILE = "cell.json"
"""A cell's status file, in ``OUT/cells/<cell>/seed-<s>/``."""
REFERENCE = "reference"
"""The folder of the reference evaluation (the model before training), in ``OUT``."""


def reference_folder(build: str | None) -> str:
    """Relative folder of the reference evaluation: ``reference``, or ``reference/<build>``."""
    return REFERENCE if build is None else f"{REFERENCE}/{build}"


def study_folder(study: Study, out: str | Path | None) -> Path:
    """``out``, or ``runs/study-<name>``; for a study of a file with ``settings``, that folder of the file's
    name, then the setting: ``runs/study-<file's name>/<setting>``."""
    if study.setting is None:
        return Path(out) if out is not None else Path("runs") / f"study-{study.name}"
    base = study.name.removesuffix(f"-{study.setting}")
    return (Path(out) if out is not None else Path("runs") / f"study-{base}") / study.setting


def read_cell_status(out: Path, cell: Cell) -> dict[str, Any] | None:
    """The cell's ``cell.json``, or None when it has not run (or the file is unreadable)."""
    path = out / cell.folder / CELL_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
