"""One real actor update through verl's worker (``ActorRolloutRefWorker(role="actor")``) with SAGE, on CPU.

The config is verl's ``ppo_trainer.yaml`` with the SAGE overrides of docs/scale.md. The step runs verl's own path:
``init_model`` (FSDP2, one gloo process), ``compute_log_prob`` (old log-probs and entropies, as the trainer
computes them) and ``update_actor`` over two micro-batches. Its logged loss, KL and q statistics must be what
:mod:`sagerl.objective` says for the same tensors, and the weights must move.
"""

import pytest
import torch
from verl_cpu import compose, cpu_overrides, tiny_model

B, PROMPT, RESPONSE = 8, 6, 10
GAMMA, TAU, BETA = 2.0, 3.2, 0.05
SAGE_OVERRIDES = [
    "++actor_rollout_ref.actor.policy_loss={_target_:sagerl.integrations.verl.SAGEPolicyLossConfig,"
    f"loss_mode:sage,guide:branch,gamma:{GAMMA},tau:{TAU}}}",
    "actor_rollout_ref.actor.calculate_entropy=True",
    "actor_rollout_ref.actor.use_kl_loss=True",
    f"actor_rollout_ref.actor.kl_loss_coef={BETA}",
    "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
]


def _batch(generator):
    """A left-padded prompt + right-padded response batch in verl's padded layout."""
    from verl import DataProto
    from verl.utils.model import compute_position_id_with_mask

    input_ids = torch.randint(0, 128, (B, PROMPT + RESPONSE), generator=generator)
    attention_mask = torch.ones(B, PROMPT + RESPONSE, dtype=torch.int64)
    prompt_pad = torch.tensor([0, 2, 0, 1, 3, 0, 0, 2])
    response_len = torch.tensor([10, 7, 4, 10, 9, 1, 6, 10])
    for i in range(B):
        attention_mask[i, : prompt_pad[i]] = 0
        attention_mask[i, PROMPT + response_len[i] :] = 0
    return DataProto.from_single_dict(
        {
            "input_ids": input_ids,
            "prompts": input_ids[:, :PROMPT],
            "responses": input_ids[:, PROMPT:],
            "attention_mask": attention_mask,
            "position_ids": compute_position_id_with_mask(attention_mask),
            "response_mask": attention_mask[:, PROMPT:],
        },
        meta_info={"temperature": 1.0},
    )


def _to_worker(data, **extra):
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    td = left_right_2_no_padding(data.to_tensordict())
    tu.assign_non_tensor(td, temperature=1.0, **extra)
    return td


def actor_worker(model_dir, overrides, mini_batch=B):
    """verl's ``ActorRolloutRefWorker(role="actor")`` on the CPU (micro-batches of B / 2), its model built."""
    from verl.workers.engine_workers import ActorRolloutRefWorker

    cfg = compose(cpu_overrides(model_dir, batch_size=mini_batch, micro_batch_size=B // 2) + overrides)
    w = ActorRolloutRefWorker(config=cfg.actor_rollout_ref, role="actor")
    w.init_model()
    return w


def update_actor(worker, data, calculate_entropy, batch_size=B, **extra):
    """One ``update_actor`` call on the whole of ``data`` (mini-batches of ``batch_size``, one epoch, no
    shuffle); its metrics, one value each."""
    from verl.utils import tensordict_utils as tu

    settings = dict(epochs=1, seed=0, dataloader_kwargs={"shuffle": False}, compute_loss=True, **extra)
    td = _to_worker(
        data,
        calculate_entropy=calculate_entropy,
        global_batch_size=batch_size,
        mini_batch_size=batch_size,
        **settings,
    )
    metrics = tu.get(worker.update_actor(td), "metrics")
    return {k: (v[0] if isinstance(v, list) else v) for k, v in metrics.items()}


@pytest.fixture(scope="module")
def worker(gloo_cpu, tmp_path_factory):
    model_dir = tiny_model(tmp_path_factory.mktemp("tiny_qwen2"), initializer_range=0.3)
    return actor_worker(model_dir, SAGE_OVERRIDES)


def test_update_actor_step_is_the_objectives(worker):
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import no_padding_2_padding

    from sagerl.integrations.verl.worker import SAGETrainingWorker
    from sagerl.objective import branch_guide, sage_loss, shaped_kl

    assert isinstance(worker.actor, SAGETrainingWorker)
    assert worker.actor.loss_fn.func.__name__ == "sage_ppo_loss"

    generator = torch.Generator().manual_seed(0)
    data = _batch(generator)
    td = _to_worker(data, calculate_entropy=True, compute_loss=False)
    out = worker.compute_log_prob(td)
    old = no_padding_2_padding(tu.get(out, "log_probs"), td).float()
    entropy = no_padding_2_padding(tu.get(out, "entropy"), td).float()
    mask = data.batch["response_mask"].bool()

    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0])
    advantages = ((rewards - rewards.mean()) / rewards.std()).unsqueeze(1) * mask
    ref = (old + 0.3 * torch.randn(old.shape, generator=generator)) * mask
    data.batch["old_log_probs"] = old
    data.batch["ref_log_prob"] = ref
    data.batch["advantages"] = advantages

    before = [p.detach().clone() for p in worker.actor.engine.module.parameters()]
    metrics = update_actor(worker, data, calculate_entropy=True)
    after = list(worker.actor.engine.module.parameters())
    change = sum((a.detach() - b).abs().sum().item() for a, b in zip(after, before, strict=True))
    assert change > 0

    # The first (and only) mini-batch's forward is at the old weights: log π = log π_old, the same entropies.
    q = branch_guide(entropy, mask, gamma=GAMMA, tau=TAU)
    valid = q[mask]
    assert 0 < (valid > 1).float().mean() < 1, "the guide should be informative on this batch"
    expected = sage_loss(
        old,
        old,
        ref,
        advantages,
        mask,
        log_q=q.log(),
        beta=BETA,
        kl_estimator="k3",
        loss_agg_mode="token-mean",
    )

    def token_mean(x):
        return (x * mask).sum().item() / mask.sum().item()

    assert metrics["loss"] == pytest.approx(expected.loss.item(), abs=1e-5)
    assert metrics["q/mean"] == pytest.approx(valid.mean().item(), abs=1e-6)
    assert metrics["q/frac_above_1"] == pytest.approx((valid > 1).float().mean().item(), abs=1e-6)
    assert metrics["q/frac_below_1"] == pytest.approx(0.0, abs=1e-9)  # the branch guide never lowers q
    assert metrics["kl"] == pytest.approx(token_mean(shaped_kl(old, ref, q.log(), "k3")), rel=1e-4)
    assert metrics["kl/reference"] == pytest.approx(token_mean(shaped_kl(old, ref, None, "k3")), rel=1e-4)
    assert metrics["kl"] != pytest.approx(metrics["kl/reference"], rel=1e-3)  # the anchor is shaped
    assert metrics["kl_coef"] == BETA
