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
        "passk",
        "pkpo",
        "w-reinforce",
        "psr",
        "nsr",
        "unlikely",
        "clip-cov",
        "kl-cov",
        "entropy-adv",
        "rs-grpo",
        "pkpo-anneal",
        "passk-two-stage",
        "passk-mix",
        "darling",
        "ucb-mean",
        "ucb-con",
        "outcome-batch",
        "maxpo",
        "maxpo-anneal",
        "simko",
        "flowrl",
        "apo",
    ]
    names.sort(key=lambda n: (order.index(n) if n in order else len(order), n))
    return {n: _read(n).get("description", "") for n in names}


GUIDE_SUFFIXES = ("branch", "token", "random", "branch_token")
"""Guides a preset name can end in (``METHOD+GUIDE``): the guide keys of the ``grpo+GUIDE`` preset."""


def composed_parts(name: str) -> tuple[str, str] | None:
    """(method preset, guide) when ``name`` is ``METHOD+GUIDE`` for a preset METHOD without a guide file of its
    own, else None: ``w-reinforce+branch`` is the w-reinforce preset with the grpo+branch preset's guide."""
    method, plus, guide = name.rpartition("+")
    if not plus or guide not in GUIDE_SUFFIXES or method not in list_presets():
        return None
    return method, guide


def load_preset(name: str) -> dict:
    """The config keys of preset ``name`` (base values overlaid with the preset's), without ``description``.

    ``METHOD+GUIDE`` (:func:`composed_parts`) composes a method preset with a guide: every exploration method
    acts on the advantage or the policy term and the guide on the KL anchor, so ``w-reinforce+branch`` is the
    w-reinforce preset plus the keys of ``grpo+branch`` (``guide: branch``).

    Raises:
        ConfigError: unknown preset (the message lists the known ones and the closest match), or a composed
            preset whose method has no KL anchor to shape (β = 0) or a guide of its own.
    """
    known = list_presets()
    parts = None if name in known else composed_parts(name)
    if parts is not None:
        method, guide = parts
        values = load_preset(method)
        if values.get("guide", "none") != "none" or not values.get("beta"):
            raise ConfigError(
                f"preset {name!r}: {method!r} has {'a guide' if values.get('guide', 'none') != 'none' else 'no KL anchor (beta = 0)'}"
                f", so the {guide} guide cannot shape its anchor"
            )
        guide_keys = _read(f"grpo+{guide}")
        guide_keys.pop("description", None)
        values.update(guide_keys)
        return values
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(
            f"unknown preset {name!r}{hint}; known presets: {', '.join(known)}; or METHOD+GUIDE with a guide "
            f"of {', '.join(GUIDE_SUFFIXES)}"
        )
    values = _read(_BASE)
    values.update(_read(name))
    values.pop("description", None)
    return values
