"""TRL's surrogate options on SAGETrainer: the loss equals trl.GRPOTrainer's on the same batch (guide off),
and with a guide the anchor is shaped on top of the chosen surrogate.

Options: importance_sampling_level="sequence" (GSPO), loss types cispo / sapo / luspo / vespo, the entropy
bonus (static and adaptive), the top-entropy token mask, the off-policy sequence mask and
multi_objective_aggregation="normalize_then_sum". The batch is made off-policy (π_old ≠ π_θ, the same
perturbation for both trainers) so that the ratios, clips and gates are exercised.
"""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from sagerl.errors import ConfigError
from sagerl.objective import branch_guide, sage_loss
from sagerl.train import SAGEConfig, SAGETrainer

GROUP = 4


def reward_a(completions, completion_ids, **kwargs):
    return [float(sum(ids) % 3 == 0) for ids in completion_ids]


def reward_b(completions, completion_ids, **kwargs):
    return [float(len(ids)) / 10 + (ids[0] % 5) for ids in completion_ids]


def _args(tmp_path, cls, **overrides):
    values = dict(
        output_dir=str(tmp_path / cls.__name__),
        per_device_train_batch_size=2 * GROUP,
        num_generations=GROUP,
        max_completion_length=10,
        temperature=0.9,
        beta=0.05,
        report_to="none",
        seed=3,
        bf16=False,
    )
    values.update(overrides)
    return cls(**values)


def _rollout(trainer):
    # the policy moved away from the reference (the same for both trainers), so that the KL is not 0
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.add_(0.003 * torch.randn(p.shape, generator=g))
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    rows = [{"prompt": "What is 2 + 3?"}] * GROUP + [{"prompt": "What is 7 - 4?"}] * GROUP
    torch.manual_seed(0)
    inputs = trainer._generate_and_score_completions(rows)
    # off-policy: π_old = π_ref (the initial policy) plus a fixed perturbation, the same for both trainers
    g = torch.Generator().manual_seed(5)
    noise = 0.4 * torch.randn(inputs["completion_mask"].shape, generator=g)
    inputs["old_per_token_logps"] = inputs["ref_per_token_logps"] + noise
    return inputs


def _loss(cls, tiny_model, tmp_path, funcs, **overrides):
    trainer = cls(
        model=str(tiny_model),
        reward_funcs=funcs,
        args=_args(tmp_path, GRPOConfig, **overrides),
        train_dataset=Dataset.from_dict({"prompt": ["What is 2 + 3?", "What is 7 - 4?"]}),
    )
    if isinstance(
        trainer, SAGETrainer
    ):  # the loss on TRL's own per-row log-probs: the formulas compared alone
        trainer.args.share_prompt_prefix = (
            False  # (the shared-prefix log-probs: tests/train/test_shared_prefix.py)
        )
    inputs = _rollout(trainer)
    return trainer, inputs, trainer.compute_loss(trainer.model, inputs)


OPTIONS = {
    "gspo": dict(importance_sampling_level="sequence"),
    "gspo dapo delta": dict(importance_sampling_level="sequence", loss_type="dapo", delta=1.3),
    "cispo": dict(loss_type="cispo", epsilon_high=1.2),
    "cispo sequence": dict(loss_type="cispo", epsilon_high=1.1, importance_sampling_level="sequence"),
    "sapo": dict(loss_type="sapo"),
    "luspo": dict(loss_type="luspo", importance_sampling_level="sequence"),
    "vespo": dict(loss_type="vespo"),
    "entropy bonus": dict(entropy_coef=0.3),
    "entropy bonus dapo": dict(entropy_coef=0.3, loss_type="dapo"),
    "top-entropy mask": dict(top_entropy_quantile=0.3),
    "top-entropy mask + bonus": dict(top_entropy_quantile=0.5, entropy_coef=0.2),
    "off-policy mask": dict(off_policy_mask_threshold=0.05),
    "normalize_then_sum": dict(multi_objective_aggregation="normalize_then_sum", reward_weights=[1.0, 0.5]),
}


@pytest.mark.parametrize("option", list(OPTIONS))
def test_loss_equals_trl_on_the_same_batch(option, tiny_model, tmp_path):
    funcs = [reward_a, reward_b]
    results = [
        _loss(cls, tiny_model, tmp_path, funcs, **OPTIONS[option]) for cls in (SAGETrainer, GRPOTrainer)
    ]
    (sage, sage_inputs, sage_loss_value), (_, trl_inputs, trl_loss_value) = results
    assert torch.equal(sage_inputs["completion_ids"], trl_inputs["completion_ids"])
    torch.testing.assert_close(sage_inputs["advantages"], trl_inputs["advantages"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(sage_loss_value.detach(), trl_loss_value.detach(), rtol=1e-5, atol=1e-7)
    assert sage_loss_value.requires_grad
    if "kl" in sage._metrics["train"]:
        assert sage._metrics["train"]["kl"][-1] > 1e-4  # the anchor is in the compared loss


def test_the_option_changes_the_loss(tiny_model, tmp_path):
    """The equality above can tell the options apart: each gives a loss different from plain GRPO's."""
    funcs = [reward_a, reward_b]
    base = _loss(SAGETrainer, tiny_model, tmp_path / "base", funcs)[2].item()
    for option in ("gspo", "cispo", "sapo", "vespo", "entropy bonus", "top-entropy mask"):
        value = _loss(SAGETrainer, tiny_model, tmp_path / option, funcs, **OPTIONS[option])[2].item()
        assert abs(value - base) > 1e-6, option


def test_adaptive_entropy_controller_matches_trl(tiny_model, tmp_path):
    options = dict(entropy_coef=0.01, use_adaptive_entropy=True, entropy_target=50.0, entropy_coef_delta=0.02)
    coefs, losses = [], []
    for cls in (SAGETrainer, GRPOTrainer):
        trainer, inputs, first = _loss(cls, tiny_model, tmp_path, [reward_a], **options)
        second = trainer.compute_loss(trainer.model, inputs)  # the bonus is applied from the second step on
        coefs.append(trainer.entropy_coef)
        losses.append((first.detach(), second.detach()))
    assert coefs[0] == pytest.approx(coefs[1]) == pytest.approx(0.05)
    for a, b in zip(losses[0], losses[1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("policy", ["gspo", "cispo", "sapo", "vespo"])
def test_the_guide_shapes_the_anchor_on_top_of_the_surrogate(policy, tiny_model, tmp_path):
    """With the branch guide on, the trainer's loss is sage_loss with that surrogate and the shaped anchor."""
    overrides = {
        "gspo": dict(importance_sampling_level="sequence"),
        "cispo": dict(loss_type="cispo", epsilon_high=1.2),
        "sapo": dict(loss_type="sapo"),
        "vespo": dict(loss_type="vespo"),
    }[policy]
    args = _args(tmp_path, SAGEConfig, guide="branch", gamma=0.5, tau=2.8, **overrides)
    trainer = SAGETrainer(
        model=str(tiny_model),
        reward_funcs=[reward_a],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["What is 2 + 3?", "What is 7 - 4?"]}),
    )
    assert args.resolved_policy_loss == policy
    inputs = _rollout(trainer)
    loss = trainer.compute_loss(trainer.model, inputs)
    with torch.no_grad():
        logp, entropy, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model,
            torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1),
            torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1),
            inputs["completion_ids"].size(1),
            compute_entropy=True,
        )
    mask = inputs["completion_mask"].float()
    q = branch_guide(entropy, mask, gamma=0.5, tau=2.8, q_min=args.q_min, q_max=args.q_max)
    assert 0 < (q[mask.bool()] > 1).float().mean() < 1
    common = dict(
        beta=0.05,
        kl_bias_correction=args.use_bias_correction_kl,
        kl_bias_correction_level=args.importance_sampling_level,
        epsilon_low=args.epsilon,
        epsilon_high=args.epsilon_high,
        loss_agg_mode=args.resolved_loss_agg_mode,
        num_tokens=mask.sum(),
        max_len=args.max_completion_length,
        policy_loss=policy,
        policy_loss_params=args.resolved_policy_loss_params,
    )
    old, ref, adv = inputs["old_per_token_logps"], inputs["ref_per_token_logps"], inputs["advantages"]
    guided = sage_loss(logp, old, ref, adv, mask, log_q=q.log(), **common).loss
    unguided = sage_loss(logp, old, ref, adv, mask, **common).loss
    torch.testing.assert_close(loss.detach(), guided, rtol=1e-4, atol=1e-6)
    assert abs(guided - unguided) > 1e-5


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(kl_placement="reward", top_entropy_quantile=0.2), "top_entropy_quantile=0.2 is not supported"),
        (dict(kl_placement="reward", off_policy_mask_threshold=0.5), "off_policy_mask_threshold=0.5"),
        (
            dict(multi_objective_aggregation="normalize_then_sum", advantage_estimator="grpo"),
            "defines the advantages itself",
        ),
        (dict(policy_loss="ppo"), "policy_loss='ppo' is not one of clip, gspo, cispo, sapo, vespo"),
    ],
)
def test_refused_combinations(overrides, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        _args(tmp_path, SAGEConfig, **overrides)
