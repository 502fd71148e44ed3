"""Dynamic sampling for the estimators whose signal lives on groups of equal accuracy (issue 34, item 7): DARLING and
the outcome-based bonuses are filtered on their own advantages (groups whose advantages are all zero leave), not on
the rewards, which would drop the all-wrong groups that carry the exploration bonus."""

from __future__ import annotations

import pytest
import torch

from sagerl.objective import (
    ADVANTAGES,
    ESTIMATORS,
    SIGNAL_ON_EQUAL_REWARDS,
    SIGNED_ESTIMATORS,
    compute_advantages,
    dynamic_sampling_mask,
    zero_advantage_mask,
)

G = 4


def test_the_estimators_filtered_on_their_advantages():
    assert SIGNAL_ON_EQUAL_REWARDS == ("darling", "ucb_mean", "ucb_con", "outcome_batch")


def test_an_all_wrong_group_with_an_outcome_bonus_is_kept():
    # group 0: all wrong, answers a, b, b, c seen 1, 2, 2, 1 times: bonuses 1, 1/√2, 1/√2, 1 (UCB-Mean's term ≠ 0)
    # group 1: all correct (the term is 0 there, GRPO's advantage too); group 2: mixed
    rewards = torch.tensor([0.0] * 4 + [1.0] * 4 + [1.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    answers = torch.tensor([0, 1, 1, 2, 0, 0, 1, 2, 0, 1, 2, 0])
    counts = torch.tensor([1, 2, 2, 1, 3, 3, 1, 1, 2, 1, 1, 2], dtype=torch.float64)
    adv = compute_advantages("ucb_mean", rewards, G, answers=answers, counts=counts)
    b = 2**-0.5
    # the mean of the others' bonuses, for a bonus 1 and for a bonus 1/√2
    loo = [(2 * b + 1) / 3, (1 + b + 1) / 3]
    torch.testing.assert_close(
        adv[:4], torch.tensor([1 - loo[0], b - loo[1], b - loo[1], 1 - loo[0]]).double()
    )
    assert adv[4:8].tolist() == [0.0] * 4
    keep = zero_advantage_mask(adv, G)
    assert keep.tolist() == [True] * 4 + [False] * 4 + [True] * 4
    # DAPO's filter on the accuracy drops the all-wrong group, the bonus's whole point
    assert dynamic_sampling_mask(rewards, G).tolist() == [False] * 8 + [True] * 4


def test_a_constant_nonzero_bonus_is_kept_and_cancelling_terms_are_zero():
    rewards = torch.zeros(8, dtype=torch.float64)
    answers = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    fresh = torch.ones(8, dtype=torch.float64)  # every answer seen once: b = 1
    con = compute_advantages("ucb_con", rewards, G, answers=answers, counts=fresh, b0=0.5)
    assert con.tolist() == [0.5] * 8  # b − b₀ on every completion: it moves the policy
    assert zero_advantage_mask(con, G).tolist() == [True] * 8
    mean = compute_advantages("ucb_mean", rewards, G, answers=answers, counts=fresh * 3.0)  # equal bonuses
    assert mean.abs().max() < 1e-12
    assert zero_advantage_mask(mean, G).tolist() == [False] * 8


def test_darling_keeps_the_all_correct_groups_whose_diversity_differs():
    # group 0: all correct, clusters {0, 0}, {1}, {2}: r' = 2/3, 2/3, 1, 1; group 1: all correct, all distinct
    # (r' = 1 each); group 2: all wrong (r' = 0)
    rewards = torch.tensor([1.0] * 8 + [0.0] * 4, dtype=torch.float64)
    clusters = torch.tensor([0, 0, 1, 2, 0, 1, 2, 3, 0, 0, 1, 1])
    adv = compute_advantages("darling", rewards, G, clusters=clusters)
    torch.testing.assert_close(adv[:4], torch.tensor([-1 / 6, -1 / 6, 1 / 6, 1 / 6]).double())
    assert zero_advantage_mask(adv, G).tolist() == [True] * 4 + [False] * 8
    assert dynamic_sampling_mask(rewards, G).tolist() == [False] * 12


REQUIRED = {
    "k": 2,
    "sequence_logp": torch.tensor([-0.5, -1.0, -2.0, -0.1, -0.3, -0.7, -1.2, -0.9], dtype=torch.float64),
}


@pytest.mark.parametrize(
    "name", [n for n in ADVANTAGES if n not in SIGNAL_ON_EQUAL_REWARDS + SIGNED_ESTIMATORS]
)
def test_the_other_estimators_vanish_on_groups_of_equal_rewards(name):
    """For them DAPO's filter on the accuracy drops only groups without signal (their advantages are exactly 0).
    The signed estimators (no baseline) are the exception DAPO's definition keeps: groups of equal accuracy."""
    rewards = torch.tensor([0.0] * G + [1.0] * G, dtype=torch.float64)
    params = {key: REQUIRED[key] for key in ESTIMATORS[name].required}
    adv = compute_advantages(name, rewards, G, **params)
    assert adv.tolist() == [0.0] * (2 * G)


def test_bad_input():
    with pytest.raises(ValueError, match=r"atol=-1 must be a number in \[0, inf\)"):
        zero_advantage_mask(torch.zeros(4), G, atol=-1)
    with pytest.raises(ValueError, match="advantages has 6 entries, not a multiple of group_size=4"):
        zero_advantage_mask(torch.zeros(6), G)
