"""The log-prob passes with each prompt's forward pass shared by its group's rollouts (``share_prompt_prefix``)
give TRL's per-row log-probs, entropies and gradients, up to float rounding."""

from __future__ import annotations

import pytest
import torch
from test_trainer_loss import GROUP, make_trainer


def _rows(tokenizer, generator):
    """Two groups of GROUP rollouts, prompts of different lengths (left-padded), completions right-padded."""
    prompts = [tokenizer("What is 2 + 3? Answer:")["input_ids"], tokenizer("7 - 4 =")["input_ids"]]
    width = max(map(len, prompts))
    prompt_ids, prompt_mask, completion_ids, completion_mask = [], [], [], []
    vocab = len(tokenizer)
    for prompt in prompts:
        for row in range(GROUP):
            prompt_ids.append([tokenizer.pad_token_id] * (width - len(prompt)) + prompt)
            prompt_mask.append([0] * (width - len(prompt)) + [1] * len(prompt))
            length = 3 + 2 * row  # rows of one group have different completion lengths
            ids = torch.randint(0, vocab, (9,), generator=generator).tolist()
            completion_ids.append(ids)
            completion_mask.append([1] * length + [0] * (9 - length))
    tensor = torch.tensor
    return tensor(prompt_ids), tensor(prompt_mask), tensor(completion_ids), tensor(completion_mask)


def _batch(trainer, seed: int):
    """_rows joined as TRL's forward passes take them: (prompt_ids, prompt_mask, completion_ids, completion_mask,
    input_ids, attention_mask, completion width)."""
    prompt_ids, prompt_mask, completion_ids, completion_mask = _rows(
        trainer.processing_class, torch.Generator().manual_seed(seed)
    )
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    mask = torch.cat([prompt_mask, completion_mask], dim=1)
    return prompt_ids, prompt_mask, completion_ids, completion_mask, ids, mask, completion_ids.shape[1]


def _counting_positions(model, run):
    """``run()`` with ``model``'s forward counting its input token positions: (run's result, positions)."""
    calls: list[int] = []
    forward = model.forward

    def counting(*a, **k):
        calls.append(k["input_ids"].numel())
        return forward(*a, **k)

    model.forward = counting
    try:
        return run(), sum(calls)
    finally:
        model.forward = forward


@pytest.mark.parametrize("batch_size", [None, 3])  # 3: chunks that cut a group
def test_shared_prompt_prefix_gives_trls_log_probs_entropies_and_gradient(tiny_model, tmp_path, batch_size):
    trainer, _ = make_trainer(tiny_model, tmp_path)
    prompt_ids, _, completion_ids, completion_mask, ids, mask, width = _batch(trainer, 0)
    results = {}
    for share in (False, True):
        trainer.args.share_prompt_prefix = share
        trainer.model.zero_grad()
        (logps, entropy, _), positions = _counting_positions(
            trainer.model,
            lambda: trainer._get_per_token_logps_and_entropies(
                trainer.model, ids, mask, width, batch_size=batch_size, compute_entropy=True
            ),
        )
        (logps * completion_mask).sum().backward()
        grad = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])
        results[share] = (logps.detach(), entropy.detach(), grad, positions)
    (lp0, h0, g0, tokens0), (lp1, h1, g1, tokens1) = results[False], results[True]
    valid = completion_mask.bool()
    torch.testing.assert_close(lp1[valid], lp0[valid], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(h1[valid], h0[valid], rtol=1e-4, atol=1e-4)
    assert float((g1 - g0).norm() / g0.norm()) < 1e-5  # the same gradient up to float rounding
    assert tokens0 == ids.numel()  # TRL: every row's whole sequence
    prompt_len = prompt_ids.shape[1]
    groups = 2 if batch_size is None else 4  # chunks of 3 rows cut the two groups into four pieces
    assert tokens1 == groups * (prompt_len - 1) + ids.shape[0] * (width + 1)  # each prompt once per piece


def test_rows_without_a_shared_prompt_and_the_switch_use_trls_forward(tiny_model, tmp_path):
    trainer, _ = make_trainer(tiny_model, tmp_path)
    *_, ids, mask, width = _batch(trainer, 1)
    alone = [0, GROUP]  # one row of each group: nothing to share
    assert (
        trainer._shared_prefix_logps(trainer.model, ids[alone], mask[alone], width, None, False, {}) is None
    )
    assert (
        trainer._shared_prefix_logps(trainer.model, ids, mask, width, None, False, {"pixel_values": 1})
        is None
    )
    trainer.args.share_prompt_prefix = False
    assert trainer._shared_prefix_logps(trainer.model, ids, mask, width, None, False, {}) is None
    trainer.args.share_prompt_prefix = True
    assert trainer._shared_prefix_logps(trainer.model, ids, mask, width, None, False, {}) is not None


def _prompt_ids(tokenizer) -> list[list[int]]:
    """Two prompts of different lengths, each GROUP times in a row, as TRL lays out a rollout batch."""
    prompts = [tokenizer("What is 2 + 3? Answer:")["input_ids"], tokenizer("7 - 4 =")["input_ids"]]
    return [p for p in prompts for _ in range(GROUP)]


def test_shared_generation_prefix_gives_trls_rollouts_with_one_prefill_per_prompt(tiny_model, tmp_path):
    """The same seed gives the same completions with and without ``share_generation_prefix`` (the random draws
    are the same, the logits equal up to rounding), cut after the same end-of-sequence token, and the shared
    run prefills each prompt once."""
    trainer, _ = make_trainer(tiny_model, tmp_path, max_completion_length=12)
    prompt_ids = _prompt_ids(trainer.processing_class)

    def rollouts(share: bool) -> tuple[list[list[int]], list[int]]:
        trainer.args.share_generation_prefix = share
        positions: list[int] = []
        forward = trainer.model.forward

        def counting(*a, **k):
            positions.append(k["input_ids"].numel())
            return forward(*a, **k)

        trainer.model.forward = counting
        try:
            torch.manual_seed(7)
            return trainer._generate_single_turn(prompt_ids, None, {}, GROUP)[0], positions
        finally:
            trainer.model.forward = forward

    # the random tiny model never samples its end-of-sequence token: make the 4th token of the first rollout one
    stop = rollouts(False)[0][0][3]
    trainer.eos_token_ids = [stop]
    trainer.generation_config.eos_token_id = [stop]
    (plain, plain_positions), (shared, shared_positions) = rollouts(False), rollouts(True)
    assert shared == plain
    assert len(plain[0]) == 4 and plain[0][-1] == stop  # cut after the first end-of-sequence token, kept
    width = max(map(len, prompt_ids))
    assert plain_positions[0] == len(prompt_ids) * width  # TRL: every row's whole prompt
    assert shared_positions[0] == 2 * (width - 1)  # shared: each distinct prompt once, but its last token
    assert shared_positions[1] == len(prompt_ids)  # then the last prompt token of every row


def test_generation_prefix_sharing_applies_to_repeated_text_prompts_only(tiny_model, tmp_path):
    trainer, _ = make_trainer(tiny_model, tmp_path, share_generation_prefix=True)
    prompt_ids = _prompt_ids(trainer.processing_class)
    assert trainer._shares_generation_prefix(prompt_ids, None, {})
    assert not trainer._shares_generation_prefix(prompt_ids[::GROUP], None, {})  # nothing repeats
    assert not trainer._shares_generation_prefix(prompt_ids, [[object()]], {})  # images
    assert not trainer._shares_generation_prefix(prompt_ids, None, {"pixel_values": torch.ones(1)})
    trainer.args.share_generation_prefix = False
    assert not trainer._shares_generation_prefix(prompt_ids, None, {})


@pytest.mark.parametrize("batch_size", [None, 3])  # 3: chunks that cut a group
def test_the_vocabulary_pass_shares_each_prompt_with_the_same_logits_hidden_states_and_gradient(
    tiny_model, tmp_path, batch_size
):
    """The losses that read the whole next-token distribution (SimKO, APO, FlowRL) get the plain forward's
    completion logits and prompt hidden states, and the same gradient, with each prompt run once per group."""
    trainer, _ = make_trainer(tiny_model, tmp_path)
    prompt_ids, prompt_mask, completion_ids, completion_mask, ids, mask, width = _batch(trainer, 2)
    results = {}
    for share in (False, True):
        trainer.args.share_prompt_prefix = share
        trainer.model.zero_grad()
        chunks, positions = _counting_positions(
            trainer.model,
            lambda: list(
                trainer._completion_logits(trainer.model, ids, mask, width, batch_size, prompt_hidden=True)
            ),
        )
        assert [c[0] for c in chunks] == list(range(0, ids.shape[0], batch_size or ids.shape[0]))
        logits = torch.cat([c[1] for c in chunks]).float()
        hidden = torch.cat([c[2] for c in chunks]).float()
        logprobs = torch.log_softmax(logits, dim=-1)
        loss = (logprobs.gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1) * completion_mask).sum()
        loss = loss + (hidden * prompt_mask.unsqueeze(-1)).square().mean()  # FlowRL's log Z reads these
        loss.backward()
        grad = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])
        results[share] = (logits.detach(), hidden.detach(), grad, positions)
    (l0, h0, g0, tokens0), (l1, h1, g1, tokens1) = results[False], results[True]
    valid, prompt = completion_mask.bool(), prompt_mask.bool()
    assert l1.shape == l0.shape == (*completion_ids.shape, trainer.model.config.vocab_size)
    torch.testing.assert_close(l1[valid], l0[valid], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(h1[prompt], h0[prompt], rtol=1e-4, atol=1e-4)
    assert float((g1 - g0).norm() / g0.norm()) < 1e-5
    assert tokens0 == ids.numel()
    groups = 2 if batch_size is None else 4
    assert tokens1 == groups * (prompt_ids.shape[1] - 1) + ids.shape[0] * (width + 1)


def test_the_prompt_cache_is_repeated_with_a_backward_pass_that_sums_rows_in_order():
    """The shared prefix's cache rows (sagerl.train.trainer.repeat_cache_rows) sum their gradients into the prompt in
    row order: the same bits on every backward pass with 2 threads, equal to adding the rows one by one. (Indexing
    with a tensor, the cache's own batch_select_indices, adds them in a thread-dependent order on a CPU: make demo's
    weights after one step differed between runs of the same command.)"""
    from transformers import DynamicCache

    from sagerl.train.trainer import repeat_cache_rows

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        generator = torch.Generator().manual_seed(0)
        # 2 prompts' keys and values, each larger than one thread's share of the backward's work
        keys = torch.randn(2, 3, 196, 64, generator=generator, requires_grad=True)
        values = torch.randn(2, 3, 196, 64, generator=generator, requires_grad=True)
        rows = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 1])
        upstream = torch.randn(len(rows), 3, 196, 64, generator=generator)

        def gradient() -> torch.Tensor:
            keys.grad = values.grad = None
            cache = DynamicCache()
            cache.update(keys, values, layer_idx=0)
            repeat_cache_rows(cache, rows)
            layer = cache.layers[0]
            assert layer.keys.shape == (9, 3, 196, 64) and torch.equal(layer.values[5], values[1].detach())
            ((layer.keys + 2 * layer.values) * upstream).sum().backward()
            return keys.grad.clone()

        first = gradient()
        assert all(torch.equal(gradient(), first) for _ in range(20))
        in_order = torch.zeros_like(first)
        for r, prompt in enumerate(rows.tolist()):
            in_order[prompt] += upstream[r]
        assert torch.equal(first, in_order)
    finally:
        torch.set_num_threads(threads)
