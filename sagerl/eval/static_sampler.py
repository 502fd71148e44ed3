"""The ``static`` sampling backend: the hf backend's samples, decoded by sagerl's static decode loop on the CPU.

:class:`StaticSampler` keeps :class:`~sagerl.eval.samplers.HFSampler`'s prompts, prefill, positions and per-row
seeded draws and runs the decode steps with :class:`~sagerl.eval.static_decoder.StaticDecoder` (the loop the
trainer's ``rollout_decoder: static`` uses). Measured in docs/performance.md.
"""

from __future__ import annotations

from typing import Any

from sagerl.errors import ConfigError
from sagerl.eval.samplers import Completion, HFSampler, row_uniforms, sample_next_tokens

BATCH_SIZE = 256
"""The static backend's rows per batch unless ``--batch-size`` says otherwise: its decode steps are compute-bound
at 256 rows, and a larger batch leaves fewer steps to the long tail of a few unfinished rows (the demo's evaluation,
64 problems x 8 samples on the AVX2 EPYC: 69 s at 256 rows, 68 at 512; 108 s for the loop before, at the hf
backend's 64 rows, each prompt prefilled whole and the draw over all rows at once; docs/performance.md)."""


class StaticSampler(HFSampler):
    """The hf backend's sampling with sagerl's static decode loop (:mod:`sagerl.eval.static_decoder`), on the CPU.

    The same prompts, prefill (the model's own forward), positions and per-row seeded draws as
    :class:`HFSampler`; the decode steps run :class:`~sagerl.eval.static_decoder.StaticDecoder` (fused and packed
    weights, a static cache, each prompt's keys read once per step for all its samples). The completions are
    the hf backend's up to float rounding of the logits (a near-tie may go the other way). Llama-family models
    only (``llama``, ``qwen2``, ``mistral``).

    Args: as :class:`HFSampler` (``device`` is always the CPU); ``batch_size`` defaults to :data:`BATCH_SIZE`.

    Raises:
        ConfigError: the model is not one the static decoder supports (the reason named), or a GPU was asked.
        ModelLoadError: the model does not load.
    """

    name = "static"

    def __init__(self, model: str | None = None, *, device: str | None = None, **kwargs: Any) -> None:
        if device not in (None, "cpu"):
            raise ConfigError(f"the static backend runs on the CPU, not {device!r} (use --backend hf)")
        if kwargs.get("batch_size") is None:
            kwargs["batch_size"] = BATCH_SIZE
        super().__init__(model, device="cpu", **kwargs)
        from sagerl.eval.static_decoder import unsupported_reason

        reason = unsupported_reason(self.model, {})
        if reason is not None:
            raise ConfigError(f"--backend static cannot sample this model: {reason} (use --backend hf)")
        self._decoder = None

    def _generate_batch(
        self,
        row_prompts: list[str],
        row_seeds: list[int],
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
    ) -> list[Completion]:
        """One completion per row, decoded by the static loop with the hf backend's per-row uniforms."""
        import torch

        from sagerl.eval.static_decoder import StaticDecoder

        if self._decoder is None:
            dtype = next(self.model.parameters()).dtype
            self._decoder = StaticDecoder(self.model, dtype=dtype, rows=self.batch_size)
        distinct = list(dict.fromkeys(row_prompts))
        encoded = self.tokenizer(distinct, add_special_tokens=self.add_special_tokens)["input_ids"]
        ids = dict(zip(distinct, encoded, strict=True))
        uniforms = row_uniforms(row_seeds, max_new_tokens)

        def draw(logits, step: int, rows):
            return sample_next_tokens(logits, temperature, top_p, uniforms[rows, step])

        with torch.inference_mode():
            outs = self._decoder.decode(
                [ids[p] for p in row_prompts],
                max_new_tokens=max_new_tokens,
                eos_token_ids=self.eos_ids,
                pad_token_id=self.tokenizer.pad_token_id,
                draw=draw,
                positions="tokens",
            )
        return [self._completion(gen, bool(gen) and gen[-1] in self.eos_ids) for gen in outs]
