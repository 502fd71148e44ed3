"""SAGETrainer with SimKO (issue 38): the loss equals sagerl.objective's on per-token inputs recomputed independently
of the trainer (top-K log-probs, entropies, top-1 flags from a plain forward pass; correctness from the reward),
and the settings SimKO cannot honour fail at config time."""

from __future__ import annotations

import pytest
import torch
from test_trainer_loss import GROUP, make_trainer, rollout

from sagerl.errors import ConfigError
from sagerl.objective import branch_guide, compute_advantages, sage_loss
from sagerl.train import SAGEConfig


def _plain_inputs(model, inputs, temperature, k):
    """log π of the sampled tokens (with gradient), entropies, the top-k log-probs and top-1 flags, by hand."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    t = inputs["completion_ids"].shape[1]
    logits = model(input_ids=ids, attention_mask=attention).logits[:, -t - 1 : -1].float() / temperature
    logprobs = torch.log_softmax(logits, dim=-1)
    logp = logprobs.gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)
    entropy = -(logprobs.exp() * logprobs).sum(-1).detach()
    top = logprobs.detach().topk(k, dim=-1).indices
    topk = logprobs.gather(-1, top)
    return logp, entropy, topk, inputs["completion_ids"] == top[..., 0]


def test_simko_loss_and_gradient_equal_the_objective(tiny_model, tmp_path):
    trainer, reward = make_trainer(
        tiny_model,
        tmp_path,
        policy_loss="simko",
        simko_top_k=3,
        simko_mix=0.3,
        simko_tau=0.5,
        simko_neg_scale=1.5,
    )
    args = trainer.args
    inputs = rollout(trainer)
    rewards = torch.tensor(reward.calls[-1])
    assert inputs["sage_correct"].tolist() == (rewards == 1.0).tolist()
    policy = trainer.model
    loss = trainer.compute_loss(policy, inputs)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}
    policy.zero_grad()

    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32).eval()
    logp, entropy, topk, is_top1 = _plain_inputs(policy, inputs, args.temperature, 3)
    with torch.no_grad():
        ref_logp, _, _, _ = _plain_inputs(reference, inputs, args.temperature, 1)
    mask = inputs["completion_mask"].float()
    advantages = compute_advantages("grpo", rewards, GROUP)
    q = branch_guide(entropy, mask, args.gamma, args.tau, args.q_min, args.q_max)
    expected = sage_loss(
        logp, None, ref_logp, advantages, mask, log_q=q.log(), beta=args.beta, epsilon_low=args.epsilon,
        loss_agg_mode=args.resolved_loss_agg_mode, policy_loss="simko",
        policy_loss_params=dict(
            args.resolved_policy_loss_params, topk_logp=topk, old_topk_logp=topk.detach(), entropy=entropy,
            is_top1=is_top1, correct=rewards == 1.0,
        ),
    )  # fmt: skip
    torch.testing.assert_close(loss.detach(), expected.loss.detach(), rtol=1e-4, atol=1e-6)
    expected.loss.backward()
    simko = _flat(policy, grads)
    # SimKO's gradient is not PPO's (the top-K mix, the scaled negatives)
    logp, entropy, _, _ = _plain_inputs(policy, inputs, args.temperature, 3)
    plain = sage_loss(logp, None, ref_logp, advantages, mask, log_q=q.log(), beta=args.beta)
    plain.loss.backward()
    ppo = _flat(policy, grads)
    trained = torch.cat([grads[n].flatten() for n in sorted(grads)])
    noise = (
        trained - simko
    ).norm() / simko.norm()  # float32 rounding: TRL's shared-prefix pass vs one full forward
    assert noise < 5e-3  # measured 1.3e-3 (the random tiny model's large activations; plain GRPO's is alike)
    assert (ppo - simko).norm() / simko.norm() > 20 * noise  # measured 0.37
    assert (
        expected.surrogate.covariance_masked.any()
        and trainer._metrics["train"]["covariance/token_share"][-1] > 0
    )


def _flat(policy, names) -> torch.Tensor:
    """The gradient of ``names`` as one vector, then zeroed."""
    out = torch.cat([dict(policy.named_parameters())[n].grad.flatten() for n in sorted(names)])
    policy.zero_grad()
    return out


BASE = dict(output_dir="/tmp/unused", num_generations=GROUP, per_device_train_batch_size=GROUP, use_cpu=True)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            dict(policy_loss="simko", steps_per_generation=2),
            "policy_loss='simko' reads the top-K log-probs of π_old",
        ),
        (dict(policy_loss="simko", num_iterations=2), "train on-policy"),
        (dict(simko_mix=1.5), r"^simko_mix=1.5 must be a number in \[0, 1\]$"),
        (dict(simko_tau=-0.5), r"^simko_tau=-0.5 must be a number in \[0, 1\]$"),
        (dict(simko_top_k=0), r"^simko_top_k=0 must be an integer in \[1, inf\)$"),
        (dict(simko_neg_scale=0.0), r"^simko_neg_scale=0.0 must be a number in \(0, inf\)$"),
    ],
)
def test_bad_simko_settings_fail_at_config_time(overrides, message):
    with pytest.raises(ConfigError, match=message):
        SAGEConfig(**{**BASE, **overrides})
