"""The planted task's reference and teacher models: tiny character-level models (:mod:`sagerl.char_lm`)
trained on traces with planted strategy frequencies, cached, with their measured frequencies.

The model learns from two kinds of traces, shuffled together. *Planted* traces draw the strategy from the
planted mix (:data:`REFERENCE_MIX` or :data:`TEACHER_MIX`) and carry the loss on the whole completion: they
set how often the model *chooses* each strategy (its first token). *Skill* traces draw every strategy
equally often (:data:`SKILL_MIX`) with the loss on all but the first token: they teach how to *carry out*
each one without changing how often it is chosen. The result knows the rare strategy but rarely uses it,
as a language model that saw a method in a few solutions does. (Planted traces alone do not teach the
rare strategy: on common problems its digit equals the dominant one's, so only its few rare-type traces
show which digit it copies; the model then copies the first digit after every marker. Training on skill
traces first and planted ones second makes it forget the same way. Both were measured while building
this task.)
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

from sagerl.atomic_files import atomic_write_text
from sagerl.char_lm import CharLMConfig, Example, Phase, cached_char_lm
from sagerl.random_state import preserved_rng
from sagerl.tasks.planted import (
    REFERENCE_MIX,
    REFERENCE_MIX_10,
    TEACHER_MIX,
    make_planted_problems,
    make_traces,
    read_strategy,
    solve,
    verify,
)

TRAIN_TRACES = 20_000
"""Traces of each kind (planted and skill)."""
TRACE_SEED = 11
TRAIN_STEPS = 1500
SKILL_MIX = {name: 0.25 for name in ("head", "tail", "second", "third")}
"""The skill traces: every strategy equally often, the loss on all but their first token."""
MEASURE_PROBLEMS = 1_000
MEASURE_SEED = 5
MIXES = {"reference": REFERENCE_MIX, "reference-10": REFERENCE_MIX_10, "teacher": TEACHER_MIX}
CONFIG = CharLMConfig()
MAX_NEW_TOKENS = 24
REPORT_FILE = "planted.json"


def _phases(role: str) -> list[Phase]:
    """One phase over two kinds of traces (see the module docstring)."""
    examples = []
    for index, (mix, loss_on) in enumerate(((MIXES[role], "completion"), (SKILL_MIX, "after_first_token"))):
        seed = TRACE_SEED + index
        problems = make_planted_problems(TRAIN_TRACES, seed=seed, split="train", name="planted_train")
        examples += [
            Example(prompt, completion, loss_on)
            for prompt, completion, _ in make_traces(problems, mix, seed=seed)
        ]
    random.Random(TRACE_SEED).shuffle(examples)
    return [Phase(tuple(examples), TRAIN_STEPS)]


def measure_strategies(
    model_dir: str | Path, *, problems: int = MEASURE_PROBLEMS, seed: int = MEASURE_SEED
) -> dict:
    """Sample one completion per held-out problem at temperature 1 and count the strategies used.

    Returns:
        ``{"samples", "measured": {"all"|"common"|"rare": {strategy: share}}, "pass@1": {class: share},
        "decision_entropy", "end_entropy"}`` (entropies in nats).
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
        solved[cls] += int(verify(p, text)[1])
    sizes = {cls: sum(c.values()) for cls, c in counts.items()}
    measured = {cls: {s: c[s] / max(sizes[cls], 1) for s in sorted(c)} for cls, c in counts.items()}
    return {
        "samples": problems,
        "measured": measured,
        "pass@1": {cls: solved[cls] / max(sizes[cls], 1) for cls in ("common", "rare")},
        "decision_entropy": decision_entropy,
        "end_entropy": _end_entropy(model, tokenizer, held_out[:200]),
    }


def _end_entropy(model, tokenizer, problems) -> float:
    """Mean entropy (nats) of the next token after "<prompt>tail <digit>": the rare strategy's end mark."""
    import torch

    texts = [p.problem + f"tail {solve(p, 'tail')}" for p in problems]
    ids = torch.tensor([tokenizer(t)["input_ids"] for t in texts])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[:, -1].float(), dim=-1)
    return -(logp.exp() * logp).sum(-1).mean().item()


def build_planted_model(role: str = "reference") -> Path:
    """The planted model of ``role`` (``"reference"``, ``"reference-10"`` or ``"teacher"``), built on first use (about 1 min on
    2 CPU cores) and cached; ``planted.json`` holds the planted and the measured strategy frequencies.

    Raises:
        ValueError: unknown role.
    """
    if role not in MIXES:
        raise ValueError(f"unknown planted model role {role!r}; expected one of {sorted(MIXES)}")

    folder = cached_char_lm(f"planted-{role}", lambda: _phases(role), CONFIG)
    if not (folder / REPORT_FILE).is_file():  # measured once, after the build (a few seconds)
        report = {
            "role": role,
            "planted": MIXES[role],
            "traces": {
                "planted": {"mix": MIXES[role], "count": TRAIN_TRACES, "loss_on": "completion"},
                "skill": {"mix": SKILL_MIX, "count": TRAIN_TRACES, "loss_on": "after_first_token"},
            },
            "steps": TRAIN_STEPS,
        }
        with preserved_rng():  # measuring samples from the model (sagerl.random_state)
            report.update(measure_strategies(folder))
        atomic_write_text(folder / REPORT_FILE, json.dumps(report, indent=2) + "\n")
    return folder
