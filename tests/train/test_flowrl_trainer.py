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
        (dict(entropy_adv_alpha=0.4), "the entropy advantage makes them per token: set entropy_adv_alpha=0"),
        (dict(loss_type="dapo"), "set loss_agg_mode='seq-mean-token-mean' \\(got 'token-mean'\\)"),
        (dict(flowrl_beta=-1.0), r"^flowrl_beta=-1.0 must be a number in \(0, inf\)$"),
    ],
)
def test_bad_flowrl_settings_fail_at_config_time(overrides, message):
    with pytest.raises(ConfigError, match=message):
        SAGEConfig(**{**BASE, "policy_loss": "flowrl", "beta": 0.05, **overrides})


def _train_flowrl(tiny_model, out, max_steps, resume=None):
    from datasets import Dataset
    from test_trainer_loss import RecordingReward

    from sagerl.train import SAGETrainer

    args = SAGEConfig(
        output_dir=str(out),
        per_device_train_batch_size=2 * GROUP,
        num_generations=GROUP,
        max_completion_length=8,
        learning_rate=1e-3,
        lr_scheduler_type="constant",
        beta=0.05,
        report_to="none",
        seed=3,
        max_steps=max_steps,
        save_steps=1,
        bf16=False,
        use_cpu=True,
        policy_loss="flowrl",
        flowrl_beta=2.0,
        loss_type="grpo",
        disable_tqdm=True,
    )
    dataset = Dataset.from_dict(
        {
            "prompt": [f"What is {a} + {a + 1}?" for a in range(8)],
            "answer": [str(2 * a + 1) for a in range(8)],
        }
    )
    trainer = SAGETrainer(
        model=str(tiny_model), reward_funcs=[RecordingReward()], args=args, train_dataset=dataset
    )
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def test_the_log_z_head_is_saved_and_resumed_exactly(tiny_model, tmp_path):
    """A FlowRL run stopped after step 2 and resumed from its checkpoint ends with the policy and the log Z head of
    a run that was never interrupted: the head is in the checkpoint's weights, and the resumed run loads it
    (not a freshly initialised head)."""
    from safetensors import safe_open

    straight = _train_flowrl(tiny_model, tmp_path / "straight", 3)
    _train_flowrl(tiny_model, tmp_path / "split", 2)
    with safe_open(str(tmp_path / "split" / "checkpoint-2" / "model.safetensors"), "pt") as f:
        head_keys = [k for k in f.keys() if k.startswith("flowrl_log_z.")]
    assert head_keys, "the checkpoint has no log Z head"
    resumed = _train_flowrl(
        tiny_model, tmp_path / "split", 3, resume=str(tmp_path / "split" / "checkpoint-2")
    )
    fresh = _train_flowrl(tiny_model, tmp_path / "fresh", 1)
    got = dict(resumed.model.named_parameters())
    for name, want in straight.model.named_parameters():
        assert torch.equal(got[name], want), name
    head = [n for n in got if n.startswith("flowrl_log_z.")]
    assert len(head) == len(head_keys)
    moved = dict(fresh.model.named_parameters())
    assert any(
        not torch.equal(got[n], moved[n]) for n in head
    )  # 3 steps moved it past 1 step's: a real check
