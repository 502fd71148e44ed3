"""Schedules for the guides' parameters (γ of the branch guide, α of the token guide, σ of the Gaussian one).

A schedule maps the optimizer step (``trainer.state.global_step``: it advances once per optimizer step,
never once per micro-batch) to a value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SCHEDULES = ("constant", "cosine")


@dataclass(frozen=True)
class ConstantSchedule:
    """The same value at every step."""

    value: float

    def __call__(self, step: int) -> float:
        return self.value


@dataclass(frozen=True)
class CosineRestartSchedule:
    """Cosine decay from an upper to a lower bound, restarted ``num_restarts`` times.

    Training is split into ``num_restarts + 1`` equal cycles. In cycle k (k = 0, 1, ...) the value goes
    from ``upper · decay^k`` down to ``lower`` along half a cosine:
    ``lower + (upper · decay^k − lower) · (1 + cos(π · f)) / 2`` with f ∈ [0, 1) the position in the cycle.
    Steps past ``total_steps`` stay at the end of the last cycle.

    Raises:
        ValueError: ``total_steps < 1``, ``num_restarts < 0`` or ``decay`` outside (0, 1].
    """

    upper: float
    lower: float
    total_steps: int
    num_restarts: int = 0
    decay: float = 0.9

    def __post_init__(self) -> None:
        if self.total_steps < 1 or self.num_restarts < 0 or not 0 < self.decay <= 1:
            raise ValueError(
                f"cosine schedule needs total_steps >= 1, num_restarts >= 0 and 0 < decay <= 1, got "
                f"total_steps={self.total_steps}, num_restarts={self.num_restarts}, decay={self.decay}"
            )

    def __call__(self, step: int) -> float:
        cycles = self.num_restarts + 1
        cycle_len = self.total_steps / cycles
        step = min(max(step, 0), self.total_steps)
        k = min(int(step // cycle_len), cycles - 1)
        frac = min((step - k * cycle_len) / cycle_len, 1.0)
        top = self.upper * self.decay**k
        return self.lower + (top - self.lower) * 0.5 * (1.0 + math.cos(math.pi * frac))


def make_schedule(
    kind: str,
    value: float,
    *,
    total_steps: int = 1,
    lower: float = 0.0,
    num_restarts: int = 0,
    decay: float = 0.9,
) -> ConstantSchedule | CosineRestartSchedule:
    """Build a schedule by name: ``"constant"`` (always ``value``) or ``"cosine"`` (``value`` is the upper bound).

    Raises:
        ValueError: unknown kind.
    """
    if kind == "constant":
        return ConstantSchedule(value)
    if kind == "cosine":
        return CosineRestartSchedule(value, lower, total_steps, num_restarts, decay)
    raise ValueError(f"unknown schedule {kind!r}; expected one of {SCHEDULES}")
