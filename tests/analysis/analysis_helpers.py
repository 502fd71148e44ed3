"""Helpers of the analysis tests: write hand-made eval run folders."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def record(dataset: str, pid: str, j: int, correct: bool, **extra: Any) -> dict[str, Any]:
    """A sample record as ``sagerl eval`` writes it."""
    answer = "7"
    rec = {
        "dataset": dataset,
        "problem_id": pid,
        "sample_index": j,
        "text": extra.pop("text", f"So the answer is \\boxed{{{answer if correct else '0'}}}."),
        "extracted": extra.pop("extracted", answer if correct else "0"),
        "answer": answer,
        "correct": bool(correct),
        "num_tokens": extra.pop("num_tokens", 9),
        "finish_reason": extra.pop("finish_reason", "stop"),
    }
    rec.update(extra)
    return rec


def write_run(
    folder: Path,
    problems: Mapping[str, Mapping[str, Sequence[Any]]],
    *,
    n: int | None = None,
    settings: Mapping[str, Any] | None = None,
    results: bool = True,
) -> Path:
    """Write an eval run folder: ``problems`` maps dataset -> problem id -> per-sample entries, each a bool
    (correct) or a full record dict. ``eval_config.json``, ``samples.jsonl`` and (``results``) a
    ``results.json`` built with :func:`sagerl.eval.results.summarize`."""
    from sagerl.eval.results import summarize, write_results

    folder.mkdir(parents=True, exist_ok=True)
    cfg = {
        "model": "hand-made",
        "temperature": 1.0,
        "top_p": 1.0,
        "max_new_tokens": 32,
        "seed": 0,
        "few_shot": None,
    }
    cfg.update(settings or {})
    (folder / "eval_config.json").write_text(json.dumps({"settings": cfg}), encoding="utf-8")
    lines, counts = [], {}
    for ds, probs in problems.items():
        counts[ds] = []
        for pid, samples in probs.items():
            c = 0
            for j, s in enumerate(samples):
                rec = s if isinstance(s, dict) else record(ds, pid, j, bool(s))
                c += bool(rec["correct"])
                lines.append(json.dumps(rec))
            counts[ds].append(c)
    (folder / "samples.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    if results:
        n = n or len(next(iter(next(iter(problems.values())).values())))
        summary = summarize(counts, n)
        write_results(folder, {"meta": {"n": n, "model": "hand-made"}, **summary})
    return folder


def flags(correct: int, n: int) -> list[bool]:
    """n samples of which the first ``correct`` are correct."""
    return [True] * correct + [False] * (n - correct)
