import math

import pytest
import torch

from sagerl.objective import (
    GuideParams,
    branch_guide,
    branch_token_guide,
    compute_guide,
    gaussian_guide,
    normalize_per_sequence,
    permutation_guide,
    random_guide,
    shaped_kl,
    teacher_guide,
    token_guide,
)
from sagerl.objective.registry import guide_inputs
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
    with pytest.raises(ValueError, match="branch guide needs entropy"):
        compute_guide("branch", MASK)
    with pytest.raises(ValueError, match="teacher guide needs teacher_logp, ref_logp"):
        compute_guide("teacher", MASK)
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
        make_schedule("exponential", 1.0)


def test_branch_token_guide_hand_values():
    entropy = torch.tensor([[0.5, 2.2, 3.2, 2.2], [3.2, 3.2, 0.0, 0.0]])
    logp = torch.log(torch.tensor([[0.9, 0.5, 0.1, 0.2], [0.3, 0.05, 1.0, 1.0]]))
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    # "prob": w = 1 - p; excess = relu(H - 1.2) = [0, 1, 2, 1], [2, 2]
    q = branch_token_guide(entropy, logp, mask, gamma=0.5, tau=1.2, normalization="prob", q_max=2.0)
    expected = torch.tensor([[1.0, 1.25, 1.9, 1.4], [1.7, 1.95, 1.0, 1.0]])
    torch.testing.assert_close(q, expected)
    # at q_max = 1.4 the clamp binds; below tau q is exactly 1 whatever the surprisal
    q = branch_token_guide(entropy, logp, mask, gamma=0.5, tau=1.2, normalization="prob")
    torch.testing.assert_close(q, expected.clamp(max=1.4))
    # "minmax" (per sequence, as the token guide): row 2 has two valid tokens, w = [0, 1]
    q = branch_token_guide(entropy, logp, mask, gamma=0.15, tau=1.2, normalization="minmax")
    assert q[1, 0].item() == 1.0 and q[1, 1].item() == pytest.approx(1.0 + 0.15 * 2.0 * 1.0)


def test_teacher_guide_hand_values():
    ref = torch.log(torch.tensor([[0.2, 0.5, 0.4], [0.1, 0.3, 0.3]]))
    teacher = torch.log(torch.tensor([[0.4, 0.25, 0.4], [0.9, 0.3, 0.0001]]))
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    q = teacher_guide(teacher, ref, mask, lam=0.5, q_min=0.6, q_max=2.0)
    expected = torch.tensor([[2**0.5, 0.5**0.5, 1.0], [2.0, 1.0, 1.0]])  # 9^0.5 = 3 clamps to 2
    torch.testing.assert_close(q, expected)
    q = teacher_guide(teacher, ref, mask, lam=1.0)  # default clamp [0.6, 1.4]
    torch.testing.assert_close(q, torch.tensor([[1.4, 0.6, 1.0], [1.4, 1.0, 1.0]]))
    assert torch.equal(teacher_guide(teacher, ref, mask, lam=0.0), torch.ones(2, 3))
    with pytest.raises(ValueError):
        teacher_guide(teacher, ref, mask, lam=-1.0)
    assert guide_inputs("teacher") == ("teacher_logp", "ref_logp")
    q = compute_guide(
        "teacher", mask, GuideParams(teacher_lambda=0.5, q_max=2.0), ref_logp=ref, teacher_logp=teacher
    )
    torch.testing.assert_close(q, expected)


def _expected_k3_gradient(logits, ref_logp, log_q):
    """E_{y~π}[∇_θ k3(y)] at one state, exactly: Σ_y π(y) ∇k3(y) with π detached as the sampling weight."""
    grads = []
    for y in range(logits.shape[0]):
        theta = logits.clone().requires_grad_(True)
        logp = torch.log_softmax(theta, dim=0)[y].reshape(1, 1)
        k3 = shaped_kl(logp, ref_logp[y].reshape(1, 1), log_q[y].reshape(1, 1), "k3", log_ratio_clip=None)
        (grad,) = torch.autograd.grad(k3.sum(), theta)
        grads.append(grad)
    prob = torch.softmax(logits, dim=0)
    return (prob[:, None] * torch.stack(grads)).sum(0)


def test_state_constant_guide_only_rescales_the_k3_gradient():
    """The branch guide's identity: q depends on the state only, so E_π[∇k3(π, q·π_ref)] = q·E_π[∇k3(π, π_ref)].

    Exactly: E_π[∇k3] = −Σ_y q(y)·π_ref(y)·∇log π(y). With one q for every token of the state, β·k3 with
    the branch guide is GRPO's β·k3 with the coefficient β·q(H_t) at that state: the anchor's preferred
    token is unchanged. A token-dependent q (token, branch_token, teacher guides) changes the direction.
    """
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, generator=g, dtype=torch.float64)
    ref_logp = torch.log_softmax(torch.randn(6, generator=g, dtype=torch.float64), dim=0)
    plain = _expected_k3_gradient(logits, ref_logp, torch.zeros(6, dtype=torch.float64))
    for q in (0.6, 1.17, 1.4):
        shaped = _expected_k3_gradient(logits, ref_logp, torch.full((6,), math.log(q), dtype=torch.float64))
        torch.testing.assert_close(shaped, q * plain, rtol=1e-10, atol=1e-12)
    # closed form: −Σ q π_ref ∇log π, with ∇_θ log π(y) = e_y − π
    prob = torch.softmax(logits, dim=0)
    closed = -(ref_logp.exp()[:, None] * (torch.eye(6, dtype=torch.float64) - prob)).sum(0)
    torch.testing.assert_close(plain, closed, rtol=1e-10, atol=1e-12)
    # a token-dependent q is not a rescaling: the gradient turns
    log_q = torch.log(torch.tensor([1.4, 0.6, 1.0, 1.2, 0.8, 1.1], dtype=torch.float64))
    turned = _expected_k3_gradient(logits, ref_logp, log_q)
    cosine = torch.nn.functional.cosine_similarity(turned, plain, dim=0).item()
    assert cosine < 0.99
