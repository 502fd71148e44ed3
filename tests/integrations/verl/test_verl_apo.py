"""APO through verl (issue 38): a reference pass and one real actor update with ``policy_term=apo`` on CPU, in one
process as verl colocates them, against an exact computation of the same step from the same checkpoint.

The reference worker (``ref_worker_cls``: SAGE's) runs verl's reference pass with the top-K hook on and keeps the
reference's top-K tokens in the process; the actor's loss gathers the policy's log-probs of them from its own
training forward. The step's logged loss, manifold masses and gradient norm must equal
:func:`sagerl.objective.sage_loss` with ``policy_loss="apo"`` on the tensors a transformers forward of the
checkpoint gives (the reference is the initial policy, as in a run's first step); β = 0 gives another gradient
norm, so the pull towards the Safe Manifold is in what verl applied.
"""

import pytest
import torch
from test_verl_simko import _batch, _positions
from test_verl_worker import PROMPT, B, _to_worker, update_actor
from verl_cpu import compose, cpu_overrides, tiny_model

from sagerl.errors import ConfigError

LAMBDA, BETA, TOP_K = 1.5, 2.0, 3
REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0])


def _config(model_dir, beta=BETA, use_kl_loss=True):
    fields = (
        f"loss_mode:sage,guide:none,policy_term:apo,apo_lambda:{LAMBDA},apo_beta:{beta},apo_top_k:{TOP_K}"
    )
    ref = "actor_rollout_ref.ref"
    overrides = cpu_overrides(model_dir, batch_size=B, micro_batch_size=B // 2) + [
        f"++actor_rollout_ref.actor.policy_loss={{_target_:sagerl.integrations.verl.SAGEPolicyLossConfig,{fields}}}",
        f"actor_rollout_ref.actor.use_kl_loss={use_kl_loss}",
        "actor_rollout_ref.actor.kl_loss_coef=0.0",
        f"{ref}.strategy=fsdp2",
        f"{ref}.fsdp_config.strategy=fsdp2",
        f"+{ref}.fsdp_config.mixed_precision.param_dtype=fp32",
        f"{ref}.log_prob_micro_batch_size_per_gpu={B // 2}",
    ]
    return compose(overrides).actor_rollout_ref


def _workers(model_dir, **kwargs):
    from verl.workers.engine_workers import ActorRolloutRefWorker

    config = _config(model_dir, **kwargs)
    actor = ActorRolloutRefWorker(config=config, role="actor")
    actor.init_model()
    ref = ActorRolloutRefWorker(config=config, role="ref")
    ref.init_model()
    return actor, ref


@pytest.fixture(scope="module")
def model_dir(gloo_cpu, tmp_path_factory):
    """The checkpoint; and, while this module runs, pinning memory is a no-op: verl's forward-only (reference) FSDP2
    engine offloads its parameters to pinned memory, which needs an accelerator."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.Tensor, "pin_memory", lambda self, *args, **kwargs: self)
        yield tiny_model(tmp_path_factory.mktemp("tiny_qwen2_apo"), initializer_range=0.3)


def _update(actor, ref, data):
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import no_padding_2_padding

    mask = data.batch["response_mask"]
    td = _to_worker(data, calculate_entropy=False, compute_loss=False)
    ref_logp = no_padding_2_padding(tu.get(ref.compute_ref_log_prob(td), "log_probs"), td).float()
    td = _to_worker(data, calculate_entropy=False, compute_loss=False)
    old = no_padding_2_padding(tu.get(actor.compute_log_prob(td), "log_probs"), td).float()
    advantages = ((REWARDS - REWARDS.mean()) / REWARDS.std()).unsqueeze(1) * mask
    data.batch["old_log_probs"] = old * mask
    data.batch["ref_log_prob"] = ref_logp * mask
    data.batch["advantages"] = advantages
    return update_actor(actor, data, calculate_entropy=False), advantages, ref_logp


def _expected(model_dir, data, advantages, beta):
    """APO's whole-batch token-mean loss, masses and gradient norm from a transformers forward of the checkpoint
    (policy and reference: the same initial weights)."""
    from transformers import AutoModelForCausalLM

    from sagerl.objective import sage_loss

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ids, attention = data.batch["input_ids"], data.batch["attention_mask"]
    logits = model(input_ids=ids, attention_mask=attention, position_ids=_positions(attention)).logits
    logprobs = torch.log_softmax(logits[:, PROMPT - 1 : -1].float(), dim=-1)
    logp = logprobs.gather(-1, ids[:, PROMPT:].unsqueeze(-1)).squeeze(-1)
    top = logprobs.detach().topk(TOP_K, dim=-1)  # the reference's Safe Manifold
    manifold = logprobs.gather(-1, top.indices)
    mask = data.batch["response_mask"].bool()
    out = sage_loss(
        logp,
        logp.detach(),
        None,
        advantages,
        mask,
        beta=0.0,
        loss_agg_mode="token-mean",
        policy_loss="apo",
        policy_loss_params={
            "apo_lambda": LAMBDA,
            "apo_beta": beta,
            "apo_top_k": TOP_K,
            "manifold_logp": manifold,
            "old_manifold_logp": manifold.detach(),
        },
    )
    out.loss.backward()
    norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters() if p.grad is not None))
    mass = top.values.exp().sum(-1)[mask].mean().item()
    return out.loss.item(), norm.item(), mass, logp.detach()


@pytest.mark.parametrize("beta", [BETA, 0.0])
def test_apo_update_is_the_objectives(model_dir, beta):
    from sagerl.integrations.verl.reference import SAGEReferenceWorker
    from sagerl.integrations.verl.worker import SAGETrainingWorker

    actor, ref = _workers(model_dir, beta=beta)
    assert isinstance(actor.actor, SAGETrainingWorker) and isinstance(ref.ref, SAGEReferenceWorker)
    data = _batch(model_dir)
    metrics, advantages, ref_logp = _update(actor, ref, data)
    loss, norm, mass, logp = _expected(model_dir, data, advantages, beta)
    other_norm = _expected(model_dir, data, advantages, BETA - beta)[1]

    mask = data.batch["response_mask"].bool()
    torch.testing.assert_close(
        ref_logp[mask], logp[mask], atol=1e-5, rtol=0
    )  # verl's reference pass is intact
    assert metrics["loss"] == pytest.approx(loss, abs=1e-5)
    assert metrics["apo/ref_topk_mass"] == pytest.approx(mass, abs=1e-5)
    assert metrics["apo/manifold_mass"] == pytest.approx(mass, abs=1e-5)  # first step: π = π_ref
    # verl's packed forward and the padded one here differ by 4e-4 in the gradient norm for plain PPO too
    assert metrics["grad_norm"] == pytest.approx(norm, rel=1e-3)
    assert abs(other_norm - norm) > 0.03 * norm, "β should change the gradient on this batch (by 5% here)"


def test_apo_without_a_reference_pass_in_the_process_is_refused(model_dir):
    from sagerl.integrations.verl.reference import REFERENCE_TOPK

    actor, _ = _workers(model_dir)
    REFERENCE_TOPK.request(TOP_K)  # as the actor asked, with nothing kept yet

    data = _batch(model_dir)
    mask = data.batch["response_mask"]
    data.batch["old_log_probs"] = torch.zeros_like(mask, dtype=torch.float32)
    data.batch["ref_log_prob"] = torch.zeros_like(mask, dtype=torch.float32)
    data.batch["advantages"] = ((REWARDS - REWARDS.mean()) / REWARDS.std()).unsqueeze(1) * mask
    with pytest.raises(
        ConfigError, match="the reference's top-K tokens of this batch are not in the actor's process"
    ):
        update_actor(actor, data, calculate_entropy=False)


def test_apo_needs_verls_reference_pass(model_dir):
    with pytest.raises(
        ConfigError, match="APO reads the reference model's top-K tokens from verl's reference pass"
    ):
        _workers(model_dir, use_kl_loss=False)
