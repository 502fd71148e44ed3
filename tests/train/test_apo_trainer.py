"""SAGETrainer with APO (issue 38): the reference's top-K tokens come from the reference forward pass TRL already runs
(one pass over the rows, no second one), the loss and gradient equal sagerl.objective's on inputs recomputed from
plain forward passes, and the settings APO cannot honour fail at config time."""

from __future__ import annotations

import pytest
import torch
from test_trainer_loss import GROUP, make_trainer, rollout

from sagerl.errors import ConfigError
from sagerl.objective import branch_guide, compute_advantages, safe_manifold_logp, sage_loss
from sagerl.train import SAGEConfig

K = 3


def _plain(model, inputs, temperature):
    """(B, T, V) log-probs of the completion positions, from one plain forward pass."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    t = inputs["completion_ids"].shape[1]
    logits = model(input_ids=ids, attention_mask=attention).logits[:, -t - 1 : -1].float() / temperature
    return torch.log_softmax(logits, dim=-1)


def test_apo_reads_the_reference_top_k_from_the_one_reference_pass(tiny_model, tmp_path):
    trainer, reward = make_trainer(
        tiny_model, tmp_path, policy_loss="apo", apo_top_k=K, apo_lambda=1.5, apo_beta=0.5
    )
    args = trainer.args
    calls = []
    hook = trainer.ref_model.register_forward_hook(lambda module, inp, out: calls.append(1))
    inputs = rollout(trainer)
    hook.remove()
    rows = inputs["completion_ids"].shape[0]
    chunks = -(-rows // args.per_device_train_batch_size)
    # one pass over the rows, in TRL's chunks: each chunk's prompts once (the shared prefix), then its rows' completions
    assert len(calls) == 2 * chunks
    assert inputs["ref_topk_ids"].shape == (*inputs["completion_ids"].shape, K)

    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32).eval()
    with torch.no_grad():
        ref_logprobs = _plain(reference, inputs, args.temperature)
    mask = inputs["completion_mask"].bool()
    top = ref_logprobs.topk(K, dim=-1)
    assert torch.equal(inputs["ref_topk_ids"][mask], top.indices[mask])
    torch.testing.assert_close(inputs["ref_topk_probs"][mask], top.values.exp()[mask], rtol=1e-4, atol=1e-6)
    ref_logp = ref_logprobs.gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(inputs["ref_per_token_logps"][mask], ref_logp[mask], rtol=1e-4, atol=1e-5)

    policy = trainer.model
    policy_calls = []
    hook = policy.register_forward_hook(lambda module, inp, out: policy_calls.append(1))
    loss = trainer.compute_loss(policy, inputs)
    hook.remove()
    assert (
        len(policy_calls) == 2
    )  # the loss's own forward pass, as TRL's: the prompts once, then the completions
    loss.backward()
    grads = {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}
    policy.zero_grad()

    logprobs = _plain(policy, inputs, args.temperature)
    logp = logprobs.gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)
    entropy = -(logprobs.exp() * logprobs).sum(-1).detach()
    manifold = safe_manifold_logp(logprobs, top.indices)
    fmask = inputs["completion_mask"].float()
    advantages = compute_advantages("grpo", torch.tensor(reward.calls[-1]), GROUP)
    q = branch_guide(entropy, fmask, args.gamma, args.tau, args.q_min, args.q_max)
    expected = sage_loss(
        logp, None, ref_logp, advantages, fmask, log_q=q.log(), beta=args.beta, epsilon_low=args.epsilon,
        loss_agg_mode=args.resolved_loss_agg_mode, policy_loss="apo",
        policy_loss_params=dict(
            args.resolved_policy_loss_params, manifold_logp=manifold, old_manifold_logp=manifold.detach()
        ),
    )  # fmt: skip
    torch.testing.assert_close(loss.detach(), expected.loss.detach(), rtol=1e-4, atol=1e-6)
    expected.loss.backward()
    apo = _flat(policy, grads)
    trained = torch.cat([grads[n].flatten() for n in sorted(grads)])
    assert (trained - apo).norm() / apo.norm() < 5e-3
    # APO's gradient is not PPO's (the push λ and the pull towards the reference's top-K)
    logp = (
        _plain(policy, inputs, args.temperature)
        .gather(-1, inputs["completion_ids"].unsqueeze(-1))
        .squeeze(-1)
    )
    sage_loss(logp, None, ref_logp, advantages, fmask, log_q=q.log(), beta=args.beta).loss.backward()
    ppo = _flat(policy, grads)
    assert (ppo - apo).norm() / apo.norm() > 0.05
    metrics = trainer._metrics["train"]
    assert 0 < metrics["apo/manifold_mass"][-1] <= 1 and 0 < metrics["apo/ref_topk_mass"][-1] <= 1
    assert metrics["covariance/token_share"][-1] > 0  # the tokens with a negative advantage


def _flat(policy, names) -> torch.Tensor:
    """The gradient of ``names`` as one vector, then zeroed."""
    out = torch.cat([dict(policy.named_parameters())[n].grad.flatten() for n in sorted(names)])
    policy.zero_grad()
    return out


def test_apo_top_k_above_the_vocabulary_fails(tiny_model, tmp_path):
    with pytest.raises(ConfigError, match=r"^apo_top_k=1000000 must be at most the vocabulary size \d+$"):
        make_trainer(tiny_model, tmp_path, policy_loss="apo", apo_top_k=1_000_000)


BASE = dict(
    output_dir="/tmp/unused",
    num_generations=GROUP,
    per_device_train_batch_size=GROUP,
    use_cpu=True,
    beta=0.05,
)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            dict(policy_loss="apo", beta=0.0),
            "policy_loss='apo' reads the reference model's top-K tokens .* set beta > 0",
        ),
        (
            dict(policy_loss="apo", steps_per_generation=2),
            "policy_loss='apo' reads π_old's log-probs .* on-policy",
        ),
        (dict(policy_loss="apo", num_iterations=2), "train on-policy"),
        (
            dict(policy_loss="apo", dynamic_sampling=True, max_num_gen_batches=4),
            "DAPO's refill does not keep .* set max_num_gen_batches=1",
        ),
        (dict(apo_lambda=0.0), r"^apo_lambda=0.0 must be a number in \(0, inf\)$"),
        (dict(apo_beta=-1.0), r"^apo_beta=-1.0 must be a number in \[0, inf\)$"),
        (dict(apo_top_k=0), r"^apo_top_k=0 must be an integer in \[1, inf\)$"),
    ],
)
def test_bad_apo_settings_fail_at_config_time(overrides, message):
    with pytest.raises(ConfigError, match=message):
        SAGEConfig(**{**BASE, **overrides})
