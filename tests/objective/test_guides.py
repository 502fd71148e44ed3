import math

import pytest
import torch

from sagerl.objective import (
    GuideParams,
    branch_guide,
    compute_guide,
    gaussian_guide,
    normalize_per_sequence,
    permutation_guide,
    random_guide,
    token_guide,
)
from sagerl.objective.schedules import ConstantSchedule, CosineRestartSchedule, make_schedule

MASK = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]])


def test_branch_guide_exact_values():
    entropy = torch.tensor([[0.0, 1.2, 1.7, 5.0, 9.0], [2.2, 1.5, float("nan"), 3.0, 0.0]])
    q = branch_guide(entropy, MASK, gamma=0.3, tau=1.2, q_min=0.6, q_max=1.4)
    expected = torch.tensor([[1.0, 1.0, 1.15, 1.4, 1.0], [1.3, 1.09, 1.0, 1.0, 1.0]])
    torch.testing.assert_close(q, expected)


def test_branch_guide_clamps_and_padding():
    entropy = torch.full((2, 5), 100.0)
    q = branch_guide(entropy, MASK, gamma=1.0, tau=0.0, q_min=0.6, q_max=1.25)
    assert torch.equal(q[MASK.bool()], torch.full((6,), 1.25))
    assert torch.equal(q[~MASK.bool()], torch.ones(4))


@pytest.mark.parametrize("bad", [dict(q_min=1.2), dict(q_max=0.9), dict(q_min=0.0), dict(gamma=-1.0)])
def test_branch_guide_rejects_bad_parameters(bad):
    with pytest.raises(ValueError):
        branch_guide(torch.ones(2, 5), MASK, **bad)


def test_guides_are_detached():
    entropy = (torch.rand(2, 5) * 3).requires_grad_(True)
    logp = (-torch.rand(2, 5) * 4).requires_grad_(True)
    for q in (
        branch_guide(entropy, MASK),
        token_guide(logp, MASK, sigma=0.1),
        random_guide(MASK, "permutation", entropy=entropy),
        random_guide(MASK, "gaussian"),
    ):
        assert not q.requires_grad
    # and no gradient reaches the inputs through q
    q = branch_guide(entropy, MASK, gamma=0.5, tau=0.0)
    loss = (q * entropy).sum()
    loss.backward()
    torch.testing.assert_close(entropy.grad, q)  # d(q·H)/dH = q exactly: nothing flows through q


def test_permutation_keeps_each_sequence_multiset():
    g = torch.Generator().manual_seed(0)
    mask = (torch.rand(6, 40, generator=g) > 0.3).int()
    q = 0.6 + 0.8 * torch.rand(6, 40, generator=g)
    q = torch.where(mask.bool(), q, torch.ones_like(q))
    p = permutation_guide(q, mask, generator=g)
    for i in range(6):
        valid = mask[i].bool()
        assert torch.equal(torch.sort(p[i][valid]).values, torch.sort(q[i][valid]).values)
        assert torch.equal(p[i][~valid], torch.ones(int((~valid).sum())))
    assert not torch.equal(p, q)  # it did move values


def test_permutation_random_guide_from_entropy_has_branch_multiset():
    entropy = torch.tensor([[0.5, 2.0, 3.0, 1.5, 9.0], [4.0, 0.1, 7.0, 7.0, 7.0]])
    g = torch.Generator().manual_seed(1)
    q = random_guide(MASK, "permutation", entropy=entropy, generator=g)
    b = branch_guide(entropy, MASK)
    for i in range(2):
        valid = MASK[i].bool()
        assert torch.equal(torch.sort(q[i][valid]).values, torch.sort(b[i][valid]).values)


def test_gaussian_guide_statistics_and_padding():
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(200, 500)
    mask[:, 400:] = 0
    q = gaussian_guide(mask, eps=0.25, sigma=0.1, q_min=0.01, q_max=10.0, generator=g)
    valid = q[:, :400]
    assert torch.equal(q[:, 400:], torch.ones(200, 100))
    share = (valid != 1.0).float().mean().item()
    assert abs(share - 0.25) < 0.01
    moved = valid[valid != 1.0]
    assert abs(moved.std().item() - 0.1) < 0.005


def test_token_guide_deterministic_values():
    # surprisal 0, 1, 2, 3 in one row; minmax with quantile clip 5%-95%
    logp = -torch.tensor([[0.0, 1.0, 2.0, 3.0, 50.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    q = token_guide(logp, mask, alpha=0.4, sigma=0.0, normalization="rank")
    torch.testing.assert_close(q, torch.tensor([[1.0, 1.0 + 0.4 / 3, 1.0 + 0.8 / 3, 1.4, 1.0]]))
    w = normalize_per_sequence(-logp, mask, "minmax")
    lo, hi = 0.15, 2.85  # linear-interpolated 5% and 95% quantiles of [0, 1, 2, 3]
    expected = torch.tensor([[0.0, (1 - lo) / (hi - lo), (2 - lo) / (hi - lo), 1.0, 0.0]])
    torch.testing.assert_close(w, expected)
    w = normalize_per_sequence(-logp, mask, "zscore")
    z = (torch.tensor([0.0, 1, 2, 3]) - 1.5) / math.sqrt(1.25)
    torch.testing.assert_close(w[0, :4], torch.sigmoid(z))
    assert w[0, 4] == 0


def test_rank_normalization_ties_and_single_token():
    values = torch.tensor([[2.0, 2.0, 1.0, 5.0], [3.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]])
    w = normalize_per_sequence(values, mask, "rank")
    torch.testing.assert_close(w, torch.tensor([[0.5, 0.5, 0.0, 1.0], [0.5, 0.0, 0.0, 0.0]]))


def test_token_guide_noise_is_scaled_by_w():
    logp = -torch.arange(10.0).repeat(500, 1)
    mask = torch.ones(500, 10)
    q = token_guide(
        logp,
        mask,
        alpha=0.0,
        sigma=0.2,
        normalization="rank",
        q_min=0.01,
        q_max=10.0,
        generator=torch.Generator().manual_seed(0),
    )
    assert torch.equal(q[:, 0], torch.ones(500))  # w = 0: no noise
    assert abs(q[:, 9].std().item() - 0.2) < 0.02  # w = 1: full σ


def test_compute_guide_dispatch():
    entropy = torch.full((2, 5), 2.2)
    assert compute_guide("none", MASK) is None
    q = compute_guide("branch", MASK, GuideParams(gamma=0.5, tau=1.2), entropy=entropy)
    assert torch.allclose(q[MASK.bool()], torch.tensor(1.4))
    with pytest.raises(ValueError, match="entropies"):
        compute_guide("branch", MASK)
    with pytest.raises(ValueError, match="unknown guide"):
        compute_guide("bogus", MASK)


def test_schedules():
    assert ConstantSchedule(0.3)(17) == 0.3
    s = CosineRestartSchedule(upper=1.0, lower=0.0, total_steps=100, num_restarts=1)
    assert s(0) == pytest.approx(1.0)
    assert s(25) == pytest.approx(0.5)
    assert s(49) == pytest.approx(0.5 * (1 + math.cos(math.pi * 49 / 50)))
    assert s(50) == pytest.approx(0.9)  # the restart's upper bound is scaled by 0.9
    assert s(75) == pytest.approx(0.45)
    assert s(1000) == pytest.approx(0.0)
    assert make_schedule("cosine", 2.0, total_steps=10, num_restarts=0)(5) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        make_schedule("linear", 1.0)
