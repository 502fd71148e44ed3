"""Presets: one YAML file per row of the SAGE paper, shipped in the package (``sagerl/train/presets``).

A preset is ``base.yaml`` overlaid with its own file; both hold :class:`~sagerl.train.SAGEConfig` fields,
plus a one-line ``description``.
"""

from __future__ import annotations

import difflib
from importlib import resources

import yaml

from sagerl.errors import ConfigError

_PACKAGE = "sagerl.train"
_FOLDER = "presets"
_BASE = "base"


def _read(name: str) -> dict:
    path = resources.files(_PACKAGE).joinpath(_FOLDER, f"{name}.yaml")
    with resources.as_file(path) as file:
        data = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"preset file {name}.yaml must hold a mapping of config keys")
    return data


def list_presets() -> dict[str, str]:
    """Preset names and their one-line descriptions, in the paper's order of rows."""
    folder = resources.files(_PACKAGE).joinpath(_FOLDER)
    names = sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))
    names = [n for n in names if n != _BASE]
    order = [
        "grpo",
        "grpo-nokl",
        "grpo-fkl",
        "grpo+random",
        "grpo+token",
        "grpo+branch",
        "grpo+branch_token",
        "bnpo",
        "bnpo+branch",
        "dapo",
        "dapo+branch",
    ]
    names.sort(key=lambda n: (order.index(n) if n in order else len(order), n))
    return {n: _read(n).get("description", "") for n in names}


def load_preset(name: str) -> dict:
    """The config keys of preset ``name`` (base values overlaid with the preset's), without ``description``.

    Raises:
        ConfigError: unknown preset (the message lists the known ones and the closest match).
    """
    known = list_presets()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"unknown preset {name!r}{hint}; known presets: {', '.join(known)}")
    values = _read(_BASE)
    values.update(_read(name))
    values.pop("description", None)
    return values
