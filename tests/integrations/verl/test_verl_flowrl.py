"""FlowRL through verl (issue 38): its log Z head lives in verl's actor (model, FSDP, optimizer, checkpoint) and
reads the training forward's own hidden states; one real actor update on CPU against an exact computation.

The step's logged loss and gradient norm must equal :func:`sagerl.objective.sage_loss` with ``policy_loss="flowrl"``
on a plain transformers forward of the checkpoint, with log Z from a copy of the actor's initial head on the same
forward's last hidden states; the head's weights move in the step (its gradient reaches it through verl's optimizer),
and the weights verl would send to a rollout engine leave it out.
"""

import pytest
import torch
from test_verl_simko import REWARDS, _batch, _positions
from test_verl_worker import PROMPT, RESPONSE, B, _to_worker, actor_worker, update_actor
from verl_cpu import compose, cpu_overrides, tiny_model

from sagerl.errors import ConfigError
from sagerl.integrations.verl.log_partition import HEAD

BETA = 2.0  # FlowRL's reward scale (the authors' 15 would make β·A dwarf the log-prob terms on this batch)


def _overrides(fields="", **extra):
    fields = f"loss_mode:sage,guide:none,policy_term:flowrl,flowrl_beta:{BETA}{fields}"
    actor = "actor_rollout_ref.actor"
    settings = {
        "use_kl_loss": "True",
        "kl_loss_coef": "0.0",
        "loss_agg_mode": "seq-mean-token-mean",
        **extra,
    }
    return [
        f"++{actor}.policy_loss={{_target_:sagerl.integrations.verl.SAGEPolicyLossConfig,{fields}}}",
        *(f"{actor}.{k}={v}" for k, v in settings.items()),
    ]


@pytest.fixture(scope="module")
def model_dir(gloo_cpu, tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("tiny_qwen2_flowrl"), initializer_range=0.3)


def _head(worker):
    from sagerl.integrations.verl.log_partition import HEAD, hf_model

    return getattr(hf_model(worker.actor.engine.module), HEAD)


def _full(state):
    return {
        k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone() for k, v in state.items()
    }


def _no_dropout(head):
    for m in head.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0


def _reference_logp(data):
    g = torch.Generator().manual_seed(2)
    return -torch.rand(B, RESPONSE, generator=g) * data.batch["response_mask"]


def _update(worker, data, advantages):
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import no_padding_2_padding

    td = _to_worker(data, calculate_entropy=False, compute_loss=False)
    old = no_padding_2_padding(tu.get(worker.compute_log_prob(td), "log_probs"), td).float()
    mask = data.batch["response_mask"]
    data.batch["old_log_probs"] = old * mask
    data.batch["advantages"] = advantages
    data.batch["ref_log_prob"] = _reference_logp(data)
    return update_actor(worker, data, calculate_entropy=False)


def _group_advantages(data):
    return ((REWARDS - REWARDS.mean()) / REWARDS.std()).unsqueeze(1) * data.batch["response_mask"]


def _expected(model_dir, data, head_state):
    """FlowRL's loss, its gradient norm (policy and head) and the mean log Z, from a transformers forward."""
    from transformers import AutoModelForCausalLM

    from sagerl.objective import sage_loss
    from sagerl.objective.flowrl import LogPartitionHead

    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    head = LogPartitionHead(model.config.hidden_size)
    head.load_state_dict({k.split(f"{HEAD}.", 1)[-1]: v for k, v in head_state.items()})
    _no_dropout(head)
    ids, attention = data.batch["input_ids"], data.batch["attention_mask"]
    out = model(
        input_ids=ids, attention_mask=attention, position_ids=_positions(attention), output_hidden_states=True
    )
    logprobs = torch.log_softmax(out.logits[:, PROMPT - 1 : -1].float(), dim=-1)
    logp = logprobs.gather(-1, ids[:, PROMPT:].unsqueeze(-1)).squeeze(-1)
    log_z = head(out.hidden_states[-1][:, :PROMPT], attention[:, :PROMPT].bool())
    mask = data.batch["response_mask"].bool()
    result = sage_loss(
        logp,
        logp.detach(),
        None,
        (REWARDS - REWARDS.mean()) / REWARDS.std(),
        mask,
        beta=0.0,
        loss_agg_mode="seq-mean-token-mean",
        policy_loss="flowrl",
        policy_loss_params={"flowrl_beta": BETA, "log_z": log_z, "ref_logp": _reference_logp(data)},
    )
    result.loss.backward()
    params = [*model.parameters(), *head.parameters()]
    norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params if p.grad is not None))
    return result.loss.item(), norm.item(), log_z.mean().item()


def test_flowrl_update_is_the_objectives_and_trains_the_head(model_dir):
    from sagerl.integrations.verl.worker import SAGETrainingWorker

    worker = actor_worker(model_dir, _overrides())
    assert isinstance(worker.actor, SAGETrainingWorker)
    head = _head(worker)
    _no_dropout(head)  # the authors' dropout 0.1 draws from torch's RNG: off, to compare values
    before = _full(head.state_dict())
    in_optimizer = {id(p) for group in worker.actor.engine.optimizer.param_groups for p in group["params"]}
    assert all(id(p) in in_optimizer for p in head.parameters())

    data = _batch(model_dir)
    metrics = _update(worker, data, _group_advantages(data))
    loss, norm, log_z = _expected(model_dir, data, before)

    assert metrics["loss"] == pytest.approx(loss, rel=1e-4)
    assert metrics["flowrl/log_z"] == pytest.approx(log_z, abs=1e-5)
    # verl's packed forward and the padded one here differ by 4e-4 in the gradient norm for plain PPO too
    assert metrics["grad_norm"] == pytest.approx(norm, rel=1e-3)
    after = _full(head.state_dict())
    moved = max((after[k] - before[k]).abs().max().item() for k in before)
    assert moved > 1e-4, "verl's optimizer should have stepped the log Z head"


def test_the_hook_reads_no_parameters_as_under_fsdp1(model_dir):
    """verl's default strategy, FSDP1 with ``use_orig_params=False``, replaces each weight of the head by a plain
    tensor (a view of its flat parameter) during the forward, so the head has no parameters then; the hook still
    gives each prompt's log Z. (FSDP1 itself needs a GPU in verl: ``sync_module_states``.)"""
    import copy

    from transformers import AutoModelForCausalLM

    from sagerl.integrations.verl.log_partition import LOG_Z, PromptLayout, with_head

    model = with_head(lambda: AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32))()
    head = getattr(model, HEAD)
    _no_dropout(head)
    reference = copy.deepcopy(head)
    for module in head.modules():
        for name, weight in list(module._parameters.items()):
            del module._parameters[name]
            setattr(module, name, weight.detach().clone().requires_grad_())
    assert not list(head.parameters())
    ids = torch.randint(0, 128, (2, 7), generator=torch.Generator().manual_seed(3))
    prompt_lens = torch.tensor([3, 5])
    LOG_Z.layout = PromptLayout(prompt_lens, torch.tensor([7, 7]), packed=False)
    try:
        out = model(input_ids=ids, output_hidden_states=True)
        log_z = LOG_Z.take(2)
    finally:
        LOG_Z.clear()
    mask = torch.arange(7)[None] < prompt_lens[:, None]
    torch.testing.assert_close(log_z, reference(out.hidden_states[-1], mask).float())


def test_the_rollouts_weights_leave_the_head_out(model_dir):
    from transformers import AutoModelForCausalLM

    worker = actor_worker(model_dir, _overrides())
    params, _ = worker.actor.engine.get_per_tensor_param()
    names = {name for name, _ in params}
    policy = set(AutoModelForCausalLM.from_pretrained(model_dir).state_dict())
    assert names == policy
    assert any(k.startswith("flowrl_log_z.") for k in worker.actor.engine.module.state_dict())


def test_verls_checkpoint_saves_and_resumes_the_head(model_dir, tmp_path):
    worker = actor_worker(model_dir, _overrides())
    head, engine = _head(worker), worker.actor.engine
    engine.save_checkpoint(str(tmp_path), global_step=1)
    saved = _full(head.state_dict())
    data = _batch(model_dir)
    _update(worker, data, _group_advantages(data))
    moved = _full(head.state_dict())
    assert max((moved[k] - saved[k]).abs().max().item() for k in saved) > 1e-4
    engine.load_checkpoint(str(tmp_path))
    resumed = _full(head.state_dict())
    assert all(torch.equal(resumed[k], saved[k]) for k in saved)


def test_flowrl_refuses_per_token_advantages(model_dir):
    worker = actor_worker(model_dir, _overrides())
    data = _batch(model_dir)
    advantages = _group_advantages(data)
    advantages[0, 1] += 0.5
    with pytest.raises(ConfigError, match="FlowRL takes one advantage per completion"):
        _update(worker, data, advantages)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"use_kl_loss": "False"}, "set actor_rollout_ref.actor.use_kl_loss=True"),
        ({"loss_agg_mode": "token-mean"}, "loss_agg_mode=seq-mean-token-mean \\(got 'token-mean'\\)"),
        ({"fields": ",entropy_adv_alpha:0.4"}, "the entropy advantage makes them per token"),
    ],
)
def test_flowrl_refuses_what_it_cannot_run_with(model_dir, extra, message):
    with pytest.raises(ConfigError, match=f"policy_term=flowrl: .*{message}"):
        actor_worker(model_dir, _overrides(**extra))


def test_flowrl_refuses_ulysses_sequence_parallelism_at_start_up(model_dir):
    """The engine's own setting (``fsdp_config.ulysses_sequence_parallel_size``; verl refuses it without packed
    sequences before the loss is set, so the check is called on the actor's config here)."""
    from verl.utils.config import omega_conf_to_dataclass

    from sagerl.integrations.verl.config import check_actor_config

    sp = [
        "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=2",
        "actor_rollout_ref.model.use_remove_padding=True",
    ]
    cfg = compose(cpu_overrides(model_dir, batch_size=B, micro_batch_size=B // 2) + _overrides() + sp)
    with pytest.raises(
        ConfigError, match="policy_term=flowrl: Ulysses .*fsdp_config.ulysses_sequence_parallel_size=1"
    ):
        check_actor_config(omega_conf_to_dataclass(cfg.actor_rollout_ref.actor))


def test_prompt_hidden_reads_the_same_prompts_packed_and_padded():
    from sagerl.integrations.verl.log_partition import PromptLayout, prompt_hidden

    g = torch.Generator().manual_seed(0)
    prompt_lens, seq_lens = torch.tensor([3, 1, 2]), torch.tensor([5, 4, 2])
    padded = torch.randn(3, 6, 4, generator=g)
    packed = torch.cat([padded[i, :n] for i, n in enumerate(seq_lens.tolist())])[None]
    packed = torch.cat(
        [packed, torch.randn(1, 2, 4, generator=g)], dim=1
    )  # verl may pad the packed row's end
    a, mask_a = prompt_hidden(padded, PromptLayout(prompt_lens, seq_lens, packed=False))
    b, mask_b = prompt_hidden(packed, PromptLayout(prompt_lens, seq_lens, packed=True))
    assert mask_a.tolist() == [[True] * 3, [True, False, False], [True, True, False]] == mask_b.tolist()
    assert torch.equal(a[mask_a], b[mask_b])
    assert torch.equal(a[2, :2], padded[2, :2]) and torch.equal(b[1, :1], padded[1, :1])
    with pytest.raises(ConfigError, match="does not hold the micro-batch's 3 sequences"):
        prompt_hidden(packed[:, :6], PromptLayout(prompt_lens, seq_lens, packed=True))
