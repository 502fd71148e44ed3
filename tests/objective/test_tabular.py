"""Exactness of the SAGE objective on a tabular problem: one prompt, a small token tree, softmax logits.

The policy has one logit vector per tree state. "Gradient descent on the per-token loss taken in exact
expectation" weights every leaf τ by its (detached) probability under the current policy and
differentiates the per-token loss that :func:`sage_loss` returns, which is exactly the expectation of the
stochastic gradient a trainer follows. The target is π*(τ) ∝ Π_t q_t·π_ref(y_t | s_t) · exp(r(τ)/β).
"""

from __future__ import annotations

import itertools

import pytest
import torch

from sagerl.objective import branch_guide, sage_loss, shaped_kl

BETA = 0.5


class Tree:
    """All sequences of ``depth`` tokens over a vocabulary of ``vocab``; one softmax per prefix state."""

    def __init__(self, vocab: int, depth: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.states = [s for d in range(depth) for s in itertools.product(range(vocab), repeat=d)]
        index = {s: i for i, s in enumerate(self.states)}
        self.leaves = list(itertools.product(range(vocab), repeat=depth))
        self.leaf_states = torch.tensor([[index[leaf[:t]] for t in range(depth)] for leaf in self.leaves])
        self.leaf_tokens = torch.tensor(self.leaves)
        self.ref_logits = torch.randn(len(self.states), vocab, generator=g, dtype=torch.float64)
        self.rewards = torch.rand(len(self.leaves), generator=g, dtype=torch.float64)
        self.table_q = torch.empty(len(self.states), vocab, dtype=torch.float64).uniform_(
            0.6, 1.4, generator=g
        )
        self.mask = torch.ones(len(self.leaves), depth)

    def token_logps(self, logits: torch.Tensor) -> torch.Tensor:
        """(L, depth) log-probabilities of each leaf's tokens."""
        return torch.log_softmax(logits, dim=-1)[self.leaf_states, self.leaf_tokens]

    @property
    def ref_logp(self) -> torch.Tensor:
        return self.token_logps(self.ref_logits)

    def log_q(self, kind: str) -> torch.Tensor | None:
        if kind == "ones":
            return None
        if kind == "table":  # depends on state and token
            return self.table_q.log()[self.leaf_states, self.leaf_tokens]
        if kind == "branch":  # depends on the state, through the reference policy's entropy
            logp = torch.log_softmax(self.ref_logits, dim=-1)
            entropy = -(logp.exp() * logp).sum(-1)[self.leaf_states]
            return branch_guide(entropy, self.mask, gamma=1.0, tau=0.4).log()
        raise ValueError(kind)

    def target(self, log_q: torch.Tensor | None) -> torch.Tensor:
        log_f = self.ref_logp + (0.0 if log_q is None else log_q)
        return torch.softmax(log_f.sum(1) + self.rewards / BETA, dim=0)

    def descend(self, steps: int = 4000, lr: float = 0.05, **loss_kwargs) -> torch.Tensor:
        """Adam on the exact expectation of the per-token loss; returns the final leaf distribution."""
        theta = torch.zeros_like(self.ref_logits, requires_grad=True)
        opt = torch.optim.Adam([theta], lr=lr)
        for _ in range(steps):
            opt.zero_grad()
            self.expected_loss(theta, **loss_kwargs).backward()
            opt.step()
        return self.token_logps(theta).sum(1).exp().detach()

    def expected_loss(self, theta: torch.Tensor, **loss_kwargs) -> torch.Tensor:
        logp = self.token_logps(theta)
        prob = logp.sum(1).exp().detach()
        advantages = self.rewards - (prob * self.rewards).sum()
        out = sage_loss(logp, None, self.ref_logp, advantages, self.mask, beta=BETA, **loss_kwargs)
        return (prob[:, None] * out.per_token_loss).sum()


def tv(p: torch.Tensor, q: torch.Tensor) -> float:
    return 0.5 * (p - q).abs().sum().item()


def solve_rational_point(weights: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
    """π(y) = w(y) / (c − r(y)) with c > max r chosen so that Σ π = 1 (bisection)."""
    lo, hi = rewards.max().item() + 1e-12, rewards.max().item() + weights.sum().item() + 1.0
    for _ in range(200):
        c = 0.5 * (lo + hi)
        if (weights / (c - rewards)).sum() > 1:
            lo = c
        else:
            hi = c
    return weights / (0.5 * (lo + hi) - rewards)


@pytest.mark.parametrize("guide", ["ones", "table", "branch"])
@pytest.mark.parametrize("depth", [2, 3])
def test_kl_in_reward_converges_to_shaped_optimum(guide, depth):
    tree = Tree(vocab=3 if depth == 2 else 2, depth=depth, seed=depth)
    log_q = tree.log_q(guide)
    p = tree.descend(log_q=log_q, kl_placement="reward")
    target = tree.target(log_q)
    assert tv(p, target) < 1e-3
    if guide != "ones":  # the guide really moves the optimum
        assert tv(target, tree.target(None)) > 0.01


def test_k3_in_loss_is_biased_on_a_tree():
    """GRPO's β·k3 in the loss does not reach π_ref·exp(r/β) on a tree (it follows a forward KL)."""
    tree = Tree(vocab=3, depth=2, seed=2)
    p = tree.descend(kl_placement="loss", kl_estimator="k3")
    assert tv(p, tree.target(None)) > 5e-3


@pytest.mark.parametrize("guide", ["ones", "table"])
def test_one_step_fixed_points(guide):
    """One token: exact local gradients reach π*; k3 and forward KL reach their documented points."""
    tree = Tree(vocab=5, depth=1, seed=7)
    log_q = tree.log_q(guide)
    target = tree.target(log_q)
    f = tree.ref_logp[:, 0].exp() * (1.0 if log_q is None else log_q[:, 0].exp())

    for kwargs in ({"kl_estimator": "k2"}, {"kl_estimator": "k3", "kl_bias_correction": True}):
        assert tv(tree.descend(log_q=log_q, **kwargs), target) < 1e-3

    k3_point = solve_rational_point(BETA * f, tree.rewards)  # π = β f / (c − r)
    p = tree.descend(log_q=log_q, kl_estimator="k3")
    assert tv(p, k3_point) < 1e-3
    assert tv(k3_point, target) > 0.01

    if guide == "ones":
        forward_point = solve_rational_point(BETA * tree.ref_logp[:, 0].exp(), tree.rewards)
        p = tree.descend(divergence="forward")
        assert tv(p, forward_point) < 1e-3
        assert tv(forward_point, target) > 0.01


def test_sampled_gradient_is_unbiased():
    """The gradient of the per-token loss on sampled sequences averages to the exact-expectation gradient."""
    tree = Tree(vocab=3, depth=2, seed=3)
    log_q = tree.log_q("table")
    theta = (0.5 * torch.randn(tree.ref_logits.shape, generator=torch.Generator().manual_seed(11))).double()
    theta.requires_grad_(True)
    exact = torch.autograd.grad(tree.expected_loss(theta, log_q=log_q, kl_placement="reward"), theta)[0]

    logp_all = tree.token_logps(theta)
    prob = logp_all.sum(1).exp().detach()
    baseline = (prob * tree.rewards).sum()
    gen = torch.Generator().manual_seed(5)
    chunks = []
    for _ in range(200):
        idx = torch.multinomial(prob, 500, replacement=True, generator=gen)
        logp = tree.token_logps(theta)[idx]
        out = sage_loss(
            logp,
            None,
            tree.ref_logp[idx],
            tree.rewards[idx] - baseline,
            tree.mask[idx],
            log_q=log_q[idx],
            beta=BETA,
            kl_placement="reward",
        )
        chunks.append(torch.autograd.grad(out.per_token_loss.sum() / len(idx), theta)[0])
    grads = torch.stack(chunks)
    mean, se = grads.mean(0), grads.std(0) / len(chunks) ** 0.5
    assert ((mean - exact).abs() <= 4 * se + 1e-12).all()
    assert exact.abs().max() > 10 * se.max()  # the check has power: the gradient is far from zero


def test_shaped_k3_is_unbiased_for_the_pseudo_kl():
    g = torch.Generator().manual_seed(0)
    vocab = 6
    pi = torch.softmax(torch.randn(vocab, generator=g, dtype=torch.float64), 0)
    ref = torch.softmax(torch.randn(vocab, generator=g, dtype=torch.float64), 0)
    q = torch.empty(vocab, dtype=torch.float64).uniform_(0.6, 1.4, generator=g)
    f = q * ref
    pseudo_kl = (pi * (pi / f).log()).sum() - 1 + f.sum()
    y = torch.multinomial(pi, 200_000, replacement=True, generator=g).view(400, 500)
    k3 = shaped_kl(pi.log()[y], ref.log()[y], q.log()[y], "k3")
    mean, se = k3.mean(), k3.std() / k3.numel() ** 0.5
    assert abs(mean - pseudo_kl) < 4 * se
    # the unshaped estimator targets a different number, far outside the error bars
    plain = shaped_kl(pi.log()[y], ref.log()[y], None, "k3").mean()
    assert abs(plain - pseudo_kl) > 20 * se
