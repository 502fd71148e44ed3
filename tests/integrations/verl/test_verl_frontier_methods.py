"""Issue 23's methods in the verl plugin: rs_grpo and passk_mix as verl advantage estimators, the others refused
with the reason verl's interface gives (estimators get rewards, mask, uid and config only; no training step)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo.core_algos import get_adv_estimator_fn

from sagerl.errors import ConfigError
from sagerl.integrations.verl.advantages import REFUSED, VERL_ESTIMATORS
from sagerl.objective import compute_advantages


def test_what_is_registered_and_what_is_refused():
    assert VERL_ESTIMATORS == (
        "bnpo",
        "passk",
        "pkpo",
        "maxpo",
        "w_reinforce",
        "psr",
        "nsr",
        "rs_grpo",
        "passk_mix",
    )
    assert REFUSED == ("unlikely", "darling", "ucb_mean", "ucb_con", "outcome_batch")


@pytest.mark.parametrize(
    "name, algorithm, params",
    [
        ("rs_grpo", {"risk_beta": 4.0}, {"risk_beta": 4.0}),
        ("rs_grpo", {}, {"risk_beta": 2.0}),
        ("passk_mix", {"passk_k": 2}, {"k": 2}),
        ("passk_mix", {"passk_k": 3, "passk_mix_weight": 0.25}, {"k": 3, "mix_weight": 0.25}),
        ("maxpo", {"passk_k": 2}, {"k": 2}),  # issue 38
        ("maxpo", {}, {"k": 4}),
    ],
)
def test_estimators_group_rows_by_uid(name, algorithm, params):
    index = np.array(["a", "b", "a", "b", "a", "b", "a", "b", "a", "b"])
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0])
    mask = torch.ones(10, 3)
    mask[1, 2:] = 0
    rewards = torch.zeros(10, 3)
    rewards[:, 0] = scores
    adv, returns = get_adv_estimator_fn(name)(
        rewards, mask, index, OmegaConf.create({"adv_estimator": name, **algorithm})
    )
    expected = torch.empty(10)
    expected[0::2] = compute_advantages(name, scores[0::2], 5, **params)
    expected[1::2] = compute_advantages(name, scores[1::2], 5, **params)
    torch.testing.assert_close(adv, expected.unsqueeze(1) * mask)
    assert torch.equal(adv, returns)


@pytest.mark.parametrize(
    "name, reason",
    [
        ("darling", "the completions \\(to partition them\\)"),
        ("ucb_mean", "the completions' final answers, state across steps"),
        ("ucb_con", "the completions' final answers, state across steps"),
        ("outcome_batch", "the completions' final answers, which"),
        ("unlikely", "π_old's log-probs"),
    ],
)
def test_the_others_are_refused_with_the_reason(name, reason):
    with pytest.raises(
        ConfigError, match=f"adv_estimator={name} is not available in verl: it reads {reason}"
    ):
        get_adv_estimator_fn(name)(torch.ones(2, 1), torch.ones(2, 1), np.array(["a", "a"]))


def test_a_k_schedule_is_refused():
    config = OmegaConf.create({"adv_estimator": "pkpo", "passk_k": 2, "passk_k_schedule": "linear"})
    with pytest.raises(ConfigError, match="passes advantage estimators no training step"):
        get_adv_estimator_fn("pkpo")(torch.ones(4, 1), torch.ones(4, 1), np.array(["a"] * 4), config)
    constant = OmegaConf.create({"adv_estimator": "pkpo", "passk_k": 2, "passk_k_schedule": "constant"})
    get_adv_estimator_fn("pkpo")(torch.ones(4, 1), torch.ones(4, 1), np.array(["a"] * 4), constant)
