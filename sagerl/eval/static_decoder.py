"""A lean sampler for Llama-family models on a CPU: a static KV cache, fused projections and pre-packed weights,
one decode step per new token for the whole batch, the prompt's cache shared by all its rows.

Why: transformers' ``generate`` at the demo's batch (8 rows, SmolLM2-135M) spends a decode step in 30 layers of
small ops, 7 un-fused matmuls per layer (MKL's unpacked sgemm, at half the machine's weight-read bandwidth), a
key/value cache grown by concatenation and copied per row, and a without-replacement ``torch.multinomial`` that
draws 49,152 exponential variates per row (7.6 ms a step on the AMX machine). This module runs the same model's
arithmetic with: q/k/v and gate/up fused into one matmul each, weights packed once per snapshot for oneDNN
(``torch.ops.mkldnn._linear_pointwise``, float32 or bfloat16: what torch's own inductor uses for frozen CPU
linears; MKL's packed float32 linear, ``torch.ops.mkl._mkl_linear``, where torch has no oneDNN; plain ``F.linear``
where it has neither), each distinct prompt's keys and values held once and attended by all its rows' queries in
one matmul (a group of G rollouts reads its prompt's cache once a step, not G times), each row's generated keys in
a preallocated cache written in place, and rows that ended leaving the batch. Measured side by side in
``benchmarks/step_profile.py`` (docs/performance.md); the float32 kernel choice in ``benchmarks/linear_kernels.py``
(oneDNN read a step's float32 weights 2.1x faster than MKL's packed sgemm at 8 rows on the AVX2-only AMD EPYC).

Two users: training rollouts (``SAGEConfig.rollout_decoder='static'``, sampling with
transformers' warpers and an inverse-CDF draw, :func:`sample_token`) and evaluation (``--backend static``,
:class:`sagerl.eval.static_sampler.StaticSampler`: the evaluation's own per-row seeded draws).

The distribution sampled is the policy's: the same logits (the prompt's prefill runs through the model's own
forward; each decode step computes what the model's forward computes, up to float rounding: tested against it).
In training the draws differ from ``generate``'s for the same seed (another use of the random stream), so a run
with it is another valid run, not ``generate``'s run again; that is why it is a setting. In evaluation the draws
are the hf backend's (the same uniforms per row), so the two backends give the same completions up to float
rounding of the logits (tested).

Supported: decoder-only Llama-architecture models (``model_type`` ``llama``, ``qwen2``, ``mistral`` without a
sliding window): RMSNorm, rotary positions from the model's own rotary module (any rope type it has), SiLU-gated
MLP, grouped-query attention, optional q/k/v biases, tied or untied LM head. :func:`unsupported_reason` says why a
model or a sampling setting is not (the trainer then keeps transformers' ``generate``; the evaluation refuses).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
    """Whether this torch has MKL's packed float32 linear (``torch.ops.mkl._mkl_linear``): the float32 path where
    torch has no oneDNN."""
    try:
        return bool(torch.backends.mkl.is_available()) and hasattr(torch.ops.mkl, "_mkl_linear")
    except (AttributeError, RuntimeError):
        return False


class _Linear:
    """y = x·Wᵀ + b for x (..., in) with W (out, in) held in the decode dtype, packed once for oneDNN (float32 or
    bfloat16), else float32 for MKL, else unpacked."""

    def __init__(
        self, weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype, rows: int
    ) -> None:
        self.weight = weight.detach().to(dtype).contiguous()
        self.bias = None if bias is None else bias.detach().to(dtype)
        self.packed, self.kind, self.rows = None, "plain", rows
        packers = []
        if dtype in (torch.float32, torch.bfloat16) and torch.backends.mkldnn.is_available():
            packers.append(("onednn", lambda w, r: torch.ops.mkldnn._reorder_linear_weight(w, r)))
        if dtype == torch.float32 and _mkl_packing():
            packers.append(("mkl", lambda w, r: torch.ops.mkl._mkl_reorder_linear_weight(w, r)))
        for kind, pack in packers:  # the first that packs; none: the plain matmul
            try:
                self.packed, self.kind = pack(self.weight, rows), kind
                break
            except (AttributeError, RuntimeError):  # a torch without the op or a CPU without the ISA
                continue

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


SHARED_PREFIX_MIN = 16
"""Distinct prompts that share at least this many leading tokens prefill them once (:meth:`StaticDecoder.prefill`,
``positions="tokens"``); below it the split's extra forward call costs more than it saves."""


def shared_prefix_length(prompts: Sequence[Sequence[int]]) -> int:
    """The number of leading tokens every prompt of ``prompts`` (two or more) has in common, at most each prompt's
    length minus 1 (every prompt keeps its last token for the forward pass that gives its first logits); 0 for one
    prompt."""
    if len(prompts) < 2:
        return 0
    limit = min(len(p) for p in prompts) - 1
    first = prompts[0]
    n = 0
    while n < limit and all(p[n] == first[n] for p in prompts):
        n += 1
    return n


@dataclass
class _Layer:
    norm_in: torch.Tensor
    qkv: _Linear
    o: _Linear
    norm_post: torch.Tensor
    gate_up: _Linear
    down: _Linear


@dataclass
class DecodeState:
    """A decode in progress (:meth:`StaticDecoder.prefill`, advanced by :meth:`StaticDecoder.step`).

    The prompt's keys and values are held once per distinct prompt (P of them, left-padded to L tokens); each
    row's own (up to N = ``max_new_tokens``) in a preallocated per-row cache. Row r belongs to prompt ``slot[r]``
    as its ``member[r]``-th row (of at most G per prompt).

    Attributes:
        logits: (B, V) float32, the next-token logits of every row in the batch.
        rows: (B,) the caller's row index of each batch row (rows leave the batch when it is compacted).
        positions: (B,) the position of each row's next token.
        generated: tokens each row has in its own cache (the same for every row).
        prefix_keys/prefix_values: per layer (P, KV, D, L) and (P, KV, L, D), float32 holding values rounded to
            the decode dtype.
        prefix_mask: (B, 1, 1, L) float32, 0 where a row may attend and -inf at its prompt's left padding; None
            when no prompt is padded.
        keys/values: per layer (B, KV, D, N) and (B, KV, N, D), float32: each row's generated tokens.
        slot, member: (B,) int64; groups: P; group_size: G; dense: rows are slot-major and every group full
            (row r is member r % G of prompt r // G), so the grouped attention needs no scatter.
    """

    logits: torch.Tensor
    rows: torch.Tensor
    positions: torch.Tensor
    generated: int
    prefix_keys: list[torch.Tensor]
    prefix_values: list[torch.Tensor]
    prefix_mask: torch.Tensor | None
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    slot: torch.Tensor
    member: torch.Tensor
    groups: int
    group_size: int
    dense: bool

    def keep(self, index: torch.Tensor) -> None:
        """Keep only the batch rows ``index`` (B',): the others have ended. The prompts' cache is untouched."""
        self.logits, self.rows, self.positions = self.logits[index], self.rows[index], self.positions[index]
        self.slot, self.member = self.slot[index], self.member[index]
        if self.prefix_mask is not None:
            self.prefix_mask = self.prefix_mask[index]
        self.keys = [k.index_select(0, index) for k in self.keys]
        self.values = [v.index_select(0, index) for v in self.values]
        self.dense = False


class StaticDecoder:
    """A snapshot of a Llama-family model's weights for sampling (see the module's docstring).

    The snapshot is taken at construction: build one per rollout (it costs one pass over the weights, ~0.1 s for
    SmolLM2-135M), so it always samples from the current policy.

    Args:
        model: the (unwrapped) transformers model, on the CPU.
        dtype: the decode dtype: ``torch.float32``, or ``torch.bfloat16`` (what transformers computes under
            bfloat16 autocast or with bfloat16 weights: bf16 linears, keys and values, float32 norms, residual
            stream and sampling).
        rows: the batch size the weights are packed for (the packing's hint; any batch works, with MKL another one
            through the unpacked matmul).

    Raises:
        ValueError: the model is not supported (:func:`unsupported_reason` says why).
    """

    COMPACT_SHARE = 0.25
    """Ended rows leave the batch once they are this share of it (the cache copy then pays for itself); never
    with MKL-packed float32 weights, whose packing is for one batch size."""

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
        self.compacts = self.head.kind != "mkl"
        self._cos = self._sin = None

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * weight

    @staticmethod
    def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.size(-1) // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin

    def _rotary(self, positions: int) -> None:
        """The model's own rotary tables (float32, (T, head_dim)) for positions < ``positions``."""
        if self._cos is None or self._cos.size(0) < positions:
            probe = self.embed[:1].float().unsqueeze(0)
            cos, sin = self.model.model.rotary_emb(probe, torch.arange(positions).unsqueeze(0))
            self._cos, self._sin = cos[0].float(), sin[0].float()

    @torch.no_grad()
    def prefill(
        self,
        prompt_ids: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        pad_token_id: int,
        positions: str = "padded",
    ) -> DecodeState:
        """Run each distinct prompt of ``prompt_ids`` (B rows) once through the model's own forward.

        With ``positions="tokens"``, distinct prompts that open with the same tokens (an evaluation's few-shot
        worked examples and chat template: 149 of the ~185 tokens of each ``arith_l1`` prompt with 2 examples)
        share that prefix's prefill too: it runs once, its cache is repeated for every prompt, and each prompt's
        remaining tokens run after it, left-padded among themselves (so the prompt cache holds
        ``[shared prefix | padding | own tokens]``, the padding masked). The same keys, values and logits as a
        whole-prompt prefill up to float rounding (tested), :data:`SHARED_PREFIX_MIN` tokens or more shared.

        Args:
            prompt_ids: B token-id lists (rows with the same ids share one prefill and one prompt cache).
            max_new_tokens: the room each row's cache gets (N).
            pad_token_id: fills the left padding of shorter prompts.
            positions: ``"padded"``: positions count from 0 over the left-padded row (transformers' ``generate``
                and TRL's log-prob passes); ``"tokens"``: from 0 at each prompt's first real token (the
                evaluation sampler's ``position_ids``).

        Returns:
            The state whose ``logits`` (B, V) give each row's first new token.

        Raises:
            ValueError: no prompt, ``max_new_tokens`` < 1, or an unknown ``positions``.
        """
        if not prompt_ids or max_new_tokens < 1:
            raise ValueError(
                f"need >= 1 prompt and max_new_tokens >= 1, got {len(prompt_ids)}, {max_new_tokens}"
            )
        if positions not in ("padded", "tokens"):
            raise ValueError(f"positions must be 'padded' or 'tokens', got {positions!r}")
        from sagerl.eval.samplers import cache_argument, output_cache

        slot_of: dict[tuple[int, ...], int] = {}
        slot_list = [slot_of.setdefault(tuple(p), len(slot_of)) for p in prompt_ids]
        distinct = list(slot_of)
        groups = len(distinct)
        shared = shared_prefix_length(distinct) if positions == "tokens" else 0
        if shared < SHARED_PREFIX_MIN:
            shared = 0
        length = max(len(p) for p in distinct) - shared  # the left-padded part each prompt runs on its own
        ids = torch.full((groups, length), pad_token_id, dtype=torch.long)
        attention = torch.zeros(groups, length, dtype=torch.long)
        for i, p in enumerate(distinct):
            ids[i, length - len(p) + shared :] = torch.tensor(p[shared:], dtype=torch.long)
            attention[i, length - len(p) + shared :] = 1
        kwargs = dict(input_ids=ids, attention_mask=attention, use_cache=True, logits_to_keep=1)
        if shared:
            head = self.model(
                input_ids=torch.tensor([distinct[0][:shared]], dtype=torch.long),
                use_cache=True,
                logits_to_keep=1,
            )
            cache = output_cache(head)
            cache.batch_select_indices(torch.zeros(groups, dtype=torch.long))  # the prefix's cache per prompt
            attention = torch.cat([torch.ones(groups, shared, dtype=torch.long), attention], 1)
            kwargs.update(attention_mask=attention, **{cache_argument(self.model): cache})
            kwargs["position_ids"] = (attention.cumsum(-1) - 1)[:, shared:]
        elif positions == "tokens":
            kwargs["position_ids"] = (attention.cumsum(-1) - 1).clamp_(min=0)
        out = self.model(**kwargs)
        length += shared
        slot = torch.tensor(slot_list)
        member = torch.zeros_like(slot)
        seen = [0] * groups  # rows of each prompt so far; in the end, each prompt's row count
        for r, s in enumerate(slot_list):
            member[r], seen[s] = seen[s], seen[s] + 1
        group_size = max(seen)
        rows = len(slot_list)
        dense = rows == groups * group_size and bool((slot == torch.arange(rows) // group_size).all())
        prefix_keys, prefix_values, keys, values = [], [], [], []
        for layer in output_cache(out).layers:
            k, v = layer.keys, layer.values  # (P, KV, L, D)
            # the cache in float32: the keys and values keep the decode dtype's rounding (they come out of its
            # linears), the attention's small matmuls run in float32 (oneDNN's bfloat16 ones take 2-3× longer here)
            prefix_keys.append(k.to(self.dtype).transpose(2, 3).float().contiguous())
            prefix_values.append(v.to(self.dtype).float().contiguous())
            keys.append(k.new_zeros(rows, k.size(1), k.size(3), max_new_tokens, dtype=torch.float32))
            values.append(v.new_zeros(rows, v.size(1), max_new_tokens, v.size(3), dtype=torch.float32))
        prefix_mask = None
        if not bool(attention.all()):
            prefix_mask = torch.zeros(groups, length).masked_fill_(attention == 0, float("-inf"))
            prefix_mask = prefix_mask[slot][:, None, None, :]
        start = attention.sum(-1) if positions == "tokens" else torch.full((groups,), length)
        self._rotary(int(start.max()) + max_new_tokens)
        return DecodeState(
            logits=out.logits[:, -1].float()[slot],
            rows=torch.arange(rows),
            positions=start[slot],
            generated=0,
            prefix_keys=prefix_keys,
            prefix_values=prefix_values,
            prefix_mask=prefix_mask,
            keys=keys,
            values=values,
            slot=slot,
            member=member,
            groups=groups,
            group_size=group_size,
            dense=dense,
        )

    def _to_groups(self, x: torch.Tensor, state: DecodeState) -> torch.Tensor:
        """(B, KV, g, ·) per row -> (P, KV, G·g, ·) per prompt, rows absent from a group as zeros."""
        if state.dense:
            grouped = x.reshape(state.groups, state.group_size, *x.shape[1:])
        else:
            grouped = x.new_zeros(state.groups, state.group_size, *x.shape[1:])
            grouped[state.slot, state.member] = x
        p, g, kv, h = grouped.shape[:4]
        return grouped.transpose(1, 2).reshape(p, kv, g * h, grouped.size(-1))

    def _from_groups(self, y: torch.Tensor, state: DecodeState) -> torch.Tensor:
        """(P, KV, G·g, ·) per prompt -> (B, KV, g, ·) per row (the inverse of :meth:`_to_groups`)."""
        p, kv, gh, last = y.shape
        y = y.view(p, kv, state.group_size, gh // state.group_size, last)
        if state.dense:
            return y.transpose(1, 2).reshape(-1, kv, gh // state.group_size, last)
        return y[state.slot, :, state.member]

    @torch.no_grad()
    def step(self, tokens: torch.Tensor, state: DecodeState) -> torch.Tensor:
        """One decode step: feed ``tokens`` (B,) at ``state.positions`` and return the next logits (B, V), float32.

        Attention of each row's one query is split in two parts that share one softmax: against its prompt's
        keys, computed once per prompt for all its rows (the queries of a group stacked as extra heads: the
        prompt's cache is read once, not once per row), and against the row's own generated keys. Writes the
        token's keys and values into the row cache and advances ``state`` (``logits``, ``positions``,
        ``generated``).
        """
        b = tokens.size(0)
        h, kv, d, dt = self.heads, self.kv_heads, self.head_dim, self.dtype
        j = state.generated
        x = self.embed[tokens].float()  # (B, hidden)
        c, s = self._cos[state.positions].unsqueeze(1), self._sin[state.positions].unsqueeze(1)
        prompt_len = state.prefix_keys[0].size(-1)
        for i, layer in enumerate(self.layers):
            qkv = layer.qkv(self._rms(x, layer.norm_in).to(dt))
            q, k, v = qkv.split([h * d, kv * d, kv * d], -1)
            qk = self._rope(torch.cat([q, k], -1).view(b, h + kv, d).float(), c, s)
            state.keys[i][..., j] = qk[:, h:].to(dt)
            state.values[i][:, :, j] = v.view(b, kv, d).to(dt)
            q = qk[:, :h].reshape(b, kv, h // kv, d)  # grouped-query: (B, KV, H/KV, D)
            prompt_scores = self._from_groups(
                torch.matmul(self._to_groups(q, state), state.prefix_keys[i]), state
            )
            own_scores = torch.matmul(q, state.keys[i][..., : j + 1])
            scores = torch.cat([prompt_scores, own_scores], -1) * self.scale
            if state.prefix_mask is not None:
                scores[..., :prompt_len] += state.prefix_mask
            weights = scores.softmax(-1)
            att = self._from_groups(
                torch.matmul(self._to_groups(weights[..., :prompt_len], state), state.prefix_values[i]),
                state,
            ) + torch.matmul(weights[..., prompt_len:], state.values[i][:, :, : j + 1])
            x = x + layer.o(att.reshape(b, h * d).to(dt)).float()
            gate, up = layer.gate_up(self._rms(x, layer.norm_post).to(dt)).split(self.intermediate, -1)
            x = x + layer.down(F.silu(gate) * up).float()
        state.logits = self.head(self._rms(x, self.norm).to(dt)).float()
        state.positions = state.positions + 1
        state.generated = j + 1
        return state.logits

    @torch.no_grad()
    def decode(
        self,
        prompt_ids: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        eos_token_ids: Sequence[int],
        pad_token_id: int,
        draw: Callable[[torch.Tensor, int, torch.Tensor], torch.Tensor],
        positions: str = "padded",
    ) -> list[list[int]]:
        """Decode every row of ``prompt_ids`` until it emits an end-of-sequence token or ``max_new_tokens``.

        Args:
            draw: ``draw(logits (B', V) float32, step, rows (B',))`` returns the next token (B',) of the batch rows
                ``rows`` (the caller's row indices; a row that has ended may still be asked, and its token is
                ignored).
            positions: see :meth:`prefill`.

        Returns:
            Per row its new token ids up to and including the first end-of-sequence token.
        """
        state = self.prefill(
            prompt_ids, max_new_tokens=max_new_tokens, pad_token_id=pad_token_id, positions=positions
        )
        total = len(prompt_ids)
        eos = torch.tensor(list(eos_token_ids), dtype=torch.long)
        tokens = torch.full((total, max_new_tokens), pad_token_id, dtype=torch.long)
        length = torch.full((total,), max_new_tokens, dtype=torch.long)
        ended = torch.zeros(total, dtype=torch.bool)
        for j in range(max_new_tokens):
            token = draw(state.logits, j, state.rows)
            live = ~ended[state.rows]
            tokens[state.rows[live], j] = token[live]
            stop = live & torch.isin(token, eos)
            if bool(stop.any()):
                length[state.rows[stop]] = j + 1
                ended[state.rows[stop]] = True
            if bool(ended.all()) or j == max_new_tokens - 1:
                break
            out = ended[state.rows]
            if self.compacts and float(out.float().mean()) >= self.COMPACT_SHARE:
                keep = (~out).nonzero().squeeze(-1)
                state.keep(keep)
                token = token[keep]
            self.step(token, state)
        return [tokens[r, : int(length[r])].tolist() for r in range(total)]

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
        """Sample one completion per row of ``prompt_ids`` with transformers' warpers (:func:`sample_token`).

        Positions count from 0 over the left-padded row, as transformers' ``generate`` and TRL's log-prob passes
        count them. Returns per row the completion's token ids up to and including the first end-of-sequence
        token (at most ``max_new_tokens``). Raises ValueError for an empty batch or ``max_new_tokens`` < 1.
        """

        def draw(logits: torch.Tensor, step: int, rows: torch.Tensor) -> torch.Tensor:
            return sample_token(logits, temperature, top_k, top_p, generator)

        return self.decode(
            prompt_ids,
            max_new_tokens=max_new_tokens,
            eos_token_ids=eos_token_ids,
            pad_token_id=pad_token_id,
            draw=draw,
        )


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
    cumulative probability is <= 1 - p are removed, the most likely always kept). The draw is by the inverse CDF:
    one uniform u per row from ``generator``, the first token whose cumulative probability exceeds u times the
    row's total (so a removed token, of probability 0, is never drawn). ``torch.multinomial`` draws the same
    distribution 50× slower here (7.6 ms against 0.15 ms for 8 rows × 49,152 tokens on the AMX machine).
    Returns (B,) int64.
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
    from sagerl.eval.samplers import inverse_cdf

    u = torch.rand(logits.size(0), 1, generator=generator, dtype=logits.dtype)
    return inverse_cdf(logits.softmax(-1), u)[:, 0]
