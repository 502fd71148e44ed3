"""studies/'s scripts as modules, for their tests (they are run as files, not imported from a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

STUDIES = Path(__file__).resolve().parents[1] / "studies"


def load_study_script(name: str):
    """``studies/<name>.py`` loaded as the module ``name``.

    Raises:
        FileNotFoundError: no such script.
    """
    path = STUDIES / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module
