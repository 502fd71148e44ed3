"""Samplers: token sampling, HFSampler against transformers' generate, seeding, the static backend, the vLLM extra."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from sagerl.errors import ConfigError, SagerlError
from sagerl.eval.backends import make_sampler
from sagerl.eval.samplers import DRAW_ROWS, HFSampler, sample_next_tokens, sample_seed
from sagerl.eval.static_sampler import StaticSampler
from sagerl.eval.vllm_backend import VLLMSampler


def test_sample_next_tokens_follows_the_distribution():
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4])
    logits = probs.log().expand(4000, 4)
    u = (torch.arange(4000, dtype=torch.float64) + 0.5) / 4000  # an even grid of uniforms
    tok = sample_next_tokens(logits, 1.0, 1.0, u)
    freq = torch.bincount(tok, minlength=4).double() / 4000
    assert torch.allclose(freq, probs.double(), atol=1e-3)
    # top_p = 0.7: the nucleus is {0.4, 0.3} (mass 0.7), renormalised to 4/7 and 3/7
    tok = sample_next_tokens(logits, 1.0, 0.7, u)
    freq = torch.bincount(tok, minlength=4).double() / 4000
    assert freq[0] == 0 and freq[1] == 0
    assert freq[3].item() == pytest.approx(4 / 7, abs=1e-3) and freq[2].item() == pytest.approx(
        3 / 7, abs=1e-3
    )
    # a tiny top_p keeps the most likely token only; temperature 0 is the argmax
    assert torch.all(sample_next_tokens(logits, 1.0, 0.01, u) == 3)
    assert torch.all(sample_next_tokens(logits, 0.0, 1.0, u) == 3)
    # temperature sharpens: T = 0.5 squares the probabilities (renormalised)
    tok = sample_next_tokens(logits, 0.5, 1.0, u)
    sharp = probs.double() ** 2 / (probs.double() ** 2).sum()
    assert torch.allclose(torch.bincount(tok, minlength=4).double() / 4000, sharp, atol=1e-3)


def test_top_p_partial_sort_equals_full_sort(monkeypatch):
    from sagerl.eval import samplers

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(12, 5000, generator=gen) * 6
    logits[:5] *= 0.05  # flat rows: their nucleus is wider than the top-k candidates
    u = torch.rand(12, generator=gen, dtype=torch.float64)
    fast = sample_next_tokens(logits, 0.9, 0.95, u)
    monkeypatch.setattr(samplers, "_TOP_P_CANDIDATES", 5000)
    assert torch.equal(fast, sample_next_tokens(logits, 0.9, 0.95, u))


def test_sample_seed_is_stable_and_distinct():
    assert sample_seed(0, "aime24", "p1", 0) == sample_seed(0, "aime24", "p1", 0)
    seeds = {
        sample_seed(s, d, p, j) for s in (0, 1) for d in ("a", "b") for p in ("x", "y") for j in range(4)
    }
    assert len(seeds) == 32
    assert all(0 <= s < 2**63 for s in seeds)


@pytest.fixture(scope="module")
def tiny_sampler(tmp_path_factory) -> HFSampler:
    from sagerl.models import save_tiny_random_model

    path = save_tiny_random_model(tmp_path_factory.mktemp("tiny-sampler") / "model")
    sampler = HFSampler(str(path), device="cpu", batch_size=6)
    # The saved init (std 0.02) makes a degenerate model that repeats one token; larger weights give
    # context-dependent, varied greedy outputs, so equality with generate() below means something.
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in sampler.model.named_parameters():
            if "norm" not in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.3)
    return sampler


def _prompts(tok):
    texts = [
        "What is 1 + 1?",
        "Compute the sum of the first ten positive odd integers, and explain each step.",
    ]
    return [
        tok.apply_chat_template([{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True)
        for t in texts
    ]


@pytest.mark.parametrize("early_stop", [False, True])
def test_greedy_matches_transformers_generate_with_left_padding(tiny_sampler, monkeypatch, early_stop):
    s = tiny_sampler
    prompts = _prompts(s.tokenizer)
    if early_stop:
        # Make the 4th greedy token of prompt 0 an end-of-sequence token: prompt 0 stops and leaves the
        # batch while prompt 1 goes on (the random model never emits its real EOS).
        enc0 = s.tokenizer(prompts[:1], return_tensors="pt", add_special_tokens=False)
        with torch.inference_mode():
            gen0 = s.model.generate(
                **enc0,
                max_new_tokens=4,
                do_sample=False,
                eos_token_id=s.eos_ids,
                pad_token_id=s.tokenizer.pad_token_id,
            )
        fourth = int(gen0[0, -1])
        monkeypatch.setattr(s, "eos_ids", [*s.eos_ids, fourth])
        assert len(set(gen0[0, -4:].tolist())) == 4  # the model does not just repeat a token
    outs = s.generate(prompts, 2, max_new_tokens=12, temperature=0.0)
    if early_stop:
        assert outs[0][0].finish_reason == "stop" and outs[0][0].num_tokens <= 4
        assert outs[1][0].num_tokens > outs[0][0].num_tokens
    assert outs[0][0].text != outs[1][0].text
    enc = s.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    assert enc["attention_mask"][0].sum() < enc["attention_mask"][1].sum()  # really padded
    with torch.inference_mode():
        ref = s.model.generate(
            **enc,
            max_new_tokens=12,
            do_sample=False,
            eos_token_id=s.eos_ids,
            pad_token_id=s.tokenizer.pad_token_id,
        )
    plen = enc["input_ids"].shape[1]
    for i, row in enumerate(outs):
        assert len(row) == 2 and row[0] == row[1]  # greedy: the n samples are the same
        gen = ref[i, plen:].tolist()
        stop = next((j for j, t in enumerate(gen) if t in s.eos_ids), None)
        kept = gen if stop is None else gen[:stop]
        assert row[0].text == s.tokenizer.decode(kept, skip_special_tokens=True)
        assert row[0].num_tokens == (12 if stop is None else stop + 1)
        assert row[0].finish_reason == ("length" if stop is None else "stop")


def test_sampling_is_seeded_per_sample_not_per_batch(tiny_sampler):
    s = tiny_sampler
    prompts = _prompts(s.tokenizer)
    kw = {"max_new_tokens": 10, "temperature": 1.0}
    # 2 prompts x 4 samples = 8 rows in batches of 6: a prompt's samples are split across batches
    a = s.generate(prompts, 4, seed=7, **kw)
    b = s.generate(prompts, 4, seed=7, **kw)
    assert a == b
    texts = {c.text for row in a for c in row}
    assert len(texts) > 4  # a random model at T = 1 gives different samples
    c = s.generate(prompts, 4, seed=8, **kw)
    assert c != a
    # one sample alone, with the seed it had inside the batch, comes out the same
    alone = s.generate([prompts[1]], 1, sample_seeds=[[sample_seed(7, 1, 3)]], **kw)
    assert alone[0][0] == a[1][3]
    for row in a:
        for comp in row:
            assert 1 <= comp.num_tokens <= 10 and comp.finish_reason in ("stop", "length")
            assert (comp.num_tokens == 10) or comp.finish_reason == "stop"


def test_variable_counts_and_validation(tiny_sampler):
    s = tiny_sampler
    prompts = _prompts(s.tokenizer)
    outs = s.generate(prompts, [3, 0], max_new_tokens=4, seed=1)
    assert [len(r) for r in outs] == [3, 0]
    with pytest.raises(ConfigError):
        s.generate(prompts, 1, max_new_tokens=0)
    with pytest.raises(ConfigError):
        s.generate(prompts, 1, max_new_tokens=4, top_p=1.5)
    with pytest.raises(ValueError):
        s.generate(prompts, 1, max_new_tokens=4, sample_seeds=[[1, 2], [3]])


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed")
def test_vllm_backend_without_vllm_names_the_make_target():
    with pytest.raises(SagerlError, match=r"make setup-vllm.*pip install 'sagerl\[vllm\]'"):
        VLLMSampler("any-model")
    with pytest.raises(SagerlError, match=r"make setup-vllm"):
        make_sampler("vllm", None)


def test_unknown_backend():
    with pytest.raises(ConfigError, match="backend"):
        make_sampler("tgi", None)


def test_vllm_sampler_request_plumbing_with_a_fake_vllm(monkeypatch):
    """Not vLLM itself (not installed here): checks requests, seeds, ordering and greedy reuse."""
    import sys
    import types

    import sagerl.models

    seen = {}

    class SamplingParams:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    class LLM:
        def __init__(self, **kw):
            seen["llm"] = kw

        def generate(self, requests, params, use_tqdm=True):
            seen["requests"], seen["params"] = requests, params
            outs = []
            for req, p in zip(requests, params, strict=True):
                ids = req["prompt_token_ids"]
                out = types.SimpleNamespace(
                    text=f"p{ids[0]}-s{p.seed}", token_ids=[1, 2, 3], finish_reason="length"
                )
                outs.append(types.SimpleNamespace(outputs=[out]))
            return outs

    class Tok:
        chat_template = "yes"

        def __call__(self, text, add_special_tokens=True):
            seen["add_special_tokens"] = add_special_tokens
            return {"input_ids": [len(text)]}

    import sagerl.eval.vllm_backend as backend

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM, SamplingParams=SamplingParams))
    monkeypatch.setattr(backend, "require_vllm", lambda *a: None)
    monkeypatch.setattr(backend, "engine_on_cpu", lambda: False)  # the GPU path: vLLM's own defaults
    monkeypatch.setattr(sagerl.models, "load_tokenizer", lambda m: Tok())
    monkeypatch.setattr(sagerl.models, "load_config", lambda m: types.SimpleNamespace())
    monkeypatch.setattr(sagerl.models, "resolve_model", lambda m: "/models/x")
    s = make_sampler("vllm", "x", seed=5)
    assert seen["llm"]["model"] == "/models/x" and seen["llm"]["seed"] == 5
    outs = s.generate(
        ["a", "bbb"], [2, 1], max_new_tokens=9, temperature=0.7, top_p=0.9, sample_seeds=[[11, 12], [13]]
    )
    assert [[c.text for c in row] for row in outs] == [["p1-s11", "p1-s12"], ["p3-s13"]]
    assert outs[0][0].num_tokens == 3 and outs[0][0].finish_reason == "length"
    p = seen["params"][0]
    assert (p.n, p.temperature, p.top_p, p.max_tokens, p.seed) == (1, 0.7, 0.9, 9, 11)
    assert seen["add_special_tokens"] is False  # the chat template brings its own special tokens
    greedy = s.generate(["a", "bbb"], 3, max_new_tokens=4, temperature=0.0)
    assert len(seen["requests"]) == 2 and [len(r) for r in greedy] == [3, 3]


@pytest.fixture(scope="module")
def tiny_static(tiny_sampler) -> StaticSampler:
    """The static backend over the hf fixture's model and tokenizer (the same weights)."""
    return StaticSampler(None, batch_size=6, model_obj=tiny_sampler.model, tokenizer=tiny_sampler.tokenizer)


@pytest.mark.parametrize("temperature, top_p", [(0.0, 1.0), (1.0, 1.0), (0.8, 0.9)])
def test_static_backend_samples_the_hf_backends_completions(tiny_sampler, tiny_static, temperature, top_p):
    """Same prompts (of two lengths), seeds and draws: the same completions, text and token counts, as the hf
    backend, with 2 prompts x 5 samples in batches of 6 (a prompt's samples split across batches and a batch
    holding two prompts' rows, so groups are both dense and not)."""
    prompts = _prompts(tiny_sampler.tokenizer)
    kw = {"max_new_tokens": 10, "temperature": temperature, "top_p": top_p, "seed": 3}
    want = tiny_sampler.generate(prompts, 5, **kw)
    got = tiny_static.generate(prompts, 5, **kw)
    assert got == want
    if temperature > 0:
        assert len({c.text for row in got for c in row}) > 4  # real, varied samples


def test_static_backend_stops_rows_at_the_end_token_as_hf(tiny_sampler, tiny_static, monkeypatch):
    """Rows that end early leave the batch (the decoder compacts it) while others go on; each completion is the
    hf backend's, the end token counted and not decoded."""
    prompts = _prompts(tiny_sampler.tokenizer)
    kw = {"max_new_tokens": 12, "temperature": 1.0, "seed": 11}
    free = tiny_sampler.generate(prompts, 3, **kw)
    ids = tiny_sampler.tokenizer(free[0][0].text, add_special_tokens=False)["input_ids"]
    monkeypatch.setattr(tiny_sampler, "eos_ids", [*tiny_sampler.eos_ids, ids[2]])
    monkeypatch.setattr(tiny_static, "eos_ids", [*tiny_static.eos_ids, ids[2]])
    want = tiny_sampler.generate(prompts, 3, **kw)
    assert want[0][0].finish_reason == "stop" and any(c.finish_reason == "length" for r in want for c in r)
    assert tiny_static.generate(prompts, 3, **kw) == want


def test_static_backend_refuses_a_gpu_and_models_it_cannot_decode(tiny_sampler, tmp_path):
    with pytest.raises(ConfigError, match="static backend runs on the CPU"):
        StaticSampler(None, device="cuda", model_obj=tiny_sampler.model, tokenizer=tiny_sampler.tokenizer)
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=len(tiny_sampler.tokenizer)))
    with pytest.raises(
        ConfigError, match=r"--backend static cannot sample this model: .*\(use --backend hf\)"
    ):
        StaticSampler(None, model_obj=gpt2, tokenizer=tiny_sampler.tokenizer)
    with pytest.raises(ConfigError, match=r"unknown backend 'tgi' \(choose hf, static, vllm\)"):
        make_sampler("tgi", None)


@pytest.mark.parametrize("top_p", [1.0, 0.9])
def test_draws_in_row_blocks_are_each_rows_own_draw(top_p):
    """Past DRAW_ROWS rows the draw runs in row blocks: every row gets the token it gets drawn alone."""
    rows = 2 * DRAW_ROWS + 5
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(rows, 5000, generator=gen) * 4
    uniforms = torch.rand(rows, generator=gen, dtype=torch.float64)
    together = sample_next_tokens(logits, 1.0, top_p, uniforms)
    alone = torch.cat(
        [sample_next_tokens(logits[r : r + 1], 1.0, top_p, uniforms[r : r + 1]) for r in range(rows)]
    )
    assert torch.equal(together, alone)
    assert len(set(together.tolist())) > rows // 2  # real draws, not one token


def test_static_backend_batches_256_rows_unless_told(tiny_sampler):
    from sagerl.eval.static_sampler import BATCH_SIZE

    kw = {"model_obj": tiny_sampler.model, "tokenizer": tiny_sampler.tokenizer}
    assert StaticSampler(None, **kw).batch_size == BATCH_SIZE == 256
    assert StaticSampler(None, batch_size=6, **kw).batch_size == 6
    with pytest.raises(ConfigError, match="batch size must be >= 1, got 0"):
        StaticSampler(None, batch_size=0, **kw)
