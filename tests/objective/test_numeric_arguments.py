"""Every numeric argument of sagerl.objective's public functions and classes is checked: NaN, +inf and -inf fail
with one ValueError line naming the argument, the value and the allowed range (sagerl/objective/_checks.py).

The walk reads the annotations, so a public function added later with a numeric argument fails
``test_every_public_callable_with_a_numeric_argument_has_a_valid_call`` until it has a valid call below.
"""

from __future__ import annotations

import inspect
import math
import types
import typing

import pytest
import torch

import sagerl.objective as objective
from sagerl.objective import (
    Range,
    check_number,
    grpo_advantages,
    pass_at_k,
    passk_advantages,
    pkpo_advantages,
    w_reinforce_advantages,
)
from sagerl.objective.guides import Q_MAX, Q_MIN

B, T = 4, 3
LOGP = -torch.rand(B, T) - 0.1
MASK = torch.ones(B, T)
REWARDS = torch.tensor([1.0, 0.0, 1.0, 0.0])
ADV = torch.tensor([1.0, -1.0, 0.5, -0.5])

VALID_CALLS: dict[str, dict] = {
    "aggregate_loss": dict(per_token=LOGP, mask=MASK, num_tokens=12.0, max_len=3),
    "bnpo_advantages": dict(rewards=REWARDS, group_size=2, max_inverse_pdf=1e6),
    "branch_guide": dict(entropy=-LOGP, mask=MASK),
    "branch_token_guide": dict(entropy=-LOGP, logp=LOGP, mask=MASK),
    "clip_cov_surrogate": dict(logp=LOGP, old_logp=LOGP + 0.1, advantages=ADV, mask=MASK),
    "clipped_surrogate": dict(logp=LOGP, old_logp=LOGP + 0.1, advantages=ADV, delta=2.0, epsilon_high=0.3),
    "entropy_advantage": dict(advantages=ADV, entropy=-LOGP, mask=MASK),
    "forward_kl": dict(logp=LOGP, ref_logp=LOGP + 0.1),
    "gaussian_guide": dict(mask=MASK),
    "grpo_advantages": dict(rewards=REWARDS, group_size=2),
    "kl_cov_surrogate": dict(logp=LOGP, old_logp=LOGP + 0.1, advantages=ADV, mask=MASK, epsilon_high=0.3),
    "make_schedule": dict(kind="cosine", value=1.0, total_steps=10, num_restarts=1),
    "overlong_penalty": dict(lengths=torch.tensor([3, 9]), max_length=10, buffer_length=4),
    "pass_at_k": dict(n=8, c=3, k=2),
    "passk_advantages": dict(rewards=REWARDS, group_size=2, k=1),
    "pkpo_advantages": dict(rewards=REWARDS, group_size=2, k=1),
    "policy_loss": dict(
        name="clip", logp=LOGP, old_logp=LOGP + 0.1, advantages=ADV, mask=MASK, delta=2.0, epsilon_high=0.3
    ),
    "random_guide": dict(mask=MASK, entropy=-LOGP),
    "sage_loss": dict(
        logp=LOGP,
        old_logp=LOGP + 0.1,
        ref_logp=LOGP - 0.1,
        advantages=ADV,
        mask=MASK,
        beta=0.05,
        delta=2.0,
        epsilon_high=0.3,
        num_tokens=12.0,
        max_len=3,
        entropy=-LOGP,
        entropy_adv_alpha=0.4,
    ),
    "shaped_kl": dict(logp=LOGP, ref_logp=LOGP + 0.1),
    "teacher_guide": dict(teacher_logp=LOGP + 0.2, ref_logp=LOGP, mask=MASK),
    "token_guide": dict(logp=LOGP, mask=MASK, sigma=0.1),
    "unlikeliness_advantages": dict(rewards=REWARDS, group_size=2, sequence_logp=LOGP[:, 0]),
    "unlikeliness_rewards": dict(rewards=REWARDS, sequence_logp=LOGP[:, 0], group_size=2),
    "w_reinforce_advantages": dict(rewards=REWARDS, group_size=2),
    "compute_advantages": dict(name="grpo", rewards=REWARDS, group_size=2),
    "dr_grpo_advantages": dict(rewards=REWARDS, group_size=2),
    "dynamic_sampling_mask": dict(rewards=REWARDS, group_size=2),
    "zero_advantage_mask": dict(advantages=REWARDS, group_size=2, atol=1e-6),
    "likelihood_ranks": dict(sequence_logp=LOGP[:, 0], group_size=2),
    "ConstantSchedule": dict(value=1.0),
    "CosineRestartSchedule": dict(upper=1.0, lower=0.0, total_steps=10),
    "GuideParams": dict(),
    # issue 23's methods
    "rs_grpo_advantages": dict(rewards=REWARDS, group_size=2, risk_beta=2.0),
    "entropic_risk_weight": dict(p=0.3, risk_beta=2.0),
    "passk_mix_advantages": dict(rewards=REWARDS, group_size=2, k=1, mix_weight=0.5),
    "prompt_weight": dict(name="grpo", p=0.3, n=4),
    "darling_advantages": dict(rewards=REWARDS, group_size=2, clusters=torch.tensor([0, 0, 1, 0]), floor=0.1),
    "partition_diversity": dict(clusters=torch.tensor([0, 0, 1, 0]), group_size=2, floor=0.1),
    "lexical_partition": dict(sequences=[[1, 2], [1, 2], [3], [4]], group_size=2, n=2, threshold=0.5),
    "partition_from_keys": dict(keys=["a", "a", "b", None], group_size=2),
    "outcome_advantages": dict(
        rewards=REWARDS,
        group_size=2,
        kind="ucb_con",
        answers=torch.tensor([0, 1, 0, 0]),
        counts=torch.tensor([1.0, 2.0, 1.0, 1.0]),
        coef=1.0,
        b0=0.5,
    ),
    "batch_penalty": dict(answers=torch.tensor([0, 1, 0, 0]), group_size=2),
    "LinearSchedule": dict(start=8.0, end=1.0, total_steps=10),
    "StepSchedule": dict(start=4.0, end=1.0, total_steps=10, switch=0.5),
    "integer_at": dict(schedule=objective.ConstantSchedule(2.0), step=3),
    # issue 38's methods
    "maxpo_advantages": dict(rewards=REWARDS, group_size=2, k=1),
    "flowrl_surrogate": dict(
        logp=LOGP,
        old_logp=LOGP + 0.1,
        advantages=ADV,
        mask=MASK,
        log_z=torch.zeros(B),
        ref_logp=LOGP - 0.1,
        epsilon_high=0.3,
        delta=2.0,
    ),
    "apo_surrogate": dict(
        logp=LOGP,
        old_logp=LOGP + 0.1,
        advantages=ADV,
        mask=MASK,
        manifold_logp=torch.stack([LOGP, LOGP - 1], dim=-1),
        old_manifold_logp=torch.stack([LOGP, LOGP - 1], dim=-1) + 0.1,
        apo_top_k=2,
        epsilon_high=0.3,
        delta=2.0,
    ),
    "simko_surrogate": dict(
        logp=LOGP,
        old_logp=LOGP + 0.1,
        advantages=ADV,
        mask=MASK,
        topk_logp=torch.stack([LOGP, LOGP - 1, LOGP - 2], dim=-1),
        old_topk_logp=torch.stack([LOGP, LOGP - 1, LOGP - 2], dim=-1) + 0.1,
        entropy=-LOGP,
        is_top1=torch.ones(B, T, dtype=torch.bool),
        correct=ADV > 0,
        epsilon_high=0.3,
        delta=2.0,
    ),
}
"""One valid call of each public callable of sagerl.objective that takes a number."""


def _numeric(annotation) -> bool:
    args = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    return any(a in (int, float) for a in args)


def numeric_parameters(name: str) -> list[str]:
    """The parameters of ``sagerl.objective.<name>`` annotated with int or float (alone or in a union)."""
    target = getattr(objective, name)
    function = target.__init__ if inspect.isclass(target) else target
    hints = typing.get_type_hints(function, vars(inspect.getmodule(target)))
    return [p for p, hint in hints.items() if p != "return" and _numeric(hint)]


PUBLIC = [
    n for n in objective.__all__ if callable(getattr(objective, n)) and n not in ("Range", "check_number")
]
CASES = [(name, p) for name in sorted(VALID_CALLS) for p in numeric_parameters(name)]


def test_every_public_callable_with_a_numeric_argument_has_a_valid_call():
    missing = [name for name in PUBLIC if numeric_parameters(name) and name not in VALID_CALLS]
    assert missing == [], f"add a valid call of {missing} to VALID_CALLS (its numeric arguments are walked)"
    assert len(CASES) > 60


@pytest.mark.parametrize("name", sorted(VALID_CALLS))
def test_the_valid_calls_are_valid(name):
    getattr(objective, name)(**VALID_CALLS[name])


@pytest.mark.parametrize(("name", "parameter"), CASES, ids=[f"{n}.{p}" for n, p in CASES])
def test_nan_and_inf_fail_in_one_line_naming_the_argument(name, parameter):
    for value in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError) as info:
            getattr(objective, name)(**{**VALID_CALLS[name], parameter: value})
        message = str(info.value)
        assert "\n" not in message
        assert message.startswith(f"{parameter}={value!r} must be "), message  # a range, or None


def test_range_text_and_membership():
    assert str(Range(0.0, 1.0, low_open=True)) == "a number in (0, 1]"
    assert str(Range(1, integer=True)) == "an integer in [1, inf)"
    assert str(Range()) == "a finite number"
    assert 1 in Range(0.0, 1.0) and 0 not in Range(0.0, 1.0, low_open=True)
    assert True not in Range() and "1" not in Range() and 2.0 not in Range(integer=True)
    assert 10**400 in Range(integer=True)  # a Python integer is finite however large
    assert Range(0.0, 1.0, low_open=True).just_outside() == [0.0, math.nextafter(1.0, math.inf)]
    assert Range(1, 8, integer=True).just_outside() == [0, 9]
    assert Q_MIN.just_outside() == [0.0, math.nextafter(1.0, 2.0)] and Q_MAX.just_outside() == [
        math.nextafter(1.0, 0.0)
    ]
    with pytest.raises(ValueError, match=r"^gamma=-0.5 must be a number in \[0, inf\)$"):
        check_number("gamma", -0.5, Range(0.0))


def test_the_issue_cases():
    # pass_at_k(8, 3, 9) raised ZeroDivisionError; a reward of inf made the whole group NaN (pkpo) or inf
    with pytest.raises(ValueError, match=r"^k=9 must be an integer in \[1, 8\]$"):
        pass_at_k(8, 3, 9)
    for estimator in (pkpo_advantages, passk_advantages):
        with pytest.raises(ValueError, match="rewards holds ±inf"):
            estimator(torch.tensor([1.0, math.inf, 0.0, 1.0]), 4, k=2)
    with pytest.raises(ValueError, match="rewards holds ±inf"):
        grpo_advantages(torch.tensor([1.0, -math.inf]), 2)
    with pytest.raises(ValueError, match=r"^lam=inf must be a number in \(0, inf\)$"):
        w_reinforce_advantages(REWARDS, 2, lam=math.inf)
    # NaN stays what it was: an unscorable completion, advantage 0
    assert pkpo_advantages(torch.tensor([1.0, math.nan, 0.0, 1.0]), 4, k=2)[1] == 0
