"""SAGETrainer with the exploration methods (sagerl.objective): the loss equals the objective on independently
recomputed tensors, bad settings fail at config time, and DAPO's refill fills the step with varied groups."""

from __future__ import annotations

import pytest
import torch
from test_trainer_loss import GROUP, make_trainer, plain_logps_and_entropy, rollout

from sagerl.errors import ConfigError
from sagerl.objective import compute_advantages, dynamic_sampling_mask, sage_loss
from sagerl.train import SAGEConfig

METHODS = {
    "passk": dict(advantage_estimator="passk", passk_k=2),
    "pkpo": dict(advantage_estimator="pkpo", passk_k=3),
    "pkpo loo": dict(advantage_estimator="pkpo", passk_k=2, pkpo_baseline="loo"),
    "w-reinforce": dict(advantage_estimator="w_reinforce", w_reinforce_lambda=0.1),
    "psr": dict(advantage_estimator="psr"),
    "nsr": dict(advantage_estimator="nsr"),
    "unlikely": dict(advantage_estimator="unlikely", unlikeliness_beta=0.25),
    "entropy-adv": dict(entropy_adv_alpha=0.4, entropy_adv_kappa=2.0),
    "clip-cov": dict(
        policy_loss="clip_cov", clip_cov_ratio=0.2, clip_cov_lb=-1e9, clip_cov_ub=1e9, steps_per_generation=2
    ),
    "kl-cov": dict(policy_loss="kl_cov", kl_cov_ratio=0.2, kl_cov_coef=1.0, steps_per_generation=2),
    "w-reinforce+branch@reward": dict(advantage_estimator="w_reinforce", kl_placement="reward"),
}


@pytest.mark.parametrize("case", list(METHODS))
def test_trainer_loss_equals_objective(case, tiny_model, tmp_path):
    trainer, reward = make_trainer(tiny_model, tmp_path, **METHODS[case])
    args = trainer.args
    inputs = rollout(trainer)
    policy = trainer.model
    old_logp, _ = plain_logps_and_entropy(policy, inputs, args.temperature)
    if args.resolved_policy_loss != "clip":  # an optimizer step happened since the rollout: π ≠ π_old
        torch.testing.assert_close(inputs["old_per_token_logps"], old_logp, rtol=1e-4, atol=1e-4)
        with torch.no_grad():
            for p in policy.parameters():
                p.mul_(1.02)
        # the rollout batch serves 2 optimizer steps: train on its first half, as TRL's buffer would
        rows = inputs["completion_ids"].shape[0]
        inputs = {
            k: v[: rows // 2] if torch.is_tensor(v) and v.dim() and v.shape[0] == rows else v
            for k, v in inputs.items()
        }
        old_logp = old_logp[: rows // 2]
    torch.manual_seed(7)  # Clip-Cov's random choice
    loss = trainer.compute_loss(policy, inputs)

    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32).eval()
    logp, entropy = plain_logps_and_entropy(policy, inputs, args.temperature)
    ref_logp, _ = plain_logps_and_entropy(reference, inputs, args.temperature)
    rewards = torch.tensor(reward.calls[-1])[: inputs["completion_ids"].shape[0]]
    mask = inputs["completion_mask"].float()
    seq_logp = (old_logp * mask).sum(1) / mask.sum(1)
    advantages = compute_advantages(
        args.resolved_advantage_estimator, rewards, GROUP, **args.advantage_params, sequence_logp=seq_logp
    )
    torch.testing.assert_close(inputs["advantages"], advantages, rtol=1e-4, atol=1e-5)
    assert advantages.abs().sum() > 0
    from sagerl.objective import branch_guide

    q = branch_guide(entropy, mask, args.gamma, args.tau, args.q_min, args.q_max)
    torch.manual_seed(7)
    expected = sage_loss(
        logp,
        old_logp if args.resolved_policy_loss != "clip" else None,
        ref_logp,
        advantages,
        mask,
        log_q=q.log(),
        beta=args.beta,
        kl_placement=args.kl_placement,
        kl_bias_correction=args.use_bias_correction_kl,
        epsilon_low=args.epsilon,
        epsilon_high=args.epsilon_high,
        loss_agg_mode=args.resolved_loss_agg_mode,
        policy_loss=args.resolved_policy_loss,
        policy_loss_params=args.resolved_policy_loss_params,
        entropy=entropy,
        entropy_adv_alpha=args.entropy_adv_alpha,
        entropy_adv_kappa=args.entropy_adv_kappa,
    )
    torch.testing.assert_close(loss.detach(), expected.loss, rtol=1e-4, atol=1e-6)
    plain = sage_loss(
        logp,
        old_logp,
        ref_logp,
        compute_advantages("grpo", rewards, GROUP),
        mask,
        log_q=q.log(),
        beta=args.beta,
    )
    assert (plain.per_token_loss - expected.per_token_loss).abs().max() > 1e-3  # the method changes the loss
    if args.resolved_policy_loss != "clip":
        share = trainer._metrics["train"]["covariance/token_share"][-1]
        assert share == pytest.approx(expected.surrogate.covariance_masked[mask.bool()].float().mean().item())
        assert share > 0


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            dict(advantage_estimator="passk", passk_k=0),
            r"passk_k=0 must be an integer in \[1, inf\)",
        ),
        (
            dict(advantage_estimator="pkpo", passk_k=5),
            r"passk_k=5 must be an integer in \[1, 4\]",
        ),
        (
            dict(advantage_estimator="pkpo", passk_k=4, pkpo_baseline="loo"),
            "needs passk_k <= num_generations - 1",
        ),
        (dict(w_reinforce_lambda=0.0), r"w_reinforce_lambda=0.0 must be a number in \(0, inf\)"),
        (dict(unlikeliness_beta=1.5), r"unlikeliness_beta=1.5 must be a number in \[0, 1\]"),
        (dict(entropy_adv_kappa=1.0), r"entropy_adv_kappa=1.0 must be a number in \(1, inf\)"),
        (dict(entropy_adv_alpha=-0.1), r"entropy_adv_alpha=-0.1 must be a number in \[0, inf\)"),
        (dict(clip_cov_ratio=1.0), r"clip_cov_ratio=1.0 must be a number in \(0, 1\)"),
        (dict(kl_cov_ratio=0.0), r"kl_cov_ratio=0.0 must be a number in \(0, 1\)"),
        (dict(policy_loss="kl_cov"), "does nothing when training is strictly on-policy"),
        (dict(policy_loss="cov"), "policy_loss='cov' is not one of"),
        (
            dict(advantage_estimator="w_reinforce", dynamic_sampling=True, overlong_buffer_len=4),
            "needs binary rewards",
        ),
        (dict(max_num_gen_batches=3), "set dynamic_sampling=True"),
        (dict(dynamic_sampling=True, max_num_gen_batches=-1), r"must be an integer in \[0, inf\)"),
    ],
)
def test_bad_settings_fail_at_config_time(overrides, message, tmp_path):
    base = dict(
        output_dir=str(tmp_path), num_generations=GROUP, per_device_train_batch_size=GROUP, use_cpu=True
    )
    with pytest.raises(ConfigError, match=message):
        SAGEConfig(**{**base, **overrides})


def test_refill_needs_whole_groups_on_each_process(tmp_path):
    # one process always holds whole groups (TRL checks the generation batch); on N processes a process's
    # share may not: per_device_train_batch_size 6 of num_generations 4, as on 2 processes with 12 rows
    args = SAGEConfig(
        output_dir=str(tmp_path), num_generations=GROUP, per_device_train_batch_size=8, use_cpu=True,
        dynamic_sampling=True, max_num_gen_batches=3,
    )  # fmt: skip
    args.per_device_train_batch_size = 6
    with pytest.raises(
        ConfigError, match=r"rollout batch \(per_device_train_batch_size x steps_per_generation = 6\)"
    ):
        args._check_exploration_methods()
    args.max_num_gen_batches = 1
    args._check_exploration_methods()  # filter only: fine


def test_kl_cov_is_accepted_off_policy(tmp_path):
    base = dict(
        output_dir=str(tmp_path), num_generations=GROUP, per_device_train_batch_size=GROUP, use_cpu=True
    )
    assert not SAGEConfig(**base, policy_loss="kl_cov", steps_per_generation=2).is_on_policy
    assert not SAGEConfig(**base, policy_loss="kl_cov", num_iterations=2).is_on_policy
    assert SAGEConfig(**base).is_on_policy


class FlakyGroupReward:
    """Round 1: the second prompt's group all correct (no spread); later rounds: spread in every group."""

    __name__ = "correctness"

    def __init__(self, constant_rounds: int = 1):
        self.calls: list[list[float]] = []
        self.constant_rounds = constant_rounds

    def __call__(self, completions, completion_ids, prompts=None, **kwargs):
        rewards = [float(i % 2) for i in range(len(completion_ids))]
        if len(self.calls) < self.constant_rounds:
            rewards[GROUP : 2 * GROUP] = [1.0] * GROUP
        self.calls.append(rewards)
        return rewards


def _refill_trainer(tiny_model, tmp_path, reward, rounds):
    trainer, _ = make_trainer(
        tiny_model, tmp_path, dynamic_sampling=True, max_num_gen_batches=rounds, loss_agg_mode="token-mean"
    )
    trainer.reward_funcs = [reward]
    return trainer


def test_refill_samples_more_prompts_until_every_group_has_spread(tiny_model, tmp_path):
    reward = FlakyGroupReward(constant_rounds=1)
    trainer = _refill_trainer(tiny_model, tmp_path, reward, rounds=5)
    inputs = rollout(trainer)
    assert len(reward.calls) == 2  # one refill round was enough
    assert inputs["completion_ids"].shape[0] == 2 * GROUP
    assert inputs["sage_keep"].tolist() == [1.0] * (2 * GROUP)
    # the step's groups: round 1's first group, then round 2's first group
    merged = torch.tensor(reward.calls[0][:GROUP] + reward.calls[1][:GROUP])
    torch.testing.assert_close(inputs["advantages"], compute_advantages("grpo", merged, GROUP))
    assert trainer._metrics["train"]["dynamic_sampling/rounds"][-1] == 2.0
    assert trainer._metrics["train"]["filtered_groups_share"][-1] == 0.0
    loss = trainer.compute_loss(trainer.model, inputs)
    assert torch.isfinite(loss)


def test_refill_stops_at_the_limit_and_drops_what_is_left(tiny_model, tmp_path):
    reward = FlakyGroupReward(constant_rounds=10)
    trainer = _refill_trainer(tiny_model, tmp_path, reward, rounds=2)
    inputs = rollout(trainer)
    assert len(reward.calls) == 2
    # two varied groups were found (one per round) and fill the step; no equal-reward group is needed
    assert inputs["sage_keep"].tolist() == [1.0] * (2 * GROUP)
    reward = FlakyGroupReward(constant_rounds=10)
    trainer = _refill_trainer(tiny_model, tmp_path / "b", reward, rounds=1)
    inputs = rollout(trainer)
    assert len(reward.calls) == 1  # max_num_gen_batches=1: filter only, as before
    keep = dynamic_sampling_mask(torch.tensor(reward.calls[0]), GROUP)
    assert inputs["sage_keep"].tolist() == keep.float().tolist() == [1.0] * GROUP + [0.0] * GROUP


def test_dapo_filter_reads_the_accuracy_not_the_overlong_penalty(tiny_model, tmp_path):
    # the case: a group all correct, one completion in the overlong buffer. verl's DAPO recipes filter on
    # `acc` (the reward before the penalty) and drop it; the weighted total (0.5 for that completion) kept it
    trainer, _ = make_trainer(
        tiny_model, tmp_path, dynamic_sampling=True, overlong_buffer_len=4, loss_agg_mode="token-mean"
    )
    assert trainer.reward_func_names == ["correctness", "overlong"]
    per_func = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, -0.5], [1.0, 0.0], [1.0, 0.0], [0.0, 0.0], [1.0, -0.25], [0.0, 0.0]])  # fmt: skip
    signal = trainer._filter_signal(per_func)
    assert signal.tolist() == per_func[:, 0].tolist()
    assert dynamic_sampling_mask(signal, GROUP).tolist() == [False] * GROUP + [True] * GROUP
    assert dynamic_sampling_mask(trainer._weighted_rewards(per_func), GROUP).tolist() == [True] * (2 * GROUP)
    # a TRL user's own reward function (not named correctness): the weighted total less DAPO's overlong term
    trainer.reward_func_names = ["my_reward", "overlong"]
    assert trainer._filter_signal(per_func).tolist() == per_func[:, 0].tolist()
    # and the rollout's keep-mask reads it
    inputs = rollout(trainer)
    correctness = torch.tensor(trainer.reward_funcs[0].calls[-1])
    expected = dynamic_sampling_mask(correctness, GROUP).float()
    assert inputs["sage_keep"].tolist() == expected.tolist() == [1.0] * GROUP + [0.0] * GROUP


class SixRightTwoWrong:
    """6 correct and 2 wrong completions among the 8 of a step (the issue's NSR example)."""

    __name__ = "correctness"

    def __call__(self, completions, completion_ids, **kwargs):
        return [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0][: len(completion_ids)]


def _policy_logp(model, inputs):
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    t = inputs["completion_ids"].shape[1]
    logits = model(input_ids=ids, attention_mask=attention).logits[:, -t - 1 : -1].float() / 0.9
    return torch.log_softmax(logits, dim=-1).gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)


def _gradient(model, loss) -> torch.Tensor:
    grads = torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad], allow_unused=True)
    return torch.cat([g.reshape(-1) for g in grads if g is not None])


@pytest.mark.parametrize("estimator", ["nsr", "psr"])
def test_signed_samples_only_is_the_authors_batch_of_kept_samples(estimator, tiny_model, tmp_path):
    # RLVR-Decomposed (Zhu et al.) subsets the batch to the correct (PSR) or wrong (NSR) samples and takes verl's
    # token mean over them: −A·ρ over the kept completions' tokens, A = +1 (PSR) or −1 (NSR), no KL
    grads = {}
    for only in (True, False):
        trainer, _ = make_trainer(
            tiny_model, tmp_path / str(only), advantage_estimator=estimator, signed_samples_only=only,
            guide="none", beta=0.0, loss_agg_mode="token-mean",
        )  # fmt: skip
        trainer.reward_funcs = [SixRightTwoWrong()]
        inputs = rollout(trainer)
        grads[only] = _gradient(trainer.model, trainer.compute_loss(trainer.model, inputs))
    rewards = torch.tensor(SixRightTwoWrong()(None, [0] * 8))
    kept = rewards == (1.0 if estimator == "psr" else 0.0)
    mask = inputs["completion_mask"].float() * kept.unsqueeze(1)
    logp = _policy_logp(trainer.model, inputs)
    sign = 1.0 if estimator == "psr" else -1.0
    theirs = _gradient(trainer.model, (-sign * torch.exp(logp - logp.detach()) * mask).sum() / mask.sum())
    torch.testing.assert_close(grads[True], theirs, rtol=1e-3, atol=1e-5)  # float32, fused head vs plain
    assert grads[True].norm().item() == pytest.approx(theirs.norm().item(), rel=1e-4)
    # sagerl's default keeps the other completions in the token count: the step scales by the kept tokens' share
    share = (mask.sum() / inputs["completion_mask"].sum()).item()
    torch.testing.assert_close(grads[False], share * theirs, rtol=1e-3, atol=1e-5)
    assert grads[False].norm().item() == pytest.approx(share * theirs.norm().item(), rel=1e-4)
    assert share < 1


def test_signed_samples_only_needs_psr_or_nsr(tmp_path):
    with pytest.raises(ConfigError, match="signed_samples_only .* needs advantage_estimator='psr' or 'nsr'"):
        SAGEConfig(output_dir=str(tmp_path), num_generations=GROUP, per_device_train_batch_size=GROUP,
                   use_cpu=True, advantage_estimator="w_reinforce", signed_samples_only=True)  # fmt: skip


def test_unlikeliness_refills_groups_of_equal_accuracy(tiny_model, tmp_path):
    # the authors' advantage_threshold + dynamic_update: a group whose samples are all correct leaves the batch and
    # more prompts are sampled; sagerl does it with DAPO's refill, as the unlikely preset sets it
    reward = FlakyGroupReward(constant_rounds=1)
    trainer, _ = make_trainer(
        tiny_model, tmp_path, advantage_estimator="unlikely", dynamic_sampling=True, max_num_gen_batches=5
    )
    trainer.reward_funcs = [reward]
    inputs = rollout(trainer)
    assert len(reward.calls) == 2 and trainer._metrics["train"]["dynamic_sampling/rounds"][-1] == 2.0
    assert inputs["sage_keep"].tolist() == [1.0] * (2 * GROUP)  # every group of the step has spread
    assert (inputs["advantages"].view(2, GROUP) != 0).any(dim=1).all()
