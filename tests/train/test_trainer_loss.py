"""On a tiny random model, SAGETrainer's loss equals sagerl.objective on the same tensors.

The reference tensors are computed independently of TRL: a plain forward pass of the policy and of a fresh
copy of the reference model, log_softmax, gather; the guide and the loss come from sagerl.objective.
"""

from __future__ import annotations

import math

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM

from sagerl.objective import (
    branch_guide,
    branch_token_guide,
    compute_advantages,
    dynamic_sampling_mask,
    sage_loss,
    teacher_guide,
    token_guide,
)
from sagerl.train import SAGEConfig, SAGETrainer

GROUP = 4


class RecordingReward:
    """Deterministic rewards with spread inside groups; records what it returned."""

    __name__ = "correctness"

    def __init__(self):
        self.calls: list[list[float]] = []

    def __call__(self, completions, completion_ids, **kwargs):
        rewards = [float(sum(ids) % 3 == 0) for ids in completion_ids]
        # make the second group constant so that dynamic sampling has something to drop
        if len(rewards) >= 2 * GROUP:
            rewards[GROUP : 2 * GROUP] = [1.0] * GROUP
        self.calls.append(rewards)
        return rewards


def plain_logps_and_entropy(model, inputs, temperature):
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attention).logits
    t = inputs["completion_ids"].shape[1]
    logits = logits[:, -t - 1 : -1].float() / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def make_trainer(tiny_model, tmp_path, **overrides):
    args = dict(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=2 * GROUP,
        num_generations=GROUP,
        max_completion_length=10,
        temperature=0.9,
        beta=0.05,
        guide="branch",
        gamma=0.5,
        tau=2.8,  # the tiny model's entropies (0.2 to 4.2 nats) straddle it, so q varies
        report_to="none",
        seed=3,
        max_steps=5,
        bf16=False,
        loss_type="grpo",
    )
    args.update(overrides)
    reward = RecordingReward()
    dataset = Dataset.from_dict({"prompt": ["What is 2 + 3?", "What is 7 - 4?"], "answer": ["5", "3"]})
    trainer = SAGETrainer(
        model=str(tiny_model), reward_funcs=[reward], args=SAGEConfig(**args), train_dataset=dataset
    )
    trainer.model.train()
    trainer.state.max_steps = 5
    trainer.current_gradient_accumulation_steps = 1
    return trainer, reward


def rollout(trainer):
    rows = [{"prompt": "What is 2 + 3?", "answer": "5"}] * GROUP + [
        {"prompt": "What is 7 - 4?", "answer": "3"}
    ] * GROUP
    torch.manual_seed(0)
    return trainer._generate_and_score_completions(rows)


CASES = {
    "grpo+branch": dict(),
    "grpo+token": dict(guide="token", token_alpha=0.4),
    "bnpo+branch": dict(advantage_estimator="bnpo", loss_type="bnpo"),
    "dapo+branch": dict(loss_agg_mode="token-mean", epsilon_high=0.28, dynamic_sampling=True),
    "grpo+branch reward-placement": dict(kl_placement="reward"),
    "grpo+branch reference entropy": dict(guide_entropy_source="reference"),
    "grpo+branch_token": dict(guide="branch_token", token_normalization="prob", gamma=1.0, tau=2.0),
    "grpo+teacher": dict(guide="teacher", teacher_lambda=0.5),
}


@pytest.fixture(scope="module")
def tiny_teacher(tiny_model, tmp_path_factory):
    """The teacher guide's teacher: the tiny model with perturbed weights (same tokenizer), so that
    π_teacher/π_ref straddles 1 on the sampled tokens."""
    from transformers import AutoTokenizer

    teacher = AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in teacher.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    out = tmp_path_factory.mktemp("teacher") / "model"
    teacher.save_pretrained(out)
    AutoTokenizer.from_pretrained(str(tiny_model)).save_pretrained(out)
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_trainer_loss_equals_objective(case, tiny_model, tiny_teacher, tmp_path):
    overrides = dict(CASES[case])
    if overrides.get("guide") == "teacher":
        overrides["teacher_model"] = str(tiny_teacher)
    trainer, reward = make_trainer(tiny_model, tmp_path, **overrides)
    args = trainer.args
    inputs = rollout(trainer)
    loss = trainer.compute_loss(trainer.model, inputs)

    policy = trainer.model
    reference = AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32).eval()
    logp, entropy = plain_logps_and_entropy(policy, inputs, args.temperature)
    ref_logp, ref_entropy = plain_logps_and_entropy(reference, inputs, args.temperature)
    torch.testing.assert_close(inputs["ref_per_token_logps"], ref_logp, rtol=1e-4, atol=1e-4)

    rewards = torch.tensor(reward.calls[-1])
    advantages = compute_advantages(args.resolved_advantage_estimator, rewards, GROUP)
    torch.testing.assert_close(inputs["advantages"], advantages)
    mask = inputs["completion_mask"].float()
    if args.dynamic_sampling:
        keep = dynamic_sampling_mask(rewards, GROUP)
        assert keep.tolist() == [True] * GROUP + [False] * GROUP
        mask = mask * keep.unsqueeze(1)
    source_entropy = ref_entropy if args.guide_entropy_source == "reference" else entropy
    if args.guide == "token":
        q = token_guide(logp, mask, alpha=args.token_alpha, q_min=args.q_min, q_max=args.q_max)
    elif args.guide == "branch_token":
        q = branch_token_guide(entropy, logp, mask, args.gamma, args.tau, "prob", args.q_min, args.q_max)
    elif args.guide == "teacher":
        teacher = AutoModelForCausalLM.from_pretrained(str(tiny_teacher), dtype=torch.float32).eval()
        teacher_logp, _ = plain_logps_and_entropy(teacher, inputs, args.temperature)
        torch.testing.assert_close(inputs["teacher_logps"], teacher_logp, rtol=1e-4, atol=1e-4)
        q = teacher_guide(teacher_logp, ref_logp, mask, args.teacher_lambda, args.q_min, args.q_max)
    else:
        q = branch_guide(
            source_entropy, mask, gamma=args.gamma, tau=args.tau, q_min=args.q_min, q_max=args.q_max
        )
    assert 0 < (q[mask.bool()] > 1).float().mean() < 1  # the guide is active on some tokens, not all
    num_tokens = mask.sum() if args.resolved_loss_agg_mode == "token-mean" else None
    expected = sage_loss(
        logp,
        None,
        ref_logp,
        advantages,
        mask,
        log_q=q.log(),
        beta=args.beta,
        kl_placement=args.kl_placement,
        epsilon_low=args.epsilon,
        epsilon_high=args.epsilon_high,
        loss_agg_mode=args.resolved_loss_agg_mode,
        num_tokens=num_tokens,
        max_len=args.max_completion_length,
    ).loss
    torch.testing.assert_close(loss.detach(), expected, rtol=1e-4, atol=1e-6)
    unguided = sage_loss(
        logp,
        None,
        ref_logp,
        advantages,
        mask,
        beta=args.beta,
        kl_placement=args.kl_placement,
        loss_agg_mode=args.resolved_loss_agg_mode,
        num_tokens=num_tokens,
        max_len=args.max_completion_length,
    ).loss
    assert abs(unguided - expected) > 1e-5  # the check can tell a guided loss from an unguided one

    metrics = trainer._metrics["train"]
    assert metrics["q/mean"][-1] == pytest.approx(q[mask.bool()].mean().item(), rel=1e-4)
    if args.dynamic_sampling:
        assert metrics["filtered_groups_share"][-1] == 0.5


def test_plain_grpo_config_gives_trl_grpo(tiny_model, tmp_path):
    """A TRL user passing a plain GRPOConfig gets the same loss as trl.GRPOTrainer on the same batch."""
    from trl import GRPOConfig, GRPOTrainer

    common = dict(
        output_dir=str(tmp_path / "plain"),
        per_device_train_batch_size=2 * GROUP,
        num_generations=GROUP,
        max_completion_length=10,
        beta=0.05,
        report_to="none",
        seed=3,
        loss_type="dapo",
        bf16=False,
    )
    dataset = Dataset.from_dict({"prompt": ["What is 2 + 3?", "What is 7 - 4?"], "answer": ["5", "3"]})
    losses = []
    for cls in (SAGETrainer, GRPOTrainer):
        trainer = cls(
            model=str(tiny_model),
            reward_funcs=[RecordingReward()],
            args=GRPOConfig(**common),
            train_dataset=dataset,
        )
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = 1
        inputs = rollout(trainer)
        losses.append(trainer.compute_loss(trainer.model, inputs).detach())
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-7)


def test_lora_through_peft_trains_with_the_branch_guide(tiny_model, tmp_path):
    """PEFT: the reference is the base model with the adapter switched off (no reference copy)."""
    from peft import LoraConfig

    args = SAGEConfig(
        output_dir=str(tmp_path / "lora"),
        per_device_train_batch_size=GROUP,
        num_generations=GROUP,
        max_completion_length=6,
        beta=0.05,
        guide="branch",
        tau=2.8,
        report_to="none",
        seed=0,
        bf16=False,
        max_steps=1,
        learning_rate=1e-2,
        save_strategy="no",
        logging_steps=1,
    )
    dataset = Dataset.from_dict({"prompt": ["What is 2 + 3?"] * 2, "answer": ["5"] * 2})
    trainer = SAGETrainer(
        model=str(tiny_model),
        reward_funcs=[RecordingReward()],
        args=args,
        train_dataset=dataset,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    assert trainer.ref_model is None
    before = {k: v.clone() for k, v in trainer.model.named_parameters() if "lora_B" in k}
    trainer.train()
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(before[k], after[k]) for k in before)  # the adapter learned
    assert trainer.state.log_history[0]["kl"] >= 0.0


def test_guide_schedule_advances_per_optimizer_step(tiny_model, tmp_path):
    trainer, _ = make_trainer(tiny_model, tmp_path, guide_schedule="cosine", gradient_accumulation_steps=2)
    inputs = rollout(trainer)
    strengths = []
    for step in (0, 0, 2, 2, 4):  # two micro-batches at steps 0 and 2
        trainer.state.global_step = step
        trainer.compute_loss(trainer.model, inputs)
        strengths.append(trainer._metrics["train"]["guide/strength"][-1])
    # cosine from 1 at step 0 to 0 at the last of max_steps = 5 optimizer steps (step 4): (1 + cos(pi * step / 4)) / 2
    assert strengths[0] == strengths[1] == pytest.approx(1.0)
    assert strengths[2] == strengths[3] == pytest.approx(0.5 * (1 + math.cos(math.pi * 2 / 4)))
    assert strengths[4] == pytest.approx(0.0, abs=1e-12)
