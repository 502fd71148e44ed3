"""Shared argument checks and masked reductions for the objective (private)."""

from __future__ import annotations

import torch


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
        ValueError: not 1-D, ``group_size`` < 1, or N not a multiple of ``group_size``.
    """
    if values.dim() != 1:
        raise ValueError(f"{name} must be a flat (N,) tensor, got shape {tuple(values.shape)}")
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if values.numel() % group_size != 0:
        raise ValueError(f"{name} has {values.numel()} entries, not a multiple of group_size={group_size}")
    return values.view(-1, group_size)


def per_token(advantages: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Detached (B, T) advantages from (B,), (B, 1) or (B, T) ones, broadcast to the shape of ``like``."""
    adv = advantages.detach()
    return (adv.unsqueeze(1) if adv.dim() == 1 else adv).expand_as(like)
