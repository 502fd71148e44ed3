"""SimKO through verl (issue 38): one real actor update with ``policy_term=simko`` on CPU, against an exact
computation of the same step from the same checkpoint.

verl's FSDP engine hands the training forward's logits to the loss function when the micro-batch says
``distillation_use_topk`` (its top-K hook); SAGE's worker turns it on for SimKO, and the loss reads the policy's
top-K log-probs from there: no second forward. The step's logged loss, the share of tokens SimKO acted on and
the gradient norm must equal :func:`sagerl.objective.sage_loss` with ``policy_loss="simko"`` on the tensors a
plain transformers forward of the checkpoint gives; the gradient norm with α = 0 differs by 10%, so the top-K
part of the gradient is what verl applied.
"""

import pytest
import torch
from test_verl_worker import PROMPT, RESPONSE, B, _to_worker, actor_worker, update_actor
from verl_cpu import tiny_model

from sagerl.errors import ConfigError

MIX, TAU, NEG_SCALE, TOP_K = 0.3, 0.5, 1.5, 3
REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0])
GREEDY_ROWS = (0, 1, 2, 3)  # responses that take the top-1 token: SimKO's λ acts on the wrong ones (1, 2)
PROMPT_PAD = torch.tensor([0, 2, 0, 1, 3, 0, 0, 2])
RESPONSE_LEN = torch.tensor([10, 7, 4, 10, 9, 1, 6, 10])


def _overrides(mix=MIX, **extra):
    fields = f"loss_mode:sage,guide:none,policy_term:simko,simko_mix:{mix},simko_tau:{TAU}"
    fields += f",simko_neg_scale:{NEG_SCALE},simko_top_k:{TOP_K}"
    fields += "".join(f",{k}:{v}" for k, v in extra.items())
    return [
        f"++actor_rollout_ref.actor.policy_loss={{_target_:sagerl.integrations.verl.SAGEPolicyLossConfig,{fields}}}",
        "actor_rollout_ref.actor.calculate_entropy=True",
        "actor_rollout_ref.actor.use_kl_loss=False",
    ]


@pytest.fixture(scope="module")
def model_dir(gloo_cpu, tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("tiny_qwen2_simko"), initializer_range=0.3)


def _positions(attention):
    return (attention.cumsum(1) - 1).clamp(min=0)


def _batch(model_dir):
    """verl's padded layout; rows in GREEDY_ROWS continue their prompt greedily, the others at random."""
    from transformers import AutoModelForCausalLM
    from verl import DataProto

    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 128, (B, PROMPT + RESPONSE), generator=g)
    attention = torch.ones(B, PROMPT + RESPONSE, dtype=torch.int64)
    for i in range(B):
        attention[i, : PROMPT_PAD[i]] = 0
    with torch.no_grad():
        for j in range(RESPONSE):
            t = PROMPT + j
            logits = model(
                input_ids=ids[:, :t],
                attention_mask=attention[:, :t],
                position_ids=_positions(attention[:, :t]),
            ).logits[:, -1]
            for i in GREEDY_ROWS:
                ids[i, t] = logits[i].argmax()
    for i in range(B):
        attention[i, PROMPT + RESPONSE_LEN[i] :] = 0
    scores = torch.zeros(B, RESPONSE)
    scores[torch.arange(B), RESPONSE_LEN - 1] = REWARDS
    return DataProto.from_single_dict(
        {
            "input_ids": ids,
            "prompts": ids[:, :PROMPT],
            "responses": ids[:, PROMPT:],
            "attention_mask": attention,
            "position_ids": _positions(attention),
            "response_mask": attention[:, PROMPT:],
            "token_level_scores": scores,
        },
        meta_info={"temperature": 1.0},
    )


def _expected(model_dir, data, advantages, mix):
    """SimKO's whole-batch token-mean loss and its gradient norm, from a transformers forward of the checkpoint."""
    from transformers import AutoModelForCausalLM

    from sagerl.objective import sage_loss

    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    ids, attention = data.batch["input_ids"], data.batch["attention_mask"]
    logits = model(input_ids=ids, attention_mask=attention, position_ids=_positions(attention)).logits
    logprobs = torch.log_softmax(logits[:, PROMPT - 1 : -1].float(), dim=-1)  # (B, T, V): the response tokens
    responses = ids[:, PROMPT:]
    logp = logprobs.gather(-1, responses.unsqueeze(-1)).squeeze(-1)
    entropy = -(logprobs.exp() * logprobs).sum(-1)
    top = logprobs.detach().topk(TOP_K, dim=-1).indices
    topk = logprobs.gather(-1, top)
    mask = data.batch["response_mask"].bool()
    out = sage_loss(
        logp,
        logp.detach(),
        None,
        advantages,
        mask,
        beta=0.0,
        loss_agg_mode="token-mean",
        policy_loss="simko",
        policy_loss_params={
            "simko_top_k": TOP_K,
            "simko_mix": mix,
            "simko_tau": TAU,
            "simko_neg_scale": NEG_SCALE,
            "topk_logp": topk,
            "old_topk_logp": topk.detach(),
            "entropy": entropy.detach(),
            "is_top1": responses == top[..., 0],
            "correct": REWARDS == 1.0,
        },
    )
    out.loss.backward()
    norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters() if p.grad is not None))
    acted = out.surrogate.covariance_masked
    negative_top1 = (acted & (responses == top[..., 0]) & (advantages < 0)).sum().item()
    return out.loss.item(), norm.item(), acted[mask].float().mean().item(), negative_top1


def _update(worker, data):
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import no_padding_2_padding

    td = _to_worker(data, calculate_entropy=True, compute_loss=False)
    old = no_padding_2_padding(tu.get(worker.compute_log_prob(td), "log_probs"), td).float()
    mask = data.batch["response_mask"]
    advantages = ((REWARDS - REWARDS.mean()) / REWARDS.std()).unsqueeze(1) * mask
    data.batch["old_log_probs"] = old * mask
    data.batch["advantages"] = advantages
    return update_actor(worker, data, calculate_entropy=True), advantages


@pytest.mark.parametrize("mix", [MIX, 0.0])
def test_simko_update_is_the_objectives(model_dir, mix):
    from sagerl.integrations.verl.worker import SAGETrainingWorker

    worker = actor_worker(model_dir, _overrides(mix=mix))
    assert isinstance(worker.actor, SAGETrainingWorker)
    data = _batch(model_dir)
    metrics, advantages = _update(worker, data)
    loss, norm, share, negative_top1 = _expected(model_dir, data, advantages, mix)
    other_norm = _expected(model_dir, data, advantages, MIX - mix)[1]

    assert negative_top1 > 0, "λ should act on some tokens of this batch"
    assert 0 < share < 1
    assert metrics["loss"] == pytest.approx(loss, abs=1e-5)
    assert metrics["covariance/token_share"] == pytest.approx(share, abs=1e-6)
    # verl's packed forward and the padded one here differ by 4e-4 in the gradient norm for plain PPO too; α moves
    # it by 10% on this batch (4.56 against 5.08)
    assert metrics["grad_norm"] == pytest.approx(norm, rel=1e-3)
    assert abs(other_norm - norm) > 0.05 * norm, "α should change the gradient on this batch"


def test_simko_refuses_off_policy_mini_batches(model_dir):
    worker = actor_worker(model_dir, _overrides(), mini_batch=B // 2)
    data = _batch(model_dir)
    with pytest.raises(ConfigError, match="policy_term='simko' reads π_old's log-probs of top-K tokens"):
        _update_off_policy(worker, data)


def _update_off_policy(worker, data):
    mask = data.batch["response_mask"]
    data.batch["old_log_probs"] = torch.zeros(B, RESPONSE)
    data.batch["advantages"] = ((REWARDS - REWARDS.mean()) / REWARDS.std()).unsqueeze(1) * mask
    return update_actor(worker, data, calculate_entropy=True, batch_size=B // 2)


def test_simko_needs_the_entropies(model_dir):
    overrides = [o for o in _overrides() if "calculate_entropy" not in o]
    overrides.append("actor_rollout_ref.actor.calculate_entropy=False")
    with pytest.raises(
        ConfigError, match="SimKO \\(its high-entropy tokens\\) reads the policy's token entropies"
    ):
        actor_worker(model_dir, overrides)
