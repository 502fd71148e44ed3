"""FlowRL (arXiv 2509.15207): equal to the authors' compute_flowrl_objective (written again in torch) in value and
gradient, the trajectory-balance residual by hand, the log-partition head, and its bounds."""

from __future__ import annotations

import pytest
import torch

from sagerl.objective import aggregate_loss
from sagerl.objective.flowrl import LogPartitionHead, flowrl_surrogate

B, T = 4, 5


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(B, T, generator=g, dtype=torch.float64) * 3).requires_grad_(True)
    old = logp.detach() + 0.05 * torch.randn(B, T, generator=g, dtype=torch.float64)
    ref = logp.detach() + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)
    log_z = torch.randn(B, generator=g, dtype=torch.float64).requires_grad_(True)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, 3:] = False
    mask[2, 4:] = False
    adv = torch.tensor([0.8, -0.5, 1.2, -1.5], dtype=torch.float64)
    return logp, old, ref, log_z, mask, adv


def _authors(logpf, logf_ref, logpf_old, log_z, reward, response_mask):
    """Xuekai-Zhu/FlowRL compute_flowrl_objective, written again: masked means of log π, log π_ref and the
    token-level advantage, δ = log Z + mean log π − 15·mean A − mean log π_ref, the unclipped sequence importance
    weight, the batch mean of w·δ²."""
    m = response_mask.to(logpf.dtype)
    avg_logpf = (logpf * m).sum(1) / m.sum(1)
    avg_logp_ref = (logf_ref * m).sum(1) / m.sum(1)
    seq_log_reward = (reward * m).sum(1) / m.sum(1)
    delta = log_z + avg_logpf - 15 * seq_log_reward - avg_logp_ref
    weight = torch.exp(((logpf - logpf_old) * m).sum(1)).detach()
    return torch.mean(weight * delta**2)


@pytest.mark.parametrize("seed", [0, 1])
def test_flowrl_equals_the_authors_objective(seed):
    logp, old, ref, log_z, mask, adv = _inputs(seed)
    token_adv = adv[:, None].expand(B, T) * mask  # verl's per-token advantages
    expected = _authors(logp, ref, old, log_z, token_adv, mask)
    grad_expected = torch.autograd.grad(expected, (logp, log_z), retain_graph=True)
    out = flowrl_surrogate(logp, old, adv, mask, log_z=log_z, ref_logp=ref)
    loss = aggregate_loss(out.loss, mask, "seq-mean-token-mean")
    grad = torch.autograd.grad(loss, (logp, log_z))
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(grad[0], grad_expected[0])
    torch.testing.assert_close(grad[1], grad_expected[1])
    assert expected > 1.0 and grad[1].abs().min() > 1e-3


def test_the_residual_and_weight_by_hand():
    logp, _, ref, log_z, mask, adv = _inputs(2)
    out = flowrl_surrogate(logp, logp.detach(), adv, mask, log_z=log_z, ref_logp=ref, flowrl_beta=2.0)
    row = 1  # three valid tokens
    delta = log_z[row] + logp[row, :3].mean() - 2.0 * adv[row] - ref[row, :3].mean()
    torch.testing.assert_close(out.loss[row, :3], (delta**2).expand(3))
    assert out.loss[row, 3:].tolist() == [0.0, 0.0]
    assert out.ratio.detach().eq(1.0).all()  # on policy: w = 1
    assert not (out.clipped_low.any() or out.clipped_high.any())


def test_the_log_partition_head_reads_the_prompt_mean():
    torch.manual_seed(0)
    head = LogPartitionHead(8, num_layers=3).eval()
    hidden = torch.randn(2, 4, 8)
    prompt_mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    got = head(hidden, prompt_mask)
    expected = head.net(torch.stack([hidden[0, 1:].mean(0), hidden[1].mean(0)])).squeeze(-1)
    torch.testing.assert_close(got, expected)
    assert got.shape == (2,) and len([m for m in head.net if isinstance(m, torch.nn.Linear)]) == 3


def test_bad_input_is_refused():
    logp, old, ref, log_z, mask, adv = _inputs(3)
    with pytest.raises(ValueError, match=r"^flowrl_beta=0.0 must be a number in \(0, inf\)$"):
        flowrl_surrogate(logp, old, adv, mask, log_z=log_z, ref_logp=ref, flowrl_beta=0.0)
    with pytest.raises(ValueError, match="one advantage per completion"):
        flowrl_surrogate(logp, old, adv[:, None].expand(B, T), mask, log_z=log_z, ref_logp=ref)
    with pytest.raises(ValueError, match=r"log_z must be \(B,\) = \(4,\)"):
        flowrl_surrogate(logp, old, adv, mask, log_z=log_z[:2], ref_logp=ref)
