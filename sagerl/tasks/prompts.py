"""Prompts: chat messages for a problem, with optional worked examples, and their rendering.

Two prompt formats (:data:`PROMPT_FORMATS`):

- ``"chat"`` (every math and logic set): the user turn is the problem text, a newline, and the instruction
  (:data:`PROMPT_SUFFIX` for math, :data:`KK_PROMPT_SUFFIX` for Knights and Knaves). Worked examples come
  first, as earlier user/assistant turns whose answers end in ``\\boxed{...}``; the tiny embedded model
  needs them to answer in a box.
- ``"raw"`` (synthetic tasks whose model was trained on bare problems, such as the planted-strategy task):
  the prompt is the problem text itself, with no template, instruction or examples.
"""

from __future__ import annotations

from typing import Any

from sagerl.tasks.problem import KINDS, Problem

__all__ = [
    "ARITHMETIC_EXAMPLES",
    "KK_EXAMPLES",
    "KK_PROMPT_SUFFIX",
    "PROMPT_FORMATS",
    "PROMPT_SUFFIX",
    "build_messages",
    "build_prompt",
    "render_prompt",
]

PROMPT_FORMATS = ("chat", "raw")

PROMPT_SUFFIX = "Please reason step by step, and put your final answer within \\boxed{}."
KK_PROMPT_SUFFIX = (
    "Please reason step by step, and put your final answer within \\boxed{}, giving the role of every "
    "person, like \\boxed{(1) Zoe is a knight (2) Liam is a knave}."
)

ARITHMETIC_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("What is 7 + 5?", "7 + 5 = 12.\nThe answer is \\boxed{12}."),
    (
        "Sam has 9 pears. Sam eats 3 of them. How many pears does Sam have left?",
        "9 - 3 = 6.\nThe answer is \\boxed{6}.",
    ),
    (
        "There are 4 jars with 6 candies in each jar. How many candies are there in total?",
        "4 × 6 = 24.\nThe answer is \\boxed{24}.",
    ),
    ("What is 3 × 5 + 2?", "3 × 5 = 15. 15 + 2 = 17.\nThe answer is \\boxed{17}."),
    (
        "Kim had 20 coins, lost 8 of them, and then found 5. How many coins does Kim have now?",
        "20 - 8 = 12. 12 + 5 = 17.\nThe answer is \\boxed{17}.",
    ),
    (
        "28 grapes are shared equally among 4 kids. How many grapes does each kid get?",
        "28 ÷ 4 = 7.\nThe answer is \\boxed{7}.",
    ),
)
"""Short worked examples (question, answer) used as few-shot turns for "math" prompts, written by hand. Their
computations all lie in the training part of the arithmetic task (``in_eval_split`` is False for each), and the
word problems use names and objects the generator never uses, so none is a held-out "arith" problem."""

KK_EXAMPLES: tuple[tuple[str, str], ...] = (
    (
        "A very special island is inhabited only by knights and knaves. Knights always tell the truth, and "
        'knaves always lie. You meet 2 inhabitants: Zoe and Liam. Zoe says, "Liam is a knave." Liam says, '
        '"Zoe and I are both knights." So who is a knight and who is a knave?',
        "If Liam were a knight, Zoe would be a knight too, and her claim that Liam is a knave would be false: "
        "impossible. So Liam is a knave. Then Zoe's claim is true, so Zoe is a knight.\n"
        "\\boxed{(1) Zoe is a knight (2) Liam is a knave}",
    ),
    (
        "A very special island is inhabited only by knights and knaves. Knights always tell the truth, and "
        'knaves always lie. You meet 2 inhabitants: Noah and Ava. Noah says, "Ava is a knave." Ava says, '
        '"Noah and I are both knaves." So who is a knight and who is a knave?',
        "A knight cannot say she is a knave, so Ava is a knave and her claim is false: they are not both "
        "knaves, so Noah is a knight. Noah's claim that Ava is a knave is true, as it must be.\n"
        "\\boxed{(1) Noah is a knight (2) Ava is a knave}",
    ),
)
"""Worked Knights-and-Knaves examples (question, answer) for "kk" prompts, in the format the checker reads."""


def _examples(kind: str) -> tuple[tuple[str, str], ...]:
    return KK_EXAMPLES if kind == "kk" else ARITHMETIC_EXAMPLES


def _user_turn(text: str, kind: str) -> str:
    return text + "\n" + (KK_PROMPT_SUFFIX if kind == "kk" else PROMPT_SUFFIX)


def build_messages(
    problem: Problem | str, *, few_shot: int = 0, kind: str | None = None
) -> list[dict[str, str]]:
    """Chat messages (``{"role", "content"}`` dicts) that pose ``problem``, after ``few_shot`` worked examples.

    Args:
        problem: a :class:`Problem` or the bare problem text.
        few_shot: number of worked examples to put first (0 to :data:`ARITHMETIC_EXAMPLES` length for
            "math", :data:`KK_EXAMPLES` length for "kk").
        kind: "math" or "kk"; default: the problem's own kind, or "math" for a bare string.

    Raises:
        ValueError: an unknown kind, or more worked examples than there are.
    """
    if kind is None:
        kind = problem.kind if isinstance(problem, Problem) else "math"
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}: expected one of {KINDS}")
    examples = _examples(kind)
    if not 0 <= few_shot <= len(examples):
        raise ValueError(f"few_shot must be between 0 and {len(examples)} for kind {kind!r}, got {few_shot}")
    text = problem.problem if isinstance(problem, Problem) else problem
    messages: list[dict[str, str]] = []
    for question, worked in examples[:few_shot]:
        messages.append({"role": "user", "content": _user_turn(question, kind)})
        messages.append({"role": "assistant", "content": worked})
    messages.append({"role": "user", "content": _user_turn(text, kind)})
    return messages


def build_prompt(
    problem: Problem | str, *, few_shot: int = 0, kind: str | None = None, prompt_format: str = "chat"
) -> list[dict[str, str]] | str:
    """The prompt as TRL takes it: chat messages (:func:`build_messages`) for ``"chat"``, the bare problem
    text for ``"raw"``.

    Raises:
        ValueError: an unknown format, worked examples asked for with ``"raw"``, or as :func:`build_messages`.
    """
    if prompt_format == "chat":
        return build_messages(problem, few_shot=few_shot, kind=kind)
    if prompt_format == "raw":
        if few_shot:
            raise ValueError(f"the raw prompt format takes no worked examples, got few_shot={few_shot}")
        return problem.problem if isinstance(problem, Problem) else problem
    raise ValueError(f"unknown prompt format {prompt_format!r}: expected one of {PROMPT_FORMATS}")


def render_prompt(
    tokenizer: Any,
    problem: Problem | str,
    *,
    few_shot: int = 0,
    kind: str | None = None,
    prompt_format: str = "chat",
) -> str:
    """The prompt text for a model: :func:`build_prompt`, with chat messages rendered by the tokenizer.

    ``tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)`` when the tokenizer
    has a chat template; otherwise plain text, one "Question: ...\\nAnswer: ..." block per turn pair, ending
    with "Answer:". A ``"raw"`` prompt is the problem text as it is.

    Raises:
        ValueError: as :func:`build_prompt`.
    """
    messages = build_prompt(problem, few_shot=few_shot, kind=kind, prompt_format=prompt_format)
    if isinstance(messages, str):
        return messages
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    blocks = []
    for message in messages:
        if message["role"] == "user":
            blocks.append(f"Question: {message['content']}\nAnswer:")
        else:
            blocks[-1] += f" {message['content']}\n"
    return "\n".join(blocks)
