"""Sampling backends behind one interface: :class:`HFSampler` (transformers) here, ``VLLMSampler`` in
:mod:`sagerl.eval.vllm_backend`; :func:`sagerl.eval.backends.make_sampler` picks one by name.

Every backend implements :meth:`Sampler.generate`: for each prompt, draw some completions and return, for
each, its text (prompt and special tokens excluded), its number of completion tokens and why it ended
(``"stop"``: an end-of-sequence token; ``"length"``: ``max_new_tokens`` reached).

Reproducibility: every *sample* has its own seed (see :func:`sample_seed`), derived from the run seed and
the sample's identity, never from what was generated before. A resumed run therefore draws the same
random numbers for the samples it still needs as an uninterrupted run would have.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sagerl.errors import ConfigError, SagerlError


@dataclass(frozen=True)
class Completion:
    """One sampled completion.

    Attributes:
        text: the generated text, without the prompt and without special tokens.
        num_tokens: completion tokens generated, counting the final end-of-sequence token if any.
        finish_reason: ``"stop"`` (end-of-sequence token) or ``"length"`` (hit ``max_new_tokens``).
    """

    text: str
    num_tokens: int
    finish_reason: str


def sample_seed(seed: int, *parts: Any) -> int:
    """A 63-bit seed derived from the run seed and a sample's identity (e.g. dataset, problem id, index).

    Stable across processes and Python versions (SHA-256 of the ``repr`` of the parts), unlike ``hash()``.
    """
    digest = hashlib.sha256(repr((int(seed), *parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)


def _normalise_requests(
    prompts: Sequence[str], n: int | Sequence[int], seed: int, sample_seeds: Sequence[Sequence[int]] | None
) -> list[list[int]]:
    """Per-prompt lists of sample seeds (their lengths are the number of samples per prompt)."""
    counts = [int(n)] * len(prompts) if isinstance(n, int) else [int(x) for x in n]
    if len(counts) != len(prompts):
        raise ValueError(f"got {len(prompts)} prompts but {len(counts)} sample counts")
    if any(x < 0 for x in counts):
        raise ValueError("sample counts must be >= 0")
    if sample_seeds is None:
        return [[sample_seed(seed, i, j) for j in range(c)] for i, c in enumerate(counts)]
    seeds = [[int(s) for s in row] for row in sample_seeds]
    if [len(r) for r in seeds] != counts:
        raise ValueError("sample_seeds must hold one seed per requested sample")
    return seeds


class Sampler(ABC):
    """Interface of a sampling backend.

    Attributes:
        tokenizer: the model's tokenizer (used to render prompts with its chat template).
        name: backend name recorded in results (``"hf"``, ``"vllm"``...).
        chunk_size: how many sequences the evaluation runner hands over per :meth:`generate` call; results
            are written to disk after each call, so this is also the checkpoint granularity.
    """

    name: str = "base"
    tokenizer: Any = None
    chunk_size: int = 64

    @abstractmethod
    def generate(
        self,
        prompts: Sequence[str],
        n: int | Sequence[int],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
        sample_seeds: Sequence[Sequence[int]] | None = None,
    ) -> list[list[Completion]]:
        """Sample completions.

        Args:
            prompts: P rendered prompt strings (chat template already applied).
            n: samples per prompt, one int for all or a list of P ints.
            max_new_tokens: the completion length limit, in tokens.
            temperature: softmax temperature; 0 means greedy (all samples of a prompt are then identical).
            top_p: nucleus sampling mass in (0, 1].
            seed: run seed; sample j of prompt i uses ``sample_seed(seed, i, j)`` unless ``sample_seeds``.
            sample_seeds: optional explicit seed per sample (P lists whose lengths match ``n``).

        Returns:
            P lists; list i holds ``n_i`` :class:`Completion` in request order.
        """


# ---------------------------------------------------------------------------------------------------------
# Token sampling (pure torch, shared by HFSampler and tests)


def sample_next_tokens(logits, temperature: float, top_p: float, uniforms):
    """Draw one token per row from ``softmax(logits / temperature)`` restricted to the top-p nucleus.

    Inverse-CDF sampling with one caller-supplied uniform per row, so each row's randomness comes from its
    own seeded stream and does not depend on which other rows share the batch.

    Args:
        logits: (R, V) float tensor of next-token logits.
        temperature: > 0 samples; 0 takes the argmax (``uniforms`` unused).
        top_p: keep the smallest set of most likely tokens whose mass is >= top_p (HF/vLLM semantics).
        uniforms: (R,) float64 tensor of uniforms in [0, 1).

    Returns:
        (R,) int64 tensor of token ids.
    """
    import torch

    if temperature <= 0:
        return logits.argmax(dim=-1)
    if logits.shape[0] > DRAW_ROWS:
        # in row blocks: each row's arithmetic is unchanged, and a block's float64 work stays in cache
        return torch.cat(
            [
                sample_next_tokens(logits[i : i + DRAW_ROWS], temperature, top_p, uniforms[i : i + DRAW_ROWS])
                for i in range(0, logits.shape[0], DRAW_ROWS)
            ]
        )
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    u = uniforms.to(device=probs.device, dtype=torch.float64).unsqueeze(-1)  # (R, 1)
    if top_p < 1.0:
        # The nucleus almost always lies in the top few hundred tokens: a partial sort (topk) is ~15x cheaper
        # than sorting the vocabulary; rows whose top-k mass falls short of top_p get the full sort.
        k0 = min(probs.shape[-1], _TOP_P_CANDIDATES)
        sorted_p, order = probs.topk(k0, dim=-1)
        short = sorted_p.sum(dim=-1) < top_p
        if bool(short.any()):
            full_p, full_order = probs[short].sort(dim=-1, descending=True)
            out = torch.empty(probs.shape[0], dtype=torch.long, device=probs.device)
            out[~short] = _nucleus_draw(sorted_p[~short], order[~short], top_p, u[~short])
            out[short] = _nucleus_draw(full_p, full_order, top_p, u[short])
            return out
        return _nucleus_draw(sorted_p, order, top_p, u)
    return inverse_cdf(probs, u).squeeze(-1)


_TOP_P_CANDIDATES = 256
DRAW_ROWS = 32
"""Rows :func:`sample_next_tokens` draws at a time: every step is per row, so the draws are the same for any block
size; a block's float64 probabilities (32 x 49,152 x 8 bytes, 12.6 MB for SmolLM2) stay in cache, where 256 rows'
did not (the AVX2 EPYC: 194 ms a draw of 256 rows at once, 34 ms in blocks of 32; docs/performance.md)."""


def _nucleus_draw(sorted_p, order, top_p: float, u):
    """Inverse-CDF draw within the top-p nucleus of descending probabilities ``sorted_p`` (R, K)."""
    cum = sorted_p.cumsum(dim=-1)
    # drop a token when the mass strictly before it already reaches top_p (the first is always kept)
    kept = sorted_p.masked_fill(cum - sorted_p >= top_p, 0.0)
    return order.gather(-1, inverse_cdf(kept, u)).squeeze(-1)


def inverse_cdf(weights, u):
    """(R, 1) int64: per row the first index whose cumulative weight exceeds ``u`` (R, 1) in [0, 1) times the
    row's total, for ``weights`` (R, V) ≥ 0 (need not sum to 1). A weight-0 index is never drawn."""
    import torch

    cdf = weights.cumsum(dim=-1)
    return torch.searchsorted(cdf, u * cdf[:, -1:], right=True).clamp_(max=cdf.shape[-1] - 1)


def default_batch_size(device: str) -> int:
    """Sequences per forward batch: 64 on CPU (throughput flattens beyond), 256 on a GPU."""
    return 256 if str(device).startswith("cuda") else 64


class HFSampler(Sampler):
    """transformers backend, on CPU or GPU.

    How a batch is generated (:meth:`_generate_batch`):
    - the distinct prompts of the batch are tokenised once, LEFT padded, and prefilled once;
    - their KV cache and last-token logits are then expanded to one row per requested sample, so n samples
      of a prompt share one prefill (stronger than ``num_return_sequences``, which re-encodes each copy);
    - decoding is a plain KV-cache loop; each row samples with its own seeded uniforms
      (:func:`sample_next_tokens`), and rows that emitted an end-of-sequence token leave the batch.
    Temperature 0 decodes each prompt once, greedily, and repeats the result n times.

    Args:
        model: a path or hub id, or None / ``"smollm2-135m-instruct"`` for the embedded model.
        device: ``"cpu"``, ``"cuda"``...; default CUDA when available.
        dtype: ``"auto"`` (bfloat16 where the device has bfloat16 matrix units, :mod:`sagerl.precision`,
            else float32), ``"float32"``, ``"bfloat16"``, ``"float16"``: the weights' dtype (the sampling
            probabilities are computed in float32 from the logits).
        batch_size: sequences per decoding batch (default :func:`default_batch_size`).
        model_obj, tokenizer: already loaded objects (skip loading; for tests and benchmarks).

    Raises:
        ModelLoadError: the model does not load.
    """

    name = "hf"

    def __init__(
        self,
        model: str | None = None,
        *,
        device: str | None = None,
        dtype: str = "auto",
        batch_size: int | None = None,
        model_obj: Any = None,
        tokenizer: Any = None,
    ) -> None:
        import torch

        from sagerl.models import load_model, load_tokenizer
        from sagerl.precision import resolve_dtype

        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ConfigError(f"unknown dtype {dtype!r} (choose auto, float32, bfloat16 or float16)")
        if dtype != "float16":
            dtype = resolve_dtype(dtype, str(device))
        self.device = str(device)
        self.dtype = dtype
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(model)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = (
            model_obj if model_obj is not None else load_model(model, dtype=dtype, device=self.device)
        )
        self.model.eval()
        if batch_size is not None and batch_size < 1:
            raise ConfigError(f"batch size must be >= 1, got {batch_size}")
        self.batch_size = int(batch_size or default_batch_size(self.device))
        self.chunk_size = self.batch_size
        self.eos_ids = self._eos_ids()
        # A chat template already writes the special tokens the model expects; a plain prompt gets BOS etc.
        self.add_special_tokens = not getattr(self.tokenizer, "chat_template", None)

    def _eos_ids(self) -> list[int]:
        ids: set[int] = set()
        for source in (getattr(self.model, "generation_config", None), self.tokenizer):
            value = getattr(source, "eos_token_id", None)
            if value is None:
                continue
            ids.update([value] if isinstance(value, int) else list(value))
        if not ids:
            raise SagerlError("the model has no end-of-sequence token; cannot tell where a completion stops")
        return sorted(ids)

    def generate(
        self,
        prompts: Sequence[str],
        n: int | Sequence[int],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
        sample_seeds: Sequence[Sequence[int]] | None = None,
    ) -> list[list[Completion]]:
        """See :meth:`Sampler.generate`. Splits the requests into batches of at most ``batch_size`` rows."""
        _validate_sampling(max_new_tokens, temperature, top_p)
        seeds = _normalise_requests(prompts, n, seed, sample_seeds)
        results: list[list[Completion | None]] = [[None] * len(s) for s in seeds]
        greedy = temperature <= 0
        # Work items: (prompt index, sample slot, seed). Greedy: one row per prompt, copied afterwards.
        items = [(i, j, s) for i, row in enumerate(seeds) for j, s in enumerate(row[:1] if greedy else row)]
        for start in range(0, len(items), self.batch_size):
            batch = items[start : start + self.batch_size]
            outs = self._generate_batch(
                [prompts[i] for i, _, _ in batch],
                [s for _, _, s in batch],
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                top_p=top_p,
            )
            for (i, j, _), comp in zip(batch, outs, strict=True):
                if greedy:
                    results[i] = [comp] * len(seeds[i])
                else:
                    results[i][j] = comp
        return [list(r) for r in results]  # type: ignore[arg-type]

    def _generate_batch(
        self,
        row_prompts: list[str],
        row_seeds: list[int],
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
    ) -> list[Completion]:
        """Generate one completion per row; rows with the same prompt share its prefill."""
        import torch

        # Distinct prompts in first-seen order, and each row's prompt slot.
        slot: dict[str, int] = {}
        row_slot = [slot.setdefault(p, len(slot)) for p in row_prompts]
        uniq = list(slot)
        enc = self.tokenizer(
            uniq, return_tensors="pt", padding=True, add_special_tokens=self.add_special_tokens
        )
        ids = enc["input_ids"].to(self.device)
        mask = enc["attention_mask"].to(self.device)
        pos = (mask.long().cumsum(-1) - 1).clamp_(min=0)
        rows = len(row_prompts)
        uniforms = row_uniforms(row_seeds, max_new_tokens).to(self.device)
        eos = torch.tensor(self.eos_ids, device=self.device)
        tokens = torch.full((rows, max_new_tokens), -1, dtype=torch.long, device=self.device)
        lengths = torch.full((rows,), max_new_tokens, dtype=torch.long)
        stopped = torch.zeros(rows, dtype=torch.bool)

        with torch.inference_mode():
            out = self._forward(ids, mask, pos, cache=None, logits_to_keep=1)
            cache = output_cache(out)
            expand = torch.tensor(row_slot, device=self.device)
            cache.batch_select_indices(expand)
            logits = out.logits[:, -1, :].float().index_select(0, expand)
            mask = mask.index_select(0, expand)
            next_pos = pos[:, -1].index_select(0, expand) + 1
            active = torch.arange(rows, device=self.device)  # original row of each live batch row
            for step in range(max_new_tokens):
                tok = sample_next_tokens(logits, temperature, top_p, uniforms[active, step])
                tokens[active, step] = tok
                done = torch.isin(tok, eos)
                if done.any():
                    finished = active[done].cpu()
                    lengths[finished] = step + 1
                    stopped[finished] = True
                if step == max_new_tokens - 1:
                    break
                keep = ~done
                if not keep.any():
                    break
                if not keep.all():
                    idx = keep.nonzero().squeeze(-1)
                    cache.batch_select_indices(idx)
                    active, tok, mask, next_pos = active[idx], tok[idx], mask[idx], next_pos[idx]
                mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)
                out = self._forward(tok[:, None], mask, next_pos[:, None], cache=cache, logits_to_keep=1)
                logits = out.logits[:, -1, :].float()
                next_pos = next_pos + 1

        tokens = tokens.cpu()
        return [
            self._completion(tokens[r, : int(lengths[r])].tolist(), bool(stopped[r])) for r in range(rows)
        ]

    def _completion(self, new_ids: list[int], stopped: bool) -> Completion:
        """The :class:`Completion` of one row's new token ids (``stopped``: the last one ends the sequence; it is
        counted, not decoded)."""
        text = self.tokenizer.decode(new_ids[:-1] if stopped else new_ids, skip_special_tokens=True)
        return Completion(text, len(new_ids), "stop" if stopped else "length")

    def _forward(self, input_ids, attention_mask, position_ids, *, cache, logits_to_keep):
        kwargs = dict(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
        )
        kwargs[cache_argument(self.model)] = cache
        if getattr(self, "_supports_logits_to_keep", True):
            try:
                return self.model(**kwargs, logits_to_keep=logits_to_keep)
            except TypeError:
                self._supports_logits_to_keep = False
        return self.model(**kwargs)


def row_uniforms(row_seeds: Sequence[int], max_new_tokens: int):
    """Each row's uniforms (rows, max_new_tokens), float64 on the CPU: one per decoding step, from a generator
    seeded with the row's sample seed (so a sample is the same whatever batch it is drawn in)."""
    import torch

    return torch.stack(
        [
            torch.rand(max_new_tokens, generator=torch.Generator().manual_seed(s), dtype=torch.float64)
            for s in row_seeds
        ]
    )


def cache_argument(model) -> str:
    """The name under which ``model``'s forward takes its KV cache: ``cache`` (transformers >= 5.2x) or
    ``past_key_values`` (earlier 5.x, e.g. 5.17 in .venv-vllm), whose forward would swallow ``cache=`` into
    its ``**kwargs`` and silently recompute everything without it."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params or "past_key_values" not in params else "past_key_values"


def output_cache(out):
    """The KV cache a forward pass returned (``out.cache``, or ``out.past_key_values`` before it was renamed)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def _validate_sampling(max_new_tokens: int, temperature: float, top_p: float) -> None:
    if max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if temperature < 0:
        raise ConfigError(f"temperature must be >= 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise ConfigError(f"top_p must be in (0, 1], got {top_p}")
