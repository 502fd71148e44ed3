"""SAGE's verl loss on a batch equals sagerl.objective.sage_loss on the same (B, T) tensors.

The batch is in verl's layout (nested, unpadded model outputs over prompt + response; padded response
tensors in the TensorDict), so the test also covers the slicing from model output to response tokens.
"""

from functools import partial

import pytest
import torch
from tensordict import TensorDict
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.utils import tensordict_utils as tu
from verl.workers.config import ActorConfig
from verl.workers.utils.losses import ppo_loss
from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

from sagerl.errors import ConfigError
from sagerl.integrations.verl import SAGEPolicyLossConfig
from sagerl.integrations.verl.loss import sage_ppo_loss
from sagerl.objective import compute_guide, sage_loss

PROMPT, RESPONSE = 3, 6
PROMPT_PAD = [0, 1, 2, 0, 1]
RESPONSE_LEN = [6, 4, 1, 5, 6]
B = len(PROMPT_PAD)


def _padded(rows=range(B), seed=0):
    """Full-sequence log-probs and entropies, and the response tensors, for the given rows of a fixed batch."""
    g = torch.Generator().manual_seed(seed)
    L = PROMPT + RESPONSE
    attention = torch.ones(B, L, dtype=torch.int64)
    for i in range(B):
        attention[i, : PROMPT_PAD[i]] = 0
        attention[i, PROMPT + RESPONSE_LEN[i] :] = 0
    full_logp = -torch.rand(B, L, generator=g) * 3 - 0.05
    full_entropy = torch.rand(B, L, generator=g) * 3
    rows = list(rows)
    response_mask = attention[:, PROMPT:]
    old = torch.roll(full_logp, -1, dims=1)[:, PROMPT - 1 : L - 1] + 0.1 * torch.randn(
        B, RESPONSE, generator=g
    )
    ref = torch.roll(full_logp, -1, dims=1)[:, PROMPT - 1 : L - 1] + 0.4 * torch.randn(
        B, RESPONSE, generator=g
    )
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0])
    adv = ((rewards - rewards.mean()) / rewards.std()).unsqueeze(1) * response_mask
    weights = 0.5 + torch.rand(B, RESPONSE, generator=g)
    pick = {
        "attention": attention,
        "full_logp": full_logp,
        "full_entropy": full_entropy,
        "response_mask": response_mask,
        "old": old * response_mask,
        "ref": ref * response_mask,
        "adv": adv,
        "weights": weights,
    }
    return {k: v[rows] for k, v in pick.items()}


def _verl_inputs(t, with_entropy=True, with_weights=False, global_sizes=None):
    """(model_output, data) as verl's engine hands them to the loss function."""
    ids = torch.arange(PROMPT + RESPONSE).repeat(len(t["attention"]), 1)
    fields = {
        "input_ids": ids,
        "prompts": ids[:, :PROMPT],
        "responses": ids[:, PROMPT:],
        "attention_mask": t["attention"],
        "position_ids": (t["attention"].cumsum(1) - 1).clamp(min=0),
        "response_mask": t["response_mask"],
        "old_log_probs": t["old"],
        "ref_log_prob": t["ref"],
        "advantages": t["adv"],
    }
    if with_weights:
        fields["rollout_is_weights"] = t["weights"]
    data = left_right_2_no_padding(TensorDict(fields, batch_size=[len(ids)]))
    sizes = {"dp_size": 1, "batch_num_tokens": None, "global_batch_size": None}
    sizes.update(global_sizes or {})
    tu.assign_non_tensor(data, **sizes)
    valid = t["attention"].bool()
    offsets = torch.nn.functional.pad(valid.sum(1).cumsum(0), (1, 0))
    logp_values = t["full_logp"][valid].clone().requires_grad_()
    output = {"log_probs": torch.nested.nested_tensor_from_jagged(logp_values, offsets=offsets)}
    if with_entropy:
        output["entropy"] = torch.nested.nested_tensor_from_jagged(t["full_entropy"][valid], offsets=offsets)
    return output, data, logp_values


def _actor(guide="branch", agg="token-mean", kl_type="low_var_kl", placement="loss", sage=True):
    """verl's ActorConfig with SAGE's policy loss (or verl's plain one, ``sage=False``)."""
    settings = SAGEPolicyLossConfig(guide=guide, kl_placement=placement, gamma=0.8, tau=1.0) if sage else None
    return ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        use_kl_loss=True,
        kl_loss_coef=0.05,
        kl_loss_type=kl_type,
        calculate_entropy=sage,
        loss_agg_mode=agg,
        **({"policy_loss": settings} if sage else {}),
    )


def _expected(t, config, data, logp_values, log_q, estimator="k3", weights=None):
    logp = no_padding_2_padding(logp_values, data)
    s = config.policy_loss
    return sage_loss(
        logp,
        t["old"],
        t["ref"],
        t["adv"],
        t["response_mask"],
        log_q=log_q,
        beta=config.kl_loss_coef,
        kl_estimator=estimator,
        kl_log_ratio_clip=s.kl_log_ratio_clip,
        kl_placement=s.kl_placement,
        epsilon_low=0.2,
        epsilon_high=0.28,
        delta=config.clip_ratio_c,
        loss_agg_mode=config.loss_agg_mode,
        importance_weights=weights,
    )


@pytest.mark.parametrize("guide", ["branch", "token", "branch_token", "none"])
def test_loss_and_gradient_equal_sage_loss(guide):
    t = _padded()
    config = _actor(guide)
    output, data, leaf = _verl_inputs(t)
    loss, metrics = sage_ppo_loss(config, output, data)
    (grad,) = torch.autograd.grad(loss, leaf)

    mask = t["response_mask"].bool()
    response_entropy = no_padding_2_padding(output["entropy"], data)
    expected_leaf = leaf.detach().clone().requires_grad_()
    logp = no_padding_2_padding(expected_leaf, data)
    q = compute_guide(
        guide, mask, config.policy_loss.guide_params, entropy=response_entropy, logp=logp.detach()
    )
    if guide == "none":
        assert q is None and "q/mean" not in metrics
    else:
        assert 0 < (q[mask] != 1).float().mean() < 1  # an informative guide on this batch
    out = _expected(t, config, data, expected_leaf, None if q is None else q.log())
    (expected_grad,) = torch.autograd.grad(out.loss, expected_leaf)

    assert loss.item() == pytest.approx(out.loss.item(), abs=1e-7)
    assert torch.allclose(grad, expected_grad, atol=1e-7)
    assert metrics["kl"].aggregate() == pytest.approx(
        (out.kl * mask).sum().item() / mask.sum().item(), rel=1e-6
    )
    if q is not None:
        assert metrics["q/mean"].aggregate() == pytest.approx(q[mask].mean().item(), rel=1e-6)
        assert metrics["q/frac_above_1"].aggregate() == pytest.approx((q[mask] > 1).float().mean().item())
        assert metrics["q/frac_below_1"].aggregate() == pytest.approx((q[mask] < 1).float().mean().item())


def test_reward_placement_sequence_mean_and_rollout_weights():
    t = _padded()
    config = _actor("branch", agg="seq-mean-token-mean", kl_type="k2", placement="reward")
    output, data, leaf = _verl_inputs(t, with_weights=True)
    loss, metrics = sage_ppo_loss(config, output, data)
    mask = t["response_mask"].bool()
    q = compute_guide(
        "branch", mask, config.policy_loss.guide_params, entropy=no_padding_2_padding(output["entropy"], data)
    )
    out = _expected(t, config, data, leaf, q.log(), estimator="k2", weights=t["weights"])
    assert loss.item() == pytest.approx(out.loss.item(), abs=1e-7)
    assert "kl_loss" not in metrics  # the KL went into the advantages, not the loss
    assert not torch.allclose(out.advantages, t["adv"])


def test_micro_batches_add_up_to_the_mini_batch():
    """With verl's global sizes, two micro-batches' losses and metrics sum to the whole batch's."""
    whole = _padded()
    config = _actor("branch")
    tokens = int(whole["response_mask"].sum())
    loss_whole, metrics_whole = sage_ppo_loss(config, *_verl_inputs(whole)[:2])
    parts = [
        sage_ppo_loss(config, *_verl_inputs(_padded(rows), global_sizes={"batch_num_tokens": tokens})[:2])
        for rows in ([0, 1], [2, 3, 4])
    ]
    assert sum(p[0].item() for p in parts) == pytest.approx(loss_whole.item(), abs=1e-7)
    for name in ("q/mean", "kl", "kl/reference"):
        summed = sum(p[1][name].aggregate() for p in parts)
        assert summed == pytest.approx(metrics_whole[name].aggregate(), rel=1e-6), name


def test_none_guide_is_verls_own_grpo_loss():
    """q ≡ 1 through sagerl's objective is verl's vanilla clipped surrogate (with its dual clip) + β·k3."""
    t = _padded()
    sage_config, plain = _actor("none"), _actor(sage=False)
    assert get_policy_loss_fn(plain.policy_loss.loss_mode).__name__ == "compute_policy_loss_vanilla"
    t["adv"][1] = -3.0 * t["response_mask"][1]  # a large negative advantage: the dual clip matters
    t["old"][1] = t["old"][1] - 1.5  # ratio > clip_ratio_c = 3 on that row
    sage, _ = sage_ppo_loss(sage_config, *_verl_inputs(t)[:2])
    model_output, data, _ = _verl_inputs(t, with_entropy=False)
    verl, _ = partial(ppo_loss, config=plain)(model_output=model_output, data=data)
    assert sage_config.policy_loss.guide == "none"
    assert sage.item() == pytest.approx(verl.item(), abs=1e-6)


def test_missing_entropy_is_a_clear_error():
    t = _padded()
    with pytest.raises(ConfigError, match="calculate_entropy=True"):
        sage_ppo_loss(_actor("branch"), *_verl_inputs(t, with_entropy=False)[:2])
