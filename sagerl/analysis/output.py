"""The analysis output folder: ``analysis.json`` (every number, one section per analysis), written atomically.

Several commands may write into one folder (``analyze support`` then ``analyze patterns``, or ``analyze
report``); each replaces only its own section, so the file keeps every number computed there.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from sagerl.errors import SagerlError
from sagerl.eval.samples import write_json_atomic

ANALYSIS_FILE = "analysis.json"


def jsonable(obj: Any) -> Any:
    """``obj`` with numpy scalars and arrays turned into Python numbers and lists, NaN/inf into None."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating | float):
        value = float(obj)
        return value if math.isfinite(value) else None
    if isinstance(obj, Path):
        return str(obj)
    return obj


def update_analysis_json(out: str | Path, section: str, data: Any) -> Path:
    """Set ``section`` of ``out/analysis.json`` to ``data`` (other sections kept); returns the path.

    Raises:
        SagerlError: an existing ``analysis.json`` is not a JSON object.
    """
    path = Path(out) / ANALYSIS_FILE
    current: dict[str, Any] = {}
    if path.is_file():
        try:
            current = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise SagerlError(f"{path}: not valid JSON ({exc}); remove it or use another --out") from exc
        if not isinstance(current, dict):
            raise SagerlError(f"{path}: not a JSON object; remove it or use another --out")
    current[section] = jsonable(data)
    write_json_atomic(path, current)
    return path
