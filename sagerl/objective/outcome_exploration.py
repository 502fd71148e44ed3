"""Outcome-based exploration: exploration bonuses on final answers, not on reasoning traces.

Source: Song, Kempe, Munos 2025, "Outcome-based Exploration for LLM Reasoning", arXiv 2509.06941. The outcome
space of a verifiable task (its final answers) is small, so a bonus can count outcomes:

- **historical exploration** (UCB): N(x, a) counts how often prompt x has produced final answer a over the whole
  run (kept across steps: trainer state, saved in checkpoints); the bonus is b(x, a) = min(1, 1/√N(x, a)).
  Added raw, it rewards every rare answer; the paper's baselined variants subtract a baseline:
  ``ucb_con`` a constant b₀, ``ucb_mean`` the mean bonus of the other completions of the group (leave-one-out);
- **batch exploration**: a penalty −(1/n)·Σ_{j≠i} 1[a_i = a_j] for repeating, within the group of n, another
  completion's answer.

As issue 23 specifies them (the paper's text could not be read in this project's stores; no public code of the
authors was found): the exploration term is c·(b_i − baseline_i) (historical) or c·penalty_i (batch), added to
GRPO's advantage of the correctness reward (after the group normalisation, so that ``ucb_con``'s constant b₀
does not cancel in the group mean), and zeroed on groups whose completions are all correct (the exploration term
there could only move mass among right answers). A completion without a final answer has no outcome: it is not
counted, its bonus is 0 (it still pays ``ucb_con``'s baseline) and it repeats no one.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from sagerl.objective._checks import NONNEGATIVE, UNIT, Setting, check_number, grouped
from sagerl.objective.advantages import grpo_advantages
from sagerl.objective.passk_advantages import check_binary

COEF = Setting(
    "coef",
    "outcome_coef",
    1.0,
    "ucb_mean, ucb_con, outcome_batch: the weight c >= 0 of the exploration term added to GRPO's advantage.",
    NONNEGATIVE,
)
B0 = Setting(
    "b0",
    "outcome_b0",
    0.5,
    "ucb_con: the constant baseline b0 in [0, 1] subtracted from the bonus min(1, 1/√N).",
    UNIT,
)
SETTINGS = (COEF, B0)

OUTCOME_KINDS = ("ucb_mean", "ucb_con", "outcome_batch")
"""The three exploration terms (module docstring)."""


class OutcomeCounts:
    """N(x, a): how often each (prompt key, final answer) has been sampled so far (plain Python, JSON state).

    :meth:`update` counts a batch and returns each completion's count after it (0 for no answer); the state
    round-trips through :meth:`state_dict` / :meth:`load_state_dict` (what a checkpoint saves).
    """

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}

    def update(self, prompts: Sequence[Hashable], answers: Sequence[Hashable | None]) -> torch.Tensor:
        """Count every (prompt, answer) of the batch (answers None are not outcomes), then return the (N,) counts
        N(x_i, a_i) after the batch (so a first-seen answer sampled once has N = 1), 0 where a_i is None."""
        if len(prompts) != len(answers):
            raise ValueError(f"{len(prompts)} prompts but {len(answers)} answers")
        keys = [None if a is None else (str(x), str(a)) for x, a in zip(prompts, answers, strict=True)]
        for key in keys:
            if key is not None:
                self.counts[key] = self.counts.get(key, 0) + 1
        return self.lookup(keys)

    def lookup(self, keys: Sequence[tuple[str, str] | None]) -> torch.Tensor:
        """(N,) counts of the given (prompt, answer) keys, without counting them (0 for None or unseen)."""
        return torch.tensor([0 if k is None else self.counts.get(k, 0) for k in keys], dtype=torch.float64)

    def state_dict(self) -> dict:
        """JSON-able state: ``{"counts": [[prompt, answer, count], ...]}`` in a stable order."""
        return {"counts": [[x, a, n] for (x, a), n in sorted(self.counts.items())]}

    def load_state_dict(self, state: dict) -> None:
        """Replace the counts with a :meth:`state_dict`'s."""
        self.counts = {(str(x), str(a)): int(n) for x, a, n in state["counts"]}

    def __len__(self) -> int:
        return len(self.counts)


def ucb_bonus(counts: torch.Tensor) -> torch.Tensor:
    """b = min(1, 1/√N) elementwise; 0 where N = 0 (no outcome)."""
    counts = counts.double()
    return torch.where(counts > 0, counts.clamp(min=1).rsqrt().clamp(max=1.0), torch.zeros_like(counts))


def batch_penalty(answers: torch.Tensor, group_size: int) -> torch.Tensor:
    """(N,) −(1/n)·Σ_{j≠i} 1[a_i = a_j] within each group of n, from answer cluster ids (-1: no answer, 0)."""
    ids = grouped(answers.long(), group_size, name="answers")
    same = (ids.unsqueeze(2) == ids.unsqueeze(1)) & (ids.unsqueeze(2) >= 0)
    repeats = same.sum(dim=2) - (ids >= 0).long()  # others with the same answer
    return (-repeats.double() / group_size).reshape(-1)


def outcome_advantages(
    rewards: torch.Tensor,
    group_size: int,
    kind: str,
    answers: torch.Tensor,
    counts: torch.Tensor | None = None,
    coef: float = 1.0,
    b0: float = 0.5,
    scale: str = "group",
) -> torch.Tensor:
    """GRPO's advantage plus an outcome-based exploration term (module docstring).

    Args:
        rewards: (N,) binary rewards (0/1; NaN: unscorable, advantage 0), groups of ``group_size`` contiguous.
        kind: one of :data:`OUTCOME_KINDS`.
        answers: (N,) cluster ids of the final answers within each group (equal answers, equal ids; -1: none).
        counts: (N,) N(x_i, a_i) after this batch (:class:`OutcomeCounts`), for ``ucb_mean`` and ``ucb_con``.
        coef: c ≥ 0, the weight of the exploration term. b0: ``ucb_con``'s constant baseline, in [0, 1].
        scale: GRPO's std scaling of the correctness advantage.

    Returns:
        (N,) advantages: A_GRPO,i + c·(b_i − baseline_i) or A_GRPO,i + c·penalty_i, the term 0 on all-correct
        groups and on unscorable completions.

    Raises:
        ValueError: bad shapes, unknown kind, counts missing for the UCB kinds, c < 0 or not finite, b0 outside
            [0, 1], or rewards other than 0/1.
    """
    if kind not in OUTCOME_KINDS:
        raise ValueError(f"unknown outcome exploration {kind!r}; expected one of {OUTCOME_KINDS}")
    check_number("coef", coef, NONNEGATIVE)
    check_number("b0", b0, UNIT)
    check_binary(rewards, f"the {kind} advantage")
    g = grouped(rewards, group_size)
    if answers.shape != rewards.shape:
        raise ValueError(f"answers has shape {tuple(answers.shape)}, rewards {tuple(rewards.shape)}")
    base = grpo_advantages(rewards, group_size, scale=scale).double()
    if kind == "outcome_batch":
        term = batch_penalty(answers, group_size)
    else:
        if counts is None or counts.shape != rewards.shape:
            raise ValueError(
                f"the {kind} advantage needs counts of the shape of rewards, {tuple(rewards.shape)}"
            )
        bonus = grouped(ucb_bonus(counts), group_size)
        if kind == "ucb_con":
            baseline = torch.full_like(bonus, float(b0))
        else:  # leave-one-out mean of the group's other bonuses
            baseline = (bonus.sum(dim=1, keepdim=True) - bonus) / max(group_size - 1, 1)
        term = (bonus - baseline).reshape(-1)
    valid = ~torch.isnan(g)
    all_correct = ((g == 1) | ~valid).all(dim=1, keepdim=True) & valid.any(dim=1, keepdim=True)
    live = (valid & ~all_correct).reshape(-1)
    adv = base + coef * torch.where(live, term, torch.zeros_like(term))
    return adv.to(rewards.dtype)
