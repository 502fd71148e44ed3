"""An LLM judge that labels a solution's reasoning patterns with a fixed rubric.

The rubric (:data:`RUBRIC`) lists the taxonomy of :mod:`sagerl.analysis.patterns` with one line each and
asks for the labels that apply as a comma-separated list. It goes through the eval samplers
(:func:`sagerl.eval.backends.make_sampler`: HF transformers or vLLM, so any local instruct model),
greedily (temperature 0), as a chat turn when the tokenizer has a chat template.

Parsing (:func:`parse_labels`): every taxonomy label named in the answer, in snake_case or with spaces or
hyphens (``proof by contradiction`` and ``contradiction`` both count), in taxonomy order. An answer that
names none is ``("unlabeled",)``; so is an item on which the sampler raised (an error or a timeout of a
server backend): the judge goes on with the next item, and :attr:`Judge.failures` counts such items.
Nothing is dropped silently.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sagerl.analysis.patterns import DESCRIPTIONS, TAXONOMY, UNLABELED, Labels

RUBRIC = (
    "You classify the reasoning strategies used in a math solution.\n"
    "Strategies (label: meaning):\n"
    + "".join(f"- {label}: {text}\n" for label, text in DESCRIPTIONS.items())
    + "Use direct_computation only when none of the other strategies is used.\n"
    "Reply with the labels that apply, comma-separated, and nothing else.\n\n"
    "Solution:\n{solution}\n\nLabels:"
)
"""The judge prompt; ``{solution}`` is replaced by the completion text."""

_ALIASES: dict[str, str] = {
    "proof by contradiction": "contradiction",
    "trial and error": "enumeration",
    "self check": "verification",
    "symmetry": "symmetry_invariant",
    "invariant": "symmetry_invariant",
    "invariants": "symmetry_invariant",
    "geometric construction": "construction",
    "coordinate construction": "construction",
    "estimation": "bounding",
    "recursion": "induction",
}
"""Other names a judge may use (words separated by single spaces) -> the taxonomy label."""


def _words(phrase: str) -> str:
    return re.sub(r"[\s_\-]+", " ", phrase.strip())


_LABEL_RX = re.compile(
    r"(?<![a-z])("
    + "|".join(
        r"[\s_\-]+".join(map(re.escape, _words(name).split()))
        for name in sorted({*TAXONOMY, *_ALIASES}, key=len, reverse=True)
    )
    + r")(?![a-z])"
)


def parse_labels(answer: str) -> Labels:
    """Taxonomy labels named in a judge's answer, in taxonomy order; ``("unlabeled",)`` when none is.

    Names match case-insensitively with spaces, hyphens or underscores between words, plus a few aliases
    (``proof by contradiction``, ``trial and error``, ``self-check``, ``symmetry``, ``recursion``...).
    """
    found = set()
    for m in _LABEL_RX.finditer(answer.lower()):
        words = _words(m.group(1))
        found.add(_ALIASES.get(words, words.replace(" ", "_")))
    labels = tuple(t for t in TAXONOMY if t in found)
    return labels or (UNLABELED,)


def judge_prompt(tokenizer: Any, solution: str) -> str:
    """The rubric for one solution, rendered with the tokenizer's chat template when it has one."""
    content = RUBRIC.format(solution=solution)
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
        )
    return content


class Judge:
    """Labels texts with an LLM through a :class:`sagerl.eval.samplers.Sampler` (greedy decoding).

    Args:
        sampler: any sampler (``make_sampler("hf", model)``, a vLLM one, or a test double).
        max_new_tokens: answer length limit, in tokens.
        batch_size: texts per ``generate`` call; when a call raises, its texts are retried one by one and
            those that fail again become ``unlabeled``.

    Attributes:
        failures: items the sampler raised on (labelled ``unlabeled``).
        unparsed: answers that named no label (labelled ``unlabeled``).
    """

    def __init__(self, sampler: Any, *, max_new_tokens: int = 48, batch_size: int = 16) -> None:
        self.sampler = sampler
        self.max_new_tokens = int(max_new_tokens)
        self.batch_size = max(1, int(batch_size))
        self.failures = 0
        self.unparsed = 0

    @classmethod
    def from_model(cls, model: str, *, backend: str = "hf", **kwargs: Any) -> Judge:
        """A judge running ``model`` on the ``backend`` sampler (loads the model).

        Raises:
            ModelLoadError: the model does not load. ConfigError: unknown backend.
        """
        from sagerl.eval.backends import make_sampler

        return cls(make_sampler(backend, model), **kwargs)

    def _answers(self, texts: Sequence[str]) -> list[str | None]:
        prompts = [judge_prompt(self.sampler.tokenizer, t) for t in texts]
        try:
            rows = self.sampler.generate(prompts, 1, max_new_tokens=self.max_new_tokens, temperature=0.0)
            return [row[0].text for row in rows]
        except Exception:
            if len(texts) == 1:
                self.failures += 1
                return [None]
            return [a for t in texts for a in self._answers([t])]

    def __call__(self, texts: Sequence[str]) -> list[Labels]:
        """One label tuple per text (see :func:`parse_labels`); never raises on a single item's failure."""
        out: list[Labels] = []
        for start in range(0, len(texts), self.batch_size):
            for answer in self._answers(texts[start : start + self.batch_size]):
                labels = parse_labels(answer) if answer is not None else (UNLABELED,)
                if answer is not None and labels == (UNLABELED,):
                    self.unparsed += 1
                out.append(labels)
        return out
