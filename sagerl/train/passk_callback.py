"""Unbiased pass@k of the policy during training: :class:`PassAtKCallback`, a ``transformers.TrainerCallback``
for TRL's ``GRPOTrainer`` (and :class:`sagerl.train.SAGETrainer`, which adds it when ``eval_passk_every`` is
set: ``sagerl train --set eval_passk_every=50 --set eval_passk_dataset=math500``).

Every ``every`` optimizer steps it samples ``n`` completions per problem of an evaluation set with the policy
being trained, grades them as ``sagerl eval`` does (:func:`sagerl.tasks.grade_completion`), and logs the
unbiased pass@k (:func:`sagerl.eval.results.summarize`: 1 − C(n−c, k)/C(n, k) for k = 1, 2, 4, …, n, Chen et
al. 2021) under ``eval/pass@k`` through the trainer's own logging, so it reaches every ``report_to`` backend
(TensorBoard, W&B, which prefix a training log's keys with ``train/``) and ``metrics.jsonl``. With several
datasets, ``eval/pass@k`` is their unweighted average and ``eval/<dataset>/pass@k`` each one's;
``eval/passk_seconds`` is what the call cost. The full summary of each call, with the bootstrap CIs, is kept
in :attr:`PassAtKCallback.history`.

Sampling. With TRL's vLLM on (``use_vllm``), through the trainer's own vLLM engine, after the weight sync TRL
does before a rollout (so it samples the current policy), with the trainer's sampling settings; otherwise with
sagerl's HF sampler (:class:`sagerl.eval.samplers.HFSampler`) on the unwrapped policy (TRL's
``unwrap_model_for_generation``: DeepSpeed ZeRO-3 parameters gathered), with per-sample seeds
``sample_seed(seed, dataset, problem id, j)`` and the prompts ``sagerl eval`` renders. So, in float32, the
pass@k logged at step s is the one ``sagerl eval --seed SEED -n N`` reports for the checkpoint of step s
(tests/train/test_passk_callback.py checks it). The problems are split over the processes of a multi-process
run and their counts gathered, so every process logs the same values.

Cost: one call samples problems × n completions of up to ``max_new_tokens`` tokens (docs/interop.md gives
the measured seconds).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from transformers import TrainerCallback

from sagerl.errors import ConfigError

METRIC_PREFIX = "eval/"


@dataclass(frozen=True)
class EvalItem:
    """One problem of the evaluation set: its dataset and id, its prompt (a string, or chat messages of a
    TRL dataset; None for a sagerl problem, rendered as ``sagerl eval`` renders it), what grades it."""

    dataset: str
    problem_id: str
    answer: str
    kind: str
    problem: str | None
    prompt: Any = None
    source: Any = None  # the sagerl Problem, when there is one


def _items(eval_dataset: Any, *, limit: int | None, data_dir: str | None) -> list[EvalItem]:
    """The evaluation set as :class:`EvalItem` objects.

    Raises:
        ConfigError: an empty set, or rows without ``prompt`` and ``answer``. DataError: a set that does not load.
    """
    from sagerl.tasks import Problem, load_problems

    if isinstance(eval_dataset, str):
        problems: Sequence[Any] = load_problems(eval_dataset, data_dir=data_dir, limit=limit)
    else:
        problems = list(eval_dataset)[:limit] if limit else list(eval_dataset)
    items = []
    for index, p in enumerate(problems):
        if isinstance(p, Problem):
            name = str(p.dataset or (eval_dataset if isinstance(eval_dataset, str) else "eval"))
            items.append(EvalItem(name, str(p.id), p.answer, p.kind, p.problem, source=p))
            continue
        if not isinstance(p, Mapping) or "prompt" not in p or "answer" not in p:
            raise ConfigError(
                f"PassAtKCallback: eval_dataset row {index} needs 'prompt' and 'answer' (a TRL dataset row), or "
                "give a sagerl set name, a JSONL path or sagerl Problems"
            )
        items.append(
            EvalItem(
                str(p.get("dataset") or "eval"),
                str(p.get("id", index)),
                str(p["answer"]),
                str(p.get("kind") or "math"),
                p.get("problem"),
                prompt=p["prompt"],
            )
        )
    if not items:
        raise ConfigError("PassAtKCallback: the evaluation set has no problems")
    return items


class PassAtKCallback(TrainerCallback):
    """Every ``every`` optimizer steps, the unbiased pass@k of the policy on ``eval_dataset`` (``n`` samples per
    problem), logged as ``eval/pass@k`` through the trainer (module doc).

    Usage::

        trainer = GRPOTrainer(...)
        PassAtKCallback("math500", n=8, every=50, limit=64).attach(trainer)

    Args:
        eval_dataset: a sagerl set name or JSONL path (:func:`sagerl.tasks.load_problems`), sagerl ``Problem``
            objects, or TRL-style rows with ``prompt`` (text or chat messages) and ``answer`` (and optionally
            ``kind``, ``problem``, ``id``, ``dataset``).
        n: samples per problem (pass@k for k = 1, 2, 4, …, n).
        every: optimizer steps between two evaluations (the first at step ``every``).
        limit: the first ``limit`` problems only.
        max_new_tokens: completion length limit, in tokens (default: the trainer's ``max_completion_length``).
        temperature, top_p: sampling settings (default: the trainer's).
        seed: the samples' seed (default: the trainer's ``seed``).
        few_shot: worked examples in a sagerl set's prompts (default: the set's, as ``sagerl eval``).
        batch_size: sequences per generation batch of the HF sampler (default: 64 on CPU, 256 on GPU).
        data_dir: folder of the sagerl sets' JSONL files (default ``$SAGERL_DATA_DIR``).
        trainer: the trainer (or call :meth:`attach`).

    Raises:
        ConfigError: ``n`` or ``every`` below 1, an evaluation set without problems or with rows of another
            shape (at the first evaluation, when the set is read).
    """

    def __init__(
        self,
        eval_dataset: Any,
        n: int = 8,
        every: int = 50,
        *,
        limit: int | None = None,
        max_new_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        few_shot: int | None = None,
        batch_size: int | None = None,
        data_dir: str | None = None,
        trainer: Any = None,
    ) -> None:
        for name, value in (("n", n), ("every", every)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"PassAtKCallback: {name} must be an integer >= 1, got {value!r}")
        self.eval_dataset = eval_dataset
        self.n, self.every, self.limit = n, every, limit
        self.max_new_tokens, self.seed = max_new_tokens, seed
        self.temperature, self.top_p = temperature, top_p
        self.few_shot, self.batch_size, self.data_dir = few_shot, batch_size, data_dir
        self.trainer = trainer
        self.history: list[dict[str, Any]] = []
        """One entry per evaluation: ``{"step", "seconds", "summary"}`` (:func:`sagerl.eval.results.summarize`)."""
        self._items: list[EvalItem] | None = None
        self._last_step = -1

    @classmethod
    def from_config(cls, args: Any) -> PassAtKCallback:
        """The callback a :class:`sagerl.train.SAGEConfig` asks for (``eval_passk_*`` fields).

        Raises:
            ConfigError: ``eval_passk_every`` set without ``eval_passk_dataset``.
        """
        if not args.eval_passk_dataset:
            raise ConfigError("eval_passk_every needs eval_passk_dataset (a set name or JSONL path)")
        return cls(
            args.eval_passk_dataset,
            n=args.eval_passk_n,
            every=args.eval_passk_every,
            limit=args.eval_passk_limit,
            max_new_tokens=args.eval_passk_max_new_tokens,
        )

    def attach(self, trainer: Any) -> PassAtKCallback:
        """Add the callback to ``trainer`` (``trainer.add_callback``) and keep the trainer; returns self."""
        self.trainer = trainer
        trainer.add_callback(self)
        return self

    # ------------------------------------------------------------------------------------------- the hook

    def on_step_end(self, args, state, control, **kwargs):
        step = state.global_step
        if step == self._last_step or step % self.every != 0 or step == 0:
            return control
        self._last_step = step
        metrics = self.evaluate(step)
        store = getattr(self.trainer, "_metrics", None)
        if isinstance(store, Mapping) and "train" in store:
            # TRL's GRPOTrainer averages _metrics["train"] into its next log: the values join this step's line
            for key, value in metrics.items():
                store["train"][key].append(value)
            control.should_log = True  # log at this step (the Trainer logs right after on_step_end)
        else:
            self.trainer.log(dict(metrics))
        return control

    # ------------------------------------------------------------------------------------------- evaluate

    def evaluate(self, step: int | None = None) -> dict[str, float]:
        """Sample, grade and summarise once, now; returns the logged metrics (``eval/pass@k``, per dataset when
        there are several, ``eval/passk_seconds``) and appends the summary to :attr:`history`.

        Raises:
            ConfigError: no trainer attached, or an evaluation set as in the class doc.
        """
        from accelerate.utils import gather_object

        from sagerl.eval.results import summarize

        if self.trainer is None:
            raise ConfigError("PassAtKCallback has no trainer: use .attach(trainer)")
        start = time.perf_counter()
        if self._items is None:
            self._items = _items(self.eval_dataset, limit=self.limit, data_dir=self.data_dir)
        accelerator = self.trainer.accelerator
        rank, world = accelerator.process_index, accelerator.num_processes
        shard = list(range(rank, len(self._items), world))
        if getattr(self.trainer, "use_vllm", False):
            # every process joins vLLM's collective calls with as many prompts: pad the shard with its first
            per_process = -(-len(self._items) // world)
            padded = shard + [shard[0] if shard else 0] * (per_process - len(shard))
            counts = self._counts_vllm(padded)[: len(shard)]
        else:
            counts = self._counts_hf(shard)
        gathered = gather_object([(i, c) for i, c in zip(shard, counts, strict=True)]) if world > 1 else None
        pairs = dict(gathered if gathered is not None else zip(shard, counts, strict=True))
        per_dataset: dict[str, list[int]] = {}
        for index, item in enumerate(self._items):
            per_dataset.setdefault(item.dataset, []).append(pairs[index])
        summary = summarize(per_dataset, self.n)
        seconds = time.perf_counter() - start
        metrics = {
            f"{METRIC_PREFIX}{key}": float(value)
            for key, value in summary["average"].items()
            if key.startswith("pass@")
        }
        if len(per_dataset) > 1:
            for ds, entry in summary["datasets"].items():
                metrics.update(
                    {f"{METRIC_PREFIX}{ds}/{k}": float(v) for k, v in entry.items() if k.startswith("pass@")}
                )
        metrics[f"{METRIC_PREFIX}passk_seconds"] = round(seconds, 3)
        self.history.append({"step": step, "seconds": seconds, "summary": summary})
        return metrics

    def _settings(self) -> tuple[int, float, float, int]:
        args = self.trainer.args
        max_new = self.max_new_tokens or getattr(args, "max_completion_length", None) or 256
        temperature = (
            self.temperature if self.temperature is not None else float(getattr(args, "temperature", 1.0))
        )
        top_p = self.top_p if self.top_p is not None else float(getattr(args, "top_p", 1.0))
        seed = self.seed if self.seed is not None else int(getattr(args, "seed", 0))
        return int(max_new), temperature, top_p, seed

    def _prompt(self, item: EvalItem, tokenizer: Any) -> str:
        """The prompt text ``sagerl eval`` renders for a sagerl problem; a TRL row's own prompt (chat messages
        rendered with the tokenizer's template)."""
        from sagerl.tasks import default_few_shot, default_prompt_format, render_prompt

        if item.source is not None:
            few_shot = self.few_shot if self.few_shot is not None else default_few_shot(item.dataset)
            return render_prompt(
                tokenizer,
                item.source,
                few_shot=few_shot,
                kind=item.kind,
                prompt_format=default_prompt_format(item.dataset),
            )
        if isinstance(item.prompt, str):
            return item.prompt
        return tokenizer.apply_chat_template(item.prompt, tokenize=False, add_generation_prompt=True)

    def _grade(self, item: EvalItem, texts: Sequence[str]) -> int:
        from sagerl.tasks import grade_completion

        return sum(bool(grade_completion(t, item.answer, item.kind, item.problem)[1]) for t in texts)

    def _counts_hf(self, shard: list[int]) -> list[int]:
        """Correct counts of the problems ``shard`` (indices), sampled with sagerl's HF sampler."""
        import torch
        from trl.models.utils import unwrap_model_for_generation

        from sagerl.eval.samplers import HFSampler, sample_seed

        trainer = self.trainer
        tokenizer = trainer.processing_class
        max_new, temperature, top_p, seed = self._settings()
        items = [self._items[i] for i in shard]  # type: ignore[index]
        if not items:
            return []
        prompts = [self._prompt(item, tokenizer) for item in items]
        seeds = [[sample_seed(seed, it.dataset, it.problem_id, j) for j in range(self.n)] for it in items]
        side, pad = tokenizer.padding_side, tokenizer.pad_token
        with unwrap_model_for_generation(
            trainer.model_wrapped,
            trainer.accelerator,
            gather_deepspeed3_params=getattr(trainer.args, "ds3_gather_for_generation", True),
        ) as model:
            was_training = model.training
            try:
                with torch.no_grad():
                    device = next(model.parameters()).device
                    sampler = HFSampler(
                        model_obj=model,
                        tokenizer=tokenizer,
                        device=str(device),
                        dtype="float32",
                        batch_size=self.batch_size,
                    )
                    # one call: the sampler batches the samples problem by problem, as sagerl eval's chunks do
                    rows = sampler.generate(
                        prompts,
                        self.n,
                        max_new_tokens=max_new,
                        temperature=temperature,
                        top_p=top_p,
                        seed=seed,
                        sample_seeds=seeds,
                    )
            finally:
                model.train(was_training)
                tokenizer.padding_side, tokenizer.pad_token = side, pad
        return [self._grade(item, [c.text for c in row]) for item, row in zip(items, rows, strict=True)]

    def _counts_vllm(self, shard: list[int]) -> list[int]:
        """Correct counts of the problems ``shard`` (indices), sampled by TRL's vLLM engine (weights synced
        first, as TRL does before a rollout; the trainer's sampling settings)."""
        trainer = self.trainer
        tokenizer = trainer.processing_class
        if trainer.state.global_step != trainer._last_loaded_step:
            trainer.vllm_generation.sync_weights()
            trainer._last_loaded_step = trainer.state.global_step
        items = [self._items[i] for i in shard]  # type: ignore[index]
        special = not getattr(
            tokenizer, "chat_template", None
        )  # as the HF sampler: a chat template has its own
        ids = [
            tokenizer(self._prompt(it, tokenizer), add_special_tokens=special)["input_ids"] for it in items
        ]
        repeated = [row for row in ids for _ in range(self.n)]
        _, completions, _, _ = trainer.vllm_generation.generate(
            prompts=repeated, images=None, num_generations=self.n
        )
        texts = tokenizer.batch_decode(completions, skip_special_tokens=True)
        return [self._grade(it, texts[i * self.n : (i + 1) * self.n]) for i, it in enumerate(items)]
