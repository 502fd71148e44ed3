"""The third-party warnings the CLI silences: known harmless ones, each matched by its message.

Every other warning still shows. A filter names the warning's category and the start of its message
(a regular expression, as :func:`warnings.filterwarnings` takes it), so a new warning of the same
library is not hidden with it.
"""

from __future__ import annotations

import warnings

HARMLESS_WARNINGS: tuple[tuple[type[Warning], str], ...] = (
    # transformers 5 renamed gradient checkpointing; TRL 1.16 still reads and sets the old names.
    (FutureWarning, r"`gradient_checkpointing` is deprecated and will be removed in v6"),
    (FutureWarning, r"`is_gradient_checkpointing` is deprecated and will be removed in v6"),
    # TRL asks the DataLoader for pinned memory; on a CPU-only machine torch says it cannot pin.
    (UserWarning, r"'pin_memory' argument is set as true but no accelerator is found"),
)


def silence_harmless_warnings() -> None:
    """Install one ``ignore`` filter per entry of :data:`HARMLESS_WARNINGS` (in this process)."""
    for category, message in HARMLESS_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
