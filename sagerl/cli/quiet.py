"""Third-party progress bars off: each sagerl stage shows one display of its own (:mod:`sagerl.progress`).

transformers draws "Loading weights" and "Writing model shards" bars on every model load and checkpoint,
huggingface_hub and datasets theirs on downloads and ``map``; next to sagerl's bar they garble the
terminal. The CLI and the demo call :func:`quiet_third_party_progress` once at start-up. An environment
variable the user set already (``HF_HUB_DISABLE_PROGRESS_BARS=0``) wins.
"""

from __future__ import annotations

import os
import sys

PROGRESS_VARIABLES = ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS")
"""Read by huggingface_hub (and through it transformers) and by datasets when they are imported."""


def quiet_third_party_progress() -> None:
    """Turn off the progress bars of transformers, huggingface_hub and datasets in this process (and in
    the processes it starts), unless the user's environment asks for them."""
    for name in PROGRESS_VARIABLES:
        os.environ.setdefault(name, "1")
    if _is_true(os.environ["HF_HUB_DISABLE_PROGRESS_BARS"]):
        if "huggingface_hub" in sys.modules:  # imported before: its constants are read already
            from huggingface_hub.utils import disable_progress_bars

            disable_progress_bars()
        if "transformers" in sys.modules:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
    if _is_true(os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"]) and "datasets" in sys.modules:
        from datasets.utils import disable_progress_bars as disable_datasets_bars

        disable_datasets_bars()


def _is_true(value: str) -> bool:
    return value.strip().upper() in {"1", "ON", "YES", "TRUE"}
