"""Schedules for the guides' parameters (γ of the branch guide, α of the token guide, σ of the Gaussian one).

A schedule maps the optimizer step (``trainer.state.global_step``: it advances once per optimizer step,
never once per micro-batch) to a value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sagerl.objective._checks import COUNT, FINITE, Range, check_number

SCHEDULES = ("constant", "cosine")


@dataclass(frozen=True)
class ConstantSchedule:
    """The same value at every step."""

    value: float

    def __post_init__(self) -> None:
        check_number("value", self.value, FINITE)

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
        ValueError: ``upper`` or ``lower`` not finite, ``total_steps`` not an integer >= 1, ``num_restarts``
            not an integer >= 0, or ``decay`` outside (0, 1].
    """

    upper: float
    lower: float
    total_steps: int
    num_restarts: int = 0
    decay: float = 0.9

    def __post_init__(self) -> None:
        check_number("upper", self.upper, FINITE)
        check_number("lower", self.lower, FINITE)
        check_number("total_steps", self.total_steps, COUNT)
        check_number("num_restarts", self.num_restarts, Range(0, integer=True))
        check_number("decay", self.decay, Range(0.0, 1.0, low_open=True))

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
        ValueError: unknown kind, or a setting out of its range (see the two schedules).
    """
    if kind not in SCHEDULES:
        raise ValueError(f"unknown schedule {kind!r}; expected one of {SCHEDULES}")
    check_number("value", value, FINITE)
    cosine = CosineRestartSchedule(value, lower, total_steps, num_restarts, decay)  # checks every setting
    return ConstantSchedule(value) if kind == "constant" else cosine
