"""Building a cached artefact must not change the random numbers of the run that asked for it.

sagerl builds some models on first use, inside whatever run first needs them: the embedded SmolLM2
conversion (a model built from its config draws random initial weights) and the planted task's tiny models
(trained from scratch with ``transformers.Trainer``, which reseeds every generator, then sampled to measure
them). Without a guard, a training run that builds its teacher model on the way would draw other random
numbers than the same run with the model already cached (found when a fresh clone's study gave one cell
other weights than the same cell run with a warm cache).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def preserved_rng() -> Iterator[None]:
    """Run the body, then restore the global generators of ``random``, NumPy and torch (CPU and every CUDA
    device) to their state before it, whatever the body drew or reseeded (also when it raises)."""
    import numpy as np
    import torch

    python_state = random.getstate()
    numpy_state = np.random.get_state()
    with torch.random.fork_rng():
        try:
            yield
        finally:
            random.setstate(python_state)
            np.random.set_state(numpy_state)
