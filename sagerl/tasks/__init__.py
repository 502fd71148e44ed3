"""Tasks: problems, named datasets (local JSONL or the hub), prompts, and the built-in arithmetic task.

- :mod:`sagerl.tasks.problem`: :class:`Problem`.
- :mod:`sagerl.tasks.datasets`: the registry :data:`DATASETS`, :func:`load_problems`, :func:`read_jsonl`.
- :mod:`sagerl.tasks.arithmetic`: :func:`make_arithmetic_problems`.
- :mod:`sagerl.tasks.planted`: the planted-strategy task (exact strategies; its models in
  :mod:`sagerl.tasks.planted_model`).
- :mod:`sagerl.tasks.verify`: :func:`grade_completion` (task verifiers, else :mod:`sagerl.grading`).
- :mod:`sagerl.tasks.prompts`: :func:`build_messages`, :func:`render_prompt`, worked examples.
"""

from sagerl.tasks.arithmetic import make_arithmetic_problems
from sagerl.tasks.datasets import (
    DATASETS,
    DatasetSpec,
    HubSource,
    default_few_shot,
    default_prompt_format,
    load_problems,
    parse_names,
    read_jsonl,
    strategy_reader,
)
from sagerl.tasks.problem import KINDS, Problem
from sagerl.tasks.prompts import (
    ARITHMETIC_EXAMPLES,
    KK_EXAMPLES,
    KK_PROMPT_SUFFIX,
    PROMPT_FORMATS,
    PROMPT_SUFFIX,
    build_messages,
    build_prompt,
    render_prompt,
)
from sagerl.tasks.verify import grade_completion

__all__ = [
    "ARITHMETIC_EXAMPLES",
    "DATASETS",
    "KINDS",
    "KK_EXAMPLES",
    "KK_PROMPT_SUFFIX",
    "PROMPT_FORMATS",
    "PROMPT_SUFFIX",
    "DatasetSpec",
    "HubSource",
    "Problem",
    "build_messages",
    "build_prompt",
    "default_few_shot",
    "default_prompt_format",
    "grade_completion",
    "load_problems",
    "make_arithmetic_problems",
    "parse_names",
    "read_jsonl",
    "render_prompt",
    "strategy_reader",
]
