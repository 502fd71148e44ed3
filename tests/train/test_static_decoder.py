"""``rollout_decoder='static'``: the lean decode loop samples from the model's own distribution.

Checked against transformers: the log-probs of every decode step equal the model's forward pass on the same
tokens (float32, left-padded prompts, grouped-query attention, tied and untied heads, q/k/v biases), the sampling
warpers keep the tokens transformers' keep and draw with the softmax's frequencies, completions are cut after
the first end-of-sequence token, and the trainer uses it (or says once why not)."""

from __future__ import annotations

import math

import pytest
import torch
from test_trainer_loss import GROUP, make_trainer

import sagerl.eval.static_decoder as static
from sagerl.errors import ConfigError
from sagerl.eval.static_decoder import StaticDecoder, sample_token, unsupported_reason
from sagerl.train.config import SAGEConfig


def _model(kind: str):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    common = dict(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        initializer_range=0.3,
    )
    if kind == "qwen2":  # q/k/v biases, untied head
        model = Qwen2ForCausalLM(Qwen2Config(**common, tie_word_embeddings=False))
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                torch.nn.init.normal_(proj.bias, std=0.3)
        return model.eval()
    return LlamaForCausalLM(LlamaConfig(**common, tie_word_embeddings=True, rope_theta=1000.0)).eval()


PROMPTS = [[5, 17, 3, 44, 9, 61, 2], [8, 30, 12]]  # different lengths: the second row is left-padded


def _forced_logps(decoder, prompt, completion, monkeypatch):
    """The decoder's log-probs (n, V) of each step while it is made to emit ``completion``."""
    forced, seen = iter(completion), []

    def emit(logits, *args, **kwargs):
        seen.append(logits.log_softmax(-1))
        return torch.tensor([next(forced)] * logits.size(0))

    monkeypatch.setattr(static, "sample_token", emit)
    decoder.generate(prompt, max_new_tokens=len(completion), eos_token_ids=[-1], pad_token_id=0)
    return torch.stack(seen)


def _float32_path(path: str, monkeypatch) -> None:
    """Make the decoder's float32 linears take ``path``: ``onednn`` (torch's default build), ``mkl`` (what a torch
    without oneDNN gets), or ``plain``."""
    if path == "onednn":
        assert torch.backends.mkldnn.is_available()
        return
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    if path == "mkl":
        assert static._mkl_packing()
    else:
        monkeypatch.setattr(static, "_mkl_packing", lambda: False)


@pytest.mark.parametrize("path", ["onednn", "mkl", "plain"])
def test_float32_weights_are_packed_for_onednn_then_mkl_then_plain(path, monkeypatch):
    _float32_path(path, monkeypatch)
    decoder = StaticDecoder(_model("llama"))
    kinds = {decoder.head.kind} | {
        lin.kind for layer in decoder.layers for lin in (layer.qkv, layer.o, layer.down)
    }
    assert kinds == {path}
    assert decoder.compacts == (path != "mkl")  # MKL's packing is for one batch size: ended rows stay


def test_a_float32_weight_onednn_cannot_pack_gets_mkls_packing(monkeypatch):
    def refuse(weight, rows):
        raise RuntimeError("mkldnn_reorder_linear_weight: not on this CPU")

    assert static._mkl_packing()
    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", refuse, raising=False)
    decoder = StaticDecoder(_model("llama"))
    assert {decoder.head.kind, decoder.layers[0].qkv.kind} == {"mkl"}
    x = torch.randn(3, decoder.head.weight.size(1))
    torch.testing.assert_close(decoder.head(x), x @ decoder.head.weight.T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("path", ["onednn", "mkl"])
@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_decode_steps_give_the_models_log_probs(kind, path, monkeypatch):
    _float32_path(path, monkeypatch)
    model = _model(kind)
    completion = [7, 70, 33, 33, 1, 90, 14, 52, 3, 3, 61]
    width = max(map(len, PROMPTS))
    for prompt in PROMPTS:
        rows = [prompt, PROMPTS[0]]  # padded to the longer prompt whichever row
        pad = width - len(prompt)
        got = _forced_logps(StaticDecoder(model), rows, completion, monkeypatch)[:, 0]
        ids = torch.tensor([[0] * pad + prompt + completion])
        mask = torch.tensor([[0] * pad + [1] * (len(prompt) + len(completion))])
        with torch.no_grad():
            want = model(input_ids=ids, attention_mask=mask).logits[0].float().log_softmax(-1)
        want = want[width - 1 : width - 1 + len(completion)]
        torch.testing.assert_close(got, want, rtol=0, atol=1e-4)
        assert float((want[1:] - want[:-1]).abs().max()) > 0.5  # the steps differ: a real check


def test_bfloat16_decode_is_the_model_under_bfloat16_autocast(monkeypatch):
    model = _model("llama")
    completion = [7, 70, 33, 1, 90, 14]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = _forced_logps(StaticDecoder(model, dtype=torch.bfloat16), [PROMPTS[0]], completion, monkeypatch)
        with torch.no_grad():
            want = model(input_ids=torch.tensor([PROMPTS[0] + completion])).logits[0].float().log_softmax(-1)
    want = want[len(PROMPTS[0]) - 1 : len(PROMPTS[0]) - 1 + len(completion)]
    full = _forced_logps(StaticDecoder(model), [PROMPTS[0]], completion, monkeypatch)[:, 0]
    # transformers under autocast is itself bfloat16 rounding away from float32 (0.47 nats here, peaky logits):
    # the decoder in bfloat16 is closer to it than that, and no farther from float32 than it is
    rounding = float((full - want).abs().max())
    assert float((got[:, 0] - want).abs().max()) < rounding
    assert float((got[:, 0] - full).abs().max()) < 1.5 * rounding
    assert 1e-3 < rounding < 1.0


def test_sampler_keeps_transformers_tokens_and_draws_the_softmax():
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    torch.manual_seed(0)
    logits = torch.randn(3, 50) * 2
    for k, p in [(5, None), (None, 0.7), (10, 0.5)]:
        want = logits.clone()
        if k:
            want = TopKLogitsWarper(k)(None, want)
        if p:
            want = TopPLogitsWarper(p)(None, want)
        kept = torch.isfinite(want)
        draws = torch.stack([sample_token(logits, 1.0, k, p) for _ in range(300)], 1)
        assert bool(kept.gather(1, draws).all())  # only kept tokens are drawn
        if k and not p:
            assert kept.sum(1).tolist() == [5, 5, 5]
    # frequencies: 20,000 draws of one row at temperature 0.5 against the softmax, within 5 standard errors
    generator = torch.Generator().manual_seed(1)
    row = torch.tensor([[1.0, 0.0, -1.0, 2.0, 0.5]])
    draws = torch.cat([sample_token(row.expand(1000, -1), 0.5, generator=generator) for _ in range(20)])
    freq = torch.bincount(draws, minlength=5).double() / draws.numel()
    prob = (row[0] / 0.5).softmax(-1).double()
    se = (prob * (1 - prob) / draws.numel()).sqrt()
    assert bool(((freq - prob).abs() < 5 * se).all()), (freq, prob)


def test_inverse_cdf_draw_never_takes_a_removed_token_and_follows_its_generator():
    # the removed tokens sit at both ends of the vocabulary, where an inverse-CDF draw's edge cases are (u near 0
    # and near the row's total); the last row has all its mass on the last token
    logits = torch.tensor([[float("-inf"), 0.0, 1.0, float("-inf")], [float("-inf")] * 3 + [0.0]])
    generator = torch.Generator().manual_seed(3)
    draws = torch.stack([sample_token(logits, generator=generator) for _ in range(2000)])
    assert set(draws[:, 0].tolist()) == {1, 2} and set(draws[:, 1].tolist()) == {3}
    share = (draws[:, 0] == 2).double().mean().item()
    assert abs(share - torch.tensor([0.0, 1.0]).softmax(0)[1].item()) < 0.04  # e/(1+e) = 0.731, 2,000 draws
    again = torch.Generator().manual_seed(3)
    assert torch.equal(draws[:5], torch.stack([sample_token(logits, generator=again) for _ in range(5)]))


@pytest.mark.parametrize("compacts", [True, False])
def test_completions_stop_after_the_first_end_token_and_prompts_prefill_once(compacts, monkeypatch):
    model = _model("llama")
    # rows 0 and 1 emit 2 (end) at steps 2 and 1. Compacting, row 1 then leaves the batch (half of it has
    # ended), so the third draw is asked for row 0 only; not compacting (MKL-packed float32 weights), row 1 is
    # still asked and its token (6) ignored
    script = iter([[4, 9], [5, 2], [2]] if compacts else [[4, 9], [5, 2], [2, 6]])
    asked = []

    def emit(logits, *args, **kwargs):
        asked.append(logits.size(0))
        return torch.tensor(next(script))

    monkeypatch.setattr(static, "sample_token", emit)
    calls = []
    forward = model.forward
    monkeypatch.setattr(
        model, "forward", lambda *a, **k: calls.append(k["input_ids"].shape) or forward(*a, **k)
    )
    decoder = StaticDecoder(model)
    decoder.compacts = compacts
    out = decoder.generate([PROMPTS[0], PROMPTS[0]], max_new_tokens=8, eos_token_ids=[2], pad_token_id=0)
    assert out == [[4, 5, 2], [9, 2]]  # cut after the end token, kept; generation stops when all rows ended
    assert asked == ([2, 2, 1] if compacts else [2, 2, 2])
    assert calls == [torch.Size([1, len(PROMPTS[0])])]  # one prefill of the one distinct prompt
    monkeypatch.setattr(static, "sample_token", lambda logits, *a, **k: torch.tensor([1, 1]))
    out = StaticDecoder(model).generate(
        [PROMPTS[1], PROMPTS[1]], max_new_tokens=3, eos_token_ids=[2], pad_token_id=0
    )
    assert out == [[1, 1, 1], [1, 1, 1]]  # no end token: max_new_tokens


def test_unsupported_models_and_settings_are_named():
    from transformers import GPT2Config, GPT2LMHeadModel

    assert unsupported_reason(_model("llama"), {"temperature": 0.9, "top_p": 1.0, "top_k": 0}) is None
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50))
    assert "model_type 'gpt2'" in unsupported_reason(gpt2, {})
    assert "repetition penalty" in unsupported_reason(_model("llama"), {"repetition_penalty": 1.2})
    assert "['num_beams']" in unsupported_reason(_model("llama"), {"num_beams": 2})
    with pytest.raises(ValueError, match="does not support this model: model_type 'gpt2'"):
        StaticDecoder(gpt2)


def test_trainer_samples_with_it_and_falls_back_once_with_the_reason(tiny_model, tmp_path):
    trainer, _ = make_trainer(tiny_model, tmp_path, max_completion_length=6, rollout_decoder="static")
    prompts = [trainer.processing_class("What is 2 + 3?")["input_ids"]] * GROUP
    used = []
    generate = StaticDecoder.generate

    def spy(self, *a, **k):
        used.append(self.dtype)
        return generate(self, *a, **k)

    StaticDecoder.generate = spy
    try:
        completions, logps = trainer._generate_single_turn(prompts, None, {}, GROUP)
        assert used == [torch.float32] and logps is None
        assert len(completions) == GROUP and all(1 <= len(c) <= 6 for c in completions)
        trainer.generation_kwargs = {**trainer.generation_kwargs, "repetition_penalty": 1.3}
        with pytest.warns(UserWarning, match=r"does not apply \(a repetition penalty\)"):
            trainer._generate_single_turn(prompts, None, {}, GROUP)
        trainer._generate_single_turn(
            prompts, None, {}, GROUP
        )  # warned once: no second warning asserted below
        assert used == [torch.float32]  # transformers' generate took both
    finally:
        StaticDecoder.generate = generate


def test_trains_two_steps_with_static_rollouts(tiny_model, tmp_path):
    trainer, reward = make_trainer(
        tiny_model, tmp_path, max_completion_length=6, rollout_decoder="static", max_steps=2
    )
    trainer.state.max_steps = 2
    result = trainer.train()
    assert math.isfinite(result.training_loss)
    assert reward.calls  # the reward saw the static decoder's completions


def test_an_unknown_decoder_is_refused():
    with pytest.raises(ConfigError, match="rollout_decoder='fast' is not one of transformers, static"):
        SAGEConfig(output_dir="/tmp/x", rollout_decoder="fast", report_to="none", bf16=False)


def test_prompts_sharing_leading_tokens_prefill_them_once_with_the_models_log_probs(monkeypatch):
    """positions='tokens' (the evaluation's): distinct prompts that open alike run their shared prefix once, then
    their own tokens left-padded among themselves; each row's log-probs are the model's on its prompt alone."""
    model = _model("llama")
    shared = [5, 17, 3, 44, 9, 61]
    prompts = [shared + [2, 8], shared + [30], shared + [12, 4, 77]]  # own parts of 2, 1, 3 tokens
    assert static.shared_prefix_length(prompts) == 6
    assert static.shared_prefix_length([shared, shared + [1]]) == 5  # each keeps its last token
    assert static.shared_prefix_length([shared]) == 0
    monkeypatch.setattr(static, "SHARED_PREFIX_MIN", 4)
    calls = []
    forward = model.forward
    monkeypatch.setattr(
        model, "forward", lambda *a, **k: calls.append(tuple(k["input_ids"].shape)) or forward(*a, **k)
    )
    completion = [7, 70, 33, 1, 90]
    seen = []

    def draw(logits, step, rows):
        seen.append(logits.log_softmax(-1))
        return torch.full((logits.size(0),), completion[step])

    rows = [p for p in prompts for _ in range(2)]
    StaticDecoder(model).decode(
        rows,
        max_new_tokens=len(completion),
        eos_token_ids=[-1],
        pad_token_id=0,
        draw=draw,
        positions="tokens",
    )
    assert calls == [(1, 6), (3, 3)]  # the shared prefix once, then each prompt's own tokens
    got = torch.stack(seen)  # (steps, rows, V)
    for r, prompt in enumerate(rows):
        with torch.no_grad():
            want = forward(input_ids=torch.tensor([prompt + completion])).logits[0].float().log_softmax(-1)
        torch.testing.assert_close(got[:, r], want[len(prompt) - 1 : -1], rtol=0, atol=1e-4)
    monkeypatch.setattr(static, "SHARED_PREFIX_MIN", 7)  # fewer shared tokens than the minimum: whole prompts
    calls.clear()
    StaticDecoder(model).decode(
        rows, max_new_tokens=1, eos_token_ids=[-1], pad_token_id=0, draw=draw, positions="tokens"
    )
    assert calls == [(3, 9)]
