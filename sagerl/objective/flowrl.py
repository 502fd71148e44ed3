"""FlowRL: matching the reward distribution with a flow-balanced objective (Zhu et al. 2025, arXiv 2509.15207; the
authors' code: Xuekai-Zhu/FlowRL, ``verl/workers/actor/dp_actor.py`` ``compute_flowrl_objective`` and
``verl/workers/fsdp_workers.py`` ``ProjZModule``).

FlowRL trains the policy towards π(y|x) ∝ π_ref(y|x)·exp(β·r̂(x, y)) by the trajectory-balance residual of each
completion, length-normalised, with a learned log-partition log Z(x):

    δ = log Z(x) + (1/|y|)·Σ_t log π(y_t) − β·r̂ − (1/|y|)·Σ_t log π_ref(y_t),     loss = mean_b w_b·δ_b²,

r̂ the completion's group-normalised advantage (the authors take R = exp(A), so log R = A), β = 15 (their code),
and w_b = sg(exp(Σ_t (log π − log π_old)(y_t))) the sequence's importance weight (unclipped: the authors' code
computes a clipped one and does not use it). log Z(x) = :class:`LogPartitionHead` of the mean of the prompt's last
hidden states (a 3-layer MLP, the authors' ``porj_layer=3``), trained with the policy; its gradient also reaches
the policy's hidden states, as in the authors' code.

As a policy term (:func:`flowrl_surrogate`) every valid token of a completion carries its sequence loss w_b·δ_b², so
the ``seq-mean-token-mean`` aggregation (the ``grpo`` preset's; the engines refuse the others) gives the authors'
batch mean.
"""

from __future__ import annotations

import torch

from sagerl.objective._checks import POSITIVE, Setting, as_bool_mask, check_number, check_same_shape
from sagerl.objective.surrogate import SurrogateOutput, _advantages_2d, _check_epsilons

SETTINGS = (
    Setting(
        "flowrl_beta",
        "flowrl_beta",
        15.0,
        "FlowRL: the reward scale β > 0 of its target π_ref·exp(β·A) (the authors' code: 15).",
        POSITIVE,
    ),
)
"""FlowRL's settings (keywords of :func:`flowrl_surrogate`; the engines' config fields of the same names)."""
INPUTS = ("log_z", "ref_logp")
"""The inputs an engine computes for :func:`flowrl_surrogate`: (B,) log Z(x) with gradient, (B, T) log π_ref."""


class LogPartitionHead(torch.nn.Module):
    """log Z(x) from the mean of the prompt's last hidden states: ``num_layers − 1`` blocks of Linear, GELU,
    LayerNorm and dropout, then Linear(hidden, 1) (the authors' ``ProjZModule``)."""

    def __init__(self, hidden_size: int, num_layers: int = 3, dropout: float = 0.1) -> None:
        super().__init__()
        layers: list[torch.nn.Module] = []
        for _ in range(num_layers - 1):
            layers += [
                torch.nn.Linear(hidden_size, hidden_size),
                torch.nn.GELU(),
                torch.nn.LayerNorm(hidden_size),
                torch.nn.Dropout(dropout),
            ]
        layers.append(torch.nn.Linear(hidden_size, 1))
        self.net = torch.nn.Sequential(*layers)

    def forward(self, prompt_hidden: torch.Tensor, prompt_mask: torch.Tensor) -> torch.Tensor:
        """(B,) log Z from (B, P, H) hidden states and their (B, P) prompt mask (the masked mean over P)."""
        weights = prompt_mask.to(prompt_hidden.dtype).unsqueeze(-1)
        mean = (prompt_hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
        return self.net(mean).squeeze(-1)


def flowrl_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    log_z: torch.Tensor,
    ref_logp: torch.Tensor,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    flowrl_beta: float = 15.0,
    log_ratio_clip: float = 20.0,
) -> SurrogateOutput:
    """FlowRL's loss (module docstring), w_b·δ_b² on each valid token of completion b.

    Args:
        logp: (B, T) log π_θ of the sampled tokens, nats, with gradient. old_logp: (B, T) log π_old (detached).
        advantages: (B,) or (B, 1) per completion (r̂). mask: (B, T) valid tokens.
        log_z: (B,) log Z(x) of each completion's prompt, with gradient. ref_logp: (B, T) log π_ref (detached).
        epsilon_low, epsilon_high, delta: PPO's bounds, checked and unused (FlowRL has no clip; its importance
            weight is unclipped, as the authors' code). flowrl_beta: β > 0. log_ratio_clip: clamp of the summed
            log-ratio of the importance weight.

    Returns:
        :class:`~sagerl.objective.surrogate.SurrogateOutput`: ``loss`` (B, T) with gradient (0 at padding),
        ``ratio`` the importance weight w_b on every token, no clip masks.

    Raises:
        ValueError: shapes that differ, per-token advantages, β ≤ 0, or PPO's bounds out of range.
    """
    check_same_shape(logp=logp, old_logp=old_logp, ref_logp=ref_logp)
    _check_epsilons(epsilon_low, epsilon_high, delta, log_ratio_clip)
    check_number("flowrl_beta", flowrl_beta, POSITIVE)
    adv = _advantages_2d(advantages, logp)
    if adv.shape[1] != 1:
        raise ValueError(
            "flowrl takes one advantage per completion ((B,) or (B, 1)), got per-token advantages"
        )
    if log_z.shape != logp.shape[:1]:
        raise ValueError(f"log_z must be (B,) = {tuple(logp.shape[:1])}, got {tuple(log_z.shape)}")
    valid = as_bool_mask(mask, logp)
    weights = valid.to(logp.dtype)
    length = weights.sum(dim=1).clamp(min=1.0)
    mean_logp = (logp * weights).sum(dim=1) / length
    mean_ref = (ref_logp.detach() * weights).sum(dim=1) / length
    residual = log_z + mean_logp - flowrl_beta * adv[:, 0] - mean_ref
    log_w = ((logp.detach() - old_logp.detach()) * weights).sum(dim=1).clamp(-log_ratio_clip, log_ratio_clip)
    w = torch.exp(log_w)
    per_sequence = w * residual**2
    loss = torch.where(valid, per_sequence[:, None].expand_as(logp), torch.zeros_like(logp))
    none = torch.zeros_like(valid)
    return SurrogateOutput(loss=loss, ratio=w[:, None].expand_as(logp), clipped_low=none, clipped_high=none)
