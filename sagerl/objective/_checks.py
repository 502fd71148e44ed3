"""Shared argument checks and masked reductions for the objective.

Every numeric argument of :mod:`sagerl.objective`'s public functions is checked here, by :func:`check_number`
against a :class:`Range`: a finite number (NaN and ±inf are refused), an integer where the argument counts
something, inside its interval; the error is one line naming the argument, the value and the range. The
engines' configs (``sagerl.train.SAGEConfig``, the study file) check their fields with the same two names.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch


def _bound(value: float) -> str:
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Range:
    """The values a numeric setting accepts: finite numbers (integers when ``integer``) from ``low`` to
    ``high``, each bound included unless its ``*_open`` flag is set. An infinite bound is no bound (the value
    must still be finite). ``str(Range(0, 1, low_open=True))`` is ``"a number in (0, 1]"``."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    integer: bool = False

    def __contains__(self, value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        if self.integer and not isinstance(value, numbers.Integral):
            return False
        if not isinstance(value, numbers.Integral) and not math.isfinite(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return bool(above and below)

    def __str__(self) -> str:
        kind = "an integer" if self.integer else "a number"
        if math.isinf(self.low) and math.isinf(self.high):
            return f"a finite {kind.split()[-1]}"
        left = "(" if self.low_open or math.isinf(self.low) else "["
        right = ")" if self.high_open or math.isinf(self.high) else "]"
        return f"{kind} in {left}{_bound(self.low)}, {_bound(self.high)}{right}"

    def just_outside(self) -> list[float]:
        """Values next to each finite bound but outside the range (the open bound itself; else the next float,
        or the next integer), for tests."""
        out = []
        for bound, is_open, away in (
            (self.low, self.low_open, -math.inf),
            (self.high, self.high_open, math.inf),
        ):
            if math.isinf(bound):
                continue
            if is_open:
                out.append(bound)
            elif self.integer:
                out.append(int(bound) + (1 if away > 0 else -1))
            else:
                out.append(math.nextafter(float(bound), away))
        return out


def check_number(name: str, value: object, allowed: Range, error: type[Exception] = ValueError) -> None:
    """Raise ``error`` (one line: ``name=value must be <allowed>``) unless ``value`` is in ``allowed``."""
    if value not in allowed:
        raise error(f"{name}={value!r} must be {allowed}")


NONNEGATIVE = Range(0.0)
POSITIVE = Range(0.0, low_open=True)
UNIT = Range(0.0, 1.0)
SHARE = Range(0.0, 1.0, low_open=True, high_open=True)
FINITE = Range()
COUNT = Range(1, integer=True)


def as_bool_mask(mask: torch.Tensor, like: torch.Tensor, name: str = "mask") -> torch.Tensor:
    """Return ``mask`` as a bool tensor after checking it has the shape of ``like``.

    Raises:
        ValueError: the shapes differ.
    """
    if mask.shape != like.shape:
        raise ValueError(
            f"{name} has shape {tuple(mask.shape)} but the per-token tensor has {tuple(like.shape)}"
        )
    return mask if mask.dtype == torch.bool else mask != 0


def check_2d(x: torch.Tensor, name: str) -> None:
    """Raise ValueError unless ``x`` is a (B, T) tensor."""
    if x.dim() != 2:
        raise ValueError(f"{name} must be a (B, T) tensor, got shape {tuple(x.shape)}")


def check_same_shape(**tensors: torch.Tensor) -> None:
    """Raise ValueError unless every tensor given has the same shape."""
    shapes = {name: tuple(t.shape) for name, t in tensors.items() if t is not None}
    if len(set(shapes.values())) > 1:
        raise ValueError(f"shape mismatch: {shapes}")


def masked_zero(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``x`` with masked-out entries set to 0, NaN or inf there included (``x * mask`` would keep NaN)."""
    return torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over ``mask``; 0 when the mask is empty. Returns a 0-dim tensor."""
    count = mask.sum()
    return masked_zero(x, mask).sum() / count.clamp(min=1)


def grouped(values: torch.Tensor, group_size: int, name: str = "rewards") -> torch.Tensor:
    """Reshape a flat (N,) tensor to (N / G, G).

    Raises:
        ValueError: not 1-D, ``group_size`` not an integer >= 1, ±inf in ``values``, or N not a multiple of
            ``group_size``.
    """
    if values.dim() != 1:
        raise ValueError(f"{name} must be a flat (N,) tensor, got shape {tuple(values.shape)}")
    check_number("group_size", group_size, COUNT)
    if torch.isinf(values).any():
        raise ValueError(f"{name} holds ±inf (NaN marks an unscorable completion; inf has no meaning here)")
    if values.numel() % group_size != 0:
        raise ValueError(f"{name} has {values.numel()} entries, not a multiple of group_size={group_size}")
    return values.view(-1, group_size)


def per_token(advantages: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Detached (B, T) advantages from (B,), (B, 1) or (B, T) ones, broadcast to the shape of ``like``."""
    adv = advantages.detach()
    return (adv.unsqueeze(1) if adv.dim() == 1 else adv).expand_as(like)


@dataclass(frozen=True)
class Setting:
    """One setting of a method, declared once, in the method's module, and read off from there by everything else:
    the registry (the keyword the method's function reads), the TRL adapter's ``SAGEConfig`` (a field of that
    name, type, default and help, its range checked at construction), the verl plugin (the ``algorithm`` key of an
    advantage estimator) and the docs' field tables. tests/objective/test_method_settings.py fails when a method's
    keyword has no setting, or a setting is missing from an engine."""

    name: str
    """The keyword of the method's function that it sets (``k``, ``risk_beta``)."""
    field: str
    """The engines' config field (``passk_k``, ``risk_beta``): a ``SAGEConfig`` field, verl's ``algorithm`` key."""
    default: object
    """The default, the paper's where it gives one (the function's keyword default agrees)."""
    help: str
    """One or two sentences, as ``--help`` prints them."""
    allowed: Range | tuple[str, ...] | None = None
    """A numeric range (None: the value may also be None, read as "the method's own choice" where ``type`` allows
    it), or the names a string setting accepts."""
    type: str = "float"
    """The config field's annotation, as written (``int``, ``float | None``, ``str``)."""
    unit: str = ""
    """The unit (``nats``), shown after the option in ``--help``."""

    def check(self, value: object, error: type[Exception] = ValueError) -> None:
        """Raise ``error`` (one line naming :attr:`field`, the value and what is allowed) unless ``value`` is
        allowed (None passes where :attr:`type` allows None)."""
        if value is None and "None" in self.type:
            return
        if isinstance(self.allowed, Range):
            check_number(self.field, value, self.allowed, error)
        elif self.allowed is not None and value not in self.allowed:
            raise error(f"{self.field}={value!r} is not one of {', '.join(self.allowed)}")
