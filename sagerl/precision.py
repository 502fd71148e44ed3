"""Compute precision: the ``dtype`` setting of ``sagerl train``, ``sagerl eval`` and study files.

``float32`` computes everything in float32. ``bfloat16`` trains with bfloat16 autocast over float32 master
weights and samples with bfloat16 weights. ``auto`` (the default) picks one for the machine.
"""

from __future__ import annotations

from sagerl.errors import ConfigError

DTYPES = ("auto", "float32", "bfloat16")
"""The values of a ``dtype`` setting."""


def check_dtype(value: object, where: str = "dtype") -> str:
    """``value`` if it is one of :data:`DTYPES`.

    Raises:
        ConfigError: one line naming ``where``, the value and the allowed ones.
    """
    if value not in DTYPES:
        raise ConfigError(f"{where}={value!r}: expected one of {', '.join(DTYPES)}")
    return str(value)
