"""Clip-Cov, KL-Cov and sagerl's advantage estimators against verl 0.9.1's own functions, on random batches.

sagerl.objective's ``clip_cov_surrogate`` / ``kl_cov_surrogate`` must equal verl's
``compute_policy_loss_clip_cov`` / ``compute_policy_loss_kl_cov`` (loss and gradient; the same torch seed
for Clip-Cov's random choice), and the SAGE plugin with ``policy_term`` and no guide and no KL must be verl's
own ``loss_mode=clip_cov`` / ``kl_cov`` loss.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
from test_verl_loss import _padded, _verl_inputs
from verl.trainer.ppo.core_algos import (
    agg_loss,
    compute_policy_loss_clip_cov,
    compute_policy_loss_kl_cov,
    get_adv_estimator_fn,
)
from verl.workers.config import ActorConfig, PolicyLossConfig
from verl.workers.utils.losses import ppo_loss
from verl.workers.utils.padding import no_padding_2_padding

from sagerl.integrations.verl import SAGEPolicyLossConfig
from sagerl.integrations.verl.loss import sage_ppo_loss
from sagerl.objective import (
    clip_cov_surrogate,
    compute_advantages,
    entropy_advantage,
    kl_cov_surrogate,
    sage_loss,
)


def _verl_actor(mode: str, **policy) -> ActorConfig:
    return ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=0.2,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        loss_agg_mode="token-mean",
        policy_loss=PolicyLossConfig(loss_mode=mode, **policy),
    )


def _with(policy_loss, use_kl_loss: bool, calculate_entropy: bool = True) -> ActorConfig:
    """The test_verl_loss actor settings with another policy loss (verl's configs are frozen)."""
    return ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        use_kl_loss=use_kl_loss,
        kl_loss_coef=0.05,
        kl_loss_type="low_var_kl",
        calculate_entropy=calculate_entropy,
        loss_agg_mode="token-mean",
        policy_loss=policy_loss,
    )


def _batch(seed: int, b: int = 6, t: int = 9):
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(b, t, generator=g) * 3).requires_grad_(True)
    old = logp.detach() + 0.4 * torch.randn(b, t, generator=g)
    adv = (torch.randn(b, 1, generator=g) * 2).expand(b, t).contiguous()
    mask = torch.ones(b, t)
    for i in range(b):
        mask[i, int(torch.randint(1, t + 1, (1,), generator=g)) :] = 0
    return logp, old, adv * mask, mask


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_clip_cov_equals_verl(seed, agg):
    logp, old, adv, mask = _batch(seed)
    params = dict(clip_cov_ratio=0.15, clip_cov_lb=-0.5, clip_cov_ub=2.0)
    config = _verl_actor("clip_cov", **params)
    torch.manual_seed(100 + seed)
    verl_loss, _ = compute_policy_loss_clip_cov(old, logp, adv, mask, loss_agg_mode=agg, config=config)
    (verl_grad,) = torch.autograd.grad(verl_loss, logp)
    torch.manual_seed(100 + seed)
    out = clip_cov_surrogate(logp, old, adv, mask, epsilon_low=0.2, epsilon_high=0.28, **params)
    ours = agg_loss(loss_mat=out.loss, loss_mask=mask, loss_agg_mode=agg)
    (our_grad,) = torch.autograd.grad(ours, logp)
    assert out.covariance_masked.sum() > 1  # the random choice had something to choose among
    assert ours.item() == pytest.approx(verl_loss.item(), abs=1e-7)
    torch.testing.assert_close(our_grad, verl_grad, atol=1e-7, rtol=1e-6)


@pytest.mark.parametrize("seed", range(5))
def test_kl_cov_equals_verl(seed):
    logp, old, adv, mask = _batch(seed)
    config = _verl_actor("kl_cov", kl_cov_ratio=0.1, ppo_kl_coef=0.7)
    verl_loss, _ = compute_policy_loss_kl_cov(old, logp, adv, mask, loss_agg_mode="token-mean", config=config)
    (verl_grad,) = torch.autograd.grad(verl_loss, logp)
    out = kl_cov_surrogate(logp, old, adv, mask, kl_cov_ratio=0.1, kl_cov_coef=0.7)
    ours = agg_loss(loss_mat=out.loss, loss_mask=mask, loss_agg_mode="token-mean")
    (our_grad,) = torch.autograd.grad(ours, logp)
    assert out.covariance_masked.sum() == max(1, int(mask.sum().item() * 0.1))
    assert ours.item() == pytest.approx(verl_loss.item(), abs=1e-7)
    torch.testing.assert_close(our_grad, verl_grad, atol=1e-7, rtol=1e-6)


@pytest.mark.parametrize("term", ["clip_cov", "kl_cov"])
def test_plugin_policy_term_is_verls_own_loss(term):
    """SAGE's plugin with policy_term, no guide and no KL is verl's loss_mode=clip_cov / kl_cov."""
    t = _padded()
    fields = dict(clip_cov_ratio=0.3, clip_cov_lb=-10.0, clip_cov_ub=10.0, kl_cov_ratio=0.2, ppo_kl_coef=0.5)
    sage_config = _with(SAGEPolicyLossConfig(guide="none", policy_term=term, **fields), use_kl_loss=False)
    plain = _with(PolicyLossConfig(loss_mode=term, **fields), use_kl_loss=False, calculate_entropy=False)
    torch.manual_seed(5)
    ours, metrics = sage_ppo_loss(sage_config, *_verl_inputs(t)[:2])
    model_output, data, _ = _verl_inputs(t, with_entropy=False)
    torch.manual_seed(5)
    verl, _ = partial(ppo_loss, config=plain)(model_output=model_output, data=data)
    assert ours.item() == pytest.approx(verl.item(), abs=1e-6)
    assert metrics["covariance/token_share"].aggregate() > 0


def test_plugin_entropy_advantage():
    t = _padded()
    config = _with(SAGEPolicyLossConfig(guide="none", entropy_adv_alpha=0.4, entropy_adv_kappa=2.0), True)
    output, data, leaf = _verl_inputs(t)
    loss, _ = sage_ppo_loss(config, output, data)
    logp = no_padding_2_padding(leaf, data)
    entropy = no_padding_2_padding(output["entropy"], data)
    expected = sage_loss(
        logp,
        t["old"],
        t["ref"],
        t["adv"],
        t["response_mask"],
        beta=config.kl_loss_coef,
        epsilon_low=0.2,
        epsilon_high=0.28,
        delta=config.clip_ratio_c,
        loss_agg_mode=config.loss_agg_mode,
        entropy=entropy,
        entropy_adv_alpha=0.4,
        entropy_adv_kappa=2.0,
    )
    assert loss.item() == pytest.approx(expected.loss.item(), abs=1e-7)
    shaped = entropy_advantage(t["adv"], entropy, t["response_mask"].bool())
    assert not torch.allclose(shaped, t["adv"])


@pytest.mark.parametrize(
    "name, algorithm, params",
    [
        ("passk", {"passk_k": 2}, {"k": 2}),
        ("pkpo", {"passk_k": 3, "pkpo_baseline": "loo"}, {"k": 3, "baseline": "loo"}),
        ("pkpo", {}, {"k": 4}),
        ("w_reinforce", {"w_reinforce_lambda": 0.5}, {"lam": 0.5}),
        ("psr", {}, {}),
        ("nsr", {}, {}),
    ],
)
def test_registered_estimators_group_rows_by_uid(name, algorithm, params):
    from omegaconf import OmegaConf

    index = np.array(["a", "b", "a", "b", "a", "b", "a", "b", "a", "b"])
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0])
    mask = torch.ones(10, 3)
    mask[1, 2:] = 0
    rewards = torch.zeros(10, 3)
    rewards[:, 0] = scores
    fn = get_adv_estimator_fn(name)
    adv, returns = fn(rewards, mask, index, OmegaConf.create({"adv_estimator": name, **algorithm}))
    a, b = scores[0::2], scores[1::2]
    expected = torch.empty(10)
    expected[0::2] = compute_advantages(name, a, 5, **params)
    expected[1::2] = compute_advantages(name, b, 5, **params)
    torch.testing.assert_close(adv, expected.unsqueeze(1) * mask)
    assert torch.equal(adv, returns)


def test_unlikely_is_refused_with_the_reason():
    from sagerl.errors import ConfigError

    with pytest.raises(ConfigError, match="does not pass to advantage estimators"):
        get_adv_estimator_fn("unlikely")(torch.ones(2, 1), torch.ones(2, 1), np.array(["a", "a"]))


def test_clip_cov_preset_is_the_authors_recipe():
    """The clip-cov preset's ε (read from its file: sagerl.train needs TRL, not in this environment) is the
    authors' Clip-Cov recipe's clip_ratio_low = clip_ratio_high = 1 (PRIME-RL/Entropy-Mechanism-of-RL,
    recipe/dapo/7b_clip_cov.sh); with it, sagerl's loss and gradient are verl's with that recipe's settings."""
    import yaml

    presets = Path(__file__).resolve().parents[3] / "sagerl" / "train" / "presets"
    preset = {
        **yaml.safe_load((presets / "base.yaml").read_text()),
        **yaml.safe_load((presets / "clip-cov.yaml").read_text()),
    }
    assert (preset["epsilon"], preset.get("epsilon_high")) == (1.0, None)
    params = {key: preset[key] for key in ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub")}
    assert params == dict(clip_cov_ratio=2e-4, clip_cov_lb=1.0, clip_cov_ub=5.0)
    gen = torch.Generator().manual_seed(0)
    logp = (-torch.rand(40, 150, generator=gen) * 3).requires_grad_(True)
    old = logp.detach() + 0.4 * torch.randn(40, 150, generator=gen)
    adv = (torch.randn(40, 1, generator=gen) * 4).expand(40, 150).contiguous()
    config = ActorConfig(
        strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, clip_ratio=1.0, clip_ratio_low=1.0,
        clip_ratio_high=1.0, loss_agg_mode="token-mean", policy_loss=PolicyLossConfig(loss_mode="clip_cov", **params),
    )  # fmt: skip
    mask = torch.ones(40, 150)
    torch.manual_seed(3)
    verl_loss, _ = compute_policy_loss_clip_cov(
        old, logp, adv, mask, loss_agg_mode="token-mean", config=config
    )
    (verl_grad,) = torch.autograd.grad(verl_loss, logp)
    torch.manual_seed(3)
    out = clip_cov_surrogate(logp, old, adv, mask, epsilon_low=preset["epsilon"], epsilon_high=None, **params)
    ours = agg_loss(loss_mat=out.loss, loss_mask=mask, loss_agg_mode="token-mean")
    (our_grad,) = torch.autograd.grad(ours, logp)
    assert ours.item() == pytest.approx(verl_loss.item(), abs=1e-7)
    torch.testing.assert_close(our_grad, verl_grad, atol=1e-7, rtol=1e-6)
    assert out.covariance_masked.sum() == 1  # max(int(2e-4 · 6,000), 1)
