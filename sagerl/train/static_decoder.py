"""A lean sampler for training rollouts of Llama-family models on a CPU: a static KV cache, fused projections and
pre-packed weights, one decode step per new token for the whole rollout batch.

Why: transformers' ``generate`` at the demo's batch (8 rows, SmolLM2-135M) spends a decode step in 30 layers of
small ops, 7 un-fused matmuls per layer (MKL's unpacked sgemm, at half the machine's weight-read bandwidth), a
key/value cache grown by concatenation, and a without-replacement ``torch.multinomial`` that draws 49,152
exponential variates per row (7.6 ms a step on the AMX machine). This module runs the same model's arithmetic
with: q/k/v and gate/up fused into one matmul each, weights packed once per rollout (float32 for MKL,
``torch.ops.mkl._mkl_linear``; bfloat16 for oneDNN, ``torch.ops.mkldnn._linear_pointwise``: what torch's own
inductor uses for frozen CPU linears; plain ``F.linear`` where torch has neither), a preallocated cache written in place, and sampling by the inverse CDF
(``torch.multinomial(..., replacement=True)``: one uniform per row). Measured side by side in
``benchmarks/step_profile.py`` (docs/performance.md).

The distribution sampled is the policy's: the same logits (the prompt's prefill runs through the model's own
forward; each decode step computes what the model's forward computes, up to float rounding: tested against it)
and transformers' sampling (temperature, then top-k, then top-p, as ``generate`` applies them). The draws differ
from ``generate``'s for the same seed (another use of the random stream), so a run with it is another valid run,
not ``generate``'s run again; that is why it is a setting (``SAGEConfig.rollout_decoder``).

Supported: decoder-only Llama-architecture models (``model_type`` ``llama``, ``qwen2``, ``mistral`` without a
sliding window): RMSNorm, rotary positions from the model's own rotary module (any rope type it has), SiLU-gated
MLP, grouped-query attention, optional q/k/v biases, tied or untied LM head. :func:`unsupported_reason` says why a
model or a sampling setting is not (the trainer then keeps transformers' ``generate``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

MODEL_TYPES = ("llama", "qwen2", "mistral")
SAMPLING_KEYS = frozenset(
    {
        "max_new_tokens",
        "do_sample",
        "pad_token_id",
        "bos_token_id",
        "eos_token_id",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "repetition_penalty",
        "cache_implementation",
    }
)
"""The generation keywords TRL's GRPOTrainer sets; anything else (a user's ``generation_kwargs``) is not supported."""


def unsupported_reason(model, generation_kwargs: dict) -> str | None:
    """Why :class:`StaticDecoder` cannot sample rollouts of ``model`` with ``generation_kwargs``; None if it can.

    Args:
        model: a transformers causal LM (unwrapped).
        generation_kwargs: the keywords of TRL's ``GenerationConfig`` (``GRPOTrainer.generation_kwargs``).
    """
    cfg = getattr(model, "config", None)
    model_type = getattr(cfg, "model_type", None)
    if model_type not in MODEL_TYPES:
        return f"model_type {model_type!r} is not one of {MODEL_TYPES}"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"hidden_act {cfg.hidden_act!r} is not silu"
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", model_type == "mistral"):
        return "a sliding attention window"
    if getattr(cfg, "mlp_bias", False):
        return "MLP biases"
    try:
        layer = model.model.layers[0]
        layer.self_attn.q_proj, layer.mlp.gate_proj, model.model.rotary_emb, model.lm_head  # noqa: B018
    except AttributeError as e:
        return f"not the Llama module layout ({e})"
    if next(model.parameters()).device.type != "cpu":
        return "the model is not on the CPU"
    extra = sorted(set(generation_kwargs) - SAMPLING_KEYS)
    if extra:
        return f"generation keywords it does not implement: {extra}"
    if not generation_kwargs.get("do_sample", True):
        return "greedy decoding (do_sample=False)"
    if generation_kwargs.get("min_p") not in (None, 0, 0.0):
        return "min_p"
    if generation_kwargs.get("repetition_penalty") not in (None, 1, 1.0):
        return "a repetition penalty"
    if generation_kwargs.get("cache_implementation") is not None:
        return f"cache_implementation={generation_kwargs['cache_implementation']!r}"
    if not generation_kwargs.get("temperature", 1.0) > 0:
        return "temperature 0"
    return None


def _mkl_packing() -> bool:
    """Whether this torch has MKL's packed float32 linear (``torch.ops.mkl._mkl_linear``)."""
    try:
        return bool(torch.backends.mkl.is_available()) and hasattr(torch.ops.mkl, "_mkl_linear")
    except (AttributeError, RuntimeError):
        return False


class _Linear:
    """y = x·Wᵀ + b for x (..., in) with W (out, in) held in the decode dtype; float32 W packed for MKL once."""

    def __init__(
        self, weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype, rows: int
    ) -> None:
        self.weight = weight.detach().to(dtype).contiguous()
        self.bias = None if bias is None else bias.detach().to(dtype)
        self.packed, self.kind, self.rows = None, "plain", rows
        try:
            if dtype == torch.float32 and _mkl_packing():
                self.packed, self.kind = torch.ops.mkl._mkl_reorder_linear_weight(self.weight, rows), "mkl"
            elif dtype == torch.bfloat16 and torch.backends.mkldnn.is_available():
                self.packed, self.kind = torch.ops.mkldnn._reorder_linear_weight(self.weight, rows), "onednn"
        except (AttributeError, RuntimeError):  # a torch without the op or the ISA: the plain matmul
            self.packed, self.kind = None, "plain"

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "mkl":
            return torch.ops.mkl._mkl_linear(x, self.packed, self.weight, self.bias, self.rows)
        if self.kind == "onednn":
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)


def _cat_bias(*mods) -> torch.Tensor | None:
    biases = [m.bias for m in mods]
    if all(b is None for b in biases):
        return None
    return torch.cat(
        [
            b if b is not None else m.weight.new_zeros(m.weight.size(0))
            for b, m in zip(biases, mods, strict=True)
        ]
    )


@dataclass
class _Layer:
    norm_in: torch.Tensor
    qkv: _Linear
    o: _Linear
    norm_post: torch.Tensor
    gate_up: _Linear
    down: _Linear


class StaticDecoder:
    """A snapshot of a Llama-family model's weights for sampling rollouts (see the module's docstring).

    The snapshot is taken at construction: build one per rollout (it costs one pass over the weights, ~0.1 s for
    SmolLM2-135M), so it always samples from the current policy.

    Args:
        model: the (unwrapped) transformers model, on the CPU.
        dtype: the decode dtype: ``torch.float32``, or ``torch.bfloat16`` (what transformers computes under
            bfloat16 autocast: bf16 matmuls and attention, float32 norms, residual stream and sampling).
        rows: the batch size the float32 weights are packed for (MKL's hint; any batch works).
    """

    def __init__(self, model, dtype: torch.dtype = torch.float32, rows: int = 8) -> None:
        reason = unsupported_reason(model, {})
        if reason is not None:
            raise ValueError(f"StaticDecoder does not support this model: {reason}")
        self.model = model
        cfg = model.config
        self.dtype = dtype
        self.heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.eps = cfg.rms_norm_eps
        self.scale = self.head_dim**-0.5
        self.layers = []
        for layer in model.model.layers:
            a, m = layer.self_attn, layer.mlp
            qkv_w = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])
            self.layers.append(
                _Layer(
                    norm_in=layer.input_layernorm.weight.detach().float(),
                    qkv=_Linear(qkv_w, _cat_bias(a.q_proj, a.k_proj, a.v_proj), dtype, rows),
                    o=_Linear(a.o_proj.weight, a.o_proj.bias, dtype, rows),
                    norm_post=layer.post_attention_layernorm.weight.detach().float(),
                    gate_up=_Linear(torch.cat([m.gate_proj.weight, m.up_proj.weight]), None, dtype, rows),
                    down=_Linear(m.down_proj.weight, None, dtype, rows),
                )
            )
        self.norm = model.model.norm.weight.detach().float()
        self.embed = model.model.embed_tokens.weight.detach()
        self.head = _Linear(model.lm_head.weight, getattr(model.lm_head, "bias", None), dtype, rows)
        self.intermediate = self.layers[0].gate_up.weight.size(0) // 2

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * weight

    @staticmethod
    def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.size(-1) // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin

    def step(
        self,
        tokens: torch.Tensor,
        position: int,
        keys: list[torch.Tensor],
        values: list[torch.Tensor],
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """One decode step: the logits (B, V), float32, of the next token after ``tokens`` (B,) at ``position``.

        ``keys[i]`` (B, kv_heads, head_dim, T: transposed, so a step's scores need no copy) and ``values[i]``
        (B, kv_heads, T, head_dim) hold layer i's cache for positions < ``position``;
        this step writes its own at ``position``. ``cos``/``sin`` (T, head_dim) are the model's rotary tables;
        ``mask`` (B, 1, 1, T) is 0 where a row may attend and -inf at its left padding, or None without padding.
        """
        b = tokens.size(0)
        h, kv, d, dt = self.heads, self.kv_heads, self.head_dim, self.dtype
        x = self.embed[tokens].float().unsqueeze(1)  # (B, 1, hidden)
        c, s = cos[position], sin[position]
        end = position + 1
        att_mask = None if mask is None else mask[..., :end]
        for i, layer in enumerate(self.layers):
            qkv = layer.qkv(self._rms(x, layer.norm_in).to(dt))
            q, k, v = qkv.split([h * d, kv * d, kv * d], -1)
            qk = self._rope(torch.cat([q, k], -1).view(b, h + kv, d).float(), c, s)
            keys[i][..., position] = qk[:, h:].to(keys[i].dtype)
            values[i][:, :, position] = v.view(b, kv, d).to(values[i].dtype)
            # attention of one query per head, grouped: (B, KV, H/KV, D) @ (B, KV, D, t)
            q = qk[:, :h].reshape(b, kv, h // kv, d).to(dt)
            scores = torch.matmul(q, keys[i][..., :end]).float() * self.scale
            if att_mask is not None:
                scores = scores + att_mask
            att = torch.matmul(scores.softmax(-1).to(dt), values[i][:, :, :end])  # (B, KV, H/KV, D)
            x = x + layer.o(att.reshape(b, 1, h * d)).float()
            gate, up = layer.gate_up(self._rms(x, layer.norm_post).to(dt)).split(self.intermediate, -1)
            x = x + layer.down(F.silu(gate) * up).float()
        return self.head(self._rms(x, self.norm).to(dt))[:, 0].float()

    @torch.no_grad()
    def generate(
        self,
        prompt_ids: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        eos_token_ids: Sequence[int],
        pad_token_id: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        generator: torch.Generator | None = None,
    ) -> list[list[int]]:
        """Sample one completion per row of ``prompt_ids`` (left-padded to one length inside).

        Each distinct prompt is prefilled once by the model's own forward and its cache shared by its rows.
        Returns per row the completion's token ids up to and including the first end-of-sequence token (at most
        ``max_new_tokens``). Positions count from 0 over the left-padded row, as transformers' ``generate`` and
        TRL's log-prob passes count them. Raises ValueError for an empty batch or ``max_new_tokens`` < 1.
        """
        if not prompt_ids or max_new_tokens < 1:
            raise ValueError(
                f"need >= 1 prompt and max_new_tokens >= 1, got {len(prompt_ids)}, {max_new_tokens}"
            )
        from sagerl.eval.samplers import cache_argument, output_cache

        rows = len(prompt_ids)
        length = max(len(p) for p in prompt_ids)
        ids = torch.full((rows, length), pad_token_id, dtype=torch.long)
        attention = torch.zeros(rows, length, dtype=torch.long)
        for r, p in enumerate(prompt_ids):
            ids[r, length - len(p) :] = torch.tensor(list(p), dtype=torch.long)
            attention[r, length - len(p) :] = 1
        slot: dict[tuple[int, ...], int] = {}
        row_slot = torch.tensor([slot.setdefault(tuple(p), len(slot)) for p in prompt_ids])
        first = torch.tensor([row_slot.tolist().index(i) for i in range(len(slot))])

        model = self.model
        out = model(input_ids=ids[first], attention_mask=attention[first], use_cache=True, logits_to_keep=1)
        logits = out.logits[:, -1].float()[row_slot]
        prefill = output_cache(out)
        total = length + max_new_tokens
        keys, values = [], []
        for layer in prefill.layers:
            k, v = layer.keys[row_slot], layer.values[row_slot]
            kc = k.new_zeros(rows, k.size(1), k.size(3), total)
            vc = v.new_zeros(rows, v.size(1), total, v.size(3))
            kc[..., :length], vc[:, :, :length] = k.transpose(2, 3), v
            keys.append(kc.to(self.dtype))
            values.append(vc.to(self.dtype))
        del prefill, out
        positions = torch.arange(total).unsqueeze(0)
        probe = self.embed[:1].float().unsqueeze(0)
        cos, sin = model.model.rotary_emb(probe, positions)
        cos, sin = cos[0].float(), sin[0].float()
        mask = None
        if not bool(attention.all()):
            mask = torch.zeros(rows, 1, 1, total, dtype=self.dtype)
            mask[:, 0, 0, :length].masked_fill_(attention == 0, float("-inf"))
        eos = torch.tensor(list(eos_token_ids), dtype=torch.long)
        done = torch.zeros(rows, dtype=torch.bool)
        out_tokens = []
        _ = cache_argument  # the prefill above passes no cache: a fresh one whatever transformers calls it
        for j in range(max_new_tokens):
            token = sample_token(logits, temperature, top_k, top_p, generator)
            token = torch.where(done, torch.full_like(token, pad_token_id), token)
            out_tokens.append(token)
            done |= torch.isin(token, eos)
            if bool(done.all()) or j == max_new_tokens - 1:
                break
            logits = self.step(token, length + j, keys, values, cos, sin, mask)
        completions = torch.stack(out_tokens, 1)
        result = []
        for row in completions:
            hits = torch.isin(row, eos).nonzero()
            end = int(hits[0]) + 1 if len(hits) else row.size(0)
            result.append(row[:end].tolist())
        return result


def sample_token(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One token per row from ``logits`` (B, V), float32, as transformers' sampling warpers shape them.

    Temperature divides the logits; top-k (k > 0 and < V) keeps the k largest; top-p (< 1) keeps the smallest set
    of most likely tokens whose probability reaches p (transformers' ``TopPLogitsWarper``: tokens whose ascending
    cumulative probability is <= 1 - p are removed, the most likely always kept). The draw is by the inverse CDF
    (``torch.multinomial`` with replacement: one uniform per row). Returns (B,) int64.
    """
    if temperature != 1.0:
        logits = logits / temperature
    if top_k is not None and 0 < top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        ascending, order = torch.sort(logits, dim=-1)
        cumulative = ascending.softmax(-1).cumsum(-1)
        remove = cumulative <= 1 - top_p
        remove[..., -1] = False
        logits = logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
    probs = logits.softmax(-1)
    return torch.multinomial(probs, 1, replacement=True, generator=generator)[:, 0]
