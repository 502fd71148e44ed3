"""APO (arXiv 2602.05717), as sagerl reads it (sagerl/objective/apo.py says why: the paper's method section and the
authors' code could not be read): values against the formula computed by hand, the gradient in logit space in closed
form, the pull's direction (mass towards the reference's top-K on a wrong completion), its trust-region clip, and the
bad inputs."""

from __future__ import annotations

import math

import pytest
import torch

from sagerl.objective.apo import SETTINGS, apo_surrogate, safe_manifold_logp
from sagerl.objective.surrogate import clip_surrogate

LOGP = torch.tensor([[-1.0, -2.0, -0.5], [-0.2, -1.5, -2.5]], dtype=torch.float64)
OLD = torch.tensor([[-1.3, -1.6, -0.5], [-0.9, -1.5, -2.0]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.float64)
ADV = torch.tensor([1.5, -0.8], dtype=torch.float64)
# log π of the K = 2 tokens of the Safe Manifold at each position, under π_θ and π_old
MANIFOLD = torch.tensor(
    [
        [[-0.5, -1.5], [-0.2, -2.5], [-1.0, -1.0]],
        [[-0.4, -2.0], [-1.2, -1.4], [-0.1, -3.0]],
    ],
    dtype=torch.float64,
)
OLD_MANIFOLD = torch.tensor(
    [
        [[-0.6, -1.5], [-0.2, -2.0], [-1.0, -1.0]],
        [[-0.9, -2.0], [-1.2, -1.4], [-0.1, -2.0]],
    ],
    dtype=torch.float64,
)


def _hand(lam: float, beta: float, eps_low: float = 0.2, eps_high: float = 0.28) -> list[list[float]]:
    """The module docstring's per-token loss, in plain floats."""
    out = []
    for b in range(2):
        row = []
        for t in range(3):
            if MASK[b, t] == 0:
                row.append(0.0)
                continue
            a = ADV[b].item()
            rho = math.exp(LOGP[b, t].item() - OLD[b, t].item())
            a_pushed = lam * a if a < 0 else a
            clipped = min(max(rho, 1 - eps_low), 1 + eps_high)
            loss = -min(rho * a_pushed, clipped * a_pushed)
            if a < 0:
                mass = sum(math.exp(x) for x in MANIFOLD[b, t].tolist())
                old_mass = sum(math.exp(x) for x in OLD_MANIFOLD[b, t].tolist())
                r = mass / old_mass
                loss += beta * (1 - min(r, min(max(r, 1 - eps_low), 1 + eps_high)))
            row.append(loss)
        out.append(row)
    return out


def test_apo_equals_the_formula_by_hand():
    out = apo_surrogate(
        LOGP,
        OLD,
        ADV,
        MASK,
        manifold_logp=MANIFOLD,
        old_manifold_logp=OLD_MANIFOLD,
        epsilon_low=0.2,
        epsilon_high=0.28,
        apo_lambda=1.5,
        apo_beta=0.3,
        apo_top_k=2,
    )
    torch.testing.assert_close(out.loss, torch.tensor(_hand(1.5, 0.3), dtype=torch.float64))
    # one entry by hand in full: row 1, t = 0: ρ = e^0.7 = 2.014 (clip inactive for A < 0: -min(ρA', 0.8·A')),
    # r^M = (e^-0.4 + e^-2) / (e^-0.9 + e^-2) = 1.4227 > 1.28: the pull is held at its clip
    rho, a = math.exp(0.7), -0.8 * 1.5
    r = (math.exp(-0.4) + math.exp(-2.0)) / (math.exp(-0.9) + math.exp(-2.0))
    assert r > 1.28
    assert out.loss[1, 0].item() == pytest.approx(-min(rho * a, 1.28 * a) + 0.3 * (1 - 1.28))
    assert out.covariance_masked.tolist() == [[False, False, False], [True, True, True]]


def test_lambda_one_and_beta_zero_is_ppo():
    logp = LOGP.clone().requires_grad_(True)
    manifold = MANIFOLD.clone().requires_grad_(True)
    out = apo_surrogate(
        logp, OLD, ADV, MASK, manifold_logp=manifold, old_manifold_logp=OLD_MANIFOLD,
        apo_lambda=1.0, apo_beta=0.0, apo_top_k=2, epsilon_low=0.2, epsilon_high=0.28,
    )  # fmt: skip
    ppo_logp = LOGP.clone().requires_grad_(True)
    ppo = clip_surrogate(ppo_logp, OLD, ADV, MASK, epsilon_low=0.2, epsilon_high=0.28)
    torch.testing.assert_close(out.loss, ppo.loss * MASK)
    (out.loss * MASK).sum().backward()
    (ppo.loss * MASK).sum().backward()
    torch.testing.assert_close(logp.grad, ppo_logp.grad)
    assert not manifold.grad.any()


def test_positive_advantages_are_untouched_by_the_push_and_the_pull():
    adv = torch.tensor([1.5, 0.4], dtype=torch.float64)
    out = apo_surrogate(
        LOGP, OLD, adv, MASK, manifold_logp=MANIFOLD, old_manifold_logp=OLD_MANIFOLD,
        apo_lambda=3.0, apo_beta=2.0, apo_top_k=2,
    )  # fmt: skip
    ppo = clip_surrogate(LOGP, OLD, adv, MASK)
    torch.testing.assert_close(out.loss, ppo.loss * MASK)
    assert not out.covariance_masked.any()


def test_per_token_advantages_push_and_pull_only_the_negative_tokens():
    adv = torch.tensor([[0.5, -1.0, 2.0], [-0.3, 0.2, 0.0]], dtype=torch.float64)
    out = apo_surrogate(
        LOGP, LOGP, adv, torch.ones_like(MASK), manifold_logp=MANIFOLD, old_manifold_logp=MANIFOLD,
        apo_lambda=2.0, apo_beta=0.5, apo_top_k=2,
    )  # fmt: skip
    # on-policy: ρ = r^M = 1, so the loss is −A' and the pull's value 0
    torch.testing.assert_close(out.loss, -torch.where(adv < 0, 2.0 * adv, adv))
    assert out.covariance_masked.tolist() == [[False, True, False], [True, False, False]]


def _one_position(z, sampled: int, ids: list[int], advantage: float, lam: float, beta: float):
    """APO's loss at one position on-policy, from logits z (V,): the policy's log-probs, gathered."""
    logprobs = torch.log_softmax(z, -1).view(1, 1, -1)
    logp = logprobs[..., sampled]
    manifold = safe_manifold_logp(logprobs, torch.tensor(ids).view(1, 1, -1))
    out = apo_surrogate(
        logp, logp.detach(), torch.tensor([advantage], dtype=z.dtype), torch.ones(1, 1),
        manifold_logp=manifold, old_manifold_logp=manifold.detach(),
        apo_lambda=lam, apo_beta=beta, apo_top_k=len(ids),
    )  # fmt: skip
    return out.loss.sum()


@pytest.mark.parametrize("sampled", [0, 2])  # outside and inside the Safe Manifold
def test_the_gradient_in_logit_space_is_the_closed_form(sampled):
    z = torch.tensor([1.2, 0.3, -0.4, 0.9, -1.1, 0.0], dtype=torch.float64, requires_grad=True)
    ids, a, lam, beta = [2, 4], -0.7, 1.3, 0.25
    _one_position(z, sampled, ids, a, lam, beta).backward()
    pi = torch.softmax(z.detach(), -1)
    in_s = torch.zeros(6, dtype=torch.float64)
    in_s[ids] = 1.0
    mass = pi[ids].sum()
    e_y = torch.zeros(6, dtype=torch.float64)
    e_y[sampled] = 1.0
    # push: −λA·∇log π(y) = λ|A|(e_y − π); pull: −β·∇log M = −β(1_S·π/M − π)
    expected = lam * abs(a) * (e_y - pi) - beta * (in_s * pi / mass - pi)
    torch.testing.assert_close(z.grad, expected)


def test_the_pull_moves_a_wrong_completion_towards_the_reference_top_k():
    z0 = torch.tensor([2.0, 0.3, -0.4, 0.9, -1.1, 0.0], dtype=torch.float64)
    ids = [2, 4]  # the reference's top-2: tokens the policy has squeezed

    def step(beta: float) -> torch.Tensor:
        z = z0.clone().requires_grad_(True)
        _one_position(z, 0, ids, -1.0, 1.0, beta).backward()
        return (z0 - 0.5 * z.grad).detach()

    def mass(z):
        return torch.softmax(z, -1)[ids].sum().item()

    plain, pulled = step(0.0), step(0.5)
    assert mass(pulled) > mass(plain) > mass(z0)  # the push alone frees some mass; the pull sends it to S
    moved = pulled - plain
    assert (moved[ids] > 0).all()  # the pull raises every token of the Safe Manifold ...
    assert (moved[[0, 1, 3, 5]] < 0).all()  # ... and lowers every other one


def test_the_pull_is_clipped_like_a_positive_advantage():
    manifold = MANIFOLD.clone().requires_grad_(True)
    old = MANIFOLD - math.log(1.5)  # r^M = 1.5 everywhere: above 1 + ε_high
    out = apo_surrogate(
        LOGP, LOGP, ADV, MASK, manifold_logp=manifold, old_manifold_logp=old,
        apo_beta=1.0, apo_top_k=2, epsilon_low=0.2, epsilon_high=0.28,
    )  # fmt: skip
    (out.loss * MASK).sum().backward()
    assert not manifold.grad.any()  # held at the clip: no more pull
    assert out.loss[1, 0].item() == pytest.approx(0.8 + 1.0 * (1 - 1.28))
    # below 1 − ε_low the pull keeps its gradient (PPO does not clip a positive advantage from below)
    manifold.grad = None
    low = apo_surrogate(
        LOGP, LOGP, ADV, MASK, manifold_logp=manifold, old_manifold_logp=MANIFOLD + math.log(2.0),
        apo_beta=1.0, apo_top_k=2,
    )  # fmt: skip
    (low.loss * MASK).sum().backward()
    assert manifold.grad[1].abs().sum() > 0 and not manifold.grad[0].any()


def test_safe_manifold_logp_gathers_and_checks():
    logprobs = torch.log_softmax(torch.randn(2, 3, 5, dtype=torch.float64), -1)
    ids = torch.tensor([[[0, 4], [1, 2], [3, 3]], [[4, 0], [2, 2], [1, 0]]])
    got = safe_manifold_logp(logprobs, ids)
    assert got.shape == (2, 3, 2) and got[1, 0, 0] == logprobs[1, 0, 4]
    with pytest.raises(ValueError, match=r"ref_topk_ids must be \(B, T, K\) with \(B, T\) = \(2, 3\)"):
        safe_manifold_logp(logprobs, ids[:, :2])
    with pytest.raises(ValueError, match=r"ref_topk_ids must be token ids in \[0, 5\)"):
        safe_manifold_logp(logprobs, ids + 1)


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("apo_lambda", 0.0, r"^apo_lambda=0.0 must be a number in \(0, inf\)$"),
        ("apo_lambda", -1.0, r"^apo_lambda=-1.0 must be a number in \(0, inf\)$"),
        ("apo_lambda", math.nan, r"^apo_lambda=nan must be a number in \(0, inf\)$"),
        ("apo_beta", -0.1, r"^apo_beta=-0.1 must be a number in \[0, inf\)$"),
        ("apo_beta", math.inf, r"^apo_beta=inf must be a number in \[0, inf\)$"),
        ("apo_top_k", 0, r"^apo_top_k=0 must be an integer in \[1, inf\)$"),
        ("apo_top_k", 2.0, r"^apo_top_k=2.0 must be an integer in \[1, inf\)$"),
        ("apo_top_k", True, r"^apo_top_k=True must be an integer in \[1, inf\)$"),
    ],
)
def test_bad_settings_fail_in_one_line_naming_the_field(setting, value, message):
    params = {"apo_lambda": 1.0, "apo_beta": 0.1, "apo_top_k": 2, setting: value}
    with pytest.raises(ValueError, match=message):
        apo_surrogate(LOGP, OLD, ADV, MASK, manifold_logp=MANIFOLD, old_manifold_logp=OLD_MANIFOLD, **params)


def test_bad_shapes_fail():
    with pytest.raises(ValueError, match=r"must be \(B, T, K\) = \(2, 3, 3\), got \(2, 3, 2\)"):
        apo_surrogate(
            LOGP, OLD, ADV, MASK, manifold_logp=MANIFOLD, old_manifold_logp=OLD_MANIFOLD, apo_top_k=3
        )
    with pytest.raises(ValueError, match="shape mismatch"):
        apo_surrogate(
            LOGP, OLD[:, :2], ADV, MASK, manifold_logp=MANIFOLD, old_manifold_logp=OLD_MANIFOLD, apo_top_k=2
        )
    with pytest.raises(ValueError, match="mask has shape"):
        apo_surrogate(
            LOGP, OLD, ADV, MASK[:, :2], manifold_logp=MANIFOLD, old_manifold_logp=OLD_MANIFOLD, apo_top_k=2
        )


def test_the_settings_match_the_function():
    assert [(s.name, s.default) for s in SETTINGS] == [
        ("apo_lambda", 1.0),
        ("apo_beta", 0.1),
        ("apo_top_k", 5),
    ]
