"""Schedules over the optimizer steps: the guides' strength (γ of the branch guide, α of the token guide, σ of
the Gaussian one) and the k of the pass@k advantages (``passk_k``).

A schedule maps the optimizer step (``trainer.state.global_step``: it advances once per optimizer step,
never once per micro-batch) to a value. Four kinds (:data:`SCHEDULES`): constant, cosine (with restarts),
linear, and a step at a given share of the run. :func:`integer_at` reads an integer setting (k) off one.

``total_steps`` is the step at which a schedule reaches its end value, so a trainer passes the last step that
reads it: the last optimizer step (``max_steps − 1``) for a value read at every step (the guide's strength),
the step of the last rollout for a value read at rollout time (the k of pass@k), not ``max_steps``, which no
step reaches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sagerl.objective._checks import COUNT, FINITE, Range, check_number

SCHEDULES = ("constant", "cosine", "linear", "step")
SWITCH = Range(0.0, 1.0, low_open=True)
"""The share of the run at which a step schedule switches."""


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


@dataclass(frozen=True)
class LinearSchedule:
    """From ``start`` at step 0 to ``end`` at ``total_steps``, on a straight line; steps past ``total_steps``
    stay at ``end``.

    Raises:
        ValueError: ``start`` or ``end`` not finite, or ``total_steps`` not an integer >= 1.
    """

    start: float
    end: float
    total_steps: int

    def __post_init__(self) -> None:
        check_number("start", self.start, FINITE)
        check_number("end", self.end, FINITE)
        check_number("total_steps", self.total_steps, COUNT)

    def __call__(self, step: int) -> float:
        frac = min(max(step, 0), self.total_steps) / self.total_steps
        return self.start + (self.end - self.start) * frac


@dataclass(frozen=True)
class StepSchedule:
    """``start`` before step ``switch · total_steps``, ``end`` from it on (Pass@k Training's two stages: pass@k
    training, then pass@1 training).

    Raises:
        ValueError: ``start`` or ``end`` not finite, ``total_steps`` not an integer >= 1, or ``switch`` outside
            (0, 1].
    """

    start: float
    end: float
    total_steps: int
    switch: float = 0.5

    def __post_init__(self) -> None:
        check_number("start", self.start, FINITE)
        check_number("end", self.end, FINITE)
        check_number("total_steps", self.total_steps, COUNT)
        check_number("switch", self.switch, SWITCH)

    def __call__(self, step: int) -> float:
        return self.start if step < self.switch * self.total_steps else self.end


Schedule = ConstantSchedule | CosineRestartSchedule | LinearSchedule | StepSchedule


def make_schedule(
    kind: str,
    value: float,
    *,
    total_steps: int = 1,
    lower: float = 0.0,
    num_restarts: int = 0,
    decay: float = 0.9,
    switch: float = 0.5,
) -> Schedule:
    """Build a schedule by name, from ``value`` (at step 0) to ``lower`` (at step ``total_steps``, the last step
    that reads it; module docstring):

    - ``"constant"``: always ``value``;
    - ``"cosine"``: :class:`CosineRestartSchedule` (``value`` the upper bound; ``num_restarts``, ``decay``);
    - ``"linear"``: :class:`LinearSchedule` from ``value`` to ``lower``;
    - ``"step"``: :class:`StepSchedule`, ``value`` then ``lower`` from ``switch · total_steps`` on.

    ``lower`` may exceed ``value`` (a schedule that rises) for linear, step and cosine without restarts.

    Raises:
        ValueError: unknown kind, or a setting out of its range (see each schedule).
    """
    if kind not in SCHEDULES:
        raise ValueError(f"unknown schedule {kind!r}; expected one of {SCHEDULES}")
    check_number("value", value, FINITE)
    check_number("switch", switch, SWITCH)
    if kind == "linear":
        return LinearSchedule(value, lower, total_steps)
    if kind == "step":
        return StepSchedule(value, lower, total_steps, switch)
    cosine = CosineRestartSchedule(value, lower, total_steps, num_restarts, decay)  # checks every setting
    return ConstantSchedule(value) if kind == "constant" else cosine


def integer_at(schedule: Schedule, step: int) -> int:
    """The schedule's value at ``step`` rounded to the nearest integer (halves up): an integer setting such as
    the k of pass@k follows a real-valued schedule. Between two integer end points the result stays between
    them at every step.

    Raises:
        ValueError: ``step`` not an integer.
    """
    check_number("step", step, Range(integer=True))
    return math.floor(schedule(step) + 0.5)
