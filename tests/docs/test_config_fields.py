"""Every field of every config class has its help, and the API pages show it (docs/_ext/config_fields.py).

A config class is a dataclass of sagerl whose name ends in ``Config``, ``Settings`` or ``Params`` (and is not
one of ``NOT_USER_CONFIG``'s, each listed with its reason). Adding a field without help fails here, with the
line to write:

- a field declared with ``field(...)``, as in ``SAGEConfig``: ``metadata={"help": "..."}`` (what TRL's
  ``HfArgumentParser`` and ``--help`` print), and ``"metavar": "nats"`` when it has a unit;
- a plain field, as in ``RunSettings``: a docstring on the line under it (``\"\"\"...\"\"\"``).
"""

from __future__ import annotations

import sys

import pytest

from tests.docs.blocks import ROOT

sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import config_fields as cf  # noqa: E402

CLASSES = cf.config_classes()


def test_the_config_classes_are_found():
    assert {
        "sagerl.train.config.SAGEConfig",
        "sagerl.train.run.RunSettings",
        "sagerl.integrations.verl.config.SAGEPolicyLossConfig",
        "sagerl.objective.registry.GuideParams",
        "sagerl.study.spec.EvalSettings",
    } <= set(CLASSES)
    assert not set(CLASSES) & set(cf.NOT_USER_CONFIG)


@pytest.mark.parametrize("path", CLASSES)
def test_every_field_has_help(path):
    fields = cf.config_fields(path)
    assert fields, f"{path}: no fields found"
    missing = [f.name for f in fields if not f.help]
    assert not missing, (
        f"{path}: no help for {missing}. Give each one, as the class's other fields have it: "
        'field(default=..., metadata={"help": "..."}) or a """docstring""" on the line under the field. '
        "The API page shows it in the class's field table."
    )


def test_sage_config_help_is_what_the_command_line_shows():
    """TRL's HfArgumentParser (``trl grpo --help``, a user's own script) prints the same help and unit, and
    accepts the metadata (a key argparse does not know, such as "unit", would raise here)."""
    from transformers import HfArgumentParser

    from sagerl.train import SAGEConfig

    parser = HfArgumentParser(SAGEConfig)
    actions = {a.dest: a for a in parser._actions}
    fields = cf.config_fields("sagerl.train.config.SAGEConfig")
    assert len(fields) >= 39
    for f in fields:
        assert " ".join(actions[f.name].help.split()) == f.help, f.name
        assert (actions[f.name].metavar or "") == f.unit, f.name
    assert {f.name: f.unit for f in fields}["tau"] == "nats"


def test_the_table_shows_type_default_unit_and_help():
    table = cf.fields_table("sagerl.train.config.SAGEConfig").splitlines()
    assert table[0] == "| Field | Type | Default | Unit | Description |"
    row = next(line for line in table if line.startswith("| `tau` "))
    assert row == "| `tau` | `float` | `1.2` | nats | Branch guide entropy threshold τ. |"
    optional = next(line for line in table if line.startswith("| `teacher_model` "))
    assert "| `str | None` | `None` |" in optional  # a pipe inside a code span stays as it is


def test_a_field_without_help_is_found(tmp_path, monkeypatch):
    """Read from the source when the class does not import (here: a module outside the package)."""
    package = tmp_path / "sagerl" / "extra"
    package.mkdir(parents=True)
    (package / "knobs.py").write_text(
        "from dataclasses import dataclass, field\n\n"
        "@dataclass\nclass KnobConfig:\n"
        '    depth: int = 3\n    """How deep, in layers."""\n'
        "    width: int = 8\n"
        '    rate: float = field(default=0.5, metadata={"help": "How fast.", "metavar": "1/s"})\n'
    )
    monkeypatch.setattr(cf, "ROOT", tmp_path)
    assert cf.config_classes() == ["sagerl.extra.knobs.KnobConfig"]
    fields = cf.config_fields("sagerl.extra.knobs.KnobConfig")
    assert [(f.name, f.default, f.unit, f.help) for f in fields] == [
        ("depth", "3", "", "How deep, in layers."),
        ("width", "8", "", ""),
        ("rate", "0.5", "1/s", "How fast."),
    ]
