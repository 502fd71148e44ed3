"""``pip install 'sagerl[verl]'`` beside verl pulls nothing that breaks verl (this is .venv-verl, built so)."""

import subprocess
import sys
from importlib.metadata import entry_points, requires, version

from packaging.requirements import Requirement
from packaging.version import Version


def test_no_broken_requirements():
    done = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_verl_extra_keeps_verls_transformers_and_antlr():
    extra = [Requirement(r) for r in requires("sagerl") if 'extra == "verl"' in r]
    assert {r.name for r in extra} == {"verl", "math-verify"}
    assert all(not r.name.startswith(("transformers", "trl", "accelerate")) for r in extra)
    assert Version(version("transformers")) < Version("5.11")  # verl 0.9.1 needs < 5.11
    assert version("antlr4-python3-runtime").startswith("4.9.")  # hydra/omegaconf's runtime


def test_plugin_entry_point_is_declared():
    (plugin,) = [ep for ep in entry_points(group="verl.plugins") if ep.name == "sage"]
    assert plugin.value == "sagerl.integrations.verl"
