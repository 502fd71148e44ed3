"""Training: the TRL adapter (:class:`SAGETrainer`, :class:`SAGEConfig`), presets and run folders.

Importing this package imports TRL; :mod:`sagerl.objective` does not.
"""

from sagerl.train.config import SAGEConfig
from sagerl.train.presets import list_presets, load_preset
from sagerl.train.rewards import CorrectnessReward, FormatReward
from sagerl.train.trainer import SAGETrainer

__all__ = ["CorrectnessReward", "FormatReward", "SAGEConfig", "SAGETrainer", "list_presets", "load_preset"]
