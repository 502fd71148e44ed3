"""SAGETrainer with FlowRL (issue 38): the loss equals sagerl.objective's on inputs recomputed independently of the
trainer (log-probs and the prompt's hidden states from a plain forward pass, log Z from the same head), the log Z
head is trained with the policy, and the settings FlowRL cannot honour fail at config time."""

from __future__ import annotations

import pytest
import torch
from test_trainer_loss import GROUP, make_trainer, rollout

from sagerl.errors import ConfigError
from sagerl.objective import branch_guide, compute_advantages, sage_loss
from sagerl.train import SAGEConfig


def test_flowrl_loss_equals_the_objective_and_trains_its_head(tiny_model, tmp_path):
    trainer, reward = make_trainer(tiny_model, tmp_path, policy_loss="flowrl", flowrl_beta=2.0)
    args = trainer.args
    policy = trainer.model
    head = policy.flowrl_log_z.eval()  # no dropout, so the recomputation draws none either
    inputs = rollout(trainer)
    loss = trainer.compute_loss(policy, inputs)
    loss.backward()
    head_grads = [p.grad.clone() for p in head.parameters()]
    assert all(g.abs().sum() > 0 for g in head_grads)  # log Z is trained
    policy.zero_grad()

    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    t = inputs["completion_ids"].shape[1]
    out = policy(input_ids=ids, attention_mask=attention, output_hidden_states=True)
    logprobs = torch.log_softmax(out.logits[:, -t - 1 : -1].float() / args.temperature, dim=-1)
    logp = logprobs.gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)
    entropy = -(logprobs.exp() * logprobs).sum(-1).detach()
    prompt_hidden = out.hidden_states[-1][:, : inputs["prompt_ids"].shape[1]]
    log_z = head(prompt_hidden, inputs["prompt_mask"])
    mask = inputs["completion_mask"].float()
    rewards = torch.tensor(reward.calls[-1])
    q = branch_guide(entropy, mask, args.gamma, args.tau, args.q_min, args.q_max)
    ref_logp = inputs["ref_per_token_logps"]
    expected = sage_loss(
        logp, None, ref_logp, compute_advantages("grpo", rewards, GROUP), mask, log_q=q.log(), beta=args.beta,
        policy_loss="flowrl", policy_loss_params=dict(args.resolved_policy_loss_params, log_z=log_z, ref_logp=ref_logp),
    )  # fmt: skip
    torch.testing.assert_close(loss.detach(), expected.loss.detach(), rtol=1e-4, atol=1e-6)
    expected.loss.backward()
    for got, want in zip(head_grads, (p.grad for p in head.parameters()), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-5)
    optimizer = trainer.create_optimizer()
    trained = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert all(id(p) in trained for p in head.parameters())


BASE = dict(output_dir="/tmp/unused", num_generations=GROUP, per_device_train_batch_size=GROUP, use_cpu=True)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            dict(beta=0.0),
            "policy_loss='flowrl' reads the reference's log-probs, which TRL computes only with beta > 0",
        ),
        (dict(kl_placement="reward"), "use kl_placement='loss'"),
        (dict(loss_type="dapo"), "set loss_agg_mode='seq-mean-token-mean' \\(got 'token-mean'\\)"),
        (dict(flowrl_beta=-1.0), r"^flowrl_beta=-1.0 must be a number in \(0, inf\)$"),
    ],
)
def test_bad_flowrl_settings_fail_at_config_time(overrides, message):
    with pytest.raises(ConfigError, match=message):
        SAGEConfig(**{**BASE, "policy_loss": "flowrl", "beta": 0.05, **overrides})
