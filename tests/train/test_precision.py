"""bfloat16 changes the numbers, not the method: the ``dtype`` setting resolves per machine, and the SAGE loss and
its gradient under bfloat16 autocast stay within a stated tolerance of float32's, with the log-probs, their
ratios and the KL terms in float32 (sagerl.precision)."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

import sagerl.precision as precision
from sagerl.errors import ConfigError
from sagerl.objective import GuideParams, compute_guide, sage_loss
from sagerl.precision import check_dtype, resolve_dtype

LOSS_RTOL = 0.02
"""The loss under bf16 autocast within 2% of float32's (measured on the batch below: 0.08%)."""
GRAD_COSINE = 0.995
"""The gradient's cosine similarity to float32's (measured: 1.0000)."""
GRAD_NORM_RTOL = 0.05
"""The gradient's norm within 5% of float32's (measured: 0.04%)."""


@pytest.fixture
def cpu_flags(monkeypatch):
    monkeypatch.delenv("SAGERL_DTYPE")  # the suite's float32 default (tests/conftest.py) off: auto decides

    def set_flags(*flags):
        monkeypatch.setattr(precision, "cpu_bf16_flags", lambda: tuple(flags))

    return set_flags


def test_auto_is_bf16_where_the_cpu_has_bf16_matrix_units(cpu_flags):
    cpu_flags("avx512_bf16")
    assert resolve_dtype("auto") == "bfloat16"
    cpu_flags("amx_bf16", "avx512_bf16")
    assert resolve_dtype("auto") == "bfloat16"
    cpu_flags()
    assert resolve_dtype("auto") == "float32"
    assert resolve_dtype("float32") == "float32"
    with pytest.warns(UserWarning, match=r"without bfloat16 matrix units .* set dtype=float32"):
        assert resolve_dtype("bfloat16") == "bfloat16"  # works, with the slowdown named
    cpu_flags("avx512_bf16")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resolve_dtype("bfloat16")
    with pytest.raises(ConfigError, match=r"dtype='fp8': expected one of auto, float32, bfloat16"):
        check_dtype("fp8")


def test_sagerl_dtype_replaces_what_auto_resolves_to(cpu_flags, monkeypatch):
    cpu_flags("avx512_bf16")
    monkeypatch.setenv("SAGERL_DTYPE", "float32")
    assert resolve_dtype("auto") == "float32" and resolve_dtype("bfloat16") == "bfloat16"
    cpu_flags()
    monkeypatch.setenv("SAGERL_DTYPE", "bfloat16")
    with pytest.warns(UserWarning, match="without bfloat16 matrix units"):
        assert resolve_dtype("auto") == "bfloat16"
    monkeypatch.setenv("SAGERL_DTYPE", "half")
    with pytest.raises(ConfigError, match="SAGERL_DTYPE='half': expected one of"):
        resolve_dtype("auto")


def test_the_cpu_flags_are_read_from_proc_cpuinfo():
    text = open("/proc/cpuinfo").read()  # noqa: SIM115
    flags = next(line for line in text.splitlines() if line.startswith("flags")).split()
    assert precision.cpu_bf16_flags() == tuple(f for f in ("amx_bf16", "avx512_bf16") if f in flags)


def test_the_run_records_the_dtype_it_used(cpu_flags, tmp_path):
    from sagerl.train.run import resolve_config

    cpu_flags("amx_bf16")
    auto = resolve_config("grpo", {})
    assert (auto.dtype, auto.trainer["bf16"], auto.as_dict()["dtype"]) == ("bfloat16", True, "bfloat16")
    assert resolve_config("grpo", {"dtype": "float32"}).trainer["bf16"] is False
    assert resolve_config("grpo", {"bf16": False}).dtype == "float32"  # TRL's switch, with dtype auto
    cpu_flags()
    assert resolve_config("grpo", {}).dtype == "float32"
    with pytest.raises(ConfigError, match="bf16=True contradicts dtype=float32"):
        resolve_config("grpo", {"dtype": "float32", "bf16": True})
    with pytest.raises(ConfigError, match="dtype='half': expected one of"):
        resolve_config("grpo", {"dtype": "half"})


def _batch():
    """The shipped planted reference (a trained 0.1 M model) on 16 of its own completions: the inputs of one
    micro-batch of grpo+branch."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.trainer.utils import add_fused_lm_head

    from sagerl.models import resolve_model
    from sagerl.tasks.planted import make_planted_problems, make_traces, verify

    path = resolve_model("planted-reference")
    tokenizer = AutoTokenizer.from_pretrained(path)
    problems = make_planted_problems(16, seed=3, split="eval")
    traces = make_traces(problems, {"head": 0.5, "tail": 0.25, "second": 0.25}, seed=3)
    prompt = torch.tensor([tokenizer(p)["input_ids"] for p, _, _ in traces])
    completions = [tokenizer(c)["input_ids"] + [tokenizer.eos_token_id] for _, c, _ in traces]
    width = max(map(len, completions))
    completion = torch.tensor([c + [tokenizer.pad_token_id] * (width - len(c)) for c in completions])
    mask = torch.tensor([[1] * len(c) + [0] * (width - len(c)) for c in completions])
    rewards = torch.tensor([float(verify(p, c)[1]) for p, (_, c, _) in zip(problems, traces, strict=True)])
    policy = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    reference = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    with torch.no_grad():  # a policy a few steps away from the reference
        for p in policy.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    for model in (policy, reference):
        add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    return policy, reference, prompt, completion, mask, rewards


def _loss_and_grad(policy, reference, prompt, completion, mask, rewards, autocast: bool):
    ids = torch.cat([prompt, completion], dim=1)
    attention = torch.cat([torch.ones_like(prompt), mask], dim=1)
    labels = ids.masked_fill(attention == 0, -100)
    labels[:, : prompt.shape[1]] = -100
    width = completion.shape[1]
    policy.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        out = policy(input_ids=ids, attention_mask=attention, labels=labels, fused_lm_head=True)
        with torch.no_grad():
            ref = reference(input_ids=ids, attention_mask=attention, labels=labels, fused_lm_head=True)
    logp, entropy = out.log_probs[:, -width:], out.entropy[:, -width:]
    ref_logp = ref.log_probs[:, -width:]
    assert logp.dtype == entropy.dtype == ref_logp.dtype == torch.float32  # log-probs in float32
    advantages = (rewards - rewards.view(2, 8).mean(1).repeat_interleave(8)).float()
    q = compute_guide("branch", mask, GuideParams(gamma=0.3, tau=1.2), entropy=entropy.detach())
    log_q = q.log()
    result = sage_loss(
        logp, logp.detach() - 0.05, ref_logp, advantages, mask, log_q=log_q, beta=0.05
    )  # off-policy ratios, so the clip and the ratio matter
    assert result.loss.dtype == torch.float32  # the ratios and the KL computed in float32
    result.loss.backward()
    grad = torch.cat([p.grad.flatten() for p in policy.parameters() if p.grad is not None])
    return result.loss.detach(), grad, result


def test_loss_and_gradient_under_bf16_autocast_are_within_tolerance_of_float32():
    batch = _batch()
    loss32, grad32, _ = _loss_and_grad(*batch, autocast=False)
    loss16, grad16, out16 = _loss_and_grad(*batch, autocast=True)
    assert loss16 == pytest.approx(float(loss32), rel=LOSS_RTOL)
    cosine = torch.nn.functional.cosine_similarity(grad32, grad16, dim=0)
    assert cosine > GRAD_COSINE
    assert grad16.norm() == pytest.approx(float(grad32.norm()), rel=GRAD_NORM_RTOL)
    assert all(p.dtype == torch.float32 for p in batch[0].parameters())  # master weights stay float32
    assert loss32 != loss16  # bf16 did run: the numbers differ


def test_a_bf16_run_trains_and_records_its_dtype(tmp_path):
    import yaml

    from sagerl.train.run import train

    model = train(
        "grpo+branch",
        {"model": "planted-reference", "dataset": "planted_train", "dtype": "bfloat16", "max_steps": 2,
         "per_device_train_batch_size": 8, "num_generations": 4, "max_completion_length": 24,
         "learning_rate": 1e-3, "save_steps": 2},
        tmp_path / "run",
        quiet=True,
    )  # fmt: skip
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert config["dtype"] == "bfloat16" and config["trainer"]["bf16"] is True
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(abs(r["loss"]) < 10 for r in rows)
    from safetensors.torch import load_file

    weights = load_file(str(model / "model.safetensors"))
    assert all(w.dtype == torch.float32 for w in weights.values())  # saved in float32
