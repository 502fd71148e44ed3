"""Aggregation of a (B, T) per-token loss into a scalar (verl's ``loss_agg_mode`` names).

Padding, and sequences whose every token is masked (empty completions, groups dropped by dynamic
sampling), contribute nothing: masked entries are zeroed with ``torch.where`` (so NaN or inf there cannot
leak), and the sequence-level modes average over sequences that have at least one valid token. The
result always stays connected to the autograd graph, and is 0 when nothing is valid.
"""

from __future__ import annotations

import torch

from sagerl.objective._checks import COUNT, POSITIVE, as_bool_mask, check_2d, check_number, masked_zero

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


def aggregate_loss(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "token-mean",
    *,
    num_tokens: float | torch.Tensor | None = None,
    max_len: int | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss to a scalar.

    Modes, with n_i the valid tokens of sequence i and S the sequences with n_i > 0:

    - ``"token-mean"``: Σ_i Σ_t x_it / N, N = ``num_tokens`` if given (a global token count, e.g. over a
      whole generation batch under gradient accumulation, as DAPO), else Σ_i n_i.
    - ``"seq-mean-token-mean"``: (1/|S|) Σ_{i∈S} (1/n_i) Σ_t x_it (GRPO).
    - ``"seq-mean-token-sum"``: (1/|S|) Σ_{i∈S} Σ_t x_it.
    - ``"seq-mean-token-sum-norm"``: Σ_i Σ_t x_it / (|S| · L), L = ``max_len`` (default T): Dr.GRPO's
      constant normaliser (TRL's ``dr_grpo`` divides by B · max_completion_length the same way).

    Args:
        per_token: (B, T) loss. mask: (B, T) 0/1.
        mode: one of :data:`LOSS_AGG_MODES`.
        num_tokens: normaliser for ``"token-mean"``. max_len: L for ``"seq-mean-token-sum-norm"``.

    Returns:
        0-dim tensor.

    Raises:
        ValueError: unknown mode, shape mismatch, ``max_len`` not an integer >= 1, or a ``num_tokens`` number
            that is not finite and > 0 (a tensor is the trainer's count and is clamped at 1).
    """
    check_2d(per_token, "per_token")
    if max_len is not None:
        check_number("max_len", max_len, COUNT)
    if num_tokens is not None and not torch.is_tensor(num_tokens):
        check_number("num_tokens", num_tokens, POSITIVE)
    mask = as_bool_mask(mask, per_token)
    x = masked_zero(per_token, mask)
    n_i = mask.sum(dim=1)
    has_tokens = n_i > 0
    num_seqs = has_tokens.sum().clamp(min=1)
    if mode == "token-mean":
        denom = n_i.sum() if num_tokens is None else torch.as_tensor(num_tokens, device=x.device)
        return x.sum() / denom.clamp(min=1)
    if mode == "seq-mean-token-mean":
        return (x.sum(dim=1) / n_i.clamp(min=1)).sum() / num_seqs
    if mode == "seq-mean-token-sum":
        return x.sum() / num_seqs
    if mode == "seq-mean-token-sum-norm":
        length = per_token.shape[1] if max_len is None else max_len
        if length <= 0:
            raise ValueError(f"max_len must be > 0, got {length}")
        return x.sum() / (num_seqs * length)
    raise ValueError(f"unknown loss_agg_mode {mode!r}; expected one of {LOSS_AGG_MODES}")
