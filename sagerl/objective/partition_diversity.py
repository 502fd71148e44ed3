"""Partition diversity (DARLING): the reward of a completion times how few of its group are equivalent to it.

Source: Li, Zhang, Yu, Saha, Khashabi, Weston, Lanchantin, Wang 2025, "Jointly Reinforcing Diversity and Quality
in Language Model Generations", arXiv 2509.02534 (DARLING), and the authors' code (facebookresearch/darling:
``partition`` in ``verl/utils/reward_score/partition_reward_vllm_serve.py`` and the ``multiplicative``
combination in ``verl/trainer/ppo/ray_trainer.py``). A group of n completions of one prompt is partitioned into
clusters of equivalent completions (the transitive closure of a pairwise equivalence: union-find over every
pair); completion i in a cluster of size |C_i| gets

    div_i = max((n − |C_i|)/(n − 1), 0.1),      r'_i = r_i · div_i,

and the advantage is GRPO's on r' (the authors' recipe: ``norm_adv_by_std_in_grpo=False``, i.e. r' − mean(r')).

The equivalence is pluggable. The authors use a learned classifier of semantic equivalence; sagerl offers
(:data:`PARTITIONS`):

- ``"answer"``: equal final answers (their normal form; computed by the engine from the completion text);
- ``"lexical"``: token n-gram Jaccard similarity above a threshold (:func:`lexical_partition`, on token ids);
- ``"strategy"``: on the planted-strategy task only, the planted strategy label the completion states, an
  **oracle** upper bound (the equivalence the task knows exactly), named as such wherever it is reported.

This module is pure torch and Python: it turns per-completion keys or token ids into cluster ids and those into
advantages; the engines compute the keys (sagerl.train reads answers and strategy labels from the text).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from sagerl.objective._checks import COUNT, UNIT, Range, check_number, grouped
from sagerl.objective.advantages import grpo_advantages

PARTITIONS = ("answer", "lexical", "strategy")
"""The equivalences a group can be partitioned by (module docstring); ``strategy`` is an oracle (planted task)."""
DIVERSITY_FLOOR = 0.1
"""The authors' floor of the diversity factor (``max(r, 0.1)``)."""


JACCARD_THRESHOLD = Range(0.0, 1.0, high_open=True)
"""The lexical partition's threshold: a similarity that can be exceeded."""


def _check_rows(count: int, group_size: int, name: str) -> None:
    check_number("group_size", group_size, COUNT)
    if count % group_size:
        raise ValueError(f"{name} has {count} entries, not a multiple of group_size={group_size}")


def partition_from_keys(keys: Sequence[Hashable | None], group_size: int) -> torch.Tensor:
    """(N,) int64 cluster ids from per-completion keys: completions of one group with equal keys share an id
    (0, 1, ... in order of first appearance in the group); a None key (no answer, no strategy) gets -1, a
    cluster of its own.

    Raises:
        ValueError: N not a multiple of ``group_size``.
    """
    _check_rows(len(keys), group_size, "keys")
    out = []
    for start in range(0, len(keys), group_size):
        ids: dict[Hashable, int] = {}
        for key in keys[start : start + group_size]:
            out.append(-1 if key is None else ids.setdefault(key, len(ids)))
    return torch.tensor(out, dtype=torch.long)


def ngrams(tokens: Sequence[int], n: int) -> set[tuple[int, ...]]:
    """The set of token n-grams of a sequence; a sequence shorter than n is its own single gram."""
    if len(tokens) < n:
        return {tuple(tokens)}
    return {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}


def jaccard(a: set, b: set) -> float:
    """|a ∩ b| / |a ∪ b| (1 for two empty sets)."""
    union = len(a | b)
    return 1.0 if union == 0 else len(a & b) / union


def lexical_partition(
    sequences: Sequence[Sequence[int]], group_size: int, n: int = 2, threshold: float = 0.5
) -> torch.Tensor:
    """(N,) int64 cluster ids: two completions of a group are equivalent when the Jaccard similarity of their
    token n-gram sets exceeds ``threshold``; clusters are the transitive closure (union-find over every pair,
    as the authors' ``partition``). Cost per group: n(n − 1)/2 set comparisons.

    Args:
        sequences: N token-id sequences (each completion's tokens, padding removed), groups contiguous.
        group_size: completions per group. n: the n of the n-grams (≥ 1). threshold: in [0, 1).

    Raises:
        ValueError: N not a multiple of ``group_size``, n < 1, or threshold outside [0, 1).
    """
    _check_rows(len(sequences), group_size, "sequences")
    check_number("n", n, COUNT)
    check_number("threshold", threshold, JACCARD_THRESHOLD)
    out: list[int] = []
    for start in range(0, len(sequences), group_size):
        grams = [ngrams(list(seq), n) for seq in sequences[start : start + group_size]]
        pairs = [
            (i, j)
            for i in range(len(grams))
            for j in range(i + 1, len(grams))
            if jaccard(grams[i], grams[j]) > threshold
        ]
        out.extend(connected_components(len(grams), pairs))
    return torch.tensor(out, dtype=torch.long)


def connected_components(count: int, pairs: Sequence[tuple[int, int]]) -> list[int]:
    """Component ids (0, 1, ... in order of first member) of ``count`` items joined by equivalent ``pairs``: the
    transitive closure of a pairwise equivalence (union-find with path halving)."""
    parent = list(range(count))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in pairs:
        parent[find(i)] = find(j)
    roots: dict[int, int] = {}
    return [roots.setdefault(find(i), len(roots)) for i in range(count)]


def partition_diversity(
    clusters: torch.Tensor, group_size: int, floor: float = DIVERSITY_FLOOR
) -> torch.Tensor:
    """(N,) diversity factors max((n − |C_i|)/(n − 1), floor) from cluster ids (-1: a cluster of its own).

    A completion alone in its cluster gets 1; one in a cluster holding the whole group gets ``floor``. A group of
    one gets 1.

    Raises:
        ValueError: bad shapes or ``floor`` outside [0, 1].
    """
    check_number("floor", floor, UNIT)
    ids = grouped(clusters.long(), group_size, name="clusters")
    same = (ids.unsqueeze(2) == ids.unsqueeze(1)) & (ids.unsqueeze(2) >= 0)
    size = same.sum(dim=2).clamp(min=1)  # -1 rows: themselves only
    if group_size == 1:
        return torch.ones(ids.numel(), dtype=torch.float64)
    div = (group_size - size).double() / (group_size - 1)
    return div.clamp(min=floor).reshape(-1)


def darling_advantages(
    rewards: torch.Tensor,
    group_size: int,
    clusters: torch.Tensor,
    floor: float = DIVERSITY_FLOOR,
    scale: str = "none",
) -> torch.Tensor:
    """DARLING's advantages: GRPO's advantages of r·div (module docstring).

    Args:
        rewards: (N,) rewards (NaN: unscorable, advantage 0), groups of ``group_size`` contiguous.
        clusters: (N,) cluster ids of each completion within its group (:func:`partition_from_keys`,
            :func:`lexical_partition`; -1: a cluster of its own).
        floor: the diversity floor (the authors' 0.1).
        scale: GRPO's std scaling (:func:`sagerl.objective.grpo_advantages`): ``"none"`` (the authors':
            r' − mean(r')), ``"group"`` or ``"batch"``.

    Returns:
        (N,) advantages in the order of ``rewards``.

    Raises:
        ValueError: bad shapes, ``clusters`` of another shape than ``rewards``, ``floor`` outside [0, 1], or an
            unknown scale.
    """
    if clusters.shape != rewards.shape:
        raise ValueError(f"clusters has shape {tuple(clusters.shape)}, rewards {tuple(rewards.shape)}")
    diversity = partition_diversity(clusters, group_size, floor).to(rewards.dtype)
    return grpo_advantages(rewards * diversity, group_size, scale=scale)
