"""DAPO's dynamic sampling with refill: the batch helpers ``SAGETrainer`` uses to keep sampling prompts until a
step has its number of groups whose rewards differ.

DAPO (Yu et al. 2025, arXiv 2503.14476, Algorithm 1) over-samples and filters: groups whose rewards are all
equal (all right or all wrong) carry no advantage, so they are dropped and more prompts are sampled until the
batch is full again. verl does this with ``algorithm.filter_groups`` (``max_num_gen_batches`` rounds at most;
verl raises when the limit is reached). TRL has no such loop; ``SAGETrainer`` runs TRL's rollout once per
round (:meth:`sagerl.train.SAGETrainer._generate_and_score_completions`) and these helpers merge the rounds:

- :func:`choose_groups` picks, round after round, the groups of each round whose rewards differ, until the
  step has as many as one rollout batch holds;
- if the limit of rounds is reached first, the remaining places are filled with equal-reward groups, which
  the keep-mask then drops from the loss (the behaviour of ``max_num_gen_batches=1``), rather than failing
  the run as verl does;
- :func:`merge_rollouts` concatenates the chosen rows of the rounds' TRL outputs, padding prompts on the left
  and completions on the right, as TRL pads them.

The refill prompts are drawn from the training set by a generator seeded with (seed, optimizer step, round,
process), so a resumed run draws what an uninterrupted run would.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from sagerl.objective import dynamic_sampling_mask

ROW_KEYS = (
    "prompt_ids",
    "prompt_mask",
    "completion_ids",
    "completion_mask",
    "old_per_token_logps",
    "ref_per_token_logps",
    "sampling_per_token_logps",
    "importance_sampling_ratio",
    "tool_mask",
    "ref_entropies",
    "sage_rewards_per_func",
)
"""Per-row tensors of a rollout that the merge keeps: TRL's, plus SAGETrainer's reference entropies and
rewards per reward function (the advantages and counts are recomputed)."""
UNSUPPORTED_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "pixel_attention_mask",
    "spatial_shapes",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
    "num_images",
    "num_tiles",
)
"""Multimodal outputs: refill refuses them (their rows are not aligned with the completion rows)."""


def groups_with_spread(rewards: torch.Tensor, group_size: int) -> list[bool]:
    """For each group of the flat (N,) ``rewards``, whether its (non-NaN) rewards differ (DAPO's keep-mask,
    :func:`sagerl.objective.dynamic_sampling_mask`, one flag per group)."""
    return dynamic_sampling_mask(rewards, group_size).view(-1, group_size)[:, 0].tolist()


def choose_groups(rounds: Sequence[list[bool]], needed: int) -> tuple[list[tuple[int, int]], int]:
    """The groups a step trains on: ((round, group) pairs, how many of them have rewards that differ).

    Groups with differing rewards first, in round order, up to ``needed``; then, if too few, groups with equal
    rewards in round order (they are dropped from the loss by the keep-mask).
    """
    varied = [(r, g) for r, flags in enumerate(rounds) for g, ok in enumerate(flags) if ok][:needed]
    fill = [(r, g) for r, flags in enumerate(rounds) for g, ok in enumerate(flags) if not ok]
    chosen = varied + fill[: needed - len(varied)]
    return chosen, len(varied)


def _pad_to(x: torch.Tensor, width: int, left: bool, value: float) -> torch.Tensor:
    extra = width - x.shape[1]
    if extra <= 0:
        return x
    return torch.nn.functional.pad(x, (extra, 0) if left else (0, extra), value=value)


def merge_rollouts(
    outputs: Sequence[dict], chosen: Sequence[tuple[int, int]], group_size: int, pad_token_id: int
) -> dict:
    """One rollout output made of the ``chosen`` (round, group) rows of ``outputs`` (TRL's output dicts).

    Per-row tensors (:data:`ROW_KEYS`) are padded to the widest round: ``prompt_*`` on the left, the others on
    the right, ids with ``pad_token_id`` and masks, log-probs and ratios with 0 (masked positions). Keys that
    are not per-row are left out (the caller recomputes advantages and counts).

    Raises:
        ValueError: an output holds multimodal inputs (:data:`UNSUPPORTED_KEYS`).
    """
    for out in outputs:
        bad = [key for key in UNSUPPORTED_KEYS if key in out]
        if bad:
            raise ValueError(
                f"dynamic-sampling refill does not support multimodal rollouts ({', '.join(bad)})"
            )
    merged = {}
    for key in ROW_KEYS:
        present = [key in out for out in outputs]
        if not any(present):
            continue
        if not all(present):
            raise ValueError(f"rollout rounds disagree on {key!r}")
        width = max(out[key].shape[1] for out in outputs) if outputs[0][key].dim() == 2 else None
        rows = []
        for r, g in chosen:
            part = outputs[r][key][g * group_size : (g + 1) * group_size]
            if width is not None:
                value = pad_token_id if key.endswith("_ids") else 0.0
                part = _pad_to(part, width, left=key.startswith("prompt_"), value=value)
            rows.append(part)
        merged[key] = torch.cat(rows)
    return merged
