"""DARLING's partition diversity (arXiv 2509.02534): the authors' reward × diversity, and the equivalences."""

from __future__ import annotations

import pytest
import torch

from sagerl.objective import (
    compute_advantages,
    darling_advantages,
    grpo_advantages,
    lexical_partition,
    partition_diversity,
    partition_from_keys,
)
from sagerl.objective.partition_diversity import connected_components, jaccard, ngrams


def authors_partition_reward(parts: list[list[int]], total: int) -> list[float]:
    """The authors' ``partition`` (verl/utils/reward_score/partition_reward_vllm_serve.py) from given clusters,
    written again: distinct = total − |group|, reward = distinct/(total − 1), then max(reward, 0.1)."""
    rewards = [0.0] * total
    for grp in parts:
        for idx in grp:
            rewards[idx] = (total - len(grp)) / (total - 1)
    return [max(r, 0.1) for r in rewards]


def test_diversity_is_the_authors_partition_reward():
    parts = [[0, 1], [2], [3, 4, 5]]
    clusters = torch.tensor([0, 0, 1, 2, 2, 2])
    expected = authors_partition_reward(parts, 6)
    assert expected == pytest.approx([0.8, 0.8, 1.0, 0.6, 0.6, 0.6])
    torch.testing.assert_close(partition_diversity(clusters, 6), torch.tensor(expected, dtype=torch.float64))
    # the floor: one cluster holding the whole group, (n − n)/(n − 1) = 0 -> 0.1
    assert partition_diversity(torch.zeros(8, dtype=torch.long), 8).tolist() == [0.1] * 8
    # -1 (no key): a cluster of its own
    assert partition_diversity(torch.tensor([-1, -1, 0, 0]), 4).tolist() == pytest.approx(
        [1, 1, 2 / 3, 2 / 3]
    )


def test_advantage_is_grpo_of_reward_times_diversity_without_std():
    """The authors' recipe: multiplicative=True, algorithm.norm_adv_by_std_in_grpo=False."""
    rewards = torch.tensor([1.0, 1, 0, 1, 1, 0], dtype=torch.float64)
    clusters = torch.tensor([0, 0, 1, 2, 2, 2])
    shaped = rewards * torch.tensor([0.8, 0.8, 1.0, 0.6, 0.6, 0.6], dtype=torch.float64)
    expected = shaped - shaped.mean()
    torch.testing.assert_close(darling_advantages(rewards, 6, clusters), expected)
    torch.testing.assert_close(compute_advantages("darling", rewards, 6, clusters=clusters), expected)
    torch.testing.assert_close(
        darling_advantages(rewards, 6, clusters, scale="group"), grpo_advantages(shaped, 6, scale="group")
    )
    # every completion alone in its cluster: plain Dr.GRPO
    torch.testing.assert_close(darling_advantages(rewards, 6, torch.arange(6)), rewards - rewards.mean())


def test_keys_make_clusters_within_each_group():
    keys = ["7", "3", "7", None, "3", "3", "9", None]
    assert partition_from_keys(keys, 4).tolist() == [0, 1, 0, -1, 0, 0, 1, -1]
    with pytest.raises(ValueError, match="not a multiple of group_size=3"):
        partition_from_keys(keys, 3)


def test_lexical_equivalence_is_the_transitive_closure_of_jaccard_above_the_threshold():
    a, b, c, d = [1, 2, 3, 4], [2, 3, 4, 5], [3, 4, 5, 6], [9, 8, 7, 6]
    assert ngrams(a, 2) == {(1, 2), (2, 3), (3, 4)}
    assert jaccard(ngrams(a, 2), ngrams(b, 2)) == pytest.approx(2 / 4)
    assert jaccard(ngrams(a, 2), ngrams(c, 2)) == pytest.approx(1 / 5)
    # threshold 0.4: a~b, b~c, not a~c directly; d alone -> {a, b, c}, {d}
    assert lexical_partition([a, b, c, d], 4, n=2, threshold=0.4).tolist() == [0, 0, 0, 1]
    # 0.5 is not exceeded by a~b (exactly 0.5): all apart
    assert lexical_partition([a, b, c, d], 4, n=2, threshold=0.5).tolist() == [0, 1, 2, 3]
    assert lexical_partition([[5], [5], [], []], 4, n=2).tolist() == [0, 0, 1, 1]  # short sequences: one gram
    assert connected_components(5, [(0, 3), (3, 4)]) == [0, 1, 2, 0, 0]
    with pytest.raises(ValueError, match=r"threshold=1.0 must be a number in \[0, 1\)"):
        lexical_partition([a, b], 2, threshold=1.0)
    with pytest.raises(ValueError, match=r"n=0 must be an integer in \[1, inf\)"):
        lexical_partition([a, b], 2, n=0)


def test_bad_input():
    with pytest.raises(ValueError, match="needs clusters"):
        compute_advantages("darling", torch.ones(4), 4)
    with pytest.raises(ValueError, match="clusters has shape"):
        darling_advantages(torch.ones(4), 4, torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"floor=2 must be a number in \[0, 1\]"):
        partition_diversity(torch.zeros(4, dtype=torch.long), 4, floor=2)
