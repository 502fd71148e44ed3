"""The planted task's reference and teacher models: tiny character-level models (:mod:`sagerl.char_lm`)
trained on traces with planted strategy frequencies, cached, with their measured frequencies.

``planted.json`` in the model folder records, for the built model:

- ``planted``: the strategy mix of its training traces;
- ``measured``: the share of each strategy among completions sampled at temperature 1 on held-out
  problems (``samples`` of them), overall and per problem class (``common``, ``rare``), and pass@1 per class;
- ``decision_entropy``: the model's next-token entropy (nats) where the completion starts (the strategy
  choice), and ``check_entropy``: its entropy at the rare strategy's check word, each a mean over problems.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from sagerl.char_lm import CharLMConfig, cached_char_lm
from sagerl.tasks.planted import (
    REFERENCE_MIX,
    TEACHER_MIX,
    make_planted_problems,
    make_traces,
    read_strategy,
    solve,
)

TRAIN_TRACES = 20_000
TRACE_SEED = 11
MEASURE_PROBLEMS = 1_000
MEASURE_SEED = 5
MIXES = {"reference": REFERENCE_MIX, "teacher": TEACHER_MIX}
CONFIG = CharLMConfig()
MAX_NEW_TOKENS = 24


def _pairs(role: str) -> list[tuple[str, str]]:
    problems = make_planted_problems(TRAIN_TRACES, seed=TRACE_SEED, split="train", name="planted_train")
    return [
        (prompt, completion) for prompt, completion, _ in make_traces(problems, MIXES[role], seed=TRACE_SEED)
    ]


def measure_strategies(
    model_dir: str | Path, *, problems: int = MEASURE_PROBLEMS, seed: int = MEASURE_SEED
) -> dict:
    """Sample one completion per held-out problem at temperature 1 and count the strategies used.

    Returns:
        ``{"samples", "measured": {"all"|"common"|"rare": {strategy: share}}, "pass@1": {class: share},
        "decision_entropy", "check_entropy"}`` (entropies in nats).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    held_out = make_planted_problems(problems, seed=seed, split="eval", name="planted")
    ids = torch.tensor([tokenizer(p.problem)["input_ids"] for p in held_out])  # equal lengths
    torch.manual_seed(seed)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, -1].float()
        logp = torch.log_softmax(logits, dim=-1)
        decision_entropy = -(logp.exp() * logp).sum(-1).mean().item()
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            max_new_tokens=MAX_NEW_TOKENS,
            pad_token_id=tokenizer.pad_token_id,
        )
    texts = tokenizer.batch_decode(out[:, ids.shape[1] :], skip_special_tokens=True)
    counts: dict[str, Counter] = {"all": Counter(), "common": Counter(), "rare": Counter()}
    solved: Counter = Counter()
    for p, text in zip(held_out, texts, strict=True):
        strategy = read_strategy(text)
        cls = "rare" if p.meta["rare"] else "common"
        counts["all"][strategy] += 1
        counts[cls][strategy] += 1
        solved[cls] += int(text.rstrip().endswith(f"\\boxed{{{p.answer}}}"))
    sizes = {cls: sum(c.values()) for cls, c in counts.items()}
    measured = {cls: {s: c[s] / max(sizes[cls], 1) for s in sorted(c)} for cls, c in counts.items()}
    return {
        "samples": problems,
        "measured": measured,
        "pass@1": {cls: solved[cls] / max(sizes[cls], 1) for cls in ("common", "rare")},
        "decision_entropy": decision_entropy,
        "check_entropy": _check_entropy(model, tokenizer, held_out[:200]),
    }


def _check_entropy(model, tokenizer, problems) -> float:
    """Mean entropy (nats) of the next token after "<prompt> tail <digit>": the rare strategy's check word."""
    import torch

    texts = [p.problem + f"tail {solve(p, 'tail')}" for p in problems]
    ids = torch.tensor([tokenizer(t)["input_ids"] for t in texts])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[:, -1].float(), dim=-1)
    return -(logp.exp() * logp).sum(-1).mean().item()


def build_planted_model(role: str = "reference") -> Path:
    """The planted model of ``role`` (``"reference"`` or ``"teacher"``), built on first use (a few minutes on
    2 CPU cores) and cached; ``planted.json`` holds the planted and the measured strategy frequencies.

    Raises:
        ValueError: unknown role.
    """
    if role not in MIXES:
        raise ValueError(f"unknown planted model role {role!r}; expected one of {sorted(MIXES)}")

    def record(folder: Path) -> None:
        report = {"role": role, "planted": MIXES[role], "train_traces": TRAIN_TRACES}
        report.update(measure_strategies(folder))
        (folder / "planted.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")

    return cached_char_lm(f"planted-{role}", lambda: _pairs(role), CONFIG, after_build=record)
