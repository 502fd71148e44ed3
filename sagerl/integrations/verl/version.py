"""The verl versions the integration was tested with, and the check that refuses the others."""

from __future__ import annotations

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from sagerl.errors import ConfigError

TESTED_VERL = ">=0.9.1,<0.10"
"""Versions accepted: the 0.9 series from 0.9.1 (CI runs 0.9.1 and checks the internals the plugin relies on,
tests/integrations/verl/test_verl_contract.py)."""


def check_verl_version(version: str | None = None) -> str:
    """Return verl's version, or raise when it is outside :data:`TESTED_VERL`.

    Args:
        version: the version to check (default: the installed ``verl.__version__``).

    Raises:
        ConfigError: one line naming the version found and the tested range.
    """
    if version is None:
        import verl

        version = verl.__version__
    try:
        ok = Version(version) in SpecifierSet(TESTED_VERL)
    except InvalidVersion:
        ok = False
    if not ok:
        raise ConfigError(
            f"sagerl's verl integration is tested with verl {TESTED_VERL}, found verl {version}: "
            f"install a tested verl ('pip install \"sagerl[verl]\"')"
        )
    return version
